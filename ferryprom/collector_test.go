package ferryprom_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// An input is "key/name". Keys: ok answers, fail fails the call, partial
// fails the inputs named bad, panic panics, block waits for its context
// (the ferry's close). weighty weighs 8 and heavy 100, the rest 1.
func key(in string) string { k, _, _ := strings.Cut(in, "/"); return k }

func weight(in string) int64 {
	switch key(in) {
	case "weighty":
		return 8
	case "heavy":
		return 100
	}
	return 1
}

var errBoom = errors.New("boom")

// rig is a ferry wired to a Collector, served on loopback.
type rig struct {
	f       *ferry.Ferry[string, string, string]
	srv     *httptest.Server
	reports chan ferry.Batch[string] // each call, after the Collector saw it
	started chan struct{}            // a block call started
}

func newRig(t *testing.T) *rig {
	r := &rig{reports: make(chan ferry.Batch[string], 64), started: make(chan struct{}, 1)}
	call := func(ctx context.Context, k string, ins []string) ([]string, error) {
		switch k {
		case "fail":
			return nil, errBoom
		case "panic":
			panic("oops")
		case "block":
			r.started <- struct{}{}
			<-ctx.Done()
			return nil, context.Cause(ctx)
		case "partial":
			errs := make(ferry.Errors, len(ins))
			for i, in := range ins {
				if strings.HasSuffix(in, "/bad") {
					errs[i] = errBoom
				}
			}
			return ins, errs
		}
		return ins, nil
	}
	m := ferryprom.NewCollector("test", nil, ferryprom.Opts{})
	record := ferryprom.OnBatch[string](m)
	f, err := ferry.New(call, ferry.Config[string, string]{
		Key: key, Weight: weight, DirectCalls: true, MaxQueued: 4, MaxQueuedWeight: 10,
		OnBatch: func(b ferry.Batch[string]) { record(b); r.reports <- b },
	})
	if err != nil {
		t.Fatal(err)
	}
	r.f = f
	t.Cleanup(func() { f.Close() })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.WithStats(f.Stats))
	r.srv = httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.PanicOnError}))
	t.Cleanup(r.srv.Close)
	return r
}

// await waits for the reports of calls on n inputs in all.
func (r *rig) await(n int) {
	for n > 0 {
		n -= (<-r.reports).Size
	}
}

// scrape gets /metrics over HTTP and parses it.
func (r *rig) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(r.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// value is the value of the one series of name whose labels include want.
func value(t *testing.T, mfs map[string]*dto.MetricFamily, name string, want ...string) float64 {
	t.Helper()
	mf := mfs[name]
	if mf == nil {
		t.Fatalf("no %s", name)
	}
	for _, m := range mf.Metric {
		if has(m, append(want, "ferry", "test")...) {
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, want)
	return 0
}

func has(m *dto.Metric, pairs ...string) bool {
	for i := 0; i < len(pairs); i += 2 {
		found := false
		for _, l := range m.Label {
			found = found || l.GetName() == pairs[i] && l.GetValue() == pairs[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}

// histograms sums ferry_batch_size's count and sum, and gives the count of
// each "outcome/direct" pair.
func histograms(mfs map[string]*dto.MetricFamily) (count, sum uint64, by map[string]uint64) {
	by = map[string]uint64{}
	for _, m := range mfs["ferry_batch_size"].GetMetric() {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		sum += uint64(h.GetSampleSum())
		var o, d string
		for _, l := range m.Label {
			switch l.GetName() {
			case "outcome":
				o = l.GetValue()
			case "direct":
				d = l.GetValue()
			}
		}
		if h.GetSampleCount() > 0 {
			by[o+"/"+d] += h.GetSampleCount()
		}
	}
	return count, sum, by
}

// checkStats compares the scraped gauges and counters with s.
func checkStats(t *testing.T, mfs map[string]*dto.MetricFamily, s ferry.Stats) {
	t.Helper()
	for name, want := range map[string]float64{
		"ferry_queued": float64(s.Queued), "ferry_queued_weight": float64(s.Weight),
		"ferry_busy": float64(s.Busy), "ferry_lanes": float64(s.Lanes),
		"ferry_admitted_total": float64(s.Admitted), "ferry_dropped_total": float64(s.Dropped),
		"ferry_taken_total": float64(s.Taken), "ferry_batches_total": float64(s.Batches),
		"ferry_direct_calls_total": float64(s.DirectCalls), "ferry_done_panics_total": float64(s.DonePanics),
		"ferry_on_batch_panics_total": float64(s.OnBatchPanics),
		"ferry_paused":                float64(s.Paused), "ferry_paused_out_total": float64(s.PausedOut),
		"ferry_waiting": float64(s.WaitingForRoom), "ferry_parked": float64(s.Parked),
		"ferry_on_pause_panics_total": float64(s.OnPausePanics),
	} {
		if got := value(t, mfs, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for reason, want := range map[string]uint64{"full": s.RejectedFull, "weight": s.RejectedWeight, "heavy": s.RejectedHeavy} {
		if got := value(t, mfs, "ferry_rejected_total", "reason", reason); got != float64(want) {
			t.Errorf("rejected{reason=%q} = %v, want %v", reason, got, want)
		}
	}
}

func TestScrape(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	// Direct calls, one at a time: each reports before Do returns.
	if _, err := r.f.Do(ctx, "ok/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.f.Do(ctx, "fail/1"); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	var p *ferry.PanicError
	if _, err := r.f.Do(ctx, "panic/1"); !errors.As(err, &p) {
		t.Fatal(err)
	}
	// Batched calls: DoMany and Submit never call directly.
	if _, err := r.f.DoMany(ctx, []string{"partial/good", "partial/bad"}); err == nil {
		t.Fatal("partial: no error")
	}
	if _, err := r.f.DoMany(ctx, []string{"ok/a", "ok/b"}); err != nil {
		t.Fatal(err)
	}
	if err := r.f.Submit(ctx, "ok/c", nil); err != nil {
		t.Fatal(err)
	}
	r.await(3 + 2 + 2 + 1)

	// A call that holds its key, and a full room behind it.
	go r.f.Do(ctx, "block/0")
	<-r.started
	for i := range 3 {
		if err := r.f.Submit(ctx, fmt.Sprint("block/", i+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, in := range []string{"weighty/x", "heavy/x", "block/4", "block/5"} {
		err := r.f.Submit(ctx, in, nil)
		if in == "block/4" {
			if err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, ferry.ErrRejected) {
			t.Fatalf("%s: %v", in, err)
		}
	}
	before := r.f.Stats()
	mfs := r.scrape(t)
	s := r.f.Stats()
	if s != before {
		t.Fatalf("stats moved during the scrape: %+v, then %+v", before, s)
	}
	if s.Queued != 4 || s.Busy != 1 || s.RejectedFull != 1 || s.RejectedWeight != 1 || s.RejectedHeavy != 1 {
		t.Fatalf("unexpected stats %+v", s)
	}
	checkStats(t, mfs, s)
	count, sum, by := histograms(mfs)
	if want := s.Batches + s.DirectCalls - uint64(s.Busy); count != want {
		t.Errorf("batch_size count %d, want %d (Batches + DirectCalls - Busy)", count, want)
	}
	if want := s.Taken + s.DirectCalls - uint64(s.Busy); sum != want {
		t.Errorf("batch_size sum %d, want %d", sum, want)
	}
	for _, o := range []string{"ok/true", "error/true", "panic/true", "partial/false", "ok/false"} {
		if by[o] == 0 {
			t.Errorf("no call with outcome/direct %s: %v", o, by)
		}
	}

	// At close the blocked call fails with ErrClosed, and reports.
	r.f.Close()
	r.await(1)
	mfs = r.scrape(t)
	s = r.f.Stats()
	checkStats(t, mfs, s)
	if count, _, by = histograms(mfs); count != s.Batches+s.DirectCalls || by["closed/true"] != 1 {
		t.Errorf("after close: count %d, want %d; %v", count, s.Batches+s.DirectCalls, by)
	}
	if s.OnBatchPanics != 0 {
		t.Errorf("OnBatchPanics %d", s.OnBatchPanics)
	}
}

// A ferry closed before any traffic still scrapes, every series at zero.
func TestScrapeClosed(t *testing.T) {
	r := newRig(t)
	r.f.Close()
	mfs := r.scrape(t)
	checkStats(t, mfs, ferry.Stats{})
	if count, _, _ := histograms(mfs); count != 0 {
		t.Errorf("count %d", count)
	}
	if n := len(mfs["ferry_batch_size"].GetMetric()); n != 2*2*7 {
		t.Errorf("%d batch_size series, want every outcome, direct and retried", n)
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{ferry.Errors{nil, nil}, "ok"},
		{errBoom, "error"},
		{ferry.Errors{errBoom, errBoom}, "error"},
		{ferry.Errors{nil, errBoom}, "partial"},
		{ferry.Errors{errBoom, nil, nil}, "partial"},
		{fmt.Errorf("wrapped: %w", ferry.Errors{errBoom, nil}), "error"},
		{fmt.Errorf("%w: %w", ferry.ErrCallTimeout, errBoom), "timeout"},
		{ferry.Errors{nil, fmt.Errorf("%w: %w", ferry.ErrClosed, errBoom)}, "closed"},
		{context.Cause(canceled(ferry.ErrAbandoned)), "abandoned"},
		{&ferry.PanicError{Value: ferry.ErrClosed}, "panic"},
		{fmt.Errorf("%w: %w", ferry.ErrClosed, ferry.Errors{nil, errBoom}), "closed"},
	} {
		if got := ferryprom.Outcome(c.err); got != c.want {
			t.Errorf("Outcome(%v) = %s, want %s", c.err, got, c.want)
		}
	}
}

func canceled(cause error) context.Context {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	return ctx
}

// OnBatch takes any Batch, even odd ones, without panicking.
func TestOnBatchOdd(t *testing.T) {
	record := ferryprom.OnBatch[float64](ferryprom.NewCollector("odd", nil, ferryprom.Opts{}))
	record(ferry.Batch[float64]{})
	record(ferry.Batch[float64]{Size: -1, Wait: -1, Took: -1, Err: ferry.Errors{}})
}

// With Retry, every attempt is observed, and retried tells the attempts
// that Retry called again from the calls' last words: a call that fails
// once and then answers is error/retried and ok; one that fails both of its
// two attempts is error/retried and error. Mutation: OnBatch ignoring
// Batch.Retried (every attempt under retried="false").
func TestRetriedAttempts(t *testing.T) {
	seen := map[string]int{}
	call := func(_ context.Context, k string, ins []string) ([]string, error) {
		if seen[k]++; k == "fail" || seen[k] == 1 {
			return nil, errBoom
		}
		return ins, nil
	}
	c := ferryprom.NewCollector("retry", nil, ferryprom.Opts{})
	f, err := ferry.New(call, ferry.Config[string, string]{
		Key: key, Shards: 1, MaxInFlightBatches: 1, OnBatch: ferryprom.OnBatch[string](c),
		Retry: func(_ string, attempt int, _ error) (time.Duration, bool) { return 0, attempt < 2 },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := f.Do(ctx, "flaky/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Do(ctx, "fail/1"); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	f.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	got, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]uint64{}
	for _, mf := range got {
		if mf.GetName() != "ferry_batch_size" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if n := m.GetHistogram().GetSampleCount(); n > 0 {
				var o, rt string
				for _, l := range m.Label {
					switch l.GetName() {
					case "outcome":
						o = l.GetValue()
					case "retried":
						rt = l.GetValue()
					}
				}
				by[o+"/"+rt] += n
			}
		}
	}
	want := map[string]uint64{"error/true": 2, "ok/false": 1, "error/false": 1}
	if fmt.Sprint(by) != fmt.Sprint(want) {
		t.Errorf("attempts by outcome/retried: %v, want %v", by, want)
	}
}

// The package doc lists every series a Collector exports, and no other.
// Mutation: a series added to Stats' list and not to the doc (or a name
// misspelt there).
func TestSeriesListed(t *testing.T) {
	src, err := os.ReadFile("collector.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "package ferryprom")
	listed := map[string]bool{}
	for _, name := range regexp.MustCompile(`ferry_[a-z_]+`).FindAllString(doc, -1) {
		listed[name] = true
	}
	r := newRig(t)
	got := map[string]bool{}
	for name := range r.scrape(t) {
		got[name] = true
	}
	if !maps.Equal(listed, got) {
		t.Fatalf("the package doc lists %v; a scrape gives %v", slices.Sorted(maps.Keys(listed)), slices.Sorted(maps.Keys(got)))
	}
}
