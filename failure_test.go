package ferry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// What a caller is told when a call fails, or when it gives up.

// A Do whose ctx ends can tell a dropped input, which no call will see, from
// one that a call had taken, which may still succeed.
func TestDoDroppedOrTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
