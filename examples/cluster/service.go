package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferrygo/ferry"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config is what the node's flags set. A zero field takes its value in
// defaults, but for Name (zero: the address it listens on), DSN and Etcd
// (required) and Logf (nil: log.Printf). Every node of a cluster must have
// the same Prefix, Schema and Partitions.
type Config struct {
	Name        string        // the node's name in etcd, unique in the cluster
	DSN         string        // PostgreSQL
	Schema      string        // of the tables, created if missing
	Etcd        []string      // etcd's endpoints
	Prefix      string        // of the cluster's keys in etcd
	Addr        string        // to listen on, and advertised to the other nodes
	Partitions  int           // the tenants' partitions, claimed by the nodes
	TTL         time.Duration // the lease's, in whole seconds: how long a dead node's partitions wait
	MaxBatch    int           // ferry's MaxBatchSize
	Delay       time.Duration // ferry's MaxBatchDelay
	Workers     int           // ferry's MaxInFlightBatches; the pool has two connections more
	MaxQueued   int           // ferry's MaxQueued
	CallTimeout time.Duration // ferry's CallTimeout (each try's)
	Request     time.Duration // how long a 201 may take, waiting and forwarding included
	Drain       time.Duration // Shutdown's budget for the ferry to run what waits, before Close
	Logf        func(format string, args ...any)
}

// defaults are the flags' defaults, and those of Config's zero fields.
var defaults = Config{
	Schema: "cluster", Prefix: "/ferry-cluster/", Addr: "127.0.0.1:8080", Partitions: 64, TTL: 3 * time.Second,
	MaxBatch: 256, Delay: time.Millisecond, Workers: 4, MaxQueued: 8192,
	CallTimeout: 2 * time.Second, Request: 5 * time.Second, Drain: 5 * time.Second,
}

func (c Config) withDefaults() Config {
	d := defaults
	c.Schema, c.Prefix, c.Addr = cmp.Or(c.Schema, d.Schema), cmp.Or(c.Prefix, d.Prefix), cmp.Or(c.Addr, d.Addr)
	c.Partitions, c.TTL = cmp.Or(c.Partitions, d.Partitions), cmp.Or(c.TTL, d.TTL)
	c.MaxBatch, c.Delay, c.Workers, c.MaxQueued = cmp.Or(c.MaxBatch, d.MaxBatch), cmp.Or(c.Delay, d.Delay), cmp.Or(c.Workers, d.Workers), cmp.Or(c.MaxQueued, d.MaxQueued)
	c.CallTimeout, c.Request, c.Drain = cmp.Or(c.CallTimeout, d.CallTimeout), cmp.Or(c.Request, d.Request), cmp.Or(c.Drain, d.Drain)
	if c.Logf == nil {
		c.Logf = log.Printf
	}
	return c
}

// event is one event, as posted, with the partition and the claim token
// under which its node took it.
type event struct {
	Tenant  string          `json:"tenant"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload,omitempty"`

	part  int
	token int64
}

// reply is a 201's body.
type reply struct {
	Tenant string `json:"tenant"`
	ID     string `json:"id"`
	Seq    int64  `json:"seq"`
	Node   string `json:"node"`  // that stored it
	Token  int64  `json:"token"` // of the claim it was stored under
}

// counters are the node's totals, for GET /stats and the line it prints at
// exit.
type counters struct {
	requests, failed, forwarded, forwardFailed, notServed atomic.Uint64
	batches, events, fenced, fencedEvents, retries        atomic.Uint64
	claims, releases, sessionsLost                        atomic.Uint64
}

// Stats is a snapshot of a node's counters, as GET /stats and the line
// "stats" at exit give them.
type Stats struct {
	Node          string `json:"node"`
	Requests      uint64 `json:"requests"`       // POST /events taken
	Failed        uint64 `json:"failed"`         // of those, answered 429 or 5xx by this node (not forwarded answers)
	Forwarded     uint64 `json:"forwarded"`      // sent on to the partition's owner
	ForwardFailed uint64 `json:"forward_failed"` // of those, without an answer (502)
	NotServed     uint64 `json:"not_served"`     // 503: no node served the partition here
	Batches       uint64 `json:"batches"`        // committed
	Events        uint64 `json:"events"`         // in committed batches
	Fenced        uint64 `json:"fenced"`         // batch tries refused by the fence
	FencedEvents  uint64 `json:"fenced_events"`  // events in them
	Retries       uint64 `json:"retries"`        // of batches after a transient error
	Claims        uint64 `json:"claims"`         // partitions claimed
	Releases      uint64 `json:"releases"`       // partitions released to another node
	SessionsLost  uint64 `json:"sessions_lost"`  // leases lost (expired while paused, etcd unreachable)
	Served        int    `json:"served"`         // partitions served now
	Inflight      int    `json:"inflight"`       // requests taken under a claim, not answered yet
}

// Service is one node: HTTP handlers in front of a ferry whose Call writes
// each tenant's batch under the claim of its partition, and the claims. Its
// methods are safe for concurrent use.
type Service struct {
	cfg    Config
	st     *store
	etcd   *clientv3.Client
	claims *claims
	f      *ferry.Ferry[string, event, int64]
	srv    *http.Server
	ln     net.Listener
	serve  chan error
	client *http.Client // to forward requests
	count  counters
}

// Start listens on cfg.Addr, connects to PostgreSQL (creating the tables if
// missing) and to etcd, and starts claiming the node's share of the
// partitions in the background. Until it serves a partition, requests of its
// tenants are forwarded to their owner, or answered 503. It blocks while it
// connects to PostgreSQL, not for etcd. It returns an error if cfg is
// invalid, the address is taken or PostgreSQL fails.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	switch {
	case cfg.DSN == "":
		return nil, errors.New("no DSN")
	case len(cfg.Etcd) == 0:
		return nil, errors.New("no etcd endpoint")
	case cfg.TTL < time.Second || cfg.TTL%time.Second != 0:
		return nil, fmt.Errorf("TTL %v: want whole seconds", cfg.TTL)
	}
	s := &Service{cfg: cfg, serve: make(chan error, 1)}
	var err error
	if s.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return nil, err
	}
	addr := s.ln.Addr().String()
	if s.cfg.Name == "" {
		s.cfg.Name = addr
	}
	cleanup := func() {
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.st != nil {
			s.st.pool.Close()
		}
		s.ln.Close()
	}
	if s.st, err = openStore(ctx, cfg.DSN, cfg.Schema, s.cfg.Name, cfg.Partitions, cfg.Workers+2, cfg.CallTimeout+time.Second); err != nil {
		cleanup()
		return nil, err
	}
	s.etcd, err = clientv3.New(clientv3.Config{Endpoints: cfg.Etcd, DialTimeout: 5 * time.Second, Context: context.Background()})
	if err != nil {
		cleanup()
		return nil, err
	}
	s.f, err = ferry.New(s.write, ferry.Config[string, event]{
		Key:                func(e event) string { return e.Tenant },
		MaxBatchSize:       cfg.MaxBatch,
		MaxBatchDelay:      cfg.Delay,
		MaxInFlightBatches: cfg.Workers,
		MaxQueued:          cfg.MaxQueued,
		CallTimeout:        cfg.CallTimeout,
		Retry: func(_ string, attempt int, err error) (time.Duration, bool) {
			d, ok := retry(attempt, err)
			if ok {
				s.count.retries.Add(1)
			}
			return d, ok
		},
	})
	if err != nil {
		cleanup()
		return nil, err
	}
	s.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	s.claims = newClaims(s.etcd, s.cfg, addr, s.st.fence, &s.count)
	go s.claims.run()
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { s.serve <- s.srv.Serve(s.ln) }()
	return s, nil
}

// Addr is the address the node listens on, and advertises.
func (s *Service) Addr() string { return s.ln.Addr().String() }

// Name is the node's name in etcd.
func (s *Service) Name() string { return s.cfg.Name }

// Handler serves POST /events and GET /stats (see handleEvent).
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /events", s.handleEvent)
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, s.Stats()) })
	return mux
}

// forwardedBy names, in a forwarded request, the node that forwarded it: the
// owner answers it or 503, and never forwards it again.
const forwardedBy = "Ferry-Forwarded-By"

// handleEvent stores one event and answers 201 once it is committed, if this
// node serves the tenant's partition. Else it forwards the request to the
// node that does, or answers 503 if none does now: its owner died and its
// lease has not ended yet, or it is changing hands. A client posts the same
// event again after any answer but 201 and 400: it is stored once.
func (s *Service) handleEvent(w http.ResponseWriter, r *http.Request) {
	s.count.requests.Add(1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var e event
	if err := json.Unmarshal(body, &e); err != nil {
		http.Error(w, "bad body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := check(e); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e.part = partition(e.Tenant, s.cfg.Partitions)
	token, addr, ok := s.claims.enter(e.part)
	switch {
	case ok:
		defer s.claims.leave(e.part)
	case addr != "" && r.Header.Get(forwardedBy) == "":
		s.forward(w, r, addr, body)
		return
	default:
		s.count.notServed.Add(1)
		s.count.failed.Add(1)
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("partition %d is not served here now", e.part), http.StatusServiceUnavailable)
		return
	}
	e.token = token
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Request)
	defer cancel()
	seq, err := s.f.Do(ctx, e)
	if err != nil {
		s.count.failed.Add(1)
		code := status(err)
		if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, err.Error(), code)
		return
	}
	answer(w, http.StatusCreated, reply{Tenant: e.Tenant, ID: e.ID, Seq: seq, Node: s.cfg.Name, Token: token})
}

// check refuses an event without a tenant or an id (the id makes a retry
// safe), with one over 128 bytes, or with a NUL, which PostgreSQL's text
// refuses.
func check(e event) error {
	switch {
	case e.Tenant == "" || e.ID == "":
		return errors.New("an event needs a tenant and an id")
	case len(e.Tenant) > 128 || len(e.ID) > 128:
		return errors.New("tenant or id over 128 bytes")
	case strings.ContainsRune(e.Tenant, 0) || strings.ContainsRune(e.ID, 0) || bytes.Contains(e.Payload, []byte(`\u0000`)):
		return errors.New("a NUL character")
	}
	return nil
}

// forward posts body to the node at addr, which serves the partition, and
// copies its answer; 502 if none came.
func (s *Service) forward(w http.ResponseWriter, r *http.Request, addr string, body []byte) {
	s.count.forwarded.Add(1)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.Request)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/events", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(forwardedBy, s.cfg.Name)
	resp, err := s.client.Do(req)
	if err != nil {
		s.count.forwardFailed.Add(1)
		s.count.failed.Add(1)
		http.Error(w, "forwarding to the partition's owner: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Retry-After"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// status is the HTTP status of a failed write: 503 a fenced one (the
// partition changed hands: post again) or a closing node, 429 a full room,
// 504 a call or request past its time, else 500.
func status(err error) int {
	switch {
	case errors.Is(err, errFenced), errors.Is(err, ferry.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, ferry.ErrRejected):
		return http.StatusTooManyRequests
	case errors.Is(err, ferry.ErrCallTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

func answer(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// write is the ferry's Call: it stores a tenant's batch in one transaction
// under the claim its events were taken under. That is the oldest, if the
// node lost and claimed the partition again meanwhile. The fence refuses it
// if a newer claim set it.
func (s *Service) write(ctx context.Context, tenant string, evs []event) ([]int64, error) {
	token := evs[0].token
	for _, e := range evs[1:] {
		token = min(token, e.token)
	}
	seqs, err := s.st.write(ctx, evs[0].part, token, tenant, evs)
	switch {
	case errors.Is(err, errFenced):
		s.count.fenced.Add(1)
		s.count.fencedEvents.Add(uint64(len(evs)))
	case err == nil:
		s.count.batches.Add(1)
		s.count.events.Add(uint64(len(evs)))
	}
	return seqs, err
}

// Stats returns the node's counters; it blocks only for the claims' lock.
func (s *Service) Stats() Stats {
	c := &s.count
	st := Stats{
		Node: s.cfg.Name, Requests: c.requests.Load(), Failed: c.failed.Load(), Forwarded: c.forwarded.Load(), ForwardFailed: c.forwardFailed.Load(),
		NotServed: c.notServed.Load(), Batches: c.batches.Load(), Events: c.events.Load(), Fenced: c.fenced.Load(),
		FencedEvents: c.fencedEvents.Load(), Retries: c.retries.Load(), Claims: c.claims.Load(), Releases: c.releases.Load(),
		SessionsLost: c.sessionsLost.Load(),
	}
	st.Served, st.Inflight = s.claims.load()
	return st
}

// Shutdown stops the node, as on SIGTERM. It claims no more partitions,
// stops the HTTP server (no new request; those in flight finish), and runs
// what waits in the ferry, for cfg.Drain at most. Only then does it revoke
// its lease, which releases its partitions at once: their next owner starts
// after the node's last batch committed. It blocks until then, and returns
// the HTTP server's error if ctx ended first.
func (s *Service) Shutdown(ctx context.Context) error {
	var errs []error
	s.claims.quiet()
	if err := s.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("http: %w", err))
		s.srv.Close()
	}
	if err := <-s.serve; err != http.ErrServerClosed {
		errs = append(errs, fmt.Errorf("http: %w", err))
	}
	dctx, cancel := context.WithTimeout(ctx, s.cfg.Drain)
	if err := s.f.Shutdown(dctx); err != nil {
		s.cfg.Logf("cluster: %s: the ferry did not drain in %v: closing it", s.cfg.Name, s.cfg.Drain)
	}
	cancel()
	s.f.Close()
	s.claims.close()
	s.etcd.Close()
	s.st.pool.Close()
	s.client.CloseIdleConnections()
	return errors.Join(errs...)
}
