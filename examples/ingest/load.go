package main

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The load generator's paths.
const (
	pathDo = iota
	pathAsync
	pathBulk
)

var paths = [...]string{"/events", "/events/async", "/events/bulk"}

// loadConfig is what the load generator's flags set.
type loadConfig struct {
	target   string        // the service's URL, on 127.0.0.1
	n        int           // events at most
	duration time.Duration // to post new events
	grace    time.Duration // after duration, to retry those posted (default 20 s)
	writers  int
	tenants  int
	zipf     float64
	mix      [3]int // weights of do, async, bulk
	bulk     int    // events per bulk request
	run      string // prefix of the events' ids (default random)
	seed     uint64
}

// record is one event the generator posted.
type record struct {
	tenant, id string
	path       int
	sent, ack  time.Time // its first post, and its acknowledgement (zero if none)
	seq        int64     // from a 201
}

// loadResult is one run of the generator.
type loadResult struct {
	mode      string
	run       string // the prefix of the events' ids
	records   []record
	elapsed   time.Duration
	statuses  map[int]int     // responses by status, retries included; 0: no response
	lat       []time.Duration // of each 201 of /events, sorted
	perCommit float64         // events stored per commit, from the service's metrics; 0: unknown
	figures   figures
}

// generate posts events to lc.target until lc.n are posted or lc.duration has
// passed, each client one request at a time, and posts again any request that
// was not acknowledged (the same events), until it is or lc.grace has passed.
func generate(ctx context.Context, lc loadConfig) (*loadResult, error) {
	u, err := url.Parse(lc.target)
	if err != nil {
		return nil, err
	}
	switch {
	case u.Hostname() != "127.0.0.1":
		return nil, fmt.Errorf("-target %s: the load generator posts to 127.0.0.1 only", lc.target)
	case lc.n < 1 || lc.duration <= 0 || lc.writers < 1 || lc.tenants < 1 || lc.bulk < 1:
		return nil, fmt.Errorf("-n, -duration, -writers, -tenants and -bulk must be positive")
	case lc.zipf <= 1:
		return nil, fmt.Errorf("-zipf %v: want more than 1", lc.zipf)
	}
	if lc.run == "" {
		lc.run = crand.Text()[:10]
	}
	if lc.grace == 0 {
		lc.grace = 20 * time.Second
	}
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: lc.writers},
		Timeout:   30 * time.Second,
	}
	defer client.CloseIdleConnections()
	before, _ := scrape(client, lc.target)
	start := time.Now()
	g := &gen{lc: lc, client: client, stopNew: start.Add(lc.duration), stop: start.Add(lc.duration + lc.grace)}
	ws := make([]writer, lc.writers)
	var wg sync.WaitGroup
	for i := range ws {
		ws[i] = writer{g: g, i: i, statuses: map[int]int{}}
		wg.Go(func() { ws[i].run(ctx) })
	}
	wg.Wait()
	r := &loadResult{run: lc.run, elapsed: time.Since(start), statuses: map[int]int{}}
	for _, w := range ws {
		r.records = append(r.records, w.records...)
		r.lat = append(r.lat, w.lat...)
		for c, n := range w.statuses {
			r.statuses[c] += n
		}
	}
	slices.Sort(r.lat)
	if after, err := scrape(client, lc.target); err == nil && after[1] > before[1] {
		r.perCommit = (after[0] - before[0]) / (after[1] - before[1])
	}
	return r, ctx.Err()
}

// gen is what the writers share.
type gen struct {
	lc            loadConfig
	client        *http.Client
	stopNew, stop time.Time
	posted        atomic.Int64
}

// writer is one client. Its methods run on its own goroutine, and its fields
// are its own until generate reads them, once that goroutine has ended.
type writer struct {
	g        *gen
	i        int
	records  []record
	lat      []time.Duration
	statuses map[int]int
}

func (w *writer) run(ctx context.Context) {
	lc := w.g.lc
	rng := rand.New(rand.NewPCG(lc.seed, uint64(w.i)))
	zipf := rand.NewZipf(rng, lc.zipf, 1, uint64(lc.tenants-1))
	total := lc.mix[0] + lc.mix[1] + lc.mix[2]
	for k := 0; ctx.Err() == nil && time.Now().Before(w.g.stopNew); k++ {
		path, n := pathDo, 1
		for p, x := 0, rng.IntN(total); p < 3; p++ {
			if x < lc.mix[p] {
				path = p
				break
			}
			x -= lc.mix[p]
		}
		if path == pathBulk {
			n = lc.bulk
		}
		if w.g.posted.Add(int64(n)) > int64(lc.n) {
			return
		}
		evs := make([]event, n)
		for j := range evs {
			evs[j] = event{
				Tenant:  fmt.Sprintf("t%03d", zipf.Uint64()),
				ID:      fmt.Sprintf("%s-%d-%d-%d", lc.run, w.i, k, j),
				Payload: json.RawMessage(fmt.Sprintf(`{"writer":%d,"n":%d}`, w.i, k)),
			}
		}
		w.post(ctx, path, evs)
	}
}

// post posts evs until they are acknowledged, and records them.
func (w *writer) post(ctx context.Context, path int, evs []event) {
	var body []byte
	if path == pathBulk {
		body, _ = json.Marshal(evs)
	} else {
		body, _ = json.Marshal(evs[0])
	}
	sent := time.Now()
	first := len(w.records)
	for _, e := range evs {
		w.records = append(w.records, record{tenant: e.Tenant, id: e.ID, path: path, sent: sent})
	}
	backoff := 5 * time.Millisecond
	for ctx.Err() == nil {
		t0 := time.Now()
		code, replies := w.send(ctx, path, body)
		w.statuses[code]++
		if code == http.StatusCreated || code == http.StatusAccepted {
			ack := time.Now()
			if path == pathDo {
				w.lat = append(w.lat, ack.Sub(t0))
			}
			for i := range evs {
				r := &w.records[first+i]
				r.ack = ack
				if i < len(replies) {
					r.seq = replies[i].Seq
				}
			}
			return
		}
		if code == http.StatusBadRequest || time.Now().After(w.g.stop) {
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// send posts body once: the status (0 if no response came) and the replies.
func (w *writer) send(ctx context.Context, path int, body []byte) (int, []reply) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.g.lc.target+paths[path], bytes.NewReader(body))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.g.client.Do(req)
	if err != nil {
		return 0, nil
	}
	defer resp.Body.Close()
	var replies []reply
	if resp.StatusCode == http.StatusCreated {
		if path == pathBulk {
			err = json.NewDecoder(resp.Body).Decode(&replies)
		} else {
			replies = make([]reply, 1)
			err = json.NewDecoder(resp.Body).Decode(&replies[0])
		}
		if err != nil {
			return 0, nil // a torn answer: the events are posted again
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, replies
}

// scrape reads the service's events stored and commits from its metrics.
func scrape(client *http.Client, target string) ([2]float64, error) {
	var v [2]float64
	resp, err := client.Get(target + "/metrics")
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return v, err
	}
	for i, name := range []string{"ingest_events_stored_total", "ingest_commits_total"} {
		mf := mfs[name]
		if mf == nil || len(mf.GetMetric()) == 0 {
			return v, fmt.Errorf("no %s", name)
		}
		v[i] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	return v, nil
}

// figures are what the database holds of the events a run posted.
type figures struct {
	acked      int // events acknowledged (201 or 202)
	stored     int // rows of the run's events
	lost       int // acknowledged, not stored
	duplicated int // acknowledged, stored more than once
	violations int // acknowledged, stored before an event of its tenant acknowledged before it was first posted
	wrongSeq   int // a 201 whose number is not the stored one
}

// verify reads the rows of run's events in dsn's schema and checks records
// against them (see tally).
func verify(ctx context.Context, dsn, schema, run string, records []record) (figures, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return figures{}, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT tenant, id, seq FROM `+pgx.Identifier{schema, "events"}.Sanitize()+` WHERE id LIKE $1`, run+"-%")
	if err != nil {
		return figures{}, err
	}
	stored := map[eventKey][]int64{}
	var k eventKey
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&k.tenant, &k.id, &seq}, func() error {
		stored[k] = append(stored[k], seq)
		return nil
	}); err != nil {
		return figures{}, err
	}
	return tally(records, stored), nil
}

// eventKey is an event's identity.
type eventKey struct{ tenant, id string }

// tally checks records against the numbers each event is stored under:
// every acknowledged event stored exactly once, with the number its 201
// gave; and per tenant, an event acknowledged before another was first
// posted is stored with a lower number.
func tally(records []record, stored map[eventKey][]int64) figures {
	var f figures
	for _, seqs := range stored {
		f.stored += len(seqs)
	}
	type acked struct {
		seq       int64
		sent, ack time.Time
	}
	byTenant := map[string][]acked{}
	for _, r := range records {
		if r.ack.IsZero() {
			continue
		}
		f.acked++
		seqs := stored[eventKey{r.tenant, r.id}]
		switch {
		case len(seqs) == 0:
			f.lost++
			continue
		case len(seqs) > 1:
			f.duplicated++
		}
		if r.seq != 0 && r.seq != seqs[0] {
			f.wrongSeq++
		}
		byTenant[r.tenant] = append(byTenant[r.tenant], acked{seqs[0], r.sent, r.ack})
	}
	for _, evs := range byTenant {
		// From the highest number down: an event is out of order if one
		// with a higher number was acknowledged before it was posted.
		slices.SortFunc(evs, func(a, b acked) int { return cmp.Compare(b.seq, a.seq) })
		var firstAck time.Time
		for _, e := range evs {
			if !firstAck.IsZero() && firstAck.Before(e.sent) {
				f.violations++
			}
			if firstAck.IsZero() || e.ack.Before(firstAck) {
				firstAck = e.ack
			}
		}
	}
	return f
}

// report prints the runs side by side.
func report(w io.Writer, lc loadConfig, rs []*loadResult) {
	fmt.Fprintf(w, "%d writers, %d tenants (Zipf s=%v), paths do/async/bulk %d/%d/%d, bulk %d, at most %d events in %v\n\n",
		lc.writers, lc.tenants, lc.zipf, lc.mix[0], lc.mix[1], lc.mix[2], lc.bulk, lc.n, lc.duration)
	row := func(name string, f func(r *loadResult) string) {
		fmt.Fprintf(w, "%-28s", name)
		for _, r := range rs {
			fmt.Fprintf(w, "%14s", f(r))
		}
		fmt.Fprintln(w)
	}
	acked := func(r *loadResult) int {
		n := 0
		for _, rec := range r.records {
			if !rec.ack.IsZero() {
				n++
			}
		}
		return n
	}
	pct := func(r *loadResult, p int) string {
		if len(r.lat) == 0 {
			return "-"
		}
		return r.lat[len(r.lat)*p/100].Round(10 * time.Microsecond).String()
	}
	row("", func(r *loadResult) string { return cmp.Or(r.mode, "target") })
	row("events/s (acknowledged)", func(r *loadResult) string { return fmt.Sprintf("%.0f", float64(acked(r))/r.elapsed.Seconds()) })
	row("201 latency p50", func(r *loadResult) string { return pct(r, 50) })
	row("201 latency p99", func(r *loadResult) string { return pct(r, 99) })
	row("events per commit", func(r *loadResult) string {
		if r.perCommit == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", r.perCommit)
	})
	row("events acknowledged", func(r *loadResult) string { return fmt.Sprint(acked(r)) })
	row("events posted", func(r *loadResult) string { return fmt.Sprint(len(r.records)) })
	var codes []int
	for _, r := range rs {
		for c := range r.statuses {
			if !slices.Contains(codes, c) {
				codes = append(codes, c)
			}
		}
	}
	slices.Sort(codes)
	for _, c := range codes {
		name := fmt.Sprintf("responses %d", c)
		if c == 0 {
			name = "requests without response"
		}
		row(name, func(r *loadResult) string { return fmt.Sprint(r.statuses[c]) })
	}
	if rs[0].mode != "" {
		row("rows stored", func(r *loadResult) string { return fmt.Sprint(r.figures.stored) })
		row("acknowledged, lost", func(r *loadResult) string { return fmt.Sprint(r.figures.lost) })
		row("acknowledged, stored twice", func(r *loadResult) string { return fmt.Sprint(r.figures.duplicated) })
		row("stored out of order", func(r *loadResult) string { return fmt.Sprint(r.figures.violations) })
		row("201 with a wrong number", func(r *loadResult) string { return fmt.Sprint(r.figures.wrongSeq) })
	}
}
