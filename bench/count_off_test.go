//go:build !ferrycount

package bench

import "github.com/ferrygo/ferry"

// sharedPerInput is nil: only a build with the tag ferrycount counts (see
// count_on_test.go).
func sharedPerInput(*ferry.Ferry[int, int, int]) func() float64 { return nil }
