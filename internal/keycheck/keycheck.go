// Package keycheck refuses a value that no map can hold as a key: ferry's
// keys, and the load package's scopes, which its memo keys on too.
package keycheck

import "fmt"

// Err is an error for a k that no map can hold as a key, nil for any other.
// One unequal to itself (a NaN) would never be found again, and one of an
// incomparable dynamic type panics in any map. what names k in the error,
// as "ferry: key". It runs on its caller's goroutine and blocks on nothing.
func Err[K comparable](k K, what string) (err error) {
	switch any(k).(type) { // the common dynamic types of an interface key: no check needed
	case nil, string, int, int64, int32, uint, uint64, uint32, bool:
		return nil
	}
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("%s of type %T is not comparable", what, k)
		}
	}()
	if k != k {
		return fmt.Errorf("%s of type %T is not equal to itself (a NaN?)", what, k)
	}
	return nil
}
