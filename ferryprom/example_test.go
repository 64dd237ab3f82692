package ferryprom_test

import (
	"context"
	"fmt"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryprom"
	"github.com/prometheus/client_golang/prometheus"
)

func Example() {
	double := func(_ context.Context, _ string, ins []int) ([]int, error) {
		outs := make([]int, len(ins))
		for i, in := range ins {
			outs[i] = 2 * in
		}
		return outs, nil
	}
	m := ferryprom.New("doubler")
	f, err := ferry.New(double, ferry.Config[string, int]{
		Key:     func(int) string { return "all" },
		OnBatch: ferryprom.OnBatch[string](m),
	})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, m.Stats(f.Stats))
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
	// 42 ferry_batch_size direct=false ferry=doubler outcome=ok count 1
	// ferry_batches_total 1
}
