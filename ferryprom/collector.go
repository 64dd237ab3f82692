// Package ferryprom exports a ferry's calls and Stats to Prometheus, as a
// client_golang collector. The collector comes first, since its OnBatch goes
// in the ferry's Config; the ferry's Stats join it once the ferry exists:
//
//	c := ferryprom.NewCollector("orders", nil, ferryprom.Opts{})
//	f, err := ferry.New(call, ferry.Config[string, Order]{Key: orderKey, OnBatch: ferryprom.OnBatch[string](c)})
//	reg.MustRegister(c.WithStats(f.Stats))
//
// A Collector holds histograms of each call's size, wait and duration,
// labelled by outcome, direct and retried (an attempt that Config.Retry
// called again: retried="false" are the calls' last words), and reads the
// ferry's Stats at each scrape for gauges and counters. Every series carries
// the label ferry="orders", so that several ferries share one registry under
// different names. Nothing is labelled by key: keys are unbounded, and a
// series per key would grow without limit.
//
// The series, with the default namespace "ferry" (Opts.Namespace):
//
//	ferry_batch_size{outcome,direct,retried}            histogram: Batch.Size
//	ferry_batch_wait_seconds{outcome,direct,retried}    histogram: Batch.Wait
//	ferry_batch_call_seconds{outcome,direct,retried}    histogram: Batch.Took
//	ferry_queued, ferry_queued_weight                   gauges: Stats.Queued, Weight
//	ferry_busy, ferry_lanes                             gauges: Stats.Busy, Lanes
//	ferry_paused, ferry_parked, ferry_waiting           gauges: Stats.Paused, Parked, WaitingForRoom
//	ferry_admitted_total, ferry_dropped_total           counters: Stats.Admitted, Dropped
//	ferry_taken_total, ferry_batches_total              counters: Stats.Taken, Batches
//	ferry_direct_calls_total, ferry_paused_out_total    counters: Stats.DirectCalls, PausedOut
//	ferry_done_panics_total, ferry_on_batch_panics_total, ferry_on_pause_panics_total
//	ferry_rejected_total{reason}                        counter: Stats.Rejected by reason: full, weight, heavy
//
// outcome is one of ok, error, partial, timeout, closed, abandoned, panic
// (see Outcome); direct and retried are "true" or "false".
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

// Opts configures a Collector, as prometheus.HistogramOpts configures a
// histogram. Its zero value gives the defaults.
type Opts struct {
	// Namespace is the first part of every series' name: ferry_batch_size
	// and ferry_queued with the default, "ferry".
	Namespace string
	// ConstLabels are added to every series, beside ferry=name. They must
	// not name the label ferry; NewCollector panics if they do.
	ConstLabels prometheus.Labels
	// The histograms' buckets; nil: DefSizeBuckets, DefWaitBuckets and
	// DefCallBuckets.
	SizeBuckets, WaitBuckets, CallBuckets []float64
}

// The default buckets: batch sizes 1 to 1024 by powers of 2, waits from
// 10 µs and calls from 100 µs, by powers of 4 (to 2.6 s and 26 s).
var (
	DefSizeBuckets = prometheus.ExponentialBuckets(1, 2, 11)
	DefWaitBuckets = prometheus.ExponentialBuckets(1e-5, 4, 10)
	DefCallBuckets = prometheus.ExponentialBuckets(1e-4, 4, 10)
)

// Collector is a prometheus.Collector of one ferry: histograms of
// ferry_batch_size, ferry_batch_wait_seconds and ferry_batch_call_seconds,
// labelled outcome, direct and retried (ferry.Batch.Retried: true for an
// attempt after which Retry called again, so a failure there is not final),
// which OnBatch feeds; and, with a stats
// function, the gauges and counters of the ferry's Stats, read at each
// scrape. Create it with NewCollector; its zero value is not usable. Its
// methods are safe for concurrent use, and run on the goroutine that calls
// them: the registry's at a scrape, the ferry's worker for OnBatch.
type Collector struct {
	h        *histograms
	stats    func() ferry.Stats // nil: no Stats series
	descs    []*prometheus.Desc // of the Stats series, as series
	rejected *prometheus.Desc
}

// histograms are a Collector's histograms, shared with the Collectors that
// WithStats makes from it. Its method runs on the goroutine of NewCollector's
// or WithStats's caller; its fields do not change after NewCollector.
type histograms struct {
	name, namespace string
	labels          prometheus.Labels
	vecs            [3]*prometheus.HistogramVec                 // size, wait, call
	obs             [len(outcomes)][2][2][3]prometheus.Observer // by outcome, direct, retried, then as vecs
}

// NewCollector returns a Collector whose series carry the label ferry=name,
// with every outcome, direct and retried present from the start, at zero. stats,
// if not nil, is called once per scrape: a ferry's Stats method. Pass nil when
// the ferry does not exist yet (its Config takes OnBatch(c)) and register
// c.WithStats(f.Stats) once it does. It panics if opts.ConstLabels names
// the label ferry or opts' buckets are not increasing, as client_golang's
// constructors do for invalid options.
func NewCollector(name string, stats func() ferry.Stats, opts Opts) *Collector {
	if _, ok := opts.ConstLabels["ferry"]; ok {
		panic("ferryprom: Opts.ConstLabels names the label ferry, which NewCollector sets to the ferry's name")
	}
	h := &histograms{name: name, namespace: opts.Namespace, labels: prometheus.Labels{"ferry": name}}
	if h.namespace == "" {
		h.namespace = "ferry"
	}
	for k, v := range opts.ConstLabels {
		h.labels[k] = v
	}
	for i, o := range []struct {
		name, help string
		buckets    []float64
	}{
		{"batch_size", "Inputs per call.", or(opts.SizeBuckets, DefSizeBuckets)},
		{"batch_wait_seconds", "From a call's oldest input's submission to the call's start; 0 for a direct call.", or(opts.WaitBuckets, DefWaitBuckets)},
		{"batch_call_seconds", "A call's own duration.", or(opts.CallBuckets, DefCallBuckets)},
	} {
		h.vecs[i] = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: h.namespace, Name: o.name, Help: o.help, ConstLabels: h.labels, Buckets: o.buckets,
		}, []string{"outcome", "direct", "retried"})
	}
	for o, outcome := range outcomes {
		for d := range 2 {
			for r := range 2 {
				for i, v := range h.vecs {
					h.obs[o][d][r][i] = v.WithLabelValues(outcome, strconv.FormatBool(d == 1), strconv.FormatBool(r == 1))
				}
			}
		}
	}
	return h.with(stats)
}

func or(b, def []float64) []float64 {
	if b == nil {
		return def
	}
	return b
}

// WithStats returns a Collector that shares c's histograms (and so what
// OnBatch(c) records) and reads stats, a ferry's Stats method, at each
// scrape, in place of c's stats if it had any. Register it, not c: the two
// share series, which one registry cannot hold twice.
func (c *Collector) WithStats(stats func() ferry.Stats) *Collector { return c.h.with(stats) }

// with returns a Collector of h's histograms and stats.
func (h *histograms) with(stats func() ferry.Stats) *Collector {
	c := &Collector{h: h, stats: stats}
	if stats == nil {
		return c
	}
	for _, st := range series {
		c.descs = append(c.descs, prometheus.NewDesc(h.namespace+"_"+st.name, st.help, nil, h.labels))
	}
	c.rejected = prometheus.NewDesc(h.namespace+"_rejected_total",
		"Inputs rejected for room, by reason: the room held MaxQueued inputs (full), would pass MaxQueuedWeight (weight), or could never hold them (heavy).",
		[]string{"reason"}, h.labels)
	return c
}

// OnBatch returns a Config.OnBatch, for a ferry of any key type, that records
// each call in c: three observations on series NewCollector made, with no
// allocation. It runs on the goroutine that made the call, as OnBatch does.
func OnBatch[K comparable](c *Collector) func(ferry.Batch[K]) {
	return func(b ferry.Batch[K]) {
		d, r := 0, 0
		if b.Direct {
			d = 1
		}
		if b.Retried {
			r = 1
		}
		obs := &c.h.obs[outcome(b.Err)][d][r]
		obs[0].Observe(float64(b.Size))
		obs[1].Observe(b.Wait.Seconds())
		obs[2].Observe(b.Took.Seconds())
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
	{"paused", "Keys paused after a call failed for good (PauseOnError).", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.Paused) }},
	{"paused_out_total", "Admitted inputs answered ErrPaused as their key was paused.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.PausedOut) }},
	{"on_pause_panics_total", "OnPause calls that panicked.", prometheus.CounterValue, func(s *ferry.Stats) float64 { return float64(s.OnPausePanics) }},
	{"parked", "Keys whose failed batch waits out a backoff (Retry) or is held until Resume (HoldPaused).", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.Parked) }},
	{"waiting", "Inputs waiting for room (WaitForRoom), not yet admitted.", prometheus.GaugeValue, func(s *ferry.Stats) float64 { return float64(s.WaitingForRoom) }},
}

// Describe sends the descriptors of c's series.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range c.h.vecs {
		v.Describe(ch)
	}
	if c.stats == nil {
		return
	}
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.rejected
}

// Collect sends c's histograms and, with a stats function, calls it once
// and sends the gauges and counters of what it returned. It blocks while
// stats runs: a ferry's Stats waits for its loops' turns.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, v := range c.h.vecs {
		v.Collect(ch)
	}
	if c.stats == nil {
		return
	}
	v := c.stats()
	for i, st := range series {
		ch <- prometheus.MustNewConstMetric(c.descs[i], st.kind, st.value(&v))
	}
	for _, r := range []struct {
		reason string
		n      uint64
	}{{"full", v.RejectedFull}, {"weight", v.RejectedWeight}, {"heavy", v.RejectedHeavy}} {
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(r.n), r.reason)
	}
}
