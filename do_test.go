package ferry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of Do: admission and rejection, the batch rule, lanes and keys,
// direct calls, and a caller that gives up.

func TestFullRoomRejectsAtOnce(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second, MaxQueued: 3, MaxQueuedWeight: 5}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := h.do(ctx, in{Key: "a", ID: 1, W: 1}), h.do(ctx, in{Key: "b", ID: 2, W: 3})
		synctest.Wait()
		start := time.Now()
		_, err := h.f.Do(ctx, in{Key: "c", ID: 3, W: 2})
		assert.ErrorIs(t, err, ErrRejected, "full by weight: 4 + 2 > 5")
		assert.ErrorContains(t, err, "MaxQueuedWeight 5")
		c := h.do(ctx, in{Key: "c", ID: 4, W: 1})
		synctest.Wait()
		_, err = h.f.Do(ctx, in{Key: "d", ID: 5, W: 0})
		assert.ErrorIs(t, err, ErrRejected, "full by count")
		assert.ErrorContains(t, err, "the room is full (MaxQueued 3)")
		assert.Equal(t, start, time.Now(), "rejection took no time")
		pending(t, a)
		assert.Equal(t, Stats{Queued: 3, Weight: 5, Lanes: 3, Admitted: 3, Rejected: 2, RejectedFull: 1, RejectedWeight: 1}, h.f.Stats())
		advance(time.Second)
		assert.Equal(t, answer{10, nil}, got(t, a))
		assert.Equal(t, answer{20, nil}, got(t, b))
		assert.Equal(t, answer{40, nil}, got(t, c))
	})
}

func TestTooHeavyInputIsRejectedWithReason(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxQueuedWeight: 10, DirectCalls: true}, false)
		defer h.f.Close()
		_, err := h.f.Do(context.Background(), in{Key: "a", W: 11})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "input weight 11 is more than MaxQueuedWeight 10")
		assert.Empty(t, h.seen(), "even as a direct call it never runs")
		assert.Equal(t, Stats{Rejected: 1, RejectedHeavy: 1}, h.f.Stats())
	})
}

func TestNegativeWeightIsAnError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, false)
		defer h.f.Close()
		_, err := h.f.Do(context.Background(), in{Key: "a", W: -1})
		assert.ErrorContains(t, err, "negative weight -1")
		synctest.Wait()
		assert.Empty(t, h.seen())
		assert.Equal(t, Stats{}, h.f.Stats())
	})
}

func TestLaneIsInRankOrderTiesByArrival(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: 10 * time.Millisecond}, false)
		defer h.f.Close()
		var cs []chan answer
		for i, r := range []int64{5, 1, 5, 0, 1} {
			cs = append(cs, h.do(context.Background(), in{Key: "a", ID: i, R: r}))
			synctest.Wait()
		}
		advance(10 * time.Millisecond)
		assert.Equal(t, [][]int{{3, 1, 4, 0, 2}}, ids(h.seen()))
		for i, c := range cs {
			assert.Equal(t, answer{10 * i, nil}, got(t, c))
		}
	})
}

func TestFerryBatchRule(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchSize: 3, MaxBatchWeight: 10, MaxBatchDelay: time.Millisecond, MaxInFlightBatches: 1}, true)
		defer h.f.Close()
		for i, w := range []int64{4, 4, 4, 12, 1, 1, 1, 1} {
			h.do(context.Background(), in{Key: "a", ID: i, W: w})
			synctest.Wait()
		}
		for range 4 {
			h.hold <- struct{}{}
			synctest.Wait()
		}
		advance(time.Millisecond)
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, [][]int{{0, 1}, {2}, {3}, {4, 5, 6}, {7}}, ids(h.seen()),
			"prefixes within 3 inputs and weight 10; 12 alone; the last partial batch at its deadline")
	})
}

func TestFullLaneIsReadyAtOncePartialWaitsForOldest(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchSize: 3, MaxBatchDelay: 10 * time.Millisecond}, false)
		defer h.f.Close()
		ctx := context.Background()
		for i := range 3 {
			h.do(ctx, in{Key: "full", ID: i})
		}
		synctest.Wait()
		require.Len(t, h.seen(), 1)
		assert.Equal(t, time.Duration(0), h.seen()[0].at, "a full lane does not wait")

		h.do(ctx, in{Key: "p", ID: 3, R: 9})
		advance(4 * time.Millisecond)
		h.do(ctx, in{Key: "p", ID: 4, R: 0}) // ranks first, but its deadline is later
		advance(6*time.Millisecond - 1)
		assert.Len(t, h.seen(), 1, "1ns before the oldest input's deadline")
		advance(1)
		calls := h.seen()
		require.Len(t, calls, 2)
		assert.Equal(t, called{key: "p", ids: []int{4, 3}, at: 10 * time.Millisecond}, calls[1])
	})
}

func TestOneCallPerKeyWhileInputsJoin(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxInFlightBatches: 4}, true)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := h.do(ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		c := h.do(ctx, in{Key: "a", ID: 3})
		synctest.Wait()
		assert.Len(t, h.seen(), 1, "a second call for a waits, though workers are free")
		assert.Equal(t, 2, h.f.Stats().Queued)
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, answer{10, nil}, got(t, a))
		assert.Equal(t, [][]int{{1}, {2, 3}}, ids(h.seen()))
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, answer{20, nil}, got(t, b))
		assert.Equal(t, answer{30, nil}, got(t, c))
		assert.Equal(t, Stats{Admitted: 3, Batches: 2, Taken: 3}, h.f.Stats(), "the lane is gone once empty and idle")
	})
}

func TestReleasedLaneJoinsTheBackOfTheLine(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxInFlightBatches: 1}, true)
		defer h.f.Close()
		ctx := context.Background()
		for i, k := range []string{"a", "b", "c", "a", "d"} {
			h.do(ctx, in{Key: k, ID: i})
			synctest.Wait()
		}
		for range 5 {
			h.hold <- struct{}{}
			synctest.Wait()
		}
		var keys []string
		for _, c := range h.seen() {
			keys = append(keys, c.key)
		}
		assert.Equal(t, []string{"a", "b", "c", "d", "a"}, keys)
	})
}

func TestAtMostMaxInFlightBatches(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxInFlightBatches: 2}, true)
		defer h.f.Close()
		var cs []chan answer
		for i := range 5 {
			cs = append(cs, h.do(context.Background(), in{Key: fmt.Sprint(i), ID: i}))
		}
		synctest.Wait()
		assert.Len(t, h.seen(), 2)
		assert.Equal(t, 2, h.f.Stats().Busy)
		for range 5 {
			h.hold <- struct{}{}
			synctest.Wait()
		}
		for i, c := range cs {
			assert.Equal(t, answer{10 * i, nil}, got(t, c))
		}
		assert.Equal(t, 2, h.peak)
	})
}

func TestDirectCall(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var h *harness
		seenValue := make(chan any, 1)
		h = newHarness(t, Config[string, in]{DirectCalls: true, MaxQueued: 1, MaxInFlightBatches: 1}, true)
		defer h.f.Close()
		ctx := context.WithValue(context.Background(), ctxKey{}, "v")
		orig := h.f.call
		h.f.call = func(ctx context.Context, key string, ins []in) ([]int, error) {
			if key == "a" && ins[0].ID == 1 {
				seenValue <- ctx.Value(ctxKey{})
			}
			return orig(ctx, key, ins)
		}
		a := h.do(ctx, in{Key: "a", ID: 1})
		b := h.do(ctx, in{Key: "b", ID: 2})
		c := h.do(ctx, in{Key: "c", ID: 3})
		synctest.Wait()
		assert.Equal(t, "v", <-seenValue, "the call's context carries the caller's values")
		s := h.f.Stats()
		assert.Equal(t, Stats{Busy: 3, Lanes: 3, DirectCalls: 3}, s,
			"direct calls count neither against MaxQueued 1 nor MaxInFlightBatches 1")
		a2 := h.do(ctx, in{Key: "a", ID: 4})
		synctest.Wait()
		a3 := h.do(ctx, in{Key: "a", ID: 5})
		synctest.Wait()
		_, err := h.f.Do(ctx, in{Key: "a", ID: 6})
		assert.ErrorIs(t, err, ErrRejected, "inputs for a busy key wait, and the room holds 1")
		pending(t, a2)
		for range 3 {
			h.hold <- struct{}{}
			synctest.Wait()
		}
		for i, x := range []chan answer{a, b, c} {
			assert.Equal(t, answer{10 * (i + 1), nil}, got(t, x))
		}
		assert.ErrorIs(t, got(t, a3).err, ErrRejected)
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, answer{40, nil}, got(t, a2))
		calls := ids(h.seen())
		require.Len(t, calls, 4)
		assert.ElementsMatch(t, [][]int{{1}, {2}, {3}}, calls[:3])
		assert.Equal(t, []int{4}, calls[3], "batched after the direct call")
	})
}

func TestDirectCallContextEnds(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{DirectCalls: true}, true)
		ctx, cancel := context.WithCancel(context.Background())
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, context.Canceled, "with the caller's context")
		assert.Equal(t, 0, h.f.Stats().Busy, "the key is released after the call returns")

		b := h.do(context.Background(), in{Key: "a", ID: 2})
		synctest.Wait()
		assert.Equal(t, uint64(2), h.f.Stats().DirectCalls)
		require.NoError(t, h.f.Close())
		synctest.Wait()
		assert.ErrorIs(t, got(t, b).err, ErrClosed, "with the ferry's close, as its cause")
	})
}

func TestBatchedCallContextEndsOnlyWithClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, true)
		ctx, cancel := context.WithCancel(context.Background())
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := h.do(context.Background(), in{Key: "a", ID: 2})
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, context.Canceled, "the caller returns at once")
		pending(t, b)
		assert.Equal(t, 1, h.f.Stats().Busy, "and its call goes on")
		require.NoError(t, h.f.Close())
		synctest.Wait()
		assert.ErrorIs(t, got(t, b).err, ErrClosed, "context.Cause of the call's context")
	})
}

func TestCancelledWaitingInputIsDropped(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second}, false)
		defer h.f.Close()
		ctx, cancel := context.WithCancelCause(context.Background())
		a := h.do(ctx, in{Key: "a", ID: 1, W: 5})
		b := h.do(context.Background(), in{Key: "b", ID: 2, W: 1})
		synctest.Wait()
		cause := errors.New("gave up")
		cancel(cause)
		synctest.Wait()
		r := got(t, a)
		assert.ErrorIs(t, r.err, context.Canceled)
		assert.ErrorIs(t, r.err, cause)
		assert.Equal(t, Stats{Queued: 1, Weight: 1, Lanes: 1, Admitted: 2, Dropped: 1}, h.f.Stats())
		advance(time.Second)
		assert.Equal(t, answer{20, nil}, got(t, b))
		assert.Equal(t, [][]int{{2}}, ids(h.seen()), "the dropped input reaches no call")

		_, err := h.f.Do(ctx, in{Key: "a", ID: 3})
		assert.ErrorIs(t, err, context.Canceled, "a context ended before Do")
	})
}
