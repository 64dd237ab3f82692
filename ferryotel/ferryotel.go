// Package ferryotel traces a ferry's calls with OpenTelemetry: Wrap returns a
// ferry.Call that runs each call inside a span, linked to the spans of the
// callers whose inputs it carries. Give the ferry Config.KeepContexts, so that
// the call can see its callers (ferry.Callers):
//
//	f, err := ferry.New(ferryotel.Wrap(insert, ferryotel.Opts[string]{Name: "INSERT events"}),
//		ferry.Config[string, Event]{Key: tenant, KeepContexts: true})
//
// A batched call's span starts a trace of its own, as the call serves many
// traces: it holds one link per distinct caller span (up to Opts.MaxLinks),
// the way OpenTelemetry models a batch. A direct call's span is a child of its
// caller's. The call's own spans (a database client's) are children of it.
// Without KeepContexts a batched call's span has no links and no attempt, and
// a direct call's is still its caller's child.
package ferryotel

import (
	"context"
	"errors"

	"github.com/ferrygo/ferry"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the tracer Wrap gets.
const ScopeName = "github.com/ferrygo/ferry/ferryotel"

// DefaultMaxLinks is the links per span when Opts.MaxLinks is 0: the
// OpenTelemetry SDK's default limit of links per span.
const DefaultMaxLinks = 128

// The attributes of a call's span. error.type is OpenTelemetry's (semantic
// conventions, general attributes); there is none for the others.
const (
	AttrBatchSize    = attribute.Key("ferry.batch.size")    // int: the call's inputs
	AttrAttempt      = attribute.Key("ferry.attempt")       // int: 1, more for a retry; with KeepContexts
	AttrDirect       = attribute.Key("ferry.direct")        // bool: a direct call; with KeepContexts
	AttrOutcome      = attribute.Key("ferry.outcome")       // string: see Outcome
	AttrKey          = attribute.Key("ferry.key")           // string: with Opts.Key
	AttrLinksDropped = attribute.Key("ferry.links.dropped") // int: distinct caller spans past Opts.MaxLinks, if any
	AttrErrorType    = attribute.Key("error.type")          // string: the outcome, when not ok
)

// EventBatch is the name of the event that Opts.CallerEvents adds to each
// caller's span, with the call span's IDs as AttrBatchTraceID and AttrBatchSpanID.
const EventBatch = "ferry.batch"

// The attributes of an EventBatch event: hex IDs of the call's span.
const (
	AttrBatchTraceID = attribute.Key("ferry.batch.trace_id")
	AttrBatchSpanID  = attribute.Key("ferry.batch.span_id")
)

// Opts configures Wrap. Its zero value uses the global TracerProvider, the
// span name "ferry.call", DefaultMaxLinks, and records no key and no event.
type Opts[K comparable] struct {
	TracerProvider trace.TracerProvider // nil: otel.GetTracerProvider()
	Name           string               // the span's name, of low cardinality (never the key); "": "ferry.call"

	// Key, if set, names a call's key as AttrKey. nil: the key is not
	// recorded, as it may be unbounded or private (a tenant, a user).
	Key func(K) string

	// MaxLinks is the most links a batched call's span gets, one per
	// distinct caller span, in input order; the distinct caller spans
	// beyond it are counted in AttrLinksDropped. 0: DefaultMaxLinks; < 0:
	// no link, and every distinct caller span is counted in
	// AttrLinksDropped. The SDK drops links past its own
	// SpanLimits.LinkCountLimit (128 by default): raise both together.
	MaxLinks int

	// CallerEvents adds an EventBatch event to each distinct caller span
	// that is still recording (a Submit's may have ended), naming the
	// call's span: a link back, from spans the ferry does not own.
	// false: none.
	CallerEvents bool
}

// Wrap returns a Call that runs call inside a span named opts.Name, with the
// attributes above, links to the callers' spans (see the package doc), and
// the call's error recorded: status Error and an exception event. A call that
// panics or runs runtime.Goexit ends its span with status Error and outcome
// panic, and the panic goes on up to the ferry. call gets the span's context,
// from which ferry.Callers still reads. Wrap makes its tracer once; the
// returned Call may run on many goroutines at once.
func Wrap[K comparable, I, O any](call ferry.Call[K, I, O], opts Opts[K]) ferry.Call[K, I, O] {
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	tracer := tp.Tracer(ScopeName)
	name := opts.Name
	if name == "" {
		name = "ferry.call"
	}
	maxLinks := opts.MaxLinks
	switch {
	case maxLinks == 0:
		maxLinks = DefaultMaxLinks
	case maxLinks < 0:
		maxLinks = 0
	}
	return func(ctx context.Context, key K, ins []I) (outs []O, err error) {
		attempt, direct := ferry.CallInfo(ctx)
		attrs := make([]attribute.KeyValue, 0, 6)
		attrs = append(attrs, AttrBatchSize.Int(len(ins)))
		if attempt > 0 {
			attrs = append(attrs, AttrAttempt.Int(attempt), AttrDirect.Bool(direct))
		}
		if opts.Key != nil {
			attrs = append(attrs, AttrKey.String(opts.Key(key)))
		}
		start := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}
		var spans []trace.Span // the distinct caller spans, for their events
		if !direct {
			var links []trace.Link
			var dropped int
			links, spans, dropped = linksTo(ferry.Callers(ctx), maxLinks, opts.CallerEvents)
			if dropped > 0 {
				attrs = append(attrs, AttrLinksDropped.Int(dropped))
			}
			start = append(start, trace.WithLinks(links...))
			if attempt > 0 { // a batched call's: it serves many traces, and starts its own
				start = append(start, trace.WithNewRoot())
			}
		}
		start = append(start, trace.WithAttributes(attrs...))
		ctx, span := tracer.Start(ctx, name, start...)
		if opts.CallerEvents {
			sc := span.SpanContext()
			ev := trace.WithAttributes(AttrBatchTraceID.String(sc.TraceID().String()), AttrBatchSpanID.String(sc.SpanID().String()))
			for _, s := range spans {
				s.AddEvent(EventBatch, ev)
			}
		}
		returned := false
		defer func() {
			if !returned {
				span.SetAttributes(AttrOutcome.String(outcomes[panicked]), AttrErrorType.String(outcomes[panicked]))
				span.SetStatus(codes.Error, "the call panicked or ran runtime.Goexit")
			}
			span.End()
		}()
		outs, err = call(ctx, key, ins)
		returned = true
		o := outcome(ctx, err)
		span.SetAttributes(AttrOutcome.String(outcomes[o]))
		if o != ok {
			span.SetAttributes(AttrErrorType.String(outcomes[o]))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return outs, err
	}
}

// spanKey is a span's identity, for links to distinct spans.
type spanKey struct {
	trace trace.TraceID
	span  trace.SpanID
}

// linksTo returns a link to each distinct valid span of callers, in their
// order, up to limit, and how many distinct spans it left out; with events,
// also the distinct caller spans that are recording.
func linksTo(callers []context.Context, limit int, events bool) (links []trace.Link, spans []trace.Span, dropped int) {
	if len(callers) == 0 {
		return nil, nil, 0
	}
	seen := make(map[spanKey]struct{}, min(len(callers), 64))
	var last context.Context
	for _, c := range callers {
		if c == last { // a DoMany's inputs share their caller's context
			continue
		}
		last = c
		s := trace.SpanFromContext(c)
		sc := s.SpanContext()
		if !sc.IsValid() {
			continue
		}
		k := spanKey{sc.TraceID(), sc.SpanID()}
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = struct{}{}
		if len(links) < limit {
			links = append(links, trace.Link{SpanContext: sc})
		} else {
			dropped++
		}
		if events && s.IsRecording() {
			spans = append(spans, s)
		}
	}
	return links, spans, dropped
}

// outcomes are the values of AttrOutcome, by the constants below: those of
// ferryprom's outcome label.
var outcomes = [...]string{"ok", "error", "partial", "timeout", "closed", "abandoned", "panic"}

const (
	ok = iota
	failed
	partial
	timeout
	closed
	abandoned
	panicked
)

// Outcome names a call's error, as ferryprom's outcome label does: ok (nil,
// or an Errors failing no input), partial (an Errors failing some inputs but
// not all), timeout, closed or abandoned (the call failed once the ferry had
// ended its context: CallTimeout, Close, CancelAbandoned; or an error matches
// ErrCallTimeout, ErrClosed or ErrAbandoned), else error; panic for a call
// that panicked. ctx is the call's.
func Outcome(ctx context.Context, err error) string { return outcomes[outcome(ctx, err)] }

func outcome(ctx context.Context, err error) int {
	if e, isErrs := err.(ferry.Errors); isErrs {
		n := 0
		for _, err := range e {
			if err != nil {
				n++
			}
		}
		switch {
		case n == 0:
			return ok
		case n < len(e):
			if c := cause(ctx, err); c != failed {
				return c
			}
			return partial
		}
	}
	if err == nil {
		return ok
	}
	var p *ferry.PanicError
	if errors.As(err, &p) {
		return panicked
	}
	return cause(ctx, err)
}

// cause names a failure by the ferry's end of the call's context, or the
// error's own match of its causes, else failed.
func cause(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		switch context.Cause(ctx) {
		case ferry.ErrClosed:
			return closed
		case ferry.ErrCallTimeout:
			return timeout
		case ferry.ErrAbandoned:
			return abandoned
		}
	}
	switch {
	case errors.Is(err, ferry.ErrClosed):
		return closed
	case errors.Is(err, ferry.ErrCallTimeout):
		return timeout
	case errors.Is(err, ferry.ErrAbandoned):
		return abandoned
	}
	return failed
}
