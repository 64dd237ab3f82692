package ferry

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Several calls of a key in flight (Config.MaxCallsPerKey): the core's
// count, stepped; then whole ferries.

// A lane is taken again while fewer than N of its calls are in flight; its
// batches keep rank and arrival order; at N it waits, and a release places
// it again. Mutations: take not placing the rest again (the second batch
// waits for a release); the count not checked (a third batch taken); a
// release not placing a busy lane's inputs (a3 never taken).
func TestStateSeveralCallsPerKey(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, calls: 2})
	a1, a2, a3 := c.add("a", t0), c.add("a", t0), c.add("a", t0)
	b := c.add("b", t0)
	c.takes(t0, "a", a1)
	c.takes(t0, "b", b) // a went to the back of the line as it was taken
	c.takes(t0, "a", a2)
	assert.Equal(t, 3, c.busy)
	c.none(t0) // a has 2 calls in flight: a3 waits
	c.rel("a", t0)
	c.takes(t0, "a", a3)
	c.rel("a", t0)
	c.rel("a", t0)
	c.rel("b", t0)
	assert.Empty(t, c.lanes.m)
	assert.Zero(t, c.busy)
}

// With direct calls, a Do claims a key with no input waiting and fewer
// than N calls in flight: an idle key costs no delay, and batching grows
// with load (a Do joins a lane whose calls are all in flight, or that has
// inputs waiting). Mutations: claiming only a key with no lane (the second
// Do joins); claiming over inputs waiting (a4 overtakes a3).
func TestStateSeveralDirectCalls(t *testing.T) {
	c := newCore(t, limits{direct: true, calls: 2})
	_, o1, _ := c.in("a", 1, 0, t0)
	_, o2, _ := c.in("a", 1, 0, t0)
	_, o3, _ := c.in("a", 1, 0, t0)
	assert.Equal(t, []outcome{claimed, claimed, admitted}, []outcome{o1, o2, o3})
	c.none(t0) // both calls in flight: the input waits
	c.rel("a", t0)
	_, o4, _ := c.in("a", 1, 0, t0)
	assert.Equal(t, admitted, o4, "an input waits: a Do joins behind it")
	c.takes(t0, "a", 2, 3)
	c.rel("a", t0)
	c.rel("a", t0)
	assert.Empty(t, c.lanes.m)
}

// A lane with calls in flight whose last waiting input is dropped leaves
// the line and stays, busy; one with a deadline keeps it. Mutations: drop
// removing a lane with calls in flight (its release panics); the lane left
// in line with no input (checkState fails).
func TestStateSeveralCallsDrop(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, calls: 2, delay: ms(10)})
	c.add("a", t0)
	c.takes(ms(10), "a", 0)
	_, _, tk := c.in("a", 1, 0, ms(11))
	_, ok := c.drop("a", tk, ms(12))
	require.True(t, ok)
	require.NoError(t, checkState(c.state))
	assert.Len(t, c.lanes.m, 1, "its call is in flight")
	_, ok = c.sched.earliest()
	assert.False(t, ok, "no deadline left")
	c.rel("a", ms(13))
	assert.Empty(t, c.lanes.m)
}

// A ferry with MaxCallsPerKey 3 and one key: a slow call holds only its
// own callers; the key's other calls answer theirs as they return; at most
// three calls of the key run at once, each a batch in rank and arrival
// order. Mutations: the loop keeping one call per key (every Do takes 2s);
// completions chained per key (a Submit's done waits for the slow call).
func TestSeveralCallsPerKeyHoldOnlyTheirCallers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var mu sync.Mutex
		running, most := 0, 0
		call := func(_ context.Context, _ string, ins []in) ([]int, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			d := 10 * time.Millisecond
			if ins[0].ID == 0 {
				d = 2 * time.Second // the slow one
			}
			time.Sleep(d)
			mu.Lock()
			running--
			mu.Unlock()
			return tens(ins), nil
		}
		f, err := New(call, Config[string, in]{Key: inCfg.Key, Shards: 1, MaxBatchSize: 2, MaxInFlightBatches: 8,
			MaxCallsPerKey: 3, OnBatch: func(Batch[string]) {}})
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		slow := do(f, ctx, in{Key: "a", ID: 0})
		synctest.Wait()
		var fast []chan answer
		for i := 1; i <= 8; i++ {
			fast = append(fast, do(f, ctx, in{Key: "a", ID: i}))
		}
		done := make(chan error, 1)
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 9}, func(_ int, err error) { done <- err }))
		advance(100 * time.Millisecond)
		for i, d := range fast {
			assert.Equal(t, answer{10 * (i + 1), nil}, got(t, d), "answered while the slow call runs")
		}
		require.Len(t, done, 1, "its done too")
		pending(t, slow)
		mu.Lock()
		assert.Equal(t, 3, most, "three calls of the key at once")
		mu.Unlock()
		advance(2 * time.Second)
		assert.Equal(t, answer{0, nil}, got(t, slow))
	})
}

// New refuses MaxCallsPerKey > 1 with what keeps a key's order through its
// failures: Retry and PauseOnError (and so HoldPaused and OnPause), naming
// both fields.
func TestSeveralCallsPerKeyRefusesOrderedFailures(t *testing.T) {
	call := func(context.Context, string, []in) ([]int, error) { return nil, nil }
	_, err := New(call, Config[string, in]{Key: inCfg.Key, MaxCallsPerKey: 2,
		Retry: func(string, int, error) (time.Duration, bool) { return 0, false }})
	assert.ErrorContains(t, err, "Config.Retry")
	assert.ErrorContains(t, err, "MaxCallsPerKey 2")
	_, err = New(call, Config[string, in]{Key: inCfg.Key, MaxCallsPerKey: 3, PauseOnError: true})
	assert.ErrorContains(t, err, "Config.PauseOnError")
	_, err = New(call, Config[string, in]{Key: inCfg.Key, MaxCallsPerKey: -1})
	assert.EqualError(t, err, "ferry: Config.MaxCallsPerKey is negative: -1")
	f, err := New(call, Config[string, in]{Key: inCfg.Key, MaxCallsPerKey: 1, PauseOnError: true})
	require.NoError(t, err, "one call per key: as the zero value")
	f.Close()
}
