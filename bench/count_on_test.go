//go:build ferrycount

package bench

import "github.com/ferrygo/ferry"

// sharedPerInput returns, for after f's Close, f's operations on the
// channels its shards share (ferry.SharedOps) per input taken into a batch.
func sharedPerInput(f *ferry.Ferry[int, int, int]) func() float64 {
	return func() float64 {
		st := f.Stats()
		if st.Taken == 0 {
			return 0
		}
		return float64(ferry.SharedOps(f)) / float64(st.Taken)
	}
}
