package ferry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of the call's own behaviour: its results and errors, panics and
// Goexit, CallTimeout, CancelAbandoned, and the errors of a call whose
// context the ferry ended.

func TestResults(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		call Call[string, in, int]
		want func(t *testing.T, i int, a answer)
	}{
		{"error", func(context.Context, string, []in) ([]int, error) { return nil, boom },
			func(t *testing.T, i int, a answer) { assert.ErrorIs(t, a.err, boom) }},
		{"errors per input", func(_ context.Context, _ string, ins []in) ([]int, error) {
			return []int{7, 0, 9}, Errors{nil, boom, nil}
		}, func(t *testing.T, i int, a answer) {
			if i == 1 {
				assert.ErrorIs(t, a.err, boom)
			} else {
				assert.Equal(t, answer{7 + i, nil}, a)
			}
		}},
		{"wrapped Errors", func(_ context.Context, _ string, ins []in) ([]int, error) {
			return []int{7, 0, 9}, fmt.Errorf("some: %w", Errors{nil, boom, nil})
		}, func(t *testing.T, i int, a answer) {
			if i == 1 {
				assert.ErrorIs(t, a.err, boom)
			} else {
				assert.NoError(t, a.err)
			}
		}},
		{"Errors of wrong length", func(context.Context, string, []in) ([]int, error) { return nil, Errors{boom} },
			func(t *testing.T, i int, a answer) { assert.ErrorContains(t, a.err, "1 errors for 3 inputs") }},
		{"wrong number of outputs", func(context.Context, string, []in) ([]int, error) { return []int{1}, nil },
			func(t *testing.T, i int, a answer) { assert.ErrorContains(t, a.err, "1 outputs for 3 inputs") }},
		{"panic", func(context.Context, string, []in) ([]int, error) { panic("oops") },
			func(t *testing.T, i int, a answer) {
				var p *PanicError
				require.ErrorAs(t, a.err, &p)
				assert.Equal(t, "oops", p.Value)
				assert.ErrorContains(t, a.err, "oops")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				n := 0
				f, err := New(func(ctx context.Context, key string, ins []in) ([]int, error) {
					if n++; n > 1 {
						return []int{42}, nil // the ferry keeps working
					}
					return tc.call(ctx, key, ins)
				}, Config[string, in]{Key: inCfg.Key, MaxBatchDelay: time.Millisecond})
				require.NoError(t, err)
				defer f.Close()
				var cs []chan answer
				for i := range 3 {
					c := make(chan answer, 1)
					go func() { out, err := f.Do(context.Background(), in{Key: "a", ID: i}); c <- answer{out, err} }()
					cs = append(cs, c)
					synctest.Wait()
				}
				advance(time.Millisecond)
				for i, c := range cs {
					tc.want(t, i, got(t, c))
				}
				out, err := f.Do(context.Background(), in{Key: "a"})
				assert.NoError(t, err)
				assert.Equal(t, 42, out)
			})
		})
	}
}

func TestDirectCallPanics(t *testing.T) {
	bubble(t, func(t *testing.T) {
		f, err := New(func(context.Context, string, []in) ([]int, error) { panic(errors.New("bad")) },
			Config[string, in]{Key: inCfg.Key, DirectCalls: true})
		require.NoError(t, err)
		defer f.Close()
		_, err = f.Do(context.Background(), in{Key: "a"})
		var p *PanicError
		assert.ErrorAs(t, err, &p)
		assert.ErrorContains(t, err, "bad")
		assert.Equal(t, Stats{DirectCalls: 1}, f.Stats(), "released")
	})
}

// A Call that ends its goroutine with runtime.Goexit (as t.FailNow does)
// fails its batch, and the ferry goes on with as many workers as before; in a
// direct call it ends the caller's goroutine, and the key is released.
func TestCallGoexit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		for _, direct := range []bool{false, true} {
			h := newHarness(t, Config[string, in]{DirectCalls: direct, MaxInFlightBatches: 1}, false)
			orig := h.f.call
			h.f.call = func(ctx context.Context, key string, ins []in) ([]int, error) {
				if ins[0].ID == 1 {
					runtime.Goexit()
				}
				return orig(ctx, key, ins)
			}
			a := h.do(context.Background(), in{Key: "a", ID: 1})
			synctest.Wait()
			if direct {
				pending(t, a) // the caller's goroutine has gone
			} else {
				assert.ErrorContains(t, got(t, a).err, "runtime.Goexit")
			}
			assert.Equal(t, 0, h.f.Stats().Busy, "direct %v: the key is released", direct)
			out, err := h.f.Do(context.Background(), in{Key: "a", ID: 2})
			assert.NoError(t, err)
			assert.Equal(t, 20, out, "direct %v: the ferry goes on", direct)
			require.NoError(t, h.f.Close())
		}
	})
}

func TestErrorTypes(t *testing.T) {
	e1, e2 := errors.New("one"), errors.New("two")
	errs := Errors{nil, e1, e2}
	assert.Equal(t, "input 1: one; input 2: two", errs.Error())
	assert.ErrorIs(t, errs, e2)
	assert.Equal(t, "ferry: no input failed", Errors{nil}.Error())
	p := &PanicError{Value: e1}
	assert.ErrorIs(t, p, e1)
	assert.Nil(t, (&PanicError{Value: 3}).Unwrap())
}

func TestCallTimeout(t *testing.T) {
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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

		// A DoMany's inputs count as their callers. A Submit's input has no
		// caller to give up: its ctx bounds only its admission.
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
		assert.True(t, running(), "a Submit's batch keeps running")
		assert.Empty(t, done)

		// A caller that never gives up keeps its batch running; Close ends it.
		ctx5, cancel5 := context.WithCancel(context.Background())
		a5, a6 := do(f, ctx5, in{Key: "d", ID: 6}), do(f, context.Background(), in{Key: "d", ID: 7})
		synctest.Wait()
		cancel5()
		assert.True(t, running())
		assert.ErrorIs(t, got(t, a5).err, context.Canceled)
		require.NoError(t, f.Close())
		assert.Equal(t, ErrClosed, <-causes)
		assert.Equal(t, ErrClosed, <-causes)
		synctest.Wait()
		assert.ErrorIs(t, got(t, a6).err, ErrClosed)
		assert.ErrorIs(t, <-done, ErrClosed, "the Submit's done is told of the close")
		assert.Equal(t, uint64(7), f.Stats().Taken)
	})
}

// A call that runs runtime.Goexit on a worker whose last batch held Submits
// answers its own batch only: the worker's buffer of Submits starts empty.
func TestGoexitAfterSubmits(t *testing.T) {
	bubble(t, func(t *testing.T) {
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

// A direct call's claim takes its key's place among the key's completions
// (with OnBatch); Close's notifier, which calls the drained Submits' done
// once every completion in flight is over, waits on it too. A direct call
// that ends with no OnBatch (runtime.Goexit, as here, or a claim its caller
// gave up) must still let that wait end once the key's earlier completions
// are over: else Close never returns (found by model/fail.pml). Mutation:
// endDirect giving the place back without closing the claim's fin (the
// bubble deadlocks in Close).
func TestCloseAfterADirectCallsGoexit(t *testing.T) {
	bubble(t, func(t *testing.T) {
		call := func(ctx context.Context, key string, ins []in) ([]int, error) {
			<-ctx.Done()
			if key == "a" {
				runtime.Goexit()
			}
			return nil, ctx.Err()
		}
		f, err := New(call, Config[string, in]{Key: inCfg.Key, Shards: 1, DirectCalls: true,
			MaxInFlightBatches: 1, OnBatch: func(Batch[string]) {}})
		require.NoError(t, err)
		ctx := context.Background()
		busy := make(chan error, 1)
		require.NoError(t, f.Submit(ctx, in{Key: "c", ID: 1}, func(_ int, err error) { busy <- err }))
		synctest.Wait() // c's batch holds the one worker
		drained := make(chan error, 1)
		require.NoError(t, f.Submit(ctx, in{Key: "b", ID: 2}, func(_ int, err error) { drained <- err }))
		direct := make(chan answer, 1) // a's direct call, whose claim takes a's place
		go func() {
			a := answer{err: errCallerGone} // unless Do returns: Goexit ends its goroutine
			defer func() { direct <- a }()
			out, err := f.Do(ctx, in{Key: "a", ID: 3})
			a = answer{out, err}
		}()
		synctest.Wait()
		require.NoError(t, f.Close())
		synctest.Wait()
		assert.ErrorIs(t, <-drained, ErrClosed)
		assert.ErrorIs(t, <-busy, ErrClosed)
		assert.ErrorIs(t, got(t, direct).err, errCallerGone)
	})
}
