package ferry

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of what call.go adds around a Call: OnBatch, CallTimeout,
// CancelAbandoned, and the errors of a call whose context the ferry ended.

// reports collects what OnBatch is given, and fails where it ran on the loop.
type reports struct {
	mu     sync.Mutex
	bs     []Batch[string]
	onLoop []string
}

func (r *reports) on(b Batch[string]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bs = append(r.bs, b)
	if fn := onLoop(); fn != "" {
		r.onLoop = append(r.onLoop, fn)
	}
}

// get returns the reports so far, by key, and requires that none ran on the loop.
func (r *reports) get(t *testing.T) []Batch[string] {
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.onLoop, "OnBatch ran on the loop")
	bs := slices.Clone(r.bs)
	slices.SortStableFunc(bs, func(a, b Batch[string]) int { return strings.Compare(a.Key, b.Key) })
	return bs
}

// do starts f.Do in a goroutine; its answer arrives on the returned channel.
func do(f *Ferry[string, in, int], ctx context.Context, x in) chan answer {
	c := make(chan answer, 1)
	go func() {
		out, err := f.Do(ctx, x)
		c <- answer{out, err}
	}()
	return c
}

// tens answers 10*id per input.
func tens(ins []in) []int {
	outs := make([]int, len(ins))
	for i, x := range ins {
		outs[i] = 10 * x.ID
	}
	return outs
}

var errBoom = errors.New("boom")

func TestOnBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		assert.Equal(t, Batch[string]{Key: "a", Size: 2, Weight: 5, Wait: ms3, Took: 5 * time.Millisecond}, bs[0])
		ms10 := 10 * time.Millisecond
		assert.Equal(t, Batch[string]{Key: "b", Size: 1, Weight: 1, Wait: ms10, Took: 7 * time.Millisecond}, bs[1], "at its deadline")
		assert.Equal(t, Batch[string]{Key: "e", Size: 1, Wait: ms10, Err: errBoom}, bs[2])
		assert.Equal(t, Batch[string]{Key: "m", Size: 2, Err: Errors{nil, errBoom}}, bs[3], "full at once")
		assert.ErrorAs(t, bs[4].Err, &pe, "the call panicked")
		assert.Equal(t, Batch[string]{Key: "p", Size: 1, Wait: ms10}, Batch[string]{Key: bs[4].Key, Size: bs[4].Size, Wait: bs[4].Wait})
		assert.Equal(t, uint64(0), f.Stats().OnBatchPanics)
	})
}

func TestOnBatchRunsAfterTheAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
		assert.Equal(t, []Batch[string]{{Key: "a", Size: 1, Weight: 4, Took: 7 * time.Millisecond, Direct: true}}, rep.get(t),
			"told before Do returns, on its goroutine, with Wait 0")
		assert.Equal(t, Stats{DirectCalls: 1}, f.Stats())
	})
}

// With no MaxBatchDelay the loop stamps inputs as it admits them, for Do,
// Submit and DoMany alike; each waits 3 ms behind its key's first call here.
func TestOnBatchWaitWithZeroDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
			{Key: "a", Size: 1, Took: ms4}, {Key: "a", Size: 1, Wait: ms3},
			{Key: "b", Size: 1, Took: ms4}, {Key: "b", Size: 1, Wait: ms3},
			{Key: "c", Size: 1, Took: ms4}, {Key: "c", Size: 2, Wait: ms3},
		}, rep.get(t), "from its admission, with no delay too")
	})
}

func TestOnBatchPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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

func TestCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rep reports
		type seen struct {
			deadline time.Duration // after the call's start
			value    any
		}
		calls := make(chan seen, 2)
		call := func(ctx context.Context, key string, ins []in) ([]int, error) {
			if key == "quick" {
				time.Sleep(10 * time.Millisecond)
				return tens(ins), nil
			}
			d, _ := ctx.Deadline()
			calls <- seen{time.Until(d), ctx.Value(ctxKey{})}
			<-ctx.Done()
			return nil, ctx.Err()
		}
		cfg := inCfg
		cfg.CallTimeout, cfg.OnBatch = 50*time.Millisecond, rep.on
		for _, direct := range []bool{false, true} {
			cfg.DirectCalls = direct
			f, err := New(call, cfg)
			require.NoError(t, err)
			ctx := context.WithValue(context.Background(), ctxKey{}, "v")
			start := time.Now()
			_, err = f.Do(ctx, in{Key: "slow", ID: 1})
			assert.Equal(t, 50*time.Millisecond, time.Since(start))
			assert.ErrorIs(t, err, ErrCallTimeout)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "the call's own error stays in the chain")
			assert.Equal(t, "ferry: call timed out: context deadline exceeded", err.Error())
			s := <-calls
			assert.Equal(t, 50*time.Millisecond, s.deadline, "a deadline CallTimeout after the start")
			if direct {
				assert.Equal(t, "v", s.value, "a direct call's context is its caller's")
			} else {
				assert.Nil(t, s.value, "a batched call's carries no caller's values")
			}
			out, err := f.Do(ctx, in{Key: "quick", ID: 2})
			assert.Equal(t, answer{20, nil}, answer{out, err})
			require.NoError(t, f.Close())
		}
		bs := rep.get(t)
		require.Len(t, bs, 4)
		for i, b := range bs[:2] {
			assert.Equal(t, i == 1, b.Direct)
			assert.Equal(t, 10*time.Millisecond, b.Took)
		}
		for i, b := range bs[2:] {
			assert.Equal(t, i == 1, b.Direct)
			assert.Equal(t, 50*time.Millisecond, b.Took, "exactly CallTimeout")
			assert.ErrorIs(t, b.Err, ErrCallTimeout)
		}
	})
}

func TestCloseErrorsMatchErrClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		call := func(ctx context.Context, key string, ins []in) ([]int, error) {
			<-ctx.Done()
			switch key {
			case "m": // fails the first input, answers the others
				errs := make(Errors, len(ins))
				errs[0] = ctx.Err()
				return tens(ins), errs
			case "cause":
				return nil, context.Cause(ctx)
			}
			return nil, ctx.Err() // a bare context.Canceled
		}
		for _, direct := range []bool{false, true} {
			cfg := inCfg
			cfg.DirectCalls, cfg.MaxBatchSize = direct, 2
			if !direct {
				cfg.MaxBatchDelay = time.Millisecond // m's two inputs go together
			}
			f, err := New(call, cfg)
			require.NoError(t, err)
			ctx := context.Background()
			a := do(f, ctx, in{Key: "a", ID: 1})
			c := do(f, ctx, in{Key: "cause", ID: 2})
			synctest.Wait()
			m1, m2 := do(f, ctx, in{Key: "m", ID: 3}), do(f, ctx, in{Key: "m", ID: 4})
			advance(time.Millisecond)
			require.NoError(t, f.Close())
			synctest.Wait()
			err = got(t, a).err
			assert.ErrorIs(t, err, ErrClosed, "direct %v", direct)
			assert.ErrorIs(t, err, context.Canceled, "the call's own error stays in the chain")
			assert.Equal(t, "ferry: closed: context canceled", err.Error())
			assert.Equal(t, ErrClosed, got(t, c).err, "a call's error that matches already is left alone")
			ms := []answer{got(t, m1), got(t, m2)}
			if direct { // one made a direct call; the other waited for it and was drained
				assert.ElementsMatch(t, []string{"ferry: closed: context canceled", "ferry: closed"},
					[]string{ms[0].err.Error(), ms[1].err.Error()})
				continue
			}
			slices.SortFunc(ms, func(x, y answer) int { return x.out - y.out })
			assert.NoError(t, ms[1].err, "an input the Errors did not fail keeps its output")
			assert.Contains(t, []int{30, 40}, ms[1].out)
			assert.ErrorIs(t, ms[0].err, ErrClosed)
			assert.ErrorIs(t, ms[0].err, context.Canceled)
		}
	})
}

func TestCancelAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		causes := make(chan error, 8)
		call := func(ctx context.Context, _ string, ins []in) ([]int, error) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return nil, ctx.Err()
		}
		cfg := inCfg
		cfg.CancelAbandoned, cfg.MaxBatchSize, cfg.MaxBatchDelay = true, 2, time.Millisecond
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		running := func() bool { synctest.Wait(); return len(causes) == 0 }

		// Two Do callers in one batch: it runs until both have gone.
		ctx1, cancel1 := context.WithCancel(context.Background())
		ctx2, cancel2 := context.WithCancel(context.Background())
		a1, a2 := do(f, ctx1, in{Key: "a", ID: 1}), do(f, ctx2, in{Key: "a", ID: 2})
		synctest.Wait()
		require.Equal(t, 1, f.Stats().Busy)
		cancel1()
		assert.True(t, running(), "a batch with one caller left keeps running")
		assert.ErrorIs(t, got(t, a1).err, context.Canceled)
		cancel2()
		assert.False(t, running())
		assert.Equal(t, ErrAbandoned, <-causes)
		assert.ErrorIs(t, got(t, a2).err, context.Canceled)

		// A DoMany's inputs and a Submit's count as their callers.
		ctx3, cancel3 := context.WithCancel(context.Background())
		many := make(chan error, 1)
		go func() {
			_, err := f.DoMany(ctx3, []in{{Key: "b", ID: 3}, {Key: "b", ID: 4}})
			many <- err
		}()
		ctx4, cancel4 := context.WithCancel(context.Background())
		done := make(chan error, 1)
		require.NoError(t, f.Submit(ctx4, in{Key: "c", ID: 5}, func(_ int, err error) { done <- err }))
		time.Sleep(time.Millisecond)
		assert.True(t, running())
		assert.Equal(t, 2, f.Stats().Busy)
		cancel3()
		assert.False(t, running())
		assert.Equal(t, ErrAbandoned, <-causes)
		assert.ErrorIs(t, <-many, context.Canceled)
		cancel4()
		assert.False(t, running())
		assert.Equal(t, ErrAbandoned, <-causes)
		err = <-done
		assert.ErrorIs(t, err, ErrAbandoned, "done gets the call's error, and why its context ended")
		assert.Equal(t, "ferry: every caller gave up: context canceled", err.Error())

		// A caller that never gives up keeps its batch running; Close ends it.
		ctx5, cancel5 := context.WithCancel(context.Background())
		a5, a6 := do(f, ctx5, in{Key: "d", ID: 6}), do(f, context.Background(), in{Key: "d", ID: 7})
		synctest.Wait()
		cancel5()
		assert.True(t, running())
		assert.ErrorIs(t, got(t, a5).err, context.Canceled)
		require.NoError(t, f.Close())
		assert.Equal(t, ErrClosed, <-causes)
		synctest.Wait()
		assert.ErrorIs(t, got(t, a6).err, ErrClosed)
		assert.Equal(t, uint64(7), f.Stats().Taken)
	})
}

func TestStatsRejectedByReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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

// A call that runs runtime.Goexit on a worker whose last batch held Submits
// answers its own batch only: the worker's buffer of Submits starts empty.
func TestGoexitAfterSubmits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		call := func(_ context.Context, key string, ins []in) ([]int, error) {
			if key == "exit" {
				runtime.Goexit()
			}
			return tens(ins), nil
		}
		cfg := inCfg
		cfg.MaxInFlightBatches, cfg.MaxBatchSize, cfg.MaxBatchDelay = 1, 2, time.Millisecond
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		done := make(chan submitted, 2)
		for id := 1; id <= 2; id++ {
			require.NoError(t, f.Submit(ctx, in{Key: "a", ID: id}, func(out int, err error) { done <- submitted{out: out, err: err} }))
		}
		synctest.Wait()
		require.Len(t, done, 2, "one batch of two Submits")
		a := do(f, ctx, in{Key: "exit", ID: 3})
		advance(time.Millisecond)
		assert.ErrorIs(t, got(t, a).err, errGoexit)
		assert.Len(t, done, 2, "no done called again")
		out, err := f.Do(ctx, in{Key: "b", ID: 4})
		assert.Equal(t, answer{40, nil}, answer{out, err}, "the worker's replacement works")
	})
}
