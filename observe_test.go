package ferry

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of what a ferry tells of itself: OnBatch and Stats.

func TestOnBatch(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var rep reports
		took := map[string]time.Duration{"a": 5 * time.Millisecond, "b": 7 * time.Millisecond}
		call := func(ctx context.Context, key string, ins []in) ([]int, error) {
			time.Sleep(took[key])
			switch key {
			case "e":
				return nil, errBoom
			case "m":
				return tens(ins), Errors{nil, errBoom}
			case "p":
				panic("p")
			}
			return tens(ins), nil
		}
		cfg := inCfg
		cfg.MaxBatchSize, cfg.MaxBatchDelay, cfg.OnBatch = 2, 10*time.Millisecond, rep.on
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		a1 := do(f, ctx, in{Key: "a", ID: 1, W: 2})
		synctest.Wait()
		time.Sleep(3 * time.Millisecond)
		a2 := do(f, ctx, in{Key: "a", ID: 2, W: 3}) // full: goes now, 3 ms after the oldest came
		b := do(f, ctx, in{Key: "b", ID: 3, W: 1})  // partial: goes at its deadline
		e := do(f, ctx, in{Key: "e", ID: 4})
		m1, m2 := do(f, ctx, in{Key: "m", ID: 5}), do(f, ctx, in{Key: "m", ID: 6})
		p := do(f, ctx, in{Key: "p", ID: 7})
		advance(time.Second)
		assert.Equal(t, answer{10, nil}, got(t, a1))
		assert.Equal(t, answer{20, nil}, got(t, a2))
		assert.Equal(t, answer{30, nil}, got(t, b))
		assert.ErrorIs(t, got(t, e).err, errBoom)
		ms := []answer{got(t, m1), got(t, m2)}
		slices.SortFunc(ms, func(x, y answer) int { return x.out - y.out })
		assert.ErrorIs(t, ms[0].err, errBoom, "the second of m fails")
		assert.NoError(t, ms[1].err)
		assert.Contains(t, []int{50, 60}, ms[1].out, "and the first succeeds")
		var pe *PanicError
		assert.ErrorAs(t, got(t, p).err, &pe)

		bs := rep.get(t)
		require.Len(t, bs, 5)
		ms3 := 3 * time.Millisecond
		assert.Equal(t, Batch[string]{Key: "a", Size: 2, Weight: 5, Wait: ms3, Took: 5 * time.Millisecond, Attempt: 1}, bs[0])
		ms10 := 10 * time.Millisecond
		assert.Equal(t, Batch[string]{Key: "b", Size: 1, Weight: 1, Wait: ms10, Took: 7 * time.Millisecond, Attempt: 1}, bs[1], "at its deadline")
		assert.Equal(t, Batch[string]{Key: "e", Size: 1, Wait: ms10, Err: errBoom, Attempt: 1}, bs[2])
		assert.Equal(t, Batch[string]{Key: "m", Size: 2, Err: Errors{nil, errBoom}, Attempt: 1}, bs[3], "full at once")
		assert.ErrorAs(t, bs[4].Err, &pe, "the call panicked")
		assert.Equal(t, Batch[string]{Key: "p", Size: 1, Wait: ms10}, Batch[string]{Key: bs[4].Key, Size: bs[4].Size, Wait: bs[4].Wait})
		assert.Equal(t, uint64(0), f.Stats().OnBatchPanics)
	})
}

func TestOnBatchRunsAfterTheAnswers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		gate := make(chan struct{})
		var rep reports
		cfg := inCfg
		cfg.MaxInFlightBatches = 1
		cfg.OnBatch = func(b Batch[string]) {
			<-gate
			rep.on(b)
		}
		f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) { return tens(ins), nil }, cfg)
		require.NoError(t, err)
		defer f.Close()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		done := make(chan error, 1)
		require.NoError(t, f.Submit(context.Background(), in{Key: "a", ID: 2}, func(_ int, err error) { done <- err }))
		synctest.Wait()
		assert.Equal(t, answer{10, nil}, got(t, a), "answered while OnBatch waits")
		flushed := make(chan error, 1)
		go func() { flushed <- f.Flush(context.Background()) }()
		synctest.Wait()
		assert.Empty(t, flushed, "Flush waits for OnBatch")
		close(gate)
		synctest.Wait()
		require.NoError(t, <-flushed)
		require.NoError(t, <-done)
		assert.Len(t, rep.get(t), 2, "the second batch's done ran before its report")
	})
}

func TestOnBatchOfADirectCall(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var rep reports
		call := func(_ context.Context, _ string, ins []in) ([]int, error) {
			time.Sleep(7 * time.Millisecond)
			return tens(ins), nil
		}
		cfg := inCfg
		cfg.DirectCalls, cfg.OnBatch = true, rep.on
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		out, err := f.Do(context.Background(), in{Key: "a", ID: 1, W: 4})
		require.NoError(t, err)
		assert.Equal(t, 10, out)
		assert.Equal(t, []Batch[string]{{Key: "a", Size: 1, Weight: 4, Took: 7 * time.Millisecond, Direct: true, Attempt: 1}}, rep.get(t),
			"told before Do returns, on its goroutine, with Wait 0")
		assert.Equal(t, Stats{DirectCalls: 1}, f.Stats())
	})
}

// With no MaxBatchDelay the loop stamps inputs as it admits them, for Do,
// Submit and DoMany alike; each waits 3 ms behind its key's first call here.
func TestOnBatchWaitWithZeroDelay(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var rep reports
		call := func(_ context.Context, _ string, ins []in) ([]int, error) {
			if ins[0].ID%10 == 1 {
				time.Sleep(4 * time.Millisecond)
			}
			return tens(ins), nil
		}
		cfg := inCfg
		cfg.OnBatch = rep.on
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		advance(time.Millisecond) // so that a stamp of 0, the origin's, would show
		a1, b1, c1 := do(f, ctx, in{Key: "a", ID: 1}), do(f, ctx, in{Key: "b", ID: 11}), do(f, ctx, in{Key: "c", ID: 21})
		advance(time.Millisecond)
		a2 := do(f, ctx, in{Key: "a", ID: 2}) // each waits for its key's first call
		sub := make(chan answer, 1)
		require.NoError(t, f.Submit(ctx, in{Key: "b", ID: 12}, func(out int, err error) { sub <- answer{out, err} }))
		many := make(chan []int, 1)
		go func() {
			outs, err := f.DoMany(ctx, []in{{Key: "c", ID: 22}, {Key: "c", ID: 23}})
			assert.NoError(t, err)
			many <- outs
		}()
		advance(time.Second)
		for _, c := range []chan answer{a1, b1, c1, a2, sub} {
			assert.NoError(t, got(t, c).err)
		}
		assert.Equal(t, []int{220, 230}, <-many)
		ms3, ms4 := 3*time.Millisecond, 4*time.Millisecond
		assert.ElementsMatch(t, []Batch[string]{ // a key's second call may report before its first
			{Key: "a", Size: 1, Took: ms4, Attempt: 1}, {Key: "a", Size: 1, Wait: ms3, Attempt: 1},
			{Key: "b", Size: 1, Took: ms4, Attempt: 1}, {Key: "b", Size: 1, Wait: ms3, Attempt: 1},
			{Key: "c", Size: 1, Took: ms4, Attempt: 1}, {Key: "c", Size: 2, Wait: ms3, Attempt: 1},
		}, rep.get(t), "from its admission, with no delay too")
	})
}

func TestOnBatchPanics(t *testing.T) {
	bubble(t, func(t *testing.T) {
		cfg := inCfg
		cfg.MaxInFlightBatches = 1
		cfg.DirectCalls = true
		cfg.OnBatch = func(Batch[string]) { panic("OnBatch") }
		f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) { return tens(ins), nil }, cfg)
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		out, err := f.Do(ctx, in{Key: "a", ID: 1})
		assert.Equal(t, answer{10, nil}, answer{out, err}, "a direct call")
		for id := 2; id <= 3; id++ {
			c := make(chan error, 1)
			require.NoError(t, f.Submit(ctx, in{Key: "a", ID: id}, func(_ int, err error) { c <- err }))
			synctest.Wait()
			require.NoError(t, <-c, "batched, on the one worker, twice")
		}
		assert.Equal(t, uint64(3), f.Stats().OnBatchPanics)
	})
}

func TestStatsRejectedByReason(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second, MaxQueued: 2, MaxQueuedWeight: 10}, false)
		defer h.f.Close()
		ctx := context.Background()
		for _, x := range []in{{Key: "a", W: 11}, {Key: "a", W: 6}, {Key: "a", W: 5}, {Key: "a", W: 4}, {Key: "a", W: 1}, {Key: "a"}} {
			_ = h.f.Submit(ctx, x, nil)
		}
		_, err := h.f.DoMany(ctx, []in{{Key: "b"}, {Key: "b"}, {Key: "b"}})
		assert.ErrorIs(t, err, ErrRejected)
		s := h.f.Stats()
		assert.Equal(t, Stats{Queued: 2, Weight: 10, Lanes: 1, Admitted: 2, Rejected: 7,
			RejectedHeavy: 1, RejectedWeight: 1, RejectedFull: 1 + 1 + 3}, s,
			"11 is heavier than the room, 5 would pass its weight, 1 and 0 find it full, and so does the DoMany")
		assert.Equal(t, s.Rejected, s.RejectedFull+s.RejectedWeight+s.RejectedHeavy)
	})
}
