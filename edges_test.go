package ferry

import (
	"context"
	"errors"
	"math"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The edges of the contract (issue 10): sums at MaxInt64, keys no lane can
// hold, user code that misbehaves, Shutdown's start, and the bookkeeping.

func TestWeightsAtMaxInt64(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxQueuedWeight: math.MaxInt64, MaxBatchDelay: time.Second}, true)
		defer h.f.Close()
		h.do(context.Background(), in{Key: "a", ID: 0, W: math.MaxInt64})
		synctest.Wait() // its call holds key a: the next input waits
		a := h.do(context.Background(), in{Key: "a", ID: 1, W: math.MaxInt64})
		synctest.Wait()
		_, err := h.f.Do(context.Background(), in{Key: "b", ID: 2, W: 1})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "would pass MaxQueuedWeight 9223372036854775807")
		s := h.f.Stats()
		assert.Equal(t, int64(math.MaxInt64), s.Weight, "never negative")
		h.hold <- struct{}{}
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, answer{10, nil}, got(t, a))
	})
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second}, false)
		defer h.f.Close()
		h.do(context.Background(), in{Key: "a", ID: 1, W: math.MaxInt64 - 1}) // a partial lane
		synctest.Wait()
		_, err := h.f.Do(context.Background(), in{Key: "a", ID: 2, W: 2})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "would pass MaxInt64 (MaxQueuedWeight 0)")
		advance(time.Second)
	})
}

func TestBatchWeightNeverWraps(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchWeight: 1, MaxBatchDelay: time.Second}, true)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1, W: 1})
		synctest.Wait() // a's call holds key a
		b := h.do(ctx, in{Key: "a", ID: 2, W: math.MaxInt64 - 1})
		synctest.Wait()
		_, err := h.f.Do(ctx, in{Key: "a", ID: 3, W: math.MaxInt64})
		assert.ErrorIs(t, err, ErrRejected, "the room cannot hold its sum")
		c := h.do(ctx, in{Key: "a", ID: 4, W: 1})
		synctest.Wait()
		for range 3 {
			h.hold <- struct{}{}
			synctest.Wait()
		}
		assert.Equal(t, [][]int{{1}, {2}, {4}}, ids(h.seen()), "one input per batch of weight 1")
		for _, x := range []chan answer{a, b, c} {
			assert.NoError(t, got(t, x).err)
		}
	})
}

func TestDelayMaxInt64IsFullBatchesOnly(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchSize: 2, MaxBatchDelay: math.MaxInt64}, false)
		ctx := context.Background()
		advance(time.Millisecond) // submission time + delay passes MaxInt64 ns since New
		a := h.do(ctx, in{Key: "a", ID: 1})
		advance(1000 * time.Hour)
		pending(t, a)
		b := h.do(ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		assert.Equal(t, [][]int{{1, 2}}, ids(h.seen()))
		got(t, a)
		got(t, b)
		c := h.do(ctx, in{Key: "c", ID: 3})
		synctest.Wait()
		require.NoError(t, h.f.Shutdown(ctx))
		synctest.Wait() // c's Do has its answer, but may not have run since
		assert.Equal(t, answer{30, nil}, got(t, c), "Shutdown runs it")
	})
}

type pointerErr struct{ inner error }

func (e *pointerErr) Error() string { return "pointer error" }
func (e *pointerErr) Unwrap() error { return e.inner } // panics on a nil *pointerErr

type asPanics struct{}

func (asPanics) Error() string   { return "as panics" }
func (asPanics) As(any) bool     { panic("As") }
func (asPanics) Is(e error) bool { panic("Is") }

// crashers are scenarios that once killed the process from a goroutine of the
// ferry. TestNoCrash runs each in a child process, so that the suite survives
// if one does it again.
var crashers = map[string]func(t *testing.T){
	"NaN key": func(t *testing.T) { // item 5
		for _, direct := range []bool{false, true} {
			f, err := New(func(_ context.Context, _ float64, ins []int) ([]int, error) { return ins, nil },
				Config[float64, int]{Key: func(i int) float64 { return float64(i) / 0 * 0 }, DirectCalls: direct})
			require.NoError(t, err)
			_, err = f.Do(context.Background(), 1)
			assert.ErrorContains(t, err, "key of type float64 is not equal to itself")
			_, err = f.Do(context.Background(), 0)
			assert.ErrorContains(t, err, "not equal to itself")
			assert.Equal(t, Stats{}, f.Stats())
			require.NoError(t, f.Close())
		}
	},
	"incomparable key": func(t *testing.T) { // item 6
		f, err := New(func(_ context.Context, _ any, ins []int) ([]int, error) { return ins, nil },
			Config[any, int]{Key: func(i int) any {
				if i < 0 {
					return []int{i}
				}
				return [1]any{math.NaN()}
			}})
		require.NoError(t, err)
		defer f.Close()
		_, err = f.Do(context.Background(), -1)
		assert.ErrorContains(t, err, "key of type []int is not comparable")
		_, err = f.Do(context.Background(), 1)
		assert.ErrorContains(t, err, "key of type [1]interface {} is not equal to itself")
		assert.Equal(t, Stats{}, f.Stats())
	},
	"error methods panic": func(t *testing.T) { // item 7
		for _, direct := range []bool{false, true} {
			for _, e := range []error{(*pointerErr)(nil), asPanics{}} {
				f, err := New(func(context.Context, string, []int) ([]int, error) { return nil, e },
					Config[string, int]{Key: func(int) string { return "k" }, DirectCalls: direct})
				require.NoError(t, err)
				_, err = f.Do(context.Background(), 1)
				var p *PanicError
				assert.ErrorAs(t, err, &p, "direct %v, %T", direct, e)
				require.NoError(t, f.Close())
			}
		}
	},
}

func TestNoCrash(t *testing.T) {
	for name, run := range crashers {
		t.Run(name, func(t *testing.T) {
			if os.Getenv("FERRY_CRASHER") == name {
				bubble(t, run)
				return
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestNoCrash$/^"+t.Name()[len("TestNoCrash/"):]+"$", "-test.v")
			cmd.Env = append(os.Environ(), "FERRY_CRASHER="+name)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "the child process:\n%s", out)
			assert.Contains(t, string(out), "--- PASS: TestNoCrash/", "the child ran the scenario")
		})
	}
}

// blockingCtx is a caller's own context type whose Value blocks while
// blocked is set: user code that must never run on the loop.
type blockingCtx struct {
	context.Context
	blocked atomic.Bool
	unblock chan struct{}
}

func (c *blockingCtx) Value(key any) any {
	if c.blocked.Load() {
		<-c.unblock
	}
	return c.Context.Value(key)
}

// Item 8: at Close, cancelling a direct call's context calls its parent's
// Value; that runs off the loop, so a blocking Value stalls nothing.
func TestCloseRunsNoCallerContextMethodOnTheLoop(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{DirectCalls: true}, true)
		parent, cancel := context.WithCancel(context.Background())
		defer cancel()
		ctx := &blockingCtx{Context: parent, unblock: make(chan struct{})}
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		ctx.blocked.Store(true)
		closed := make(chan error, 1)
		go func() { closed <- h.f.Close() }()
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, ErrClosed)
		select {
		case err := <-closed:
			assert.NoError(t, err)
		default:
			t.Error("Close has not returned: the loop is stuck in the caller's Value")
		}
		assert.Equal(t, uint64(1), h.f.Stats().DirectCalls)
		close(ctx.unblock)
	})
}

// Item 9: Shutdown with a context that has ended still starts the shutdown.
func TestShutdownWithEndedContextStartsIt(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		for range 64 { // a select between a ready send and a ready ctx.Done is a coin toss
			h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour}, false)
			a := h.do(context.Background(), in{Key: "a", ID: 1})
			synctest.Wait()
			err := h.f.Shutdown(ended)
			require.ErrorIs(t, err, context.Canceled)
			synctest.Wait()
			require.Equal(t, answer{10, nil}, got(t, a), "the waiting input ran")
			_, err = h.f.Do(context.Background(), in{Key: "b"})
			require.ErrorIs(t, err, ErrClosed)
		}
	})
}

// Item 12: a direct call's caller is the call: when its context ends it
// returns what the call returns, once the call returns.
func TestDirectCallerWaitsForItsCall(t *testing.T) {
	bubble(t, func(t *testing.T) {
		f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
			time.Sleep(time.Second) // ignores ctx
			return []int{7}, ctx.Err()
		}, Config[string, in]{Key: inCfg.Key, DirectCalls: true})
		require.NoError(t, err)
		defer f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err = f.Do(ctx, in{Key: "a"})
		assert.Equal(t, time.Second, time.Since(start), "returned with the call, not with ctx")
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the call's context ended with ctx")
	})
}

// Item 14: the map of direct calls in flight follows what runs, not its peak.
// The loop's handle is stepped directly: no worker, no goroutine.
func TestDirectCallsMapShrinks(t *testing.T) {
	lim := limits{batchSize: 1, queued: 1, direct: true}
	f := &Ferry[int, int, int]{lim: lim}
	l := newLoop(&shard[int, int, int]{f: f}, lim, 0, 0, 0)
	const n = 20_000
	ws := make([]*waiter[int, int, int], n)
	for k := range n {
		w := &waiter[int, int, int]{key: k, weight: 1, c: make(chan result[int], 1)}
		ws[k] = w
		l.handle(msg[int, int, int]{op: opAdmit, w: w}, t0)
		require.Equal(t, errClaimed, (<-w.c).err)
		l.handle(msg[int, int, int]{op: opStart, key: k, w: w, cancel: func(error) {}}, t0)
	}
	require.Equal(t, n, l.directs.calls.len())
	for k := range n - 1 {
		l.handle(msg[int, int, int]{op: opRelease, key: k, worker: byCaller, w: ws[k]}, t0)
	}
	assert.Equal(t, 1, l.directs.calls.len())
	assert.LessOrEqual(t, l.directs.calls.peak, shrinkLanes, "rebuilt since the peak of %d", n)
	assert.LessOrEqual(t, l.st.lanes.peak, shrinkLanes, "and the lanes map with it")
}

func TestNilErrorsIsNoError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		for _, direct := range []bool{false, true} {
			f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) {
				var errs Errors // no input failed
				return []int{5}, errs
			}, Config[string, in]{Key: inCfg.Key, DirectCalls: direct})
			require.NoError(t, err)
			out, err := f.Do(context.Background(), in{Key: "a"})
			assert.NoError(t, err)
			assert.Equal(t, 5, out)
			require.NoError(t, f.Close())
		}
	})
}

func TestAbsurdLimitsAreErrors(t *testing.T) {
	call := func(context.Context, string, []in) ([]int, error) { return nil, nil }
	cfg := inCfg
	cfg.MaxInFlightBatches = math.MaxInt
	_, err := New(call, cfg)
	assert.ErrorContains(t, err, "Config.MaxInFlightBatches is 9223372036854775807, over MaxInFlightBatchesLimit 65536")
	bubble(t, func(t *testing.T) {
		cfg.MaxInFlightBatches = MaxInFlightBatchesLimit
		cfg.MaxBatchSize, cfg.MaxQueued, cfg.MaxBatchWeight, cfg.MaxQueuedWeight = math.MaxInt, math.MaxInt, math.MaxInt64, math.MaxInt64
		f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) { return make([]int, len(ins)), nil }, cfg)
		require.NoError(t, err)
		_, err = f.Do(context.Background(), in{Key: "a", W: math.MaxInt64})
		assert.NoError(t, err)
		require.NoError(t, f.Close())
	})
}

// Shutdown from inside a batched call, with the call's context, would wait
// for that very call: it is refused at once.
func TestShutdownFromInsideACall(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var f *Ferry[string, in, int]
		f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
			return []int{0}, f.Shutdown(ctx)
		}, Config[string, in]{Key: inCfg.Key})
		require.NoError(t, err)
		_, err = f.Do(context.Background(), in{Key: "a"})
		assert.ErrorContains(t, err, "Shutdown from inside a Call")
		assert.False(t, errors.Is(err, ErrClosed))
		require.NoError(t, f.Close())
	})
}
