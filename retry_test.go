package ferry

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Retries of a failed call (issue 24, rule 1): in the lane, holding the key
// (a batch's parked there: see park_test.go).

// flaky is a Call that records its calls, with their fake times, and fails
// an input (errBoom) while fail says so, given how many calls have seen it.
type flaky struct {
	start time.Time
	fail  func(x in, seen int) bool

	mu    sync.Mutex
	calls []called
	seen  map[int]int
	busy  map[string]bool
	errs  []string
}

func newFlaky(fail func(x in, seen int) bool) *flaky {
	return &flaky{start: time.Now(), fail: fail, seen: map[int]int{}, busy: map[string]bool{}}
}

func (c *flaky) call(ctx context.Context, key string, ins []in) ([]int, error) {
	c.mu.Lock()
	cl := called{key: key, at: time.Since(c.start)}
	if c.busy[key] {
		c.errs = append(c.errs, "two calls at once for "+key)
	}
	c.busy[key] = true
	var errs Errors
	outs := make([]int, len(ins))
	for i, x := range ins {
		cl.ids = append(cl.ids, x.ID)
		c.seen[x.ID]++
		outs[i] = 10 * x.ID
		if c.fail(x, c.seen[x.ID]) {
			if errs == nil {
				errs = make(Errors, len(ins))
			}
			errs[i] = errBoom
		}
	}
	c.calls = append(c.calls, cl)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.busy[key] = false
		c.mu.Unlock()
	}()
	if errs != nil {
		return outs, errs
	}
	return outs, nil
}

func (c *flaky) got(t *testing.T) []called {
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.errs)
	return append([]called(nil), c.calls...)
}

// retryN retries up to n attempts, after backoff(attempt).
func retryN(n int, backoff func(attempt int) time.Duration) func(string, int, error) (time.Duration, bool) {
	return func(_ string, attempt int, _ error) (time.Duration, bool) {
		return backoff(attempt), attempt < n
	}
}

func newFlakyFerry(t *testing.T, c *flaky, cfg Config[string, in]) *Ferry[string, in, int] {
	cfg.Key, cfg.Weight, cfg.Rank = inCfg.Key, inCfg.Weight, inCfg.Rank
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	f, err := New(c.call, cfg)
	require.NoError(t, err)
	return f
}

// doManyAsync starts f.DoMany in a goroutine; its outputs and error arrive on the channel.
type manyAnswer struct {
	outs []int
	err  error
}

func doManyAsync(f *Ferry[string, in, int], ctx context.Context, ins ...in) chan manyAnswer {
	c := make(chan manyAnswer, 1)
	go func() {
		outs, err := f.DoMany(ctx, ins)
		c <- manyAnswer{outs, err}
	}()
	return c
}

// The batch is called again after each backoff, to the nanosecond, holding
// the key: an input that joined the lane meanwhile waits for the last
// attempt, and goes after. OnBatch hears of every attempt, once it is over.
// Mutations: no retry (one call for [1 2]); take handing out the lane's
// items before the parked batch ([3] between the attempts); Attempt left
// at 1; Retried set on the last attempt too.
func TestRetryInTheLane(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return x.ID < 3 && seen < 3 })
		var rep reports
		f := newFlakyFerry(t, c, Config[string, in]{
			MaxInFlightBatches: 4,
			Retry:              retryN(5, func(a int) time.Duration { return time.Duration(a) * time.Second }),
			OnBatch:            rep.on,
		})
		defer f.Close()
		ctx := context.Background()
		first := doManyAsync(f, ctx, in{Key: "a", ID: 1}, in{Key: "a", ID: 2})
		synctest.Wait()
		later := do(f, ctx, in{Key: "a", ID: 3})
		other := do(f, ctx, in{Key: "b", ID: 4})
		synctest.Wait()
		assert.Equal(t, answer{40, nil}, got(t, other), "other keys go on")
		pending(t, later)
		require.Empty(t, first)
		advance(time.Second - 1)
		assert.Len(t, c.got(t), 2, "no retry before its backoff")
		advance(1)
		advance(2*time.Second - 1)
		assert.Len(t, c.got(t), 3)
		pending(t, later)
		advance(1)
		calls := c.got(t)
		var as [][]int
		var at []time.Duration
		for _, cl := range calls {
			if cl.key == "a" {
				as, at = append(as, cl.ids), append(at, cl.at)
			}
		}
		assert.Equal(t, [][]int{{1, 2}, {1, 2}, {1, 2}, {3}}, as)
		assert.Equal(t, []time.Duration{0, time.Second, 3 * time.Second, 3 * time.Second}, at)
		require.Len(t, first, 1)
		assert.Equal(t, manyAnswer{[]int{10, 20}, nil}, <-first)
		assert.Equal(t, answer{30, nil}, got(t, later))
		var attempts []int
		var retried []bool
		for _, b := range rep.get(t) {
			if b.Key == "a" {
				attempts, retried = append(attempts, b.Attempt), append(retried, b.Retried)
				if b.Attempt < 3 && b.Size == 2 {
					assert.Error(t, b.Err)
				}
			}
		}
		assert.Equal(t, []int{1, 2, 3, 1}, attempts)
		assert.Equal(t, []bool{true, true, false, false}, retried, "the last attempt's Err is the call's last word")
	})
}

// With an Errors, only the inputs it failed are tried again; the others keep
// their outputs. Retry is told of the Errors. Mutation: retry every input of
// the batch (the second call is [1 2 3]).
func TestRetryOnlyTheFailed(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return x.ID == 2 && seen == 1 })
		var told []error
		f := newFlakyFerry(t, c, Config[string, in]{Retry: func(_ string, attempt int, err error) (time.Duration, bool) {
			told = append(told, err)
			return time.Millisecond, true
		}})
		defer f.Close()
		a := doManyAsync(f, context.Background(), in{Key: "a", ID: 1}, in{Key: "a", ID: 2}, in{Key: "a", ID: 3})
		advance(time.Millisecond)
		assert.Equal(t, [][]int{{1, 2, 3}, {2}}, ids(c.got(t)))
		require.Len(t, a, 1)
		assert.Equal(t, manyAnswer{[]int{10, 20, 30}, nil}, <-a)
		require.Len(t, told, 1)
		var errs Errors
		require.ErrorAs(t, told[0], &errs)
		assert.Equal(t, Errors{nil, errBoom, nil}, errs)
	})
}

// An input whose caller gave up during the backoff is left out of the next
// attempt, and the others are tried again. Mutation: retryWanted keeps every
// input (the second call is [1 2]).
func TestRetryLeavesOutTheGone(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return seen == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{
			MaxBatchSize: 2, MaxBatchDelay: time.Hour,
			Retry: retryN(2, func(int) time.Duration { return time.Second }),
		})
		defer f.Close()
		ctx, cancel := context.WithCancel(context.Background())
		a := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := do(f, context.Background(), in{Key: "a", ID: 2})
		synctest.Wait() // the batch is full: its call fails, and the backoff starts
		cancel()
		synctest.Wait()
		err := got(t, a).err
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrDropped, "a call had taken it")
		advance(time.Second)
		assert.Equal(t, [][]int{{1, 2}, {2}}, ids(c.got(t)))
		assert.Equal(t, answer{20, nil}, got(t, b))
	})
}

// With CancelAbandoned, a backoff ends once every caller of the batch has
// given up: the key is free at once, and nothing is called again.
// Mutation: abandonParked not unparking (the key parked an hour).
func TestRetryAbandoned(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(in, int) bool { return true })
		f := newFlakyFerry(t, c, Config[string, in]{
			CancelAbandoned: true,
			Retry:           retryN(2, func(int) time.Duration { return time.Hour }),
		})
		defer f.Close()
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		a := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, context.Canceled)
		assert.Zero(t, f.Stats().Parked, "the key is free")
		assert.Equal(t, time.Duration(0), time.Since(start))
		assert.Len(t, c.got(t), 1)
	})
}

// Close during a backoff ends it at once: the input gets its last error,
// matching ErrClosed. Mutations: drain leaving parks parked (Close returns
// an hour later); retries.again not checking the batch's context (a second
// call).
func TestRetryClosedInBackoff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(in, int) bool { return true })
		f := newFlakyFerry(t, c, Config[string, in]{Retry: retryN(3, func(int) time.Duration { return time.Hour })})
		start := time.Now()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		require.NoError(t, f.Close())
		synctest.Wait()
		err := got(t, a).err
		assert.ErrorIs(t, err, ErrClosed)
		assert.ErrorIs(t, err, errBoom)
		assert.Equal(t, time.Duration(0), time.Since(start))
		assert.Len(t, c.got(t), 1)
	})
}

// A direct call is retried by its caller, holding the key, with OnBatch told
// of each attempt; its ctx ending ends a backoff with the last error.
// Mutations: no retry in direct (one call); direct's backoff not watching
// ctx (a second call an hour on).
func TestRetryDirect(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return x.ID == 2 || x.ID == 1 && seen < 3 })
		var rep reports
		f := newFlakyFerry(t, c, Config[string, in]{
			DirectCalls: true,
			OnBatch:     rep.on,
			Retry:       retryN(5, func(int) time.Duration { return time.Minute }),
		})
		defer f.Close()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		b := do(f, context.Background(), in{Key: "a", ID: 3})
		advance(2*time.Minute - 1)
		pending(t, a)
		advance(1)
		assert.Equal(t, answer{10, nil}, got(t, a))
		assert.Equal(t, answer{30, nil}, got(t, b), "after the retries")
		calls := c.got(t)
		assert.Equal(t, [][]int{{1}, {1}, {1}, {3}}, ids(calls))
		assert.Equal(t, []time.Duration{0, time.Minute, 2 * time.Minute, 2 * time.Minute},
			[]time.Duration{calls[0].at, calls[1].at, calls[2].at, calls[3].at})
		bs := rep.get(t)
		require.Len(t, bs, 4)
		for i, b := range bs[:3] {
			assert.Equal(t, i+1, b.Attempt)
			assert.True(t, b.Direct)
			assert.Equal(t, i < 2, b.Err != nil)
			assert.Equal(t, i < 2, b.Retried)
		}
		assert.False(t, bs[3].Retried)

		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		d := do(f, ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, got(t, d).err, errBoom, "the last error")
		assert.Equal(t, time.Duration(0), time.Since(start))
		assert.Len(t, c.got(t), 5)
	})
}

// A Retry that panics is no retry: the batch is answered with its error, and
// the ferry goes on. Mutation: askRetry not recovering (the test crashes).
func TestRetryPanics(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return seen == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{Retry: func(string, int, error) (time.Duration, bool) {
			panic("Retry")
		}})
		defer f.Close()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, errBoom)
		b := do(f, context.Background(), in{Key: "a", ID: 2})
		synctest.Wait()
		assert.ErrorIs(t, got(t, b).err, errBoom)
		assert.Equal(t, [][]int{{1}, {2}}, ids(c.got(t)))
	})
}

// A call that panics or times out is retried too; with a zero backoff at once.
func TestRetryPanicAndTimeout(t *testing.T) {
	bubble(t, func(t *testing.T) {
		n := 0
		call := func(ctx context.Context, key string, ins []in) ([]int, error) {
			switch n++; n {
			case 1:
				panic("call")
			case 2:
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			return tens(ins), nil
		}
		var errs []error
		f, err := New(call, Config[string, in]{Key: inCfg.Key, Shards: 1, CallTimeout: time.Second,
			Retry: func(_ string, _ int, err error) (time.Duration, bool) {
				errs = append(errs, err)
				return 0, true
			}})
		require.NoError(t, err)
		defer f.Close()
		start := time.Now()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		advance(time.Second)
		assert.Equal(t, answer{10, nil}, got(t, a))
		assert.Equal(t, time.Second, time.Since(start))
		require.Len(t, errs, 2)
		var pe *PanicError
		assert.ErrorAs(t, errs[0], &pe)
		assert.True(t, errors.Is(errs[1], ErrCallTimeout))
	})
}
