package ferryprom_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryprom"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// gather registers cs in a pedantic registry, which checks that what they
// collect matches what they describe, and gathers them by name.
func gather(t *testing.T, cs ...prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		by[mf.GetName()] = mf
	}
	return by
}

func names(mfs map[string]*dto.MetricFamily) []string {
	var ns []string
	for n := range mfs {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// Without a stats function only the histograms are collected; WithStats adds
// the Stats series and records into the same histograms as the Collector that
// OnBatch was given.
func TestWithStats(t *testing.T) {
	c := ferryprom.NewCollector("w", nil, ferryprom.Opts{})
	if got := names(gather(t, c)); !slices.Equal(got, []string{"ferry_batch_call_seconds", "ferry_batch_size", "ferry_batch_wait_seconds"}) {
		t.Fatalf("without stats: %v", got)
	}
	ferryprom.OnBatch[int](c)(ferry.Batch[int]{Size: 5})
	stats := ferry.Stats{Queued: 7, Admitted: 9, RejectedHeavy: 2, Paused: 3, PausedOut: 4, WaitingForRoom: 5, Parked: 6, OnPausePanics: 7}
	mfs := gather(t, c.WithStats(func() ferry.Stats { return stats }))
	if n := len(mfs); n != 3+17 {
		t.Errorf("%d families with stats, want 20: %v", n, names(mfs))
	}
	for name, want := range map[string]float64{"ferry_paused": 3, "ferry_waiting": 5, "ferry_parked": 6} {
		if v := mfs[name].GetMetric()[0].GetGauge().GetValue(); v != want {
			t.Errorf("%s %v, want %v", name, v, want)
		}
	}
	if v := mfs["ferry_paused_out_total"].GetMetric()[0].GetCounter().GetValue(); v != 4 {
		t.Errorf("ferry_paused_out_total %v", v)
	}
	if v := mfs["ferry_on_pause_panics_total"].GetMetric()[0].GetCounter().GetValue(); v != 7 {
		t.Errorf("ferry_on_pause_panics_total %v", v)
	}
	var count uint64
	for _, m := range mfs["ferry_batch_size"].GetMetric() {
		count += m.GetHistogram().GetSampleCount()
	}
	if count != 1 {
		t.Errorf("WithStats's collector saw %d batches, want the 1 recorded through the original", count)
	}
	if v := mfs["ferry_queued"].GetMetric()[0].GetGauge().GetValue(); v != 7 {
		t.Errorf("ferry_queued %v", v)
	}
	for _, m := range mfs["ferry_rejected_total"].GetMetric() {
		if has(m, "reason", "heavy") && m.GetCounter().GetValue() != 2 {
			t.Errorf("rejected heavy %v", m.GetCounter().GetValue())
		}
	}
	// The two share their histograms: one registry cannot take both.
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(c.WithStats(func() ferry.Stats { return stats })); err == nil {
		t.Error("registered c and c.WithStats in one registry")
	}
}

// Namespace, ConstLabels and buckets reach every series.
func TestOpts(t *testing.T) {
	sizes := []float64{1, 10, 100}
	waits := []float64{0.001, 0.1}
	calls := []float64{0.5}
	c := ferryprom.NewCollector("o", func() ferry.Stats { return ferry.Stats{} }, ferryprom.Opts{
		Namespace:   "app",
		ConstLabels: prometheus.Labels{"zone": "b"},
		SizeBuckets: sizes, WaitBuckets: waits, CallBuckets: calls,
	})
	mfs := gather(t, c)
	if len(mfs) != 20 {
		t.Errorf("%d families: %v", len(mfs), names(mfs))
	}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "app_") {
			t.Errorf("%s: not in the namespace app", name)
		}
		for _, m := range mf.GetMetric() {
			if !has(m, "ferry", "o", "zone", "b") {
				t.Errorf("%s: labels %v", name, m.GetLabel())
			}
		}
	}
	for name, want := range map[string][]float64{"app_batch_size": sizes, "app_batch_wait_seconds": waits, "app_batch_call_seconds": calls} {
		var got []float64
		for _, b := range mfs[name].GetMetric()[0].GetHistogram().GetBucket() {
			got = append(got, b.GetUpperBound())
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s buckets %v, want %v", name, got, want)
		}
	}
}

func TestConstLabelFerryPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "ferry") {
			t.Errorf("recovered %v", r)
		}
	}()
	ferryprom.NewCollector("x", nil, ferryprom.Opts{ConstLabels: prometheus.Labels{"ferry": "y"}})
}
