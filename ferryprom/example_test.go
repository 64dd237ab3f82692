package ferryprom_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryprom"
	"github.com/prometheus/client_golang/prometheus"
)

// The usual wiring: the Collector first, for the ferry's OnBatch, then the
// ferry, then the Collector with the ferry's Stats, registered.
func Example() {
	double := func(_ context.Context, _ string, ins []int) ([]int, error) {
		outs := make([]int, len(ins))
		for i, in := range ins {
			outs[i] = 2 * in
		}
		return outs, nil
	}
	c := ferryprom.NewCollector("doubler", nil, ferryprom.Opts{})
	f, err := ferry.New(double, ferry.Config[string, int]{
		Key:     func(int) string { return "all" },
		OnBatch: ferryprom.OnBatch[string](c),
	})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.WithStats(f.Stats))
	// Serve reg with promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).

	out, _ := f.Do(context.Background(), 21)
	f.Close() // OnBatch has run for every call
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		switch mf.GetName() {
		case "ferry_batch_size":
			for _, s := range mf.GetMetric() {
				if n := s.GetHistogram().GetSampleCount(); n > 0 {
					fmt.Print(out, " ", mf.GetName())
					for _, l := range s.GetLabel() {
						fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
					}
					fmt.Println(" count", n)
				}
			}
		case "ferry_batches_total":
			fmt.Println(mf.GetName(), mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	// Output:
	// 42 ferry_batch_size direct=false ferry=doubler outcome=ok retried=false count 1
	// ferry_batches_total 1
}

// A ferry made without the Collector's OnBatch still has its Stats exported:
// here under a namespace of its own and with a label for the service.
func ExampleNewCollector() {
	echo := func(_ context.Context, _ string, ins []string) ([]string, error) { return ins, nil }
	f, err := ferry.New(echo, ferry.Config[string, string]{Key: func(s string) string { return s }})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ferryprom.NewCollector("echo", f.Stats, ferryprom.Opts{
		Namespace:   "shop_ferry",
		ConstLabels: prometheus.Labels{"service": "orders"},
	}))
	if err := f.Submit(context.Background(), "hello", nil); err != nil {
		panic(err)
	}
	f.Close()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "shop_ferry_admitted_total" {
			m := mf.GetMetric()[0]
			fmt.Print(mf.GetName())
			for _, l := range m.GetLabel() {
				fmt.Printf(" %s=%s", l.GetName(), l.GetValue())
			}
			fmt.Println(" value", m.GetCounter().GetValue())
		}
	}
	// Output:
	// shop_ferry_admitted_total ferry=echo service=orders value 1
}

// Outcome is the outcome label a call's error gets.
func ExampleOutcome() {
	boom := errors.New("boom")
	for _, err := range []error{
		nil,
		boom,
		ferry.Errors{nil, boom},
		fmt.Errorf("insert: %w", ferry.ErrCallTimeout),
	} {
		fmt.Println(ferryprom.Outcome(err))
	}
	// Output:
	// ok
	// error
	// partial
	// timeout
}
