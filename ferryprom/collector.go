// Package ferryprom exports a ferry's calls and Stats to Prometheus, with
// client_golang. A user writes three lines:
//
//	m := ferryprom.New("orders")
//	f, err := ferry.New(call, ferry.Config[string, Order]{Key: orderKey, OnBatch: ferryprom.OnBatch[string](m)})
//	prometheus.MustRegister(m, m.Stats(f.Stats))
//
// m holds histograms of each call's size, wait and duration, labelled by
// outcome and direct; m.Stats reads f.Stats at scrape time for gauges and
// counters. Every series carries the label ferry="orders", so that several
// ferries share one registry under different names. Nothing is labelled by
// key: keys are unbounded, and a series per key would grow without limit.
package ferryprom

import (
	"errors"
	"strconv"

	"github.com/ferrygo/ferry"
	"github.com/prometheus/client_golang/prometheus"
)

// outcomes are the values of the outcome label, by the constants below.
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

// Outcome names a call's error, as Batch.Err: ok (nil, or an Errors failing
// no input), panic (a *ferry.PanicError), closed, timeout or abandoned (it or
// a failed input matches ErrClosed, ErrCallTimeout or ErrAbandoned), partial
// (an Errors failing some inputs but not all), else error.
func Outcome(err error) string { return outcomes[outcome(err)] }

func outcome(err error) int {
	switch e := err.(type) {
	case nil:
		return ok
	case *ferry.PanicError:
		return panicked
	case ferry.Errors: // not errors.Is on it: its Unwrap allocates
		n := 0
		for _, err := range e {
			if err == nil {
				continue
			}
			if c := cause(err); c != failed {
				return c
			}
			n++
		}
		switch n {
		case 0:
			return ok
		case len(e):
			return failed
		}
		return partial
	}
	return cause(err)
}

// cause names a failure by the ferry's context causes, else failed.
func cause(err error) int {
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

// Collector is a prometheus.Collector of one ferry's calls: histograms of
// ferry_batch_size, ferry_batch_wait_seconds and ferry_batch_call_seconds,
// labelled outcome and direct. Create it with New, feed it with OnBatch.
type Collector struct {
	name string
	vecs [3]*prometheus.HistogramVec              // size, wait, call
	obs  [len(outcomes)][2][3]prometheus.Observer // by outcome, direct, then as vecs
}

// New returns a Collector whose series carry the label ferry=name, with every
// outcome and direct pair present from the start, at zero.
func New(name string) *Collector {
	c := &Collector{name: name}
	labels := prometheus.Labels{"ferry": name}
	for i, o := range []struct {
		name, help string
		buckets    []float64
	}{
		{"batch_size", "Inputs per call.", prometheus.ExponentialBuckets(1, 2, 11)},
		{"batch_wait_seconds", "From a call's oldest input's submission to the call's start; 0 for a direct call.", prometheus.ExponentialBuckets(1e-5, 4, 10)},
		{"batch_call_seconds", "A call's own duration.", prometheus.ExponentialBuckets(1e-4, 4, 10)},
	} {
		c.vecs[i] = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ferry", Name: o.name, Help: o.help, ConstLabels: labels, Buckets: o.buckets,
		}, []string{"outcome", "direct"})
	}
	for o, outcome := range outcomes {
		for d := range 2 {
			for i, v := range c.vecs {
				c.obs[o][d][i] = v.WithLabelValues(outcome, strconv.FormatBool(d == 1))
			}
		}
	}
	return c
}

// OnBatch returns a Config.OnBatch, for a ferry of any key type, that records
// each call in c: three observations on series New made, with no allocation.
func OnBatch[K comparable](c *Collector) func(ferry.Batch[K]) {
	return func(b ferry.Batch[K]) {
		d := 0
		if b.Direct {
			d = 1
		}
		obs := &c.obs[outcome(b.Err)][d]
		obs[0].Observe(float64(b.Size))
		obs[1].Observe(b.Wait.Seconds())
		obs[2].Observe(b.Took.Seconds())
	}
}

// Describe sends the descriptors of c's histograms.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.vecs {
		v.Describe(ch)
	}
}

// Collect sends c's histograms.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.vecs {
		v.Collect(ch)
	}
}

// stat is one series read from ferry.Stats.
type stat struct {
	name, help string
	kind       prometheus.ValueType
	value      func(*ferry.Stats) float64
}

var series = []stat{
	{"queued", "Inputs waiting to be taken.", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.Queued) }},
	{"queued_weight", "Total weight of the inputs waiting.", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.Weight) }},
	{"busy", "Calls in flight, batched and direct.", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.Busy) }},
	{"lanes", "Keys with inputs waiting or a call in flight.", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.Lanes) }},
	{"admitted_total", "Inputs that joined the waiting room.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.Admitted) }},
	{"dropped_total", "Admitted inputs dropped because their caller gave up.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.Dropped) }},
	{"taken_total", "Admitted inputs taken by batched calls.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.Taken) }},
	{"batches_total", "Batched calls started.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.Batches) }},
	{"direct_calls_total", "Direct calls started.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.DirectCalls) }},
	{"done_panics_total", "Submit done callbacks that panicked.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.DonePanics) }},
	{"on_batch_panics_total", "OnBatch calls that panicked.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.OnBatchPanics) }},
}

// statsCollector reads a ferry's Stats at each scrape.
type statsCollector struct {
	stats    func() ferry.Stats
	descs    []*prometheus.Desc // as series
	rejected *prometheus.Desc
}

// Stats returns a prometheus.Collector that calls stats (a ferry's Stats
// method) once per scrape, for gauges ferry_queued, ferry_queued_weight,
// ferry_busy and ferry_lanes, counters since New, and ferry_rejected_total
// by reason: full, weight or heavy. It carries c's ferry label.
func (c *Collector) Stats(stats func() ferry.Stats) prometheus.Collector {
	labels := prometheus.Labels{"ferry": c.name}
	s := &statsCollector{stats: stats}
	for _, st := range series {
		s.descs = append(s.descs, prometheus.NewDesc("ferry_"+st.name, st.help, nil, labels))
	}
	s.rejected = prometheus.NewDesc("ferry_rejected_total",
		"Inputs rejected for room, by reason: the room held MaxQueued inputs (full), would pass MaxQueuedWeight (weight), or could never hold them (heavy).",
		[]string{"reason"}, labels)
	return s
}

func (s *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
	ch <- s.rejected
}

func (s *statsCollector) Collect(ch chan<- prometheus.Metric) {
	v := s.stats()
	for i, st := range series {
		ch <- prometheus.MustNewConstMetric(s.descs[i], st.kind, st.value(&v))
	}
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"full", v.RejectedFull}, {"weight", v.RejectedWeight}, {"heavy", v.RejectedHeavy}} {
		ch <- prometheus.MustNewConstMetric(s.rejected, prometheus.CounterValue, float64(r.n), r.reason)
	}
}
