package ferry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of Submit: admission, done, and a ctx that ends.

func TestSubmit(t *testing.T) {
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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

// Submit keeps what it accepted: its ctx bounds the admission alone, so an
// input whose ctx ends while it waits is still run, at its deadline, and
// done gets its call's answer (issue 24, rule 4: it was dropped, and done got
// ctx's error). The natural call in a handler that answers 202.
func TestSubmitContextEndsBeforeTaken(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 3}, false)
		defer h.f.Close()
		ctx, cancel := context.WithCancelCause(context.Background())
		a, err := h.submit(ctx, in{Key: "a", ID: 1})
		require.NoError(t, err)
		b, err := h.submit(context.Background(), in{Key: "a", ID: 2})
		require.NoError(t, err)
		advance(time.Minute)
		cancel(errors.New("the request was answered"))
		synctest.Wait()
		assert.Empty(t, a, "kept: no answer before its call")
		assert.Equal(t, Stats{Queued: 2, Lanes: 1, Admitted: 2}, h.f.Stats())
		advance(time.Hour - time.Minute)
		assert.Equal(t, submitted{out: 10}, once(t, a))
		assert.Equal(t, submitted{out: 20}, once(t, b))
		assert.Equal(t, [][]int{{1, 2}}, ids(h.seen()), "one call, at the deadline")
		_, err = h.submit(ctx, in{Key: "a", ID: 3})
		assert.ErrorIs(t, err, context.Canceled, "a ctx that has ended refuses the admission")
	})
}

// done may call Submit: a done that submits again for its key.
func TestSubmitFromDone(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{}, false)
		defer h.f.Close()
		ctx := context.Background()
		second := make(chan submitted, 1)
		require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 1}, func(int, error) {
			assert.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 2}, func(out int, err error) { second <- submitted{out: out, err: err} }))
		}))
		synctest.Wait()
		assert.Equal(t, submitted{out: 20}, once(t, second))
		assert.Equal(t, [][]int{{1}, {2}}, ids(h.seen()))
	})
}

func TestSubmitContextEndsAfterTaken(t *testing.T) {
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
	bubble(t, func(t *testing.T) {
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
