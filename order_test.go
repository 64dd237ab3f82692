package ferry

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Completions in order (issue 24, rule 3): a key's Submits' done and OnBatch
// run one at a time, in the order of their inputs, never overlapping a later
// batch's, though the later batch's call runs.

// With workers idle, batch 1's done blocks; batch 2 of the key runs its
// call at once, but its done waits for batch 1's. Mutation: finish not
// waiting for j.after (done 2 runs while done 1 blocks).
func TestDoneOrderAcrossBatches(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxInFlightBatches: 3}, false)
		defer h.f.Close()
		ctx := context.Background()
		block := make(chan struct{})
		var mu sync.Mutex
		var order []int
		done := func(id int) func(int, error) {
			return func(int, error) {
				if id == 1 {
					<-block
				}
				mu.Lock()
				order = append(order, id)
				mu.Unlock()
			}
		}
		require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 1}, done(1)))
		synctest.Wait()
		require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 2}, done(2)))
		synctest.Wait()
		assert.Equal(t, [][]int{{1}, {2}}, ids(h.seen()), "batch 2's call runs")
		mu.Lock()
		assert.Empty(t, order, "done 2 waits for done 1")
		mu.Unlock()
		b := h.do(ctx, in{Key: "b", ID: 3})
		synctest.Wait()
		assert.Equal(t, answer{30, nil}, got(t, b), "other keys go on")
		close(block)
		synctest.Wait()
		assert.Equal(t, []int{1, 2}, order)
	})
}

// A direct call's OnBatch comes after the key's last batch's, whose call it
// does not wait for. Mutation: direct not waiting for w.after (the direct
// call's report comes first).
func TestOnBatchOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		block := make(chan struct{})
		var mu sync.Mutex
		var order []Batch[string]
		first := true
		cfg := Config[string, in]{MaxInFlightBatches: 2, DirectCalls: true}
		cfg.OnBatch = func(b Batch[string]) {
			mu.Lock()
			wait := first
			first = false
			mu.Unlock()
			if wait {
				<-block
			}
			mu.Lock()
			order = append(order, b)
			mu.Unlock()
		}
		h := newHarness(t, cfg, false)
		defer h.f.Close()
		ctx := context.Background()
		require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 1}, nil)) // batched; its OnBatch blocks
		synctest.Wait()
		a := h.do(ctx, in{Key: "a", ID: 2}) // the key is free: a direct call
		synctest.Wait()
		assert.Equal(t, [][]int{{1}, {2}}, ids(h.seen()), "the direct call runs")
		pending(t, a) // its OnBatch waits, before its Do returns
		close(block)
		synctest.Wait()
		assert.Equal(t, answer{20, nil}, got(t, a))
		require.Len(t, order, 2)
		assert.False(t, order[0].Direct)
		assert.True(t, order[1].Direct)
	})
}
