package ferry

import (
	"context"
	"testing"
	"testing/synctest"

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
