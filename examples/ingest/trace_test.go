package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// checkLinks checks the spans of requests (their routes, with the status
// code want) and of INSERT batches: each request's span is linked from an
// INSERT span (a bulk request's from one per tenant of its events), and each
// INSERT span is a root whose links point at request spans. It returns the
// INSERT spans.
func checkLinks(t *testing.T, spans []sdktrace.ReadOnlySpan, requests int, want int) []sdktrace.ReadOnlySpan {
	t.Helper()
	reqs := map[trace.SpanID]int{} // links to each request's span
	var inserts []sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch {
		case strings.HasPrefix(s.Name(), "POST /events"):
			reqs[s.SpanContext().SpanID()] += 0
			if s.SpanKind() != trace.SpanKindServer {
				t.Errorf("%s: kind %v", s.Name(), s.SpanKind())
			}
			for _, a := range s.Attributes() {
				if a.Key == "http.response.status_code" && a.Value.AsInt64() != int64(want) {
					t.Errorf("%s: status %d, want %d", s.Name(), a.Value.AsInt64(), want)
				}
			}
		case s.Name() == "INSERT events":
			inserts = append(inserts, s)
		}
	}
	if len(reqs) != requests {
		t.Fatalf("%d request spans, want %d", len(reqs), requests)
	}
	for _, s := range inserts {
		if s.Parent().IsValid() {
			t.Errorf("an INSERT span with a parent: %v", s.Parent())
		}
		for _, l := range s.Links() {
			if _, ok := reqs[l.SpanContext.SpanID()]; !ok {
				t.Errorf("an INSERT span links to a span that is not a request's")
			}
			reqs[l.SpanContext.SpanID()]++
		}
	}
	for id, n := range reqs {
		if n == 0 {
			t.Errorf("request span %v linked from no INSERT span", id)
		}
	}
	return inserts
}

// TestTraceLinks posts events of two tenants through the service's
// handlers and ferry, over a Call that stores nothing, with Config.Tracer
// recording in memory: each request's span is linked from its tenant's
// INSERT span, three requests (a bulk one among them) from one batch.
// Mutations: KeepContexts off in newFerry (no links); the handlers not
// traced (no request spans); the handler's span not passed on in the
// request (links to nothing known).
func TestTraceLinks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
		s := &Service{cfg: Config{Tracer: tp, Delay: time.Second}.withDefaults(), reg: prometheus.NewRegistry()}
		var err error
		s.f, err = s.newFerry(func(ctx context.Context, tenant string, evs []event) ([]stored, error) {
			outs := make([]stored, len(evs))
			for i := range outs {
				outs[i].Seq = int64(i + 1)
			}
			return outs, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer s.f.Close()
		h := s.Handler()
		var wg sync.WaitGroup
		for _, p := range []struct{ path, body string }{
			{"/events", `{"tenant":"a","id":"1"}`},
			{"/events", `{"tenant":"a","id":"2"}`},
			{"/events/bulk", `[{"tenant":"a","id":"3"},{"tenant":"b","id":"1"}]`},
			{"/events", `{"tenant":"b","id":"2"}`},
		} {
			wg.Go(func() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, p.path, strings.NewReader(p.body)))
				if w.Code != http.StatusCreated {
					t.Errorf("POST %s %s: %d %s", p.path, p.body, w.Code, w.Body)
				}
			})
		}
		wg.Wait()
		inserts := checkLinks(t, sr.Ended(), 4, http.StatusCreated)
		if len(inserts) != 2 {
			t.Fatalf("%d INSERT spans, want 2 (one per tenant)", len(inserts))
		}
		links := len(inserts[0].Links()) + len(inserts[1].Links())
		if links != 5 { // a: 3 requests, b: 2 (the bulk request's span in both)
			t.Errorf("%d links, want 5", links)
		}
	})
}
