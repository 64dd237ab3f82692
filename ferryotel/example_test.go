package ferryotel_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryotel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// Two requests, each in its span, share one batch: its span links to both.
func ExampleWrap() {
	sr := tracetest.NewSpanRecorder() // in a service: an exporter's batch processor
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	upper := func(ctx context.Context, _ string, ins []string) ([]string, error) {
		outs := make([]string, len(ins))
		for i, in := range ins {
			outs[i] = strings.ToUpper(in)
		}
		return outs, nil
	}
	f, err := ferry.New(ferryotel.Wrap(upper, ferryotel.Opts[string]{TracerProvider: tp, Name: "upper"}),
		ferry.Config[string, string]{Key: func(string) string { return "k" }, KeepContexts: true, MaxBatchSize: 2, MaxBatchDelay: time.Hour})
	if err != nil {
		panic(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	for _, in := range []string{"a", "b"} {
		wg.Go(func() {
			ctx, span := tp.Tracer("handler").Start(context.Background(), "request")
			defer span.End()
			_, _ = f.Do(ctx, in)
		})
	}
	wg.Wait()
	for _, s := range sr.Ended() {
		if s.Name() == "upper" {
			fmt.Println(s.Name(), "links:", len(s.Links()))
		}
	}
	// Output: upper links: 2
}
