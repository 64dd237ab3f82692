package ferry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a caller is told when a call fails, or when it gives up.

// A Do whose ctx ends can tell a dropped input, which no call will see, from
// one that a call had taken, which may still succeed.
func TestDoDroppedOrTaken(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour}, true)
		defer h.f.Close()
		waiting, cancelWaiting := context.WithCancel(context.Background())
		a := h.do(waiting, in{Key: "a", ID: 1})
		synctest.Wait()
		cancelWaiting()
		synctest.Wait()
		err := got(t, a).err
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrDropped, "it waited: dropped")

		taken, cancelTaken := context.WithCancel(context.Background())
		b := h.do(taken, in{Key: "b", ID: 2})
		advance(time.Hour) // b's call starts and waits for hold
		cancelTaken()
		synctest.Wait()
		err = got(t, b).err
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrDropped, "a call had taken it")
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, [][]int{{2}}, ids(h.seen()), "a reached no call")
		s := h.f.Stats()
		assert.Equal(t, [2]uint64{1, 1}, [2]uint64{s.Dropped, s.Taken})
	})
}

// A DoMany whose ctx ends tells, input by input, which were dropped before
// any call took them and which a call had taken.
func TestDoManyDroppedOrTaken(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 1, MaxInFlightBatches: 1}, true)
		defer h.f.Close()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := h.f.DoMany(ctx, []in{{Key: "a", ID: 1}, {Key: "b", ID: 2}})
			errc <- err
		}()
		advance(time.Hour) // a's call starts and waits for hold; b waits for a worker
		cancel()
		synctest.Wait()
		var errs Errors
		require.ErrorAs(t, <-errc, &errs)
		require.Len(t, errs, 2)
		assert.ErrorIs(t, errs[0], context.Canceled)
		assert.NotErrorIs(t, errs[0], ErrDropped, "a call had taken it")
		assert.ErrorIs(t, errs[1], context.Canceled)
		assert.ErrorIs(t, errs[1], ErrDropped, "it waited: dropped")
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, [][]int{{1}}, ids(h.seen()), "b reached no call")
	})
}
