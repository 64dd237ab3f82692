//go:build !race

package metrics_test

import (
	"testing"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/examples/metrics"
)

// OnBatch allocates nothing, whatever the outcome.
func TestOnBatchAllocs(t *testing.T) {
	record := metrics.OnBatch[string](metrics.New("allocs"))
	for _, err := range []error{nil, errBoom, ferry.Errors{nil, errBoom}, ferry.ErrClosed, &ferry.PanicError{}} {
		b := ferry.Batch[string]{Size: 3, Err: err}
		if n := testing.AllocsPerRun(100, func() { record(b) }); n != 0 {
			t.Errorf("%v: %v allocations", metrics.Outcome(err), n)
		}
	}
}
