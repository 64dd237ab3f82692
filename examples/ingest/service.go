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
	"github.com/ferrygo/ferry/ferryotel"
	"github.com/ferrygo/ferry/ferryprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
)

// Config is what the service's flags set. A zero field takes its value in
// defaults, but for Delay and Request (0: none), Unbatched, DSN, which is
// required, and Logf (nil: log.Printf). Its method runs in Start, on its
// caller's goroutine.
type Config struct {
	DSN         string
	Schema      string        // of the tables, created if missing
	Addr        string        // to listen on
	Spool       string        // the file of accepted events left at shutdown, replayed at start; Spool+".dead" takes those PostgreSQL refused
	MaxBatch    int           // ferry's MaxBatchSize
	Delay       time.Duration // ferry's MaxBatchDelay
	Workers     int           // ferry's MaxInFlightBatches; the pool has two connections more
	MaxQueued   int           // ferry's MaxQueued
	CallTimeout time.Duration // ferry's CallTimeout (each try's), and each write outside the ferry's
	Request     time.Duration // how long a 201 may take, waiting included
	Drain       time.Duration // Shutdown's budget for the ferry to run what waits, before Close
	Unbatched   bool          // one INSERT per event, from the handler, without a ferry
	Logf        func(format string, args ...any)

	// Tracer, if set, traces each request and each INSERT batch, the batch's
	// span linked to its requests' (see traced). nil: no tracing.
	Tracer trace.TracerProvider
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

// event is one event, as posted, with the order in which this process
// accepted it.
type event struct {
	Tenant  string          `json:"tenant"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload,omitempty"`

	accepted uint64
}

// stored is the Call's answer for an event: its sequence number, or why
// PostgreSQL refused it for good (see Service.write).
type stored struct {
	Seq     int64
	Refused error
}

// Service is the ingestion service: HTTP handlers in front of a ferry whose
// Call writes each tenant's batch in one statement, retried by the ferry
// (Retry) and pausing the tenant, its events held in order, when it fails for
// good (PauseOnError, HoldPaused; see resumes). Its methods are safe for
// concurrent use: Handler's run on net/http's goroutines; write (the Call),
// done's callbacks, Retry and OnPause on the ferry's goroutines.
type Service struct {
	cfg     Config
	st      *store
	f       *ferry.Ferry[string, event, stored] // nil when unbatched
	resumes *resumes
	reg     *prometheus.Registry
	srv     *http.Server
	ln      net.Listener
	serve   chan error // Serve's error, once it returns

	accepted                                          atomic.Uint64 // the last number given to an accepted event
	retries, pauses, resumed, spooled, replayed, dead atomic.Uint64

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
	s.resumes = newResumes(func(tenant string) {
		s.resumed.Add(1)
		s.f.Resume(tenant)
	})
	if err := s.replay(ctx); err != nil {
		st.pool.Close()
		return nil, err
	}
	if !cfg.Unbatched {
		if s.f, err = s.newFerry(s.write); err != nil {
			st.pool.Close()
			return nil, err
		}
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

// newFerry returns the service's ferry over call (s.write, but in tests),
// its metrics registered; with cfg.Tracer, call runs in a span linked to the
// spans of its events' requests (see traced).
func (s *Service) newFerry(call ferry.Call[string, event, stored]) (*ferry.Ferry[string, event, stored], error) {
	cfg := s.cfg
	if cfg.Tracer != nil {
		call = ferryotel.Wrap(call, ferryotel.Opts[string]{TracerProvider: cfg.Tracer, Name: "INSERT events"})
	}
	c := ferryprom.NewCollector("ingest", nil, ferryprom.Opts{})
	f, err := ferry.New(call, ferry.Config[string, event]{
		Key:                func(e event) string { return e.Tenant },
		MaxBatchSize:       cfg.MaxBatch,
		MaxBatchDelay:      cfg.Delay,
		MaxInFlightBatches: cfg.Workers,
		MaxQueued:          cfg.MaxQueued,
		CallTimeout:        cfg.CallTimeout,
		OnBatch:            ferryprom.OnBatch[string](c),
		Retry:              s.retry,
		PauseOnError:       true,
		HoldPaused:         true,
		OnPause: func(tenant string, _ error) {
			s.pauses.Add(1)
			s.resumes.pause(tenant)
		},
		KeepContexts: cfg.Tracer != nil, // for the links
	})
	if err != nil {
		return nil, err
	}
	s.reg.MustRegister(c.WithStats(f.Stats))
	return f, nil
}

// Addr is the address the service listens on.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Handler serves POST /events, /events/async and /events/bulk, and GET /metrics.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /events", s.traced("POST /events", s.handleDo))
	mux.HandleFunc("POST /events/async", s.traced("POST /events/async", s.handleAsync))
	mux.HandleFunc("POST /events/bulk", s.traced("POST /events/bulk", s.handleBulk))
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
	switch {
	case s.f == nil:
		out.Seq, err = s.writeOne(ctx, e)
	case s.resumes.held(e.Tenant): // 503 now, rather than wait for the resume
		err = fmt.Errorf("%w: tenant %s", ferry.ErrPaused, e.Tenant)
	default:
		out, err = s.f.Do(ctx, e)
	}
	if err == nil {
		err = out.Refused
	}
	if err != nil {
		s.fail(w, e.Tenant, err)
		return
	}
	answer(w, http.StatusCreated, reply{Tenant: e.Tenant, ID: e.ID, Seq: out.Seq})
}

// handleAsync answers 202 once the event is admitted: it is stored in its
// tenant's order, held by the ferry if its tenant is paused (see resumes),
// and spooled if the service shuts down first.
func (s *Service) handleAsync(w http.ResponseWriter, r *http.Request) {
	var e event
	if !decode(w, r, &e) || !s.admit(w, &e) {
		return
	}
	var err error
	if s.f == nil {
		_, err = s.writeOne(r.Context(), e)
	} else {
		// r's context bounds the admission alone: an accepted event is
		// the ferry's when the handler returns.
		err = s.f.Submit(r.Context(), e, s.done(e))
	}
	if err != nil {
		s.fail(w, e.Tenant, err)
		return
	}
	answer(w, http.StatusAccepted, reply{Tenant: e.Tenant, ID: e.ID})
}

// maxBulk is the most events a bulk request may hold.
const maxBulk = 1000

// handleBulk stores up to maxBulk events of any tenants with one DoMany, and
// answers 201 once all are committed, else the worst status of the events
// that failed, each event's reply saying how it fared. The room admits all
// of them or none (429); the events of a paused tenant wait for its resume
// (held by the ferry), for the request's time at most.
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
		s.fail(w, "", err)
		return
	}
	code := http.StatusCreated
	replies := make([]reply, len(evs))
	for i, e := range evs {
		replies[i] = reply{Tenant: e.Tenant, ID: e.ID}
		var err error
		if errs != nil && errs[i] != nil { // then outs may be short
			err = errs[i]
		} else {
			err = outs[i].Refused
		}
		if err != nil {
			replies[i].Error = err.Error()
			code = max(code, status(err))
			continue
		}
		replies[i].Seq = outs[i].Seq
	}
	answer(w, code, replies)
}

// requestContext is r's context, ended after cfg.Request: a request waits
// that long at most, in the room and through a call's retries. Its end drops
// its events that no call has taken, and those a call would try again.
func (s *Service) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	if s.cfg.Request <= 0 {
		return r.Context(), func() {}
	}
	return context.WithTimeout(r.Context(), s.cfg.Request)
}

// admit checks e and numbers it, or answers 400.
func (s *Service) admit(w http.ResponseWriter, e *event) bool {
	if err := check(e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
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

// status is the HTTP status of a failed write: 429 a full room, 503 a paused
// tenant (see resumes), 504 a call or a request past its time, 422 an event
// PostgreSQL refused, else 500 (the ferry closed at shutdown, a failed
// statement, a panic).
func status(err error) int {
	switch {
	case errors.Is(err, ferry.ErrRejected):
		return http.StatusTooManyRequests
	case errors.Is(err, ferry.ErrPaused):
		return http.StatusServiceUnavailable
	case errors.Is(err, ferry.ErrCallTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case refused(err):
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}

// fail answers err, an error of tenant's event (or events, if "").
func (s *Service) fail(w http.ResponseWriter, tenant string, err error) {
	code := status(err)
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, err.Error(), code)
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

// write is the ferry's Call: it stores a tenant's batch in one statement
// (store.write). If PostgreSQL refuses the statement for the data it holds,
// it stores the events one by one, in order, so that a bad event is refused
// alone: that is its answer (stored.Refused; a Do gets 422, an async event
// goes to the dead letters), not a failure. The first event that fails
// otherwise ends the pass: it and those after it fail with its error, so
// that none is stored before an earlier one. The ferry retries the events
// that failed (retry); once they fail for good, it pauses the tenant and
// holds them.
func (s *Service) write(ctx context.Context, tenant string, evs []event) ([]stored, error) {
	outs := make([]stored, len(evs))
	seqs, err := s.st.write(ctx, tenant, evs)
	switch {
	case err == nil:
		for i := range outs {
			outs[i].Seq = seqs[i]
		}
		s.resumes.committed(tenant)
		return outs, nil
	case !refused(err):
		return nil, err
	case len(evs) == 1:
		outs[0].Refused = err
		return outs, nil
	}
	for i := range evs {
		seqs, err := s.st.write(ctx, tenant, evs[i:i+1])
		switch {
		case err == nil:
			outs[i].Seq = seqs[0]
		case refused(err):
			outs[i].Refused = err
		default:
			errs := make(ferry.Errors, len(evs))
			for j := i; j < len(evs); j++ {
				errs[j] = err
			}
			return outs, errs
		}
	}
	return outs, nil
}

// retry is the ferry's Retry: the policy of retry, counted. A call it gives
// up on has failed for good, and the ferry pauses its tenant (OnPause).
func (s *Service) retry(_ string, attempt int, err error) (time.Duration, bool) {
	d, ok := retry(attempt, err)
	if ok {
		s.retries.Add(1)
	}
	return d, ok
}

// done is the Submit callback of the async event e, on the ferry's
// goroutines, in the order of the tenant's events: e goes to the dead letters
// if PostgreSQL refused it, and to the spool if it failed: ErrClosed, as the
// ferry closed first, is the only failure of a Submit that holds its paused
// tenant's events.
func (s *Service) done(e event) func(stored, error) {
	return func(out stored, err error) {
		switch {
		case err == nil && out.Refused != nil:
			s.deadLetter([]event{e}, out.Refused)
		case err != nil:
			s.mu.Lock()
			s.spool = append(s.spool, e)
			s.mu.Unlock()
		}
	}
}

// rewrite stores a tenant's spooled events, in order, for the spool's
// replay: in statements of MaxBatch events at most, each within CallTimeout.
// It returns how many it stored (or sent to the dead letters, refused)
// before the first that failed, and that error.
func (s *Service) rewrite(ctx context.Context, tenant string, evs []event) (int, error) {
	n := 0
	for chunk := range slices.Chunk(evs, s.cfg.MaxBatch) {
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		outs, err := s.write(cctx, tenant, chunk)
		cancel()
		var errs ferry.Errors
		ok := len(chunk)
		switch {
		case errors.As(err, &errs):
			ok = slices.IndexFunc(errs, func(err error) bool { return err != nil })
		case err != nil:
			ok = 0
		}
		for i := range ok {
			if outs[i].Refused != nil {
				s.deadLetter(chunk[i:i+1], outs[i].Refused)
			}
		}
		if n += ok; err != nil {
			return n, err
		}
	}
	return n, nil
}

func (s *Service) deadLetter(evs []event, err error) {
	s.cfg.Logf("ingest: %d accepted events refused, to %s: %v", len(evs), s.cfg.Spool+".dead", err)
	s.dead.Add(uint64(len(evs)))
	if werr := appendEvents(s.cfg.Spool+".dead", evs); werr != nil {
		s.cfg.Logf("ingest: dead letters lost: %v", werr)
	}
}

// Shutdown stops the service, as on SIGTERM: the HTTP server first (no new
// request; those in flight, Do's included, finish), then the ferry, which runs
// what waits for at most cfg.Drain, then Close, then the resumes. The async
// events then still unstored (answered ErrClosed, held for a paused tenant's
// resume among them) are written to the spool file, for the next Start. It
// returns the HTTP server's error if ctx ended first (then the connections
// are closed), and the spool's.
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
		dctx, cancel := context.WithTimeout(ctx, s.cfg.Drain)
		if err := s.f.Shutdown(dctx); err != nil {
			s.cfg.Logf("ingest: the ferry did not drain in %v: closing it", s.cfg.Drain)
		}
		cancel()
		s.f.Close() // every done has run, and no call is in flight
	}
	s.resumes.stop()
	s.mu.Lock()
	evs := s.spool
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
	s.resumes.stop()
	s.st.pool.Close()
}

// replay stores the events of the spool file, each tenant's in the order
// they were accepted (as a resume does: see rewrite), and removes the file.
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
		if _, err := s.rewrite(ctx, t, byTenant[t]); err != nil {
			return fmt.Errorf("replaying %s: %w", s.cfg.Spool, err)
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
		{"retries_total", "Tries of a call after a transient error (the ferry's Retry).", &s.retries},
		{"commit_checks_total", "Checks whether a try whose connection failed committed.", &c.checks},
		{"commit_checks_committed_total", "Checks that found it did.", &c.checked},
		{"pauses_total", "Tenants paused after a call failed for good, their events held until the resume.", &s.pauses},
		{"resumes_total", "Paused tenants resumed.", &s.resumed},
		{"spooled_total", "Accepted events written to the spool at shutdown.", &s.spooled},
		{"replayed_total", "Spooled events stored at start.", &s.replayed},
		{"dead_letters_total", "Accepted events that PostgreSQL refused.", &s.dead},
	} {
		s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "ingest", Name: m.name, Help: m.help},
			func() float64 { return float64(m.v.Load()) }))
	}
	if s.f != nil {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "ingest", Name: "paused_tenants",
			Help: "Tenants paused after a call failed for good (503 until they resume)."},
			func() float64 { return float64(s.f.Stats().Paused) }))
	}
}
