package main

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/ferryprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config is what the service's flags set. A zero field takes its value in
// defaults, but for Delay and Request (0: none), Unbatched, DSN, which is
// required, and Logf (nil: log.Printf).
type Config struct {
	DSN         string
	Schema      string        // of the tables, created if missing
	Addr        string        // to listen on
	Spool       string        // the file of accepted events left at shutdown, replayed at start; Spool+".dead" takes those that failed for good
	MaxBatch    int           // ferry's MaxBatchSize
	Delay       time.Duration // ferry's MaxBatchDelay
	Workers     int           // ferry's MaxInFlightBatches; the pool has two connections more
	MaxQueued   int           // ferry's MaxQueued
	CallTimeout time.Duration // ferry's CallTimeout, and each unbatched write's
	Request     time.Duration // how long a 201 may take, waiting included
	Drain       time.Duration // Shutdown's budget for the ferry to run what waits, before Close
	Unbatched   bool          // one INSERT per event, from the handler, without a ferry
	Logf        func(format string, args ...any)
}

// defaults are the flags' defaults, and those of Config's zero fields.
var defaults = Config{
	Schema: "ingest", Addr: "127.0.0.1:8080", Spool: "ingest.spool",
	MaxBatch: 256, Delay: time.Millisecond, Workers: 4, MaxQueued: 8192,
	CallTimeout: 2 * time.Second, Request: 5 * time.Second, Drain: 5 * time.Second,
}

// withDefaults is c with its zero fields set.
func (c Config) withDefaults() Config {
	d := defaults
	c.Schema, c.Addr, c.Spool = cmp.Or(c.Schema, d.Schema), cmp.Or(c.Addr, d.Addr), cmp.Or(c.Spool, d.Spool)
	c.MaxBatch, c.Workers, c.MaxQueued = cmp.Or(c.MaxBatch, d.MaxBatch), cmp.Or(c.Workers, d.Workers), cmp.Or(c.MaxQueued, d.MaxQueued)
	c.CallTimeout, c.Drain = cmp.Or(c.CallTimeout, d.CallTimeout), cmp.Or(c.Drain, d.Drain)
	if c.Logf == nil {
		c.Logf = log.Printf
	}
	return c
}

// event is one event, as posted, with what the service adds.
type event struct {
	Tenant  string          `json:"tenant"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload,omitempty"`

	accepted uint64 // the order in which this process accepted it
	async    bool   // posted to /events/async: acknowledged before it is stored
	drain    bool   // no event: it makes a call for its tenant, to write what is carried
}

// stored is a Call's output for an event: its sequence number, or, for an
// async event whose call failed, that the event is carried to its tenant's
// next call.
type stored struct {
	Seq      int64
	Deferred bool
}

// Service is the ingestion service: HTTP handlers in front of a ferry whose
// Call writes each tenant's batch in one statement. Its methods are safe for
// concurrent use; Handler's run on net/http's goroutines, call on the
// ferry's workers.
type Service struct {
	cfg   Config
	st    *store
	f     *ferry.Ferry[string, event, stored] // nil when unbatched
	carry *carrier
	reg   *prometheus.Registry
	srv   *http.Server
	ln    net.Listener
	serve chan error // Serve's error, once it returns

	accepted                atomic.Uint64 // the last number given to an accepted event
	spooled, replayed, dead atomic.Uint64

	mu    sync.Mutex
	spool []event // async events answered ErrClosed, for the spool file
}

// Start connects to the database, replays the spool file that the last
// Shutdown left (before it listens: those events were accepted before any it
// will accept), and serves on cfg.Addr. It returns an error, and leaves the
// spool file, if the replay fails.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.DSN == "" {
		return nil, errors.New("no DSN")
	}
	cfg = cfg.withDefaults()
	s := &Service{cfg: cfg, reg: prometheus.NewRegistry(), serve: make(chan error, 1)}
	st, err := openStore(ctx, cfg.DSN, cfg.Schema, "ingest", cfg.Workers+2, cfg.CallTimeout+time.Second)
	if err != nil {
		return nil, err
	}
	s.st = st
	if err := s.replay(ctx); err != nil {
		st.pool.Close()
		return nil, err
	}
	s.carry = newCarrier(s.poke)
	if !cfg.Unbatched {
		c := ferryprom.NewCollector("ingest", nil, ferryprom.Opts{})
		s.f, err = ferry.New(s.call, ferry.Config[string, event]{
			Key:                func(e event) string { return e.Tenant },
			MaxBatchSize:       cfg.MaxBatch,
			MaxBatchDelay:      cfg.Delay,
			MaxInFlightBatches: cfg.Workers,
			MaxQueued:          cfg.MaxQueued,
			CallTimeout:        cfg.CallTimeout,
			OnBatch:            ferryprom.OnBatch[string](c),
		})
		if err != nil {
			st.pool.Close()
			return nil, err
		}
		s.reg.MustRegister(c.WithStats(s.f.Stats))
	}
	s.register()
	s.ln, err = net.Listen("tcp", cfg.Addr)
	if err != nil {
		s.close()
		return nil, err
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { s.serve <- s.srv.Serve(s.ln) }()
	return s, nil
}

// Addr is the address the service listens on.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Handler serves POST /events, /events/async and /events/bulk, and GET /metrics.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /events", s.handleDo)
	mux.HandleFunc("POST /events/async", s.handleAsync)
	mux.HandleFunc("POST /events/bulk", s.handleBulk)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	return mux
}

// reply is the answer for one event.
type reply struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Seq    int64  `json:"seq,omitempty"`
	Error  string `json:"error,omitempty"`
}

// handleDo stores one event and answers 201 with its sequence number once it
// is committed.
func (s *Service) handleDo(w http.ResponseWriter, r *http.Request) {
	var e event
	if !decode(w, r, &e) || !s.admit(w, &e) {
		return
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	var out stored
	var err error
	if s.f == nil {
		out.Seq, err = s.writeOne(ctx, e)
	} else {
		out, err = s.f.Do(ctx, e)
	}
	if err != nil {
		fail(w, err)
		return
	}
	answer(w, http.StatusCreated, reply{Tenant: e.Tenant, ID: e.ID, Seq: out.Seq})
}

// handleAsync answers 202 once the event is admitted; it is stored in its
// tenant's order, carried to the tenant's next call if its own fails, and
// spooled if the service shuts down first.
func (s *Service) handleAsync(w http.ResponseWriter, r *http.Request) {
	var e event
	if !decode(w, r, &e) || !s.admit(w, &e) {
		return
	}
	e.async = true
	var err error
	if s.f == nil {
		_, err = s.writeOne(r.Context(), e)
	} else {
		// r's context bounds the admission alone: an accepted event is
		// kept when the handler returns.
		err = s.f.Submit(r.Context(), e, s.done(e))
	}
	if err != nil {
		fail(w, err)
		return
	}
	answer(w, http.StatusAccepted, reply{Tenant: e.Tenant, ID: e.ID})
}

// maxBulk is the most events a bulk request may hold.
const maxBulk = 1000

// handleBulk stores up to maxBulk events of any tenants with one DoMany, and
// answers 201 once all are committed: all of them are admitted, or none.
func (s *Service) handleBulk(w http.ResponseWriter, r *http.Request) {
	var evs []event
	if !decode(w, r, &evs) {
		return
	}
	if len(evs) == 0 || len(evs) > maxBulk {
		http.Error(w, fmt.Sprintf("a bulk request holds 1 to %d events", maxBulk), http.StatusBadRequest)
		return
	}
	for i := range evs {
		if err := check(&evs[i]); err != nil {
			http.Error(w, fmt.Sprintf("event %d: %v", i, err), http.StatusBadRequest)
			return
		}
		if s.carry.paused(evs[i].Tenant) {
			paused(w, evs[i].Tenant)
			return
		}
	}
	for i := range evs {
		evs[i].accepted = s.accepted.Add(1)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	outs := make([]stored, len(evs))
	var err error
	if s.f == nil {
		errs := make(ferry.Errors, len(evs))
		for i, e := range evs {
			if outs[i].Seq, errs[i] = s.writeOne(ctx, e); errs[i] != nil {
				err = errs
			}
		}
	} else {
		outs, err = s.f.DoMany(ctx, evs)
	}
	var errs ferry.Errors
	if err != nil && !errors.As(err, &errs) {
		fail(w, err)
		return
	}
	code := http.StatusCreated
	replies := make([]reply, len(evs))
	for i, e := range evs {
		replies[i] = reply{Tenant: e.Tenant, ID: e.ID}
		if errs != nil && errs[i] != nil {
			replies[i].Error = errs[i].Error()
			code = max(code, status(errs[i]))
			continue
		}
		replies[i].Seq = outs[i].Seq
	}
	answer(w, code, replies)
}

// requestContext is r's context, ended after cfg.Request: a request waits
// that long at most, in the room and in calls that fail in turn. Its end
// drops its events that no call has taken.
func (s *Service) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	if s.cfg.Request <= 0 {
		return r.Context(), func() {}
	}
	return context.WithTimeout(r.Context(), s.cfg.Request)
}

// admit checks e and numbers it, or answers 400, or 503 if its tenant is paused.
func (s *Service) admit(w http.ResponseWriter, e *event) bool {
	if err := check(e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	if s.carry.paused(e.Tenant) {
		paused(w, e.Tenant)
		return false
	}
	e.accepted = s.accepted.Add(1)
	return true
}

// check refuses an event without a tenant, with a tenant or id over 128
// bytes, or with what PostgreSQL's text and jsonb refuse: invalid UTF-8 and
// NUL characters (in the payload, any \u0000, even one after an escaped
// backslash). It gives an event without an id a random one.
func check(e *event) error {
	switch {
	case e.Tenant == "":
		return errors.New("no tenant")
	case len(e.Tenant) > 128 || len(e.ID) > 128:
		return errors.New("tenant or id over 128 bytes")
	case !utf8.ValidString(e.Tenant) || !utf8.ValidString(e.ID) || !utf8.Valid(e.Payload):
		return errors.New("invalid UTF-8")
	case strings.ContainsRune(e.Tenant, 0) || strings.ContainsRune(e.ID, 0) || bytes.Contains(e.Payload, []byte(`\u0000`)):
		return errors.New("a NUL character")
	case e.ID == "":
		e.ID = crand.Text()
	}
	return nil
}

// decode reads a JSON body of at most 1 MiB into v, or answers 400.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(v); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

// status is the HTTP status of a failed write. 503 is left to a paused
// tenant alone (see paused), so that a client can tell the two apart.
func status(err error) int {
	switch {
	case errors.Is(err, ferry.ErrRejected):
		return http.StatusTooManyRequests
	case errors.Is(err, ferry.ErrCallTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError // ErrClosed at shutdown, a failed statement, a panic
}

func fail(w http.ResponseWriter, err error) {
	code := status(err)
	if code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, err.Error(), code)
}

// paused answers 503 for a tenant whose accepted events wait to be stored
// again after a failed call: new ones would have to be stored after them.
func paused(w http.ResponseWriter, tenant string) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, fmt.Sprintf("tenant %q is paused: its accepted events are being stored again", tenant), http.StatusServiceUnavailable)
}

func answer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeOne stores one event in a statement of its own, for -unbatched.
func (s *Service) writeOne(ctx context.Context, e event) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	seqs, err := s.st.write(ctx, e.Tenant, []event{e})
	if err != nil {
		return 0, err
	}
	return seqs[0], nil
}

// call is the ferry's Call: it writes the events carried from the tenant's
// failed calls, then its batch, in one statement (store.write, which retries
// transient errors). If the statement is refused for what it holds, the
// events are written one by one, in order, so that a bad event fails alone.
// Then each event that failed for good fails: a Do or DoMany event with the
// error, an async one to the dead-letter file. The async events that failed
// otherwise (the database unreachable, the call's time up), carried ones
// first, are carried to the tenant's next call, which a poke makes if nothing
// else does, and the tenant is paused until then; the Do and DoMany events
// among them get the error.
func (s *Service) call(ctx context.Context, tenant string, in []event) ([]stored, error) {
	carried := s.carry.peek(tenant)
	evs := make([]event, 0, len(carried)+len(in))
	evs = append(evs, carried...)
	for _, e := range in {
		if !e.drain {
			evs = append(evs, e)
		}
	}
	outs := make([]stored, len(in))
	if len(evs) == 0 {
		return outs, nil
	}
	seqs, fails := s.writeAll(ctx, tenant, evs)
	if fails == nil {
		s.carry.clear(tenant)
		seqs = seqs[len(carried):]
		for i, e := range in {
			if !e.drain {
				outs[i].Seq, seqs = seqs[0], seqs[1:]
			}
		}
		return outs, nil
	}
	var keep, dead []event
	var deadErr error
	errs := make(ferry.Errors, len(in))
	for i, j := 0, 0; j < len(evs); j++ {
		e, seq, err := evs[j], seqs[j], fails[j]
		if j >= len(carried) { // in[i] is evs[j]
			for in[i].drain {
				i++
			}
			outs[i].Seq, errs[i] = seq, err
			if e.async && err != nil {
				outs[i].Deferred, errs[i] = true, nil
			}
			i++
		}
		switch {
		case err == nil || !e.async:
		case retryable(err) || ctx.Err() != nil:
			keep = append(keep, e)
		default:
			dead, deadErr = append(dead, e), err
		}
	}
	s.carry.keep(tenant, keep) // none: clear
	if dead != nil {
		s.deadLetter(dead, deadErr)
	}
	return outs, errs
}

// writeAll writes evs in one statement, or one by one if that statement is
// refused for what it holds, and returns each event's number or error (nil
// if none failed). One by one, the first event that fails otherwise ends
// the pass: it and those after it get its error, so that none is stored
// before an earlier one.
func (s *Service) writeAll(ctx context.Context, tenant string, evs []event) ([]int64, []error) {
	seqs, err := s.st.write(ctx, tenant, evs)
	if err == nil {
		return seqs, nil
	}
	seqs, fails := make([]int64, len(evs)), make([]error, len(evs))
	for i := range fails {
		fails[i] = err
	}
	if retryable(err) || ctx.Err() != nil || len(evs) == 1 {
		return seqs, fails
	}
	for i, e := range evs {
		one, err := s.st.write(ctx, tenant, []event{e})
		if err != nil && (retryable(err) || ctx.Err() != nil) {
			for j := i; j < len(evs); j++ {
				fails[j] = err
			}
			break
		}
		fails[i] = err
		if err == nil {
			seqs[i] = one[0]
		}
	}
	return seqs, fails
}

// done is the Submit callback of the async event e: e goes to the spool if
// the ferry closed before its call (ErrClosed), to the dead-letter file if
// its call panicked. A failed call answers async events with no error: it
// carries them (see call).
func (s *Service) done(e event) func(stored, error) {
	return func(_ stored, err error) {
		switch {
		case err == nil:
		case errors.Is(err, ferry.ErrClosed):
			s.mu.Lock()
			s.spool = append(s.spool, e)
			s.mu.Unlock()
		default:
			s.deadLetter([]event{e}, err)
		}
	}
}

// poke makes a call for tenant, so that the events carried from its failed
// call are written even if no new event comes. It tries again later if the
// room is full; after Close it does nothing, as Shutdown spools the carried.
func (s *Service) poke(tenant string) {
	if s.f == nil {
		return
	}
	err := s.f.Submit(context.Background(), event{Tenant: tenant, drain: true}, nil)
	if errors.Is(err, ferry.ErrRejected) {
		s.carry.schedule(tenant)
	}
}

func (s *Service) deadLetter(evs []event, err error) {
	s.cfg.Logf("ingest: %d accepted events failed for good, to %s: %v", len(evs), s.cfg.Spool+".dead", err)
	s.dead.Add(uint64(len(evs)))
	if werr := appendEvents(s.cfg.Spool+".dead", evs); werr != nil {
		s.cfg.Logf("ingest: dead letters lost: %v", werr)
	}
}

// Shutdown stops the service, as on SIGTERM: the HTTP server first (no new
// request; those in flight, Do's included, finish), then the ferry, which runs
// what waits for at most cfg.Drain, then Close. The async events then still
// unstored (answered ErrClosed, or carried, though each paused tenant gets a
// call in the drain) are written to the spool file,
// for the next Start. It returns the HTTP server's error if ctx ended first
// (then the connections are closed), and the spool's.
func (s *Service) Shutdown(ctx context.Context) error {
	var errs []error
	if err := s.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("http: %w", err))
		s.srv.Close()
	}
	if err := <-s.serve; err != http.ErrServerClosed {
		errs = append(errs, fmt.Errorf("http: %w", err))
	}
	if s.f != nil {
		for _, t := range s.carry.tenants() { // their calls run in the drain
			s.poke(t)
		}
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Drain)
		if err := s.f.Shutdown(dctx); err != nil {
			s.cfg.Logf("ingest: the ferry did not drain in %v: closing it", s.cfg.Drain)
		}
		cancel()
		s.f.Close() // every done has run, and no call is in flight
	}
	s.mu.Lock()
	evs := append(s.spool, s.carry.stop()...)
	s.spool = nil
	s.mu.Unlock()
	if len(evs) > 0 {
		slices.SortFunc(evs, func(a, b event) int { return cmp.Compare(a.accepted, b.accepted) })
		if err := writeSpool(s.cfg.Spool, evs); err != nil {
			errs = append(errs, err)
		} else {
			s.spooled.Add(uint64(len(evs)))
			s.cfg.Logf("ingest: %d accepted events spooled to %s", len(evs), s.cfg.Spool)
		}
	}
	s.st.pool.Close()
	return errors.Join(errs...)
}

// close releases what Start made, when it fails after the replay.
func (s *Service) close() {
	if s.f != nil {
		s.f.Close()
	}
	s.carry.stop()
	s.st.pool.Close()
}

// replay stores the events of the spool file, each tenant's in the order
// they were accepted, and removes the file.
func (s *Service) replay(ctx context.Context) error {
	evs, err := readSpool(s.cfg.Spool)
	if err != nil || len(evs) == 0 {
		return err
	}
	byTenant := map[string][]event{}
	var tenants []string
	for _, e := range evs {
		if byTenant[e.Tenant] == nil {
			tenants = append(tenants, e.Tenant)
		}
		byTenant[e.Tenant] = append(byTenant[e.Tenant], e)
	}
	for _, t := range tenants {
		for chunk := range slices.Chunk(byTenant[t], 1000) {
			wctx, cancel := context.WithTimeout(ctx, 4*s.cfg.CallTimeout)
			_, err := s.st.write(wctx, t, chunk)
			cancel()
			if err != nil {
				return fmt.Errorf("replaying %s: %w", s.cfg.Spool, err)
			}
		}
	}
	s.replayed.Add(uint64(len(evs)))
	s.cfg.Logf("ingest: %d spooled events replayed from %s", len(evs), s.cfg.Spool)
	return removeSpool(s.cfg.Spool)
}

// register adds the service's own series to its registry.
func (s *Service) register() {
	c := s.st.count
	for _, m := range []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"commits_total", "Statements that committed a batch.", &c.commits},
		{"events_stored_total", "Events stored (not counting those found stored already).", &c.stored},
		{"retries_total", "Tries of a batch after a transient error.", &c.retries},
		{"commit_checks_total", "Checks whether a try whose connection failed committed.", &c.checks},
		{"commit_checks_committed_total", "Checks that found it did.", &c.checked},
		{"spooled_total", "Accepted events written to the spool at shutdown.", &s.spooled},
		{"replayed_total", "Spooled events stored at start.", &s.replayed},
		{"dead_letters_total", "Accepted events that failed for good.", &s.dead},
	} {
		s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ingest", Name: m.name, Help: m.help},
			func() float64 { return float64(m.v.Load()) }))
	}
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ingest", Name: "paused_tenants",
		Help: "Tenants whose accepted events wait to be stored again after a failed call."},
		func() float64 { return float64(s.carry.count()) }))
}
