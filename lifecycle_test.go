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

// Tests of a ferry's life: New, Flush, Close and Shutdown.

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

func TestDoAfterCloseAndDuringShutdown(t *testing.T) {
	bubble(t, func(t *testing.T) {
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

func TestClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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

func TestShutdownAfterClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, false)
		require.NoError(t, h.f.Close())
		assert.NoError(t, h.f.Shutdown(context.Background()))
		assert.Equal(t, Stats{}, h.f.Stats())
	})
}

func TestFlushAnswersWhatWaits(t *testing.T) {
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
// worker (every call so far was direct) no worker's opIdle wakes the loop
// afterwards: the round must end at once if it has nothing to wait for, and
// make what waits due at once if it has.
func TestQueuedFlushOnAShardWithNoWorker(t *testing.T) {
	t.Run("nothing to wait for", func(t *testing.T) {
		bubble(t, func(t *testing.T) {
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
		bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
