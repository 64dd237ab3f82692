//go:build !race

package ferryprom_test

import (
	"testing"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryprom"
)

// OnBatch allocates nothing, whatever the outcome.
func TestOnBatchAllocs(t *testing.T) {
	record := ferryprom.OnBatch[string](ferryprom.NewCollector("allocs", nil, ferryprom.Opts{}))
	for _, err := range []error{nil, errBoom, ferry.Errors{nil, errBoom}, ferry.ErrClosed, &ferry.PanicError{}} {
		b := ferry.Batch[string]{Size: 3, Err: err}
		if n := testing.AllocsPerRun(100, func() { record(b) }); n != 0 {
			t.Errorf("%v: %v allocations", ferryprom.Outcome(err), n)
		}
	}
}
