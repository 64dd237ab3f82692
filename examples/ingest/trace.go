package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// traced returns h, the handler of pattern ("POST /events"), run in a span
// of its own when the service traces (Config.Tracer): a server span named
// after the route, a child of the client's span if the request carries a W3C
// traceparent, with the route, the method and the status. The ferry's span
// of the INSERT that stores the request's events links to it (ferryotel),
// as the batch serves many requests. Without a Tracer it returns h.
func (s *Service) traced(pattern string, h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Tracer == nil {
		return h
	}
	tracer := s.cfg.Tracer.Tracer("github.com/ferrygo/ferry/examples/ingest")
	method, route, _ := strings.Cut(pattern, " ")
	return func(w http.ResponseWriter, r *http.Request) {
		ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, pattern, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			attribute.String("http.request.method", method),
			attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path),
		))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r.WithContext(ctx))
		span.SetAttributes(attribute.Int("http.response.status_code", sw.code))
		if sw.code >= 500 {
			span.SetStatus(codes.Error, "")
		}
	}
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// newTracer returns the tracer provider the -trace flag names ("": none,
// nil; "stdout": spans written to out as JSON, in batches) and its shutdown,
// which writes the spans left.
func newTracer(name string, out io.Writer) (trace.TracerProvider, func(context.Context) error, error) {
	switch name {
	case "":
		return nil, func(context.Context) error { return nil }, nil
	case "stdout":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
		if err != nil {
			return nil, nil, err
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
		return tp, tp.Shutdown, nil
	}
	return nil, nil, fmt.Errorf("-trace %q: want stdout or nothing", name)
}
