package ferry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of DoMany: all or none, per-input errors, a ctx that ends, close.

func TestDoMany(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchSize: 4, MaxBatchDelay: time.Second, DirectCalls: true}, false)
		defer h.f.Close()
		var ins []in
		for i := range 8 {
			ins = append(ins, in{Key: string(rune('a' + i%2)), ID: i, R: int64(i % 4 / 2)})
		}
		outs, err := h.f.DoMany(context.Background(), ins)
		require.NoError(t, err)
		assert.Equal(t, []int{0, 10, 20, 30, 40, 50, 60, 70}, outs, "in order")
		// a: 0, 2 (rank 0), 4, 6 (rank 0, 1, 0, 1 by i%4/2): 0 4 then 2 6.
		assert.ElementsMatch(t, [][]int{{0, 4, 2, 6}, {1, 5, 3, 7}}, ids(h.seen()),
			"full lanes go at once, in rank order, ties in slice order")
		assert.Equal(t, Stats{Admitted: 8, Batches: 2, Taken: 8}, h.f.Stats(), "no direct call")

		outs, err = h.f.DoMany(context.Background(), nil)
		assert.NoError(t, err)
		assert.NotNil(t, outs)
		assert.Empty(t, outs)
	})
}

func TestDoManyIsAllOrNone(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second, MaxQueued: 4, MaxQueuedWeight: 10}, false)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1, W: 1})
		synctest.Wait()
		_, err := h.f.DoMany(ctx, []in{{Key: "b", W: 1}, {Key: "c", W: 1}, {Key: "d", W: 1}, {Key: "e", W: 1}})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "4 inputs, more than the room has free (MaxQueued 4)")
		_, err = h.f.DoMany(ctx, make([]in, 5))
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "5 inputs, more than MaxQueued 4")
		_, err = h.f.DoMany(ctx, []in{{Key: "b", W: 5}, {Key: "c", W: 5}})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "MaxQueuedWeight 10 (2 inputs)")
		_, err = h.f.DoMany(ctx, []in{{Key: "b", W: 1}, {Key: "c", W: 11}})
		assert.ErrorContains(t, err, "input weight 11 is more than MaxQueuedWeight 10")
		_, err = h.f.DoMany(ctx, []in{{Key: "b", W: 1}, {Key: "c", W: -1}})
		assert.ErrorContains(t, err, "negative weight -1 (input 1)")
		assert.Equal(t, Stats{Queued: 1, Weight: 1, Lanes: 1, Admitted: 1, Rejected: 4 + 5 + 2 + 2,
			RejectedFull: 4 + 5, RejectedWeight: 2, RejectedHeavy: 2}, h.f.Stats(),
			"none of them admitted, every one counted")
		advance(time.Second)
		assert.Equal(t, answer{10, nil}, got(t, a))

		h = newHarness(t, Config[string, in]{}, false) // no weight limit but MaxInt64's
		defer h.f.Close()
		_, err = h.f.DoMany(ctx, []in{{Key: "b", W: math.MaxInt64}, {Key: "c", W: math.MaxInt64}})
		assert.ErrorContains(t, err, "total weight passes MaxInt64")
	})
}

func TestDoManyErrors(t *testing.T) {
	bubble(t, func(t *testing.T) {
		boom := errors.New("boom")
		f, err := New(func(_ context.Context, key string, ins []in) ([]int, error) {
			if key == "bad" {
				return nil, boom
			}
			outs := make([]int, len(ins))
			errs := make(Errors, len(ins))
			for i, x := range ins {
				outs[i] = 10 * x.ID
				if x.ID%2 == 1 {
					errs[i] = fmt.Errorf("odd %d", x.ID)
				}
			}
			return outs, errs
		}, Config[string, in]{Key: inCfg.Key})
		require.NoError(t, err)
		defer f.Close()
		outs, err := f.DoMany(context.Background(), []in{{Key: "a", ID: 2}, {Key: "a", ID: 3}, {Key: "bad", ID: 4}})
		var errs Errors
		require.ErrorAs(t, err, &errs)
		require.Len(t, errs, 3)
		assert.NoError(t, errs[0])
		assert.EqualError(t, errs[1], "odd 3")
		assert.ErrorIs(t, errs[2], boom)
		assert.Equal(t, []int{20, 0, 0}, outs, "the outputs of the inputs that succeeded")
	})
}

func TestDoManyContextEnds(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchSize: 2, MaxBatchDelay: time.Hour}, true)
		defer h.f.Close()
		ctx, cancel := context.WithCancel(context.Background())
		c := make(chan error, 1)
		go func() {
			_, err := h.f.DoMany(ctx, []in{{Key: "a", ID: 1}, {Key: "a", ID: 2}, {Key: "b", ID: 3}})
			c <- err
		}()
		synctest.Wait()
		assert.Equal(t, [][]int{{1, 2}}, ids(h.seen()), "a is full: taken")
		start := time.Now()
		cancel()
		synctest.Wait()
		require.Len(t, c, 1)
		assert.ErrorIs(t, <-c, context.Canceled)
		assert.Equal(t, start, time.Now(), "at once")
		s := h.f.Stats()
		assert.Equal(t, 0, s.Queued)
		assert.Equal(t, uint64(1), s.Dropped, "b was dropped")
		h.hold <- struct{}{}
		advance(time.Hour)
		assert.Equal(t, [][]int{{1, 2}}, ids(h.seen()), "b never reached a call")
	})
}

func TestDoManyClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchSize: 2, MaxBatchDelay: time.Hour}, true)
		c := make(chan error, 1)
		go func() {
			_, err := h.f.DoMany(context.Background(), []in{{Key: "a", ID: 1}, {Key: "a", ID: 2}, {Key: "b", ID: 3}})
			c <- err
		}()
		synctest.Wait()
		require.NoError(t, h.f.Close())
		var errs Errors
		require.ErrorAs(t, <-c, &errs)
		for _, err := range errs {
			assert.ErrorIs(t, err, ErrClosed, "the call in flight was cancelled, the waiting input drained")
		}
		_, err := h.f.DoMany(context.Background(), []in{{Key: "a"}})
		assert.ErrorIs(t, err, ErrClosed)
	})
}
