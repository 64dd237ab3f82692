package ferryotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryotel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Every test runs in a synctest bubble: the ferry's deadlines and the spans'
// times are the bubble's fake time.

// tracer returns a tracer provider that records every span, and its recorder.
func tracer() (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)), sr
}

// reqKey is the key of a request ID in a caller's context.
type reqKey struct{}

// echo answers each input with itself, and records the request IDs it sees
// through ferry.Callers.
type echo struct {
	mu   sync.Mutex
	reqs [][]string
	fail func(attempt int) error
}

func (e *echo) call(ctx context.Context, _ string, ins []string) ([]string, error) {
	var reqs []string
	for _, c := range ferry.Callers(ctx) {
		id, _ := c.Value(reqKey{}).(string)
		reqs = append(reqs, id)
	}
	e.mu.Lock()
	e.reqs = append(e.reqs, reqs)
	e.mu.Unlock()
	if e.fail != nil {
		attempt, _ := ferry.CallInfo(ctx)
		if err := e.fail(attempt); err != nil {
			return nil, err
		}
	}
	return ins, nil
}

// newFerry returns a ferry over call, wrapped with opts, that keeps its
// callers' contexts and waits a second for a batch.
func newFerry(t *testing.T, call ferry.Call[string, string, string], opts ferryotel.Opts[string], cfg ferry.Config[string, string]) *ferry.Ferry[string, string, string] {
	cfg.Key = func(string) string { return "k" }
	cfg.KeepContexts = true
	f, err := ferry.New(ferryotel.Wrap(call, opts), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// attrs returns a span's attributes as a map.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// byName returns the ended spans named name.
func byName(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// Three Do callers, each in a span of its own, and a fourth in the first's
// span, share one batch: its span is a root, with one link to each distinct
// caller span in input order, the batch's
// attributes, an ok outcome and the batch's fake times; with CallerEvents
// each caller's span names it. The request IDs reach the call through
// ferry.Callers. Mutations: no links (WithLinks dropped); the links in
// another order; the events not added; a span seen twice linked twice.
func TestDoSpanLinkedToBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := tracer()
		e := &echo{}
		f := newFerry(t, e.call, ferryotel.Opts[string]{TracerProvider: tp, Name: "insert", CallerEvents: true},
			ferry.Config[string, string]{MaxBatchDelay: time.Second})
		t0 := time.Now()
		var callers []trace.SpanContext
		var ctxs []context.Context
		var spans []trace.Span
		var wg sync.WaitGroup
		for i := range 3 {
			ctx, span := tp.Tracer("test").Start(context.WithValue(context.Background(), reqKey{}, fmt.Sprint("req", i)), fmt.Sprint("handler", i))
			callers, ctxs, spans = append(callers, span.SpanContext()), append(ctxs, ctx), append(spans, span)
			wg.Go(func() {
				out, err := f.Do(ctx, fmt.Sprint(i))
				assert.NoError(t, err)
				assert.Equal(t, fmt.Sprint(i), out)
			})
			synctest.Wait() // in this order
		}
		wg.Go(func() { // a second Do in the span of the first: one link to it
			_, err := f.Do(context.WithValue(ctxs[0], reqKey{}, "req3"), "3")
			assert.NoError(t, err)
		})
		wg.Wait()
		for _, s := range spans {
			s.End()
		}
		assert.Equal(t, [][]string{{"req0", "req1", "req2", "req3"}}, e.reqs)
		batch := byName(sr, "insert")
		require.Len(t, batch, 1)
		b := batch[0]
		assert.False(t, b.Parent().IsValid(), "a batch's span starts a trace of its own")
		assert.Equal(t, trace.SpanKindInternal, b.SpanKind())
		var linked []trace.SpanContext
		for _, l := range b.Links() {
			linked = append(linked, l.SpanContext)
		}
		assert.Equal(t, callers, linked)
		assert.Equal(t, map[attribute.Key]attribute.Value{
			ferryotel.AttrBatchSize: attribute.IntValue(4),
			ferryotel.AttrAttempt:   attribute.IntValue(1),
			ferryotel.AttrDirect:    attribute.BoolValue(false),
			ferryotel.AttrOutcome:   attribute.StringValue("ok"),
		}, attrs(b))
		assert.Equal(t, codes.Unset, b.Status().Code)
		assert.Equal(t, t0.Add(time.Second), b.StartTime())
		assert.Equal(t, t0.Add(time.Second), b.EndTime())
		for i := range 3 {
			hs := byName(sr, fmt.Sprint("handler", i))
			require.Len(t, hs, 1)
			require.Len(t, hs[0].Events(), 1, "caller %d", i)
			ev := hs[0].Events()[0]
			assert.Equal(t, ferryotel.EventBatch, ev.Name)
			assert.ElementsMatch(t, []attribute.KeyValue{
				ferryotel.AttrBatchTraceID.String(b.SpanContext().TraceID().String()),
				ferryotel.AttrBatchSpanID.String(b.SpanContext().SpanID().String()),
			}, ev.Attributes)
		}
	})
}

// 300 callers in one batch: links to the first 128 distinct caller spans, in
// input order, and the 172 others counted; a DoMany's inputs share their
// caller's span, linked once; and no events on callers by default.
// Mutations: no cap (300 links: the SDK keeps 128 and drops the rest, but
// the count attribute is missing); the count off by one; duplicates not
// merged (the DoMany's span linked 3 times).
func TestLinksCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := tracer()
		f := newFerry(t, (&echo{}).call, ferryotel.Opts[string]{TracerProvider: tp},
			ferry.Config[string, string]{MaxBatchDelay: time.Second, MaxBatchSize: 303, MaxQueued: 303})
		var callers []trace.SpanContext
		var wg sync.WaitGroup
		mctx, mspan := tp.Tracer("test").Start(context.Background(), "many")
		callers = append(callers, mspan.SpanContext())
		wg.Go(func() {
			_, err := f.DoMany(mctx, []string{"a", "b", "c"})
			assert.NoError(t, err)
		})
		synctest.Wait()
		for i := range 299 {
			ctx, span := tp.Tracer("test").Start(context.Background(), "handler")
			callers = append(callers, span.SpanContext())
			wg.Go(func() {
				defer span.End()
				_, err := f.Do(ctx, fmt.Sprint(i))
				assert.NoError(t, err)
			})
			synctest.Wait()
		}
		wg.Wait()
		mspan.End()
		batch := byName(sr, "ferry.call")
		require.Len(t, batch, 1)
		b := batch[0]
		assert.Equal(t, attribute.IntValue(302), attrs(b)[ferryotel.AttrBatchSize])
		assert.Equal(t, attribute.IntValue(300-128), attrs(b)[ferryotel.AttrLinksDropped])
		require.Len(t, b.Links(), 128)
		assert.Zero(t, b.DroppedLinks(), "within the SDK's limit")
		for i, l := range b.Links() {
			assert.Equal(t, callers[i], l.SpanContext, "link %d", i)
		}
		assert.Empty(t, byName(sr, "many")[0].Events(), "no caller events unless asked")
	})
}

// MaxLinks < 0: a batch's span links no caller, and counts every distinct
// caller span as dropped (two callers, one span shared by two inputs).
// Mutation: MaxLinks < 0 read as the default (3 links, none dropped).
func TestNoLinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := tracer()
		f := newFerry(t, (&echo{}).call, ferryotel.Opts[string]{TracerProvider: tp, MaxLinks: -1},
			ferry.Config[string, string]{MaxBatchDelay: time.Second})
		var wg sync.WaitGroup
		ctx1, span1 := tp.Tracer("test").Start(context.Background(), "handler")
		ctx2, span2 := tp.Tracer("test").Start(context.Background(), "handler")
		for _, ctx := range []context.Context{ctx1, ctx1, ctx2} {
			wg.Go(func() {
				_, err := f.Do(ctx, "x")
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		span1.End()
		span2.End()
		batch := byName(sr, "ferry.call")
		require.Len(t, batch, 1)
		assert.Empty(t, batch[0].Links())
		assert.Equal(t, attribute.IntValue(2), attrs(batch[0])[ferryotel.AttrLinksDropped])
	})
}

// A call that fails is retried: each attempt has its span, with its attempt,
// the first's error recorded (status Error, error.type, an exception event),
// each linked to the caller. Mutations: the attempt attribute from a counter
// of the wrapper's own; the status left Unset; RecordError dropped.
func TestRetrySpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := tracer()
		boom := errors.New("boom")
		e := &echo{fail: func(attempt int) error {
			if attempt == 1 {
				return boom
			}
			return nil
		}}
		f := newFerry(t, e.call, ferryotel.Opts[string]{TracerProvider: tp},
			ferry.Config[string, string]{MaxBatchDelay: time.Second, Retry: func(string, int, error) (time.Duration, bool) {
				return time.Second, true
			}})
		ctx, span := tp.Tracer("test").Start(context.WithValue(context.Background(), reqKey{}, "r"), "handler")
		out, err := f.Do(ctx, "x")
		span.End()
		require.NoError(t, err)
		assert.Equal(t, "x", out)
		assert.Equal(t, [][]string{{"r"}, {"r"}}, e.reqs, "the retry's callers: the request's ID")
		calls := byName(sr, "ferry.call")
		require.Len(t, calls, 2)
		for i, c := range calls {
			require.Len(t, c.Links(), 1)
			assert.Equal(t, span.SpanContext(), c.Links()[0].SpanContext)
			assert.Equal(t, attribute.IntValue(i+1), attrs(c)[ferryotel.AttrAttempt])
		}
		first, second := calls[0], calls[1]
		assert.Equal(t, sdktrace.Status{Code: codes.Error, Description: "boom"}, first.Status())
		assert.Equal(t, attribute.StringValue("error"), attrs(first)[ferryotel.AttrOutcome])
		assert.Equal(t, attribute.StringValue("error"), attrs(first)[ferryotel.AttrErrorType])
		require.Len(t, first.Events(), 1)
		assert.Equal(t, "exception", first.Events()[0].Name)
		assert.Equal(t, codes.Unset, second.Status().Code)
		assert.Equal(t, second.StartTime().Sub(first.EndTime()), time.Second, "after the backoff")
	})
}

// A direct call's span is a child of its caller's, with no links; the key
// is recorded only when Opts.Key asks. Mutations: WithNewRoot for a direct
// call (no parent); the key recorded whatever Opts.Key.
func TestDirectCallIsAChild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := tracer()
		f := newFerry(t, (&echo{}).call, ferryotel.Opts[string]{TracerProvider: tp, Key: func(k string) string { return "key " + k }},
			ferry.Config[string, string]{DirectCalls: true})
		ctx, span := tp.Tracer("test").Start(context.Background(), "handler")
		_, err := f.Do(ctx, "x")
		require.NoError(t, err)
		span.End()
		calls := byName(sr, "ferry.call")
		require.Len(t, calls, 1)
		c := calls[0]
		assert.Equal(t, span.SpanContext(), c.Parent())
		assert.Empty(t, c.Links())
		assert.Equal(t, map[attribute.Key]attribute.Value{
			ferryotel.AttrBatchSize: attribute.IntValue(1),
			ferryotel.AttrAttempt:   attribute.IntValue(1),
			ferryotel.AttrDirect:    attribute.BoolValue(true),
			ferryotel.AttrOutcome:   attribute.StringValue("ok"),
			ferryotel.AttrKey:       attribute.StringValue("key k"),
		}, attrs(c))

		g := newFerry(t, (&echo{}).call, ferryotel.Opts[string]{TracerProvider: tp}, ferry.Config[string, string]{})
		_, err = g.Do(context.Background(), "y")
		require.NoError(t, err)
		calls = byName(sr, "ferry.call")
		require.Len(t, calls, 2)
		assert.NotContains(t, attrs(calls[1]), ferryotel.AttrKey, "no key unless asked")
	})
}

// A call that runs past CallTimeout has the outcome timeout; one that
// panics ends its span with outcome panic, and the panic reaches the ferry.
// Mutations: cause read from the error alone (the call's own error does not
// match ErrCallTimeout: error); no deferred End (the panic's span is never
// ended: none recorded).
func TestFailedSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tp, sr := tracer()
		f := newFerry(t, func(ctx context.Context, _ string, ins []string) ([]string, error) {
			if ins[0] == "panic" {
				panic("oops")
			}
			<-ctx.Done()
			return nil, errors.New("cancelled")
		}, ferryotel.Opts[string]{TracerProvider: tp}, ferry.Config[string, string]{CallTimeout: time.Second})
		_, err := f.Do(context.Background(), "slow")
		require.ErrorIs(t, err, ferry.ErrCallTimeout)
		_, err = f.Do(context.Background(), "panic")
		var p *ferry.PanicError
		require.ErrorAs(t, err, &p)
		calls := byName(sr, "ferry.call")
		require.Len(t, calls, 2)
		assert.Equal(t, attribute.StringValue("timeout"), attrs(calls[0])[ferryotel.AttrOutcome])
		assert.Equal(t, attribute.StringValue("timeout"), attrs(calls[0])[ferryotel.AttrErrorType])
		assert.Equal(t, codes.Error, calls[0].Status().Code)
		assert.Equal(t, attribute.StringValue("panic"), attrs(calls[1])[ferryotel.AttrOutcome])
		assert.Equal(t, codes.Error, calls[1].Status().Code)
	})
}

// Outcome names errors as ferryprom does. Mutations: partial for an Errors
// failing every input; ok for a non-nil Errors failing none missing.
func TestOutcome(t *testing.T) {
	bg := context.Background()
	boom := errors.New("boom")
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{ferry.Errors(nil), "ok"},
		{ferry.Errors{nil, nil}, "ok"},
		{ferry.Errors{boom, nil}, "partial"},
		{ferry.Errors{boom, boom}, "error"},
		{boom, "error"},
		{fmt.Errorf("x: %w", ferry.ErrClosed), "closed"},
		{ferry.Errors{fmt.Errorf("x: %w", ferry.ErrAbandoned), nil}, "abandoned"},
		{&ferry.PanicError{Value: 1}, "panic"},
	} {
		assert.Equal(t, c.want, ferryotel.Outcome(bg, c.err), "%v", c.err)
	}
	ctx, cancel := context.WithCancelCause(bg)
	cancel(ferry.ErrClosed)
	assert.Equal(t, "closed", ferryotel.Outcome(ctx, boom))
	assert.Equal(t, "ok", ferryotel.Outcome(ctx, nil))
}
