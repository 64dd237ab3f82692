package ferry

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Config.KeepContexts, Callers and CallInfo (issue 38).

// reqKey is the key of a caller's request ID in its context.
type reqKey struct{}

// withReq returns a context holding the request ID id.
func withReq(id int) context.Context {
	return context.WithValue(context.Background(), reqKey{}, id)
}

// seenCall is what a call saw of its callers.
type seenCall struct {
	ids     []int // the inputs' IDs
	reqs    []int // the request ID in each of Callers, -1 if none; nil if Callers was nil
	attempt int
	direct  bool
	at      time.Duration
}

// spy is a Call that records what each call sees through Callers and
// CallInfo, and fails an input while fail says so.
type spy struct {
	start time.Time
	fail  func(x in, attempt int) bool

	mu    sync.Mutex
	calls []seenCall
}

func (s *spy) call(ctx context.Context, _ string, ins []in) ([]int, error) {
	c := seenCall{at: time.Since(s.start)}
	c.attempt, c.direct = CallInfo(ctx)
	if cs := Callers(ctx); cs != nil {
		c.reqs = []int{}
		for _, cc := range cs {
			id, ok := cc.Value(reqKey{}).(int)
			if !ok {
				id = -1
			}
			c.reqs = append(c.reqs, id)
		}
	}
	var errs Errors
	for i, x := range ins {
		c.ids = append(c.ids, x.ID)
		if s.fail != nil && s.fail(x, c.attempt) {
			if errs == nil {
				errs = make(Errors, len(ins))
			}
			errs[i] = errBoom
		}
	}
	s.mu.Lock()
	s.calls = append(s.calls, c)
	s.mu.Unlock()
	if errs != nil {
		return tens(ins), errs
	}
	return tens(ins), nil
}

func (s *spy) got() []seenCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]seenCall(nil), s.calls...)
}

func newSpyFerry(t *testing.T, s *spy, cfg Config[string, in]) *Ferry[string, in, int] {
	s.start = time.Now()
	cfg.Key, cfg.Weight, cfg.Rank = inCfg.Key, inCfg.Weight, inCfg.Rank
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	f, err := New(s.call, cfg)
	require.NoError(t, err)
	return f
}

// A batch of a Do, a DoMany's two inputs and a Submit (whose ctx has ended)
// sees each input's caller's context, in input order, rank order included.
// Mutations: w.ctx not set in Do, DoMany or Submit (-1 in its place); the
// contexts taken in another order than the inputs; attempt not 1.
func TestCallersInInputOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		s := &spy{}
		f := newSpyFerry(t, s, Config[string, in]{KeepContexts: true, MaxBatchDelay: time.Second})
		defer f.Close()
		sctx, cancel := context.WithCancel(withReq(104))
		done := make(chan error, 1)
		require.NoError(t, f.Submit(sctx, in{Key: "a", ID: 4, R: 1}, func(_ int, err error) { done <- err }))
		cancel() // a Submit's ctx may end: its values still reach the call
		one := do(f, withReq(101), in{Key: "a", ID: 1, R: 2})
		many := doManyAsync(f, withReq(102), in{Key: "a", ID: 2, R: 3}, in{Key: "a", ID: 3})
		advance(time.Second)
		assert.Equal(t, answer{10, nil}, got(t, one))
		assert.Equal(t, manyAnswer{[]int{20, 30}, nil}, <-many)
		require.NoError(t, <-done)
		assert.Equal(t, []seenCall{{
			ids: []int{3, 4, 1, 2}, reqs: []int{102, 104, 101, 102}, attempt: 1, at: time.Second,
		}}, s.got())
	})
}

// With KeepContexts off, a call, batched or direct, sees no callers and no
// attempt; outside a call Callers is nil too. Mutation: the worker and the
// direct call wrapping their ctx whatever KeepContexts.
func TestCallersOff(t *testing.T) {
	bubble(t, func(t *testing.T) {
		s := &spy{}
		f := newSpyFerry(t, s, Config[string, in]{MaxBatchDelay: time.Second})
		defer f.Close()
		a := do(f, withReq(1), in{Key: "a", ID: 1})
		many := doManyAsync(f, withReq(2), in{Key: "b", ID: 2})
		advance(time.Second)
		got(t, a)
		<-many
		assert.ElementsMatch(t, []seenCall{{ids: []int{1}, at: time.Second}, {ids: []int{2}, at: time.Second}}, s.got())
		assert.Nil(t, Callers(withReq(1)))
		d := &spy{}
		g := newSpyFerry(t, d, Config[string, in]{DirectCalls: true})
		defer g.Close()
		got(t, func() chan answer { a := do(g, withReq(3), in{Key: "a", ID: 3}); synctest.Wait(); return a }())
		assert.Equal(t, []seenCall{{ids: []int{3}}}, d.got(), "a direct call: its ctx is its caller's, Callers nil")
		attempt, direct := CallInfo(context.Background())
		assert.Equal(t, 0, attempt)
		assert.False(t, direct)
	})
}

// A retry sees the contexts of the inputs it carries alone, in their order,
// and its attempt. Mutations: the retry given every input's context (idx
// ignored); its attempt left at 1; the first call's attempt at 0.
func TestCallersOfARetry(t *testing.T) {
	bubble(t, func(t *testing.T) {
		s := &spy{fail: func(x in, attempt int) bool { return x.ID != 2 && attempt < 3 }}
		f := newSpyFerry(t, s, Config[string, in]{
			KeepContexts: true, MaxBatchDelay: time.Second,
			Retry: retryN(5, func(int) time.Duration { return time.Second }),
		})
		defer f.Close()
		var as []chan answer
		for id := 1; id <= 3; id++ {
			as = append(as, do(f, withReq(100+id), in{Key: "a", ID: id}))
			synctest.Wait() // in this order
		}
		advance(3 * time.Second)
		for i, a := range as {
			assert.Equal(t, answer{10 * (i + 1), nil}, got(t, a))
		}
		assert.Equal(t, []seenCall{
			{ids: []int{1, 2, 3}, reqs: []int{101, 102, 103}, attempt: 1, at: time.Second},
			{ids: []int{1, 3}, reqs: []int{101, 103}, attempt: 2, at: 2 * time.Second},
			{ids: []int{1, 3}, reqs: []int{101, 103}, attempt: 3, at: 3 * time.Second},
		}, s.got())
	})
}

// A direct call's Callers is its caller's context alone, and CallInfo says
// direct, with each retry's attempt. Mutations: direct false; the call's own
// ctx (the ferry's child) in place of the caller's (no difference in values:
// caught by the identity check); a retry's attempt left at 1.
func TestCallersOfADirectCall(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []context.Context
		s := &spy{fail: func(_ in, attempt int) bool { return attempt < 2 }}
		call := s.call
		f, err := New(func(ctx context.Context, key string, ins []in) ([]int, error) {
			mu.Lock()
			seen = append(seen, Callers(ctx)...)
			mu.Unlock()
			return call(ctx, key, ins)
		}, Config[string, in]{
			Key: inCfg.Key, KeepContexts: true, DirectCalls: true, Shards: 1,
			Retry: retryN(3, func(int) time.Duration { return time.Second }),
		})
		require.NoError(t, err)
		defer f.Close()
		s.start = time.Now()
		ctx := withReq(7)
		a := do(f, ctx, in{Key: "a", ID: 1})
		advance(time.Second)
		assert.Equal(t, answer{10, nil}, got(t, a))
		assert.Equal(t, []seenCall{
			{ids: []int{1}, reqs: []int{7}, attempt: 1, direct: true},
			{ids: []int{1}, reqs: []int{7}, attempt: 2, direct: true, at: time.Second},
		}, s.got())
		require.Len(t, seen, 2)
		assert.True(t, seen[0] == ctx && seen[1] == ctx, "the caller's own context")
	})
}

// Callers reads through contexts the call derives from its own, and a
// ferry's Flush and Shutdown still know their own call's context. Mutation:
// callCtx.Value not passing other keys on (Flush from the call waits for
// itself: the bubble deadlocks).
func TestCallersThroughDerivedContexts(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var f *Ferry[string, in, int]
		var reqs []int
		var flushErr error
		f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
			dctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			for _, c := range Callers(dctx) {
				reqs = append(reqs, c.Value(reqKey{}).(int))
			}
			flushErr = f.Flush(dctx)
			return tens(ins), nil
		}, Config[string, in]{Key: inCfg.Key, KeepContexts: true, CallTimeout: time.Hour})
		require.NoError(t, err)
		defer f.Close()
		a := do(f, withReq(5), in{Key: "a", ID: 1})
		synctest.Wait()
		got(t, a)
		assert.Equal(t, []int{5}, reqs)
		assert.ErrorIs(t, flushErr, errFlushInCall)
	})
}

// The callers' contexts are not kept once their call is over: not by the
// waiter (pooled), nor by the worker's buffer. Mutation: the worker's
// clear of its buffer after the batch.
func TestCallersNotKept(t *testing.T) {
	bubble(t, func(t *testing.T) {
		s := &spy{}
		f := newSpyFerry(t, s, Config[string, in]{KeepContexts: true, MaxBatchDelay: time.Second})
		defer f.Close()
		type big struct {
			context.Context
			_ [1 << 10]byte // not a tiny object
		}
		var ptrs []weak.Pointer[big]
		var as []chan answer
		for id := range 3 {
			c := &big{Context: withReq(id)}
			ptrs = append(ptrs, weak.Make(c))
			as = append(as, do(f, c, in{Key: "a", ID: id}))
			synctest.Wait()
		}
		advance(time.Second)
		for _, a := range as {
			got(t, a)
		}
		as = nil
		runtime.GC()
		runtime.GC()
		for i, p := range ptrs {
			assert.Nil(t, p.Value(), "caller %d's context is still held", i)
		}
	})
}
