package ferry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The workers' edges (issue 22, items 5 to 10): a slow done or OnBatch holds
// its own worker and no other; Close, Flush and Shutdown from user code the
// ferry runs; a direct call's OnBatch, which Flush and Close wait for; the
// buffers a big batch leaves; the workers of several shards.

// Item 5: a done or OnBatch that blocks holds its own worker and slot, not the
// next batch: with four workers, a Do on another key is called and answered.
func TestSlowDoneHoldsOnlyItsWorker(t *testing.T) {
	for _, how := range []string{"done", "OnBatch", "OnBatch of a Do"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				block := make(chan struct{})
				cfg := Config[string, in]{MaxInFlightBatches: 4, Shards: 1}
				if how != "done" {
					cfg.OnBatch = func(b Batch[string]) {
						if b.Key == "a" {
							<-block
						}
					}
				}
				h := newHarness(t, cfg, false)
				defer h.f.Close()
				ctx := context.Background()
				var a chan answer
				if how == "done" {
					require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 1}, func(int, error) { <-block }))
				} else {
					a = h.do(ctx, in{Key: "a", ID: 1})
				}
				synctest.Wait() // a's call is over; its done (or OnBatch) blocks
				b := h.do(ctx, in{Key: "b", ID: 2})
				synctest.Wait()
				assert.Len(t, h.seen(), 2, "b's call was made while a's %s blocks", how)
				select {
				case x := <-b:
					assert.Equal(t, answer{20, nil}, x)
				default:
					t.Errorf("b's Do has no answer while a's %s blocks: its batch went to a's worker", how)
					close(block)
					synctest.Wait()
					<-b
					return
				}
				if a != nil {
					assert.Equal(t, answer{10, nil}, got(t, a), "answered before OnBatch")
				}
				s := h.f.Stats()
				assert.Equal(t, uint64(2), s.Batches)
				assert.Zero(t, s.Busy, "both keys are free")
				close(block)
				synctest.Wait()
			})
		})
	}
}

// Item 7: a Flush waits for the OnBatch of a direct call in flight when it
// was called, which runs after the call has released its key.
func TestFlushWaitsForADirectCallsOnBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		reported := make(chan Batch[string], 1)
		h := newHarness(t, Config[string, in]{DirectCalls: true, OnBatch: func(b Batch[string]) {
			<-block
			reported <- b
		}}, true)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1}) // a direct call, held
		synctest.Wait()
		flushed := make(chan error, 1)
		go func() { flushed <- h.f.Flush(ctx) }()
		synctest.Wait()
		h.hold <- struct{}{} // the call returns and releases a; OnBatch blocks
		synctest.Wait()
		assert.Empty(t, flushed, "Flush returned while the direct call's OnBatch runs")
		assert.Zero(t, h.f.Stats().Busy, "key a is free")
		close(block)
		synctest.Wait()
		require.Len(t, flushed, 1)
		assert.NoError(t, <-flushed)
		assert.Equal(t, Batch[string]{Key: "a", Size: 1, Direct: true}, <-reported)
		assert.Equal(t, answer{10, nil}, got(t, a))
	})
}

// Item 8: the OnBatch of a direct call in flight at Close runs before the
// ferry ends, and its panic is counted in the final Stats.
func TestDirectOnBatchPanicAtCloseIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{DirectCalls: true, OnBatch: func(Batch[string]) {
			time.Sleep(time.Millisecond) // the loop would have ended by now
			panic("OnBatch")
		}}, true)
		a := h.do(context.Background(), in{Key: "a", ID: 1}) // a direct call, held
		synctest.Wait()
		require.NoError(t, h.f.Close())
		advance(time.Millisecond)
		assert.ErrorIs(t, got(t, a).err, ErrClosed)
		assert.Equal(t, Stats{DirectCalls: 1, OnBatchPanics: 1}, h.f.Stats())
	})
}
