package ferry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// in is a test input: its key, id, weight and rank.
type in struct {
	Key  string
	ID   int
	W, R int64
}

var inCfg = Config[string, in]{
	Key:    func(x in) string { return x.Key },
	Weight: func(x in) int64 { return x.W },
	Rank:   func(x in) int64 { return x.R },
}

// called is one call as the harness saw it.
type called struct {
	key string
	ids []int
	at  time.Duration // since the harness started, in the bubble's fake time
}

// harness runs a ferry whose Call records every batch, checks that no key has
// two calls at once, and answers 10*id per input. With hold set, each call
// waits for a token on hold (or its context) first.
type harness struct {
	t     *testing.T
	f     *Ferry[string, in, int]
	start time.Time
	hold  chan struct{}

	mu      sync.Mutex
	calls   []called
	busy    map[string]bool
	running int
	peak    int
	errs    []error
}

func newHarness(t *testing.T, cfg Config[string, in], hold bool) *harness {
	h := &harness{t: t, start: time.Now(), busy: map[string]bool{}}
	if hold {
		h.hold = make(chan struct{})
	}
	if cfg.Key == nil {
		cfg.Key, cfg.Weight, cfg.Rank = inCfg.Key, inCfg.Weight, inCfg.Rank
	}
	if cfg.Shards == 0 {
		cfg.Shards = 1 // one room and one ready line, whatever GOMAXPROCS is: see shard_test.go
	}
	f, err := New(h.call, cfg)
	require.NoError(t, err)
	h.f = f
	return h
}

func (h *harness) call(ctx context.Context, key string, ins []in) ([]int, error) {
	h.mu.Lock()
	c := called{key: key, at: time.Since(h.start)}
	for _, x := range ins {
		c.ids = append(c.ids, x.ID)
	}
	h.calls = append(h.calls, c)
	if h.busy[key] {
		h.errs = append(h.errs, fmt.Errorf("two calls in flight for key %s", key))
	}
	h.busy[key] = true
	h.running++
	h.peak = max(h.peak, h.running)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.busy[key] = false
		h.running--
		h.mu.Unlock()
	}()
	if h.hold != nil {
		select {
		case <-h.hold:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	outs := make([]int, len(ins))
	for i, x := range ins {
		outs[i] = 10 * x.ID
	}
	return outs, nil
}

// seen returns the calls so far and fails on a broken rule.
func (h *harness) seen() []called {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(h.t, h.errs)
	return append([]called(nil), h.calls...)
}

// answer is what one Do returned.
type answer struct {
	out int
	err error
}

// do starts Do in a goroutine; its answer arrives on the returned channel.
func (h *harness) do(ctx context.Context, x in) chan answer {
	c := make(chan answer, 1)
	go func() {
		out, err := h.f.Do(ctx, x)
		c <- answer{out, err}
	}()
	return c
}

// got requires that c has its answer now.
func got(t *testing.T, c chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	default:
		require.FailNow(t, "Do has not returned")
		return answer{}
	}
}

// pending requires that c has no answer yet.
func pending(t *testing.T, c chan answer) {
	t.Helper()
	select {
	case a := <-c:
		require.FailNow(t, "Do returned early", "%+v", a)
	default:
	}
}

// advance moves the bubble's fake time on by d and lets everything settle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func ids(calls []called) [][]int {
	var out [][]int
	for _, c := range calls {
		out = append(out, c.ids)
	}
	return out
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	call := func(context.Context, string, []in) ([]int, error) { return nil, nil }
	_, err := New[string, in, int](nil, inCfg)
	assert.ErrorContains(t, err, "call")
	_, err = New(call, Config[string, in]{})
	assert.ErrorContains(t, err, "Key")
	for _, tc := range []struct {
		field string
		set   func(*Config[string, in])
	}{
		{"MaxBatchSize", func(c *Config[string, in]) { c.MaxBatchSize = -1 }},
		{"MaxBatchWeight", func(c *Config[string, in]) { c.MaxBatchWeight = -1 }},
		{"MaxBatchDelay", func(c *Config[string, in]) { c.MaxBatchDelay = -1 }},
		{"MaxInFlightBatches", func(c *Config[string, in]) { c.MaxInFlightBatches = -1 }},
		{"MaxQueued", func(c *Config[string, in]) { c.MaxQueued = -1 }},
		{"MaxQueuedWeight", func(c *Config[string, in]) { c.MaxQueuedWeight = -1 }},
		{"CallTimeout", func(c *Config[string, in]) { c.CallTimeout = -1 }},
	} {
		cfg := inCfg
		tc.set(&cfg)
		_, err := New(call, cfg)
		assert.ErrorContains(t, err, tc.field)
	}
}

func TestFullRoomRejectsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, false)
		defer h.f.Close()
		_, err := h.f.Do(context.Background(), in{Key: "a", W: -1})
		assert.ErrorContains(t, err, "negative weight -1")
		synctest.Wait()
		assert.Empty(t, h.seen())
		assert.Equal(t, Stats{}, h.f.Stats())
	})
}

func TestDoAfterCloseAndDuringShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, true)
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		shut := make(chan error, 1)
		go func() { shut <- h.f.Shutdown(ctx) }()
		synctest.Wait()
		_, err := h.f.Do(ctx, in{Key: "b"})
		assert.ErrorIs(t, err, ErrClosed, "during Shutdown")
		h.hold <- struct{}{}
		synctest.Wait()
		assert.NoError(t, <-shut)
		assert.Equal(t, answer{10, nil}, got(t, a))
		_, err = h.f.Do(ctx, in{Key: "b"})
		assert.ErrorIs(t, err, ErrClosed, "after Close")
		assert.NoError(t, h.f.Close())
	})
}

func TestLaneIsInRankOrderTiesByArrival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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

type ctxKey struct{}

func TestDirectCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
			synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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

func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 1}, true)
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := h.do(ctx, in{Key: "b", ID: 2, R: 1})
		b2 := h.do(ctx, in{Key: "b", ID: 3})
		c := h.do(ctx, in{Key: "a", ID: 4})
		synctest.Wait()
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { assert.NoError(t, h.f.Close()) })
		}
		wg.Wait()
		synctest.Wait()
		start := time.Now()
		for _, x := range []chan answer{a, b, b2, c} {
			assert.ErrorIs(t, got(t, x).err, ErrClosed)
		}
		assert.Equal(t, start, time.Now())
		_, err := h.f.Do(ctx, in{Key: "a"})
		assert.ErrorIs(t, err, ErrClosed)
		assert.Equal(t, Stats{Admitted: 4, Batches: 2, Taken: 2}, h.f.Stats(), "the final snapshot")
		assert.NoError(t, h.f.Close())
	})
}

func TestShutdownRunsWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 2, MaxInFlightBatches: 1}, false)
		ctx := context.Background()
		var cs []chan answer
		for i, k := range []string{"a", "a", "a", "b"} {
			cs = append(cs, h.do(ctx, in{Key: k, ID: i}))
			synctest.Wait()
		}
		synctest.Wait()
		assert.Equal(t, [][]int{{0, 1}}, ids(h.seen()))
		start := time.Now()
		require.NoError(t, h.f.Shutdown(ctx))
		synctest.Wait()
		assert.Equal(t, start, time.Now(), "no waiting for deadlines")
		for i, c := range cs {
			assert.Equal(t, answer{10 * i, nil}, got(t, c))
		}
		assert.Equal(t, [][]int{{0, 1}, {2}, {3}}, ids(h.seen()))
		assert.NoError(t, h.f.Shutdown(ctx))
	})
}

func TestShutdownGivesUpWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, true)
		a := h.do(context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		b := h.do(context.Background(), in{Key: "a", ID: 2})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		assert.ErrorIs(t, h.f.Shutdown(ctx), context.DeadlineExceeded)
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, answer{10, nil}, got(t, a), "the ferry keeps draining")
		assert.Equal(t, [][]int{{1}, {2}}, ids(h.seen()))
		require.NoError(t, h.f.Close())
		synctest.Wait()
		assert.ErrorIs(t, got(t, b).err, ErrClosed, "Close ends what is left")
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

func TestShutdownAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, false)
		require.NoError(t, h.f.Close())
		assert.NoError(t, h.f.Shutdown(context.Background()))
		assert.Equal(t, Stats{}, h.f.Stats())
	})
}

// submitted is what one Submit's done received, and where it ran.
type submitted struct {
	out    int
	err    error
	onLoop string
}

// submit calls Submit with a done that records its answer on the channel,
// which is buffered so that done never blocks.
func (h *harness) submit(ctx context.Context, x in) (chan submitted, error) {
	c := make(chan submitted, 2)
	err := h.f.Submit(ctx, x, func(out int, err error) { c <- submitted{out, err, onLoop()} })
	return c, err
}

// once requires that c has exactly one answer now, and returns it.
func once(t *testing.T, c chan submitted) submitted {
	t.Helper()
	require.Len(t, c, 1, "done called once")
	s := <-c
	assert.Empty(t, s.onLoop, "done ran on the loop")
	return s
}

func TestSubmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second, MaxBatchSize: 2, DirectCalls: true}, false)
		defer h.f.Close()
		start := time.Now()
		a, err := h.submit(context.Background(), in{Key: "a", ID: 1})
		require.NoError(t, err)
		assert.Equal(t, start, time.Now(), "Submit returns at once")
		advance(time.Second - 1)
		assert.Empty(t, a, "the input waits for its deadline")
		advance(1)
		assert.Equal(t, submitted{out: 10}, once(t, a))
		assert.Equal(t, []called{{"a", []int{1}, time.Second}}, h.seen())
		synctest.Wait()
		assert.Empty(t, a, "and only once")
		require.NoError(t, h.f.Submit(context.Background(), in{Key: "b", ID: 2}, nil), "done may be nil")
		advance(time.Second)
		assert.Equal(t, Stats{Admitted: 2, Batches: 2, Taken: 2}, h.f.Stats())
	})
}

func TestSubmitNeverMakesADirectCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ctxs []context.Context
		f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
			ctxs = append(ctxs, ctx)
			return make([]int, len(ins)), nil
		}, Config[string, in]{Key: inCfg.Key, DirectCalls: true, MaxInFlightBatches: 1})
		require.NoError(t, err)
		defer f.Close()
		done := make(chan error, 1)
		require.NoError(t, f.Submit(context.Background(), in{Key: "a"}, func(_ int, err error) { done <- err }))
		synctest.Wait()
		require.NoError(t, <-done)
		require.Len(t, ctxs, 1)
		assert.Equal(t, f, ctxs[0].Value(callKey{}), "a batched call, on a worker")
		assert.Equal(t, Stats{Admitted: 1, Batches: 1, Taken: 1}, f.Stats())
	})
}

func TestSubmitRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second, MaxQueued: 1}, false)
		_, err := h.submit(context.Background(), in{Key: "a", ID: 1})
		require.NoError(t, err)
		b, err := h.submit(context.Background(), in{Key: "b", ID: 2})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "MaxQueued")
		_, err = h.submit(context.Background(), in{Key: "b", W: -1})
		assert.ErrorContains(t, err, "negative weight -1")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = h.submit(ctx, in{Key: "b"})
		assert.ErrorIs(t, err, context.Canceled)
		require.NoError(t, h.f.Close())
		_, err = h.submit(context.Background(), in{Key: "b"})
		assert.ErrorIs(t, err, ErrClosed)
		synctest.Wait()
		assert.Empty(t, b, "no done for what was not admitted")
		assert.Equal(t, Stats{Admitted: 1, Rejected: 1, RejectedFull: 1}, h.f.Stats())
	})
}

func TestSubmitContextEndsBeforeTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 3}, false)
		defer h.f.Close()
		ctx, cancel := context.WithCancelCause(context.Background())
		a, err := h.submit(ctx, in{Key: "a", ID: 1})
		require.NoError(t, err)
		b, err := h.submit(context.Background(), in{Key: "a", ID: 2})
		require.NoError(t, err)
		advance(time.Minute)
		start := time.Now()
		cause := errors.New("client went away")
		cancel(cause)
		synctest.Wait()
		s := once(t, a)
		assert.ErrorIs(t, s.err, context.Canceled)
		assert.ErrorIs(t, s.err, cause)
		assert.Equal(t, start, time.Now(), "at once, not at the deadline")
		assert.Equal(t, Stats{Queued: 1, Weight: 0, Lanes: 1, Admitted: 2, Dropped: 1}, h.f.Stats())
		advance(time.Hour)
		assert.Equal(t, submitted{out: 20}, once(t, b))
		assert.Equal(t, [][]int{{2}}, ids(h.seen()), "the dropped input never reached a call")
	})
}

func TestSubmitContextEndsAfterTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, true)
		defer h.f.Close()
		ctx, cancel := context.WithCancel(context.Background())
		a, err := h.submit(ctx, in{Key: "a", ID: 1})
		require.NoError(t, err)
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.Empty(t, a, "taken: its call's answer comes")
		h.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, submitted{out: 10}, once(t, a))
		assert.Equal(t, Stats{Admitted: 1, Batches: 1, Taken: 1}, h.f.Stats())
	})
}

func TestSubmitDonePanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second}, false)
		defer h.f.Close()
		ctx := context.Background()
		require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 1}, func(int, error) { panic("done panics") }))
		b, err := h.submit(ctx, in{Key: "a", ID: 2})
		require.NoError(t, err)
		c := h.do(ctx, in{Key: "a", ID: 3})
		advance(time.Second)
		assert.Equal(t, submitted{out: 20}, once(t, b), "the rest of the batch is answered")
		assert.Equal(t, answer{30, nil}, got(t, c))
		assert.Equal(t, uint64(1), h.f.Stats().DonePanics)
		d := h.do(ctx, in{Key: "a", ID: 4}) // the worker is still there
		advance(time.Second)
		assert.Equal(t, answer{40, nil}, got(t, d))
	})
}

func TestSubmitCloseAndShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour}, false)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, err := h.submit(ctx, in{Key: "a", ID: 1})
		require.NoError(t, err)
		require.NoError(t, h.f.Close())
		assert.Equal(t, submitted{err: ErrClosed}, once(t, a), "before Close returns")
		cancel()
		synctest.Wait()
		assert.Empty(t, a)

		h = newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour}, false)
		a, err = h.submit(context.Background(), in{Key: "a", ID: 1})
		require.NoError(t, err)
		require.NoError(t, h.f.Shutdown(context.Background()))
		assert.Equal(t, submitted{out: 10}, once(t, a), "Shutdown runs what was submitted")
	})
}

func TestDoMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Second, MaxQueued: 4, MaxQueuedWeight: 10}, false)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1, W: 1})
		synctest.Wait()
		_, err := h.f.DoMany(ctx, []in{{Key: "b", W: 1}, {Key: "c", W: 1}, {Key: "d", W: 1}, {Key: "e", W: 1}})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "4 inputs, more than the room has spare (MaxQueued 4)")
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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

func TestFlushAnswersWhatWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 4, MaxInFlightBatches: 1}, false)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := h.do(ctx, in{Key: "b", ID: 2})
		synctest.Wait()
		slow := make(chan struct{})
		var doneReturned bool
		require.NoError(t, h.f.Submit(ctx, in{Key: "c", ID: 3}, func(int, error) { <-slow; doneReturned = true }))
		advance(time.Minute)
		flushed := make(chan error, 1)
		go func() { flushed <- h.f.Flush(ctx) }()
		synctest.Wait()
		got(t, a)
		got(t, b)
		assert.Empty(t, flushed, "c's done has not returned")
		later := h.do(ctx, in{Key: "d", ID: 4})
		slow <- struct{}{}
		synctest.Wait()
		require.Len(t, flushed, 1)
		assert.NoError(t, <-flushed)
		assert.True(t, doneReturned)
		assert.Equal(t, time.Minute, time.Since(h.start), "Flush took no time of its own")
		advance(time.Hour - 1)
		pending(t, later)
		advance(1)
		assert.Equal(t, answer{40, nil}, got(t, later), "an input admitted after Flush keeps its deadline")

		assert.NoError(t, h.f.Flush(ctx), "nothing waits")
	})
}

func TestFlushWaitsForCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{DirectCalls: true}, true)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1}) // a direct call
		synctest.Wait()
		flushed := make(chan error, 1)
		go func() { flushed <- h.f.Flush(ctx) }()
		synctest.Wait()
		assert.Empty(t, flushed)
		h.hold <- struct{}{}
		synctest.Wait()
		got(t, a)
		assert.NoError(t, <-flushed)

		tctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		b := h.do(ctx, in{Key: "b", ID: 2})
		synctest.Wait()
		assert.ErrorIs(t, h.f.Flush(tctx), context.DeadlineExceeded, "ctx ends first")
		h.hold <- struct{}{}
		synctest.Wait()
		got(t, b)
	})
}

// A Flush that comes while another's round is in progress gets the next
// round, which starts as the first ends. On a shard that has started no
// worker (every call so far was direct) no ping's answer wakes the loop
// afterwards: the round must end at once if it has nothing to wait for, and
// make what waits due at once if it has.
func TestQueuedFlushOnAShardWithNoWorker(t *testing.T) {
	t.Run("nothing to wait for", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Config[string, in]{DirectCalls: true}, true)
			defer h.f.Close()
			ctx := context.Background()
			a := h.do(ctx, in{Key: "a", ID: 1}) // a direct call, held
			synctest.Wait()
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- h.f.Flush(ctx) }()
			synctest.Wait()
			go func() { second <- h.f.Flush(ctx) }()
			synctest.Wait()
			assert.Empty(t, first)
			assert.Empty(t, second)
			h.hold <- struct{}{}
			synctest.Wait()
			got(t, a)
			require.Len(t, first, 1)
			assert.NoError(t, <-first)
			require.Len(t, second, 1, "its round had nothing to wait for")
			assert.NoError(t, <-second)
			assert.Zero(t, time.Since(h.start))
		})
	})
	t.Run("an input waiting for its deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour}, false)
			defer h.f.Close()
			ctx := context.Background()
			slow := make(chan struct{})
			cctx, cancel := context.WithCancel(ctx)
			require.NoError(t, h.f.Submit(cctx, in{Key: "a", ID: 1}, func(int, error) { <-slow }))
			synctest.Wait()
			cancel() // dropped: its done runs, and blocks; the first round waits for it
			synctest.Wait()
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- h.f.Flush(ctx) }()
			synctest.Wait()
			b := h.do(ctx, in{Key: "b", ID: 2}) // after the first Flush: the second waits for it
			synctest.Wait()
			go func() { second <- h.f.Flush(ctx) }()
			synctest.Wait()
			assert.Empty(t, first)
			close(slow)
			synctest.Wait()
			require.Len(t, first, 1)
			assert.NoError(t, <-first)
			assert.Equal(t, answer{20, nil}, got(t, b), "the second round made b due at once")
			require.Len(t, second, 1)
			assert.NoError(t, <-second)
			assert.Zero(t, time.Since(h.start))
		})
	})
}

func TestFlushClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, true)
		a := h.do(context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		flushed := make(chan error, 1)
		go func() { flushed <- h.f.Flush(context.Background()) }()
		synctest.Wait()
		require.NoError(t, h.f.Close())
		assert.ErrorIs(t, <-flushed, ErrClosed, "closed while it waited")
		assert.ErrorIs(t, h.f.Flush(context.Background()), ErrClosed)
		synctest.Wait() // a's Do has its answer, but may not have run since
		assert.ErrorIs(t, got(t, a).err, ErrClosed, "the call's cause")
	})
}

func TestFlushFromInsideACall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f *Ferry[string, in, int]
		f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
			return make([]int, len(ins)), f.Flush(ctx)
		}, Config[string, in]{Key: inCfg.Key})
		require.NoError(t, err)
		defer f.Close()
		_, err = f.Do(context.Background(), in{Key: "a"})
		assert.ErrorIs(t, err, errFlushInCall)
	})
}
