package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is the service's tables. A tenant's row holds its last sequence
// number and the id of the batch that set it; an event's (tenant, id) is
// unique, so an event written twice (a client's retry, a replayed spool) is
// stored once.
const schema = `
CREATE TABLE IF NOT EXISTS tenants (
	tenant     text PRIMARY KEY,
	seq        bigint NOT NULL,
	last_batch text NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
	tenant  text NOT NULL,
	seq     bigint NOT NULL,
	id      text NOT NULL,
	payload jsonb,
	batch   text NOT NULL,
	stored  timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (tenant, seq),
	UNIQUE (tenant, id)
);`

// insert writes one tenant's batch in one statement, so one commit: it
// takes the next len(ids) sequence numbers of the tenant (its row lock orders
// the tenant's writers, in this process or another), stamps the tenant's row
// with the batch id, and inserts the events numbered in slice order. Events
// already stored are skipped, and only the new ones come back.
const insert = `
WITH t AS (
	INSERT INTO tenants AS t (tenant, seq, last_batch) VALUES ($1, $2, $3)
	ON CONFLICT (tenant) DO UPDATE SET seq = t.seq + excluded.seq, last_batch = excluded.last_batch
	RETURNING seq
)
INSERT INTO events (tenant, seq, id, payload, batch)
SELECT $1, t.seq - $2 + e.n, e.id, e.payload::jsonb, $3
FROM t, unnest($4::text[], $5::text[]) WITH ORDINALITY AS e(id, payload, n)
ON CONFLICT (tenant, id) DO NOTHING
RETURNING id, seq`

// store writes events to PostgreSQL. Its methods are safe for concurrent use
// and run on their caller's goroutine: a ferry's worker, a tenant's resume,
// the replay at start, or a handler when unbatched.
type store struct {
	pool  *pgxpool.Pool
	count *counters
	// lose, if not nil, is asked after each try that committed; true makes
	// the try fail as if its connection broke before the answer came. For
	// tests.
	lose func() bool

	mu     sync.Mutex
	unsure map[string]string // by tenant, the batch of its last try if that may have committed
}

// errLost is the error of a try that lose made fail.
var errLost = errors.New("ingest: the answer was lost (a test's fault)")

// counters are the store's totals, read by the metrics at a scrape.
type counters struct {
	commits, stored, checks, checked atomic.Uint64
}

// openStore connects to dsn, with the tables in schema (created if missing).
// Each connection is named app in pg_stat_activity and has a statement
// timeout, so that a statement its client gave up on is ended by the server
// too, not left to commit later.
func openStore(ctx context.Context, dsn, schemaName, app string, conns int, timeout time.Duration) (*store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	rt := cfg.ConnConfig.RuntimeParams
	rt["application_name"] = app
	rt["search_path"] = schemaName
	rt["statement_timeout"] = fmt.Sprint(timeout.Milliseconds())
	// A cancelled statement is cancelled on the server too, and its
	// connection kept, rather than the connection cut under it.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schemaName}.Sanitize()+";"+schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating the tables: %w", err)
	}
	return &store{pool: pool, count: new(counters), unsure: map[string]string{}}, nil
}

// write stores evs, all of tenant, in one statement, in one try, and returns
// their sequence numbers, in order. If tenant's last try may have committed
// (its connection failed after the statement was sent), write first checks
// whether it did (see committed): if it did and evs are among its events, as
// when the ferry retries them, their numbers come from the table and no
// statement runs, so no batch is given numbers twice. Events stored already
// are skipped in any case, as an event's (tenant, id) is unique: nothing is
// stored twice.
func (s *store) write(ctx context.Context, tenant string, evs []event) ([]int64, error) {
	s.mu.Lock()
	last, check := s.unsure[tenant]
	s.mu.Unlock()
	if check {
		seqs, ok, err := s.committed(ctx, tenant, last, evs)
		if err != nil {
			return nil, err // still unsure
		}
		s.setUnsure(tenant, "")
		if ok {
			return seqs, nil
		}
	}
	batch := newBatchID()
	seqs, err := s.insert(ctx, tenant, batch, evs)
	if err != nil && ambiguous(err) {
		s.setUnsure(tenant, batch)
	}
	return seqs, err
}

// setUnsure records batch as tenant's try that may have committed, or
// forgets it if batch is "".
func (s *store) setUnsure(tenant, batch string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if batch == "" {
		delete(s.unsure, tenant)
	} else {
		s.unsure[tenant] = batch
	}
}

// insert runs the insert statement once, then looks up the numbers of the
// events that were stored before.
func (s *store) insert(ctx context.Context, tenant, batch string, evs []event) ([]int64, error) {
	ids, payloads := make([]string, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		ids[i], payloads[i] = e.ID, string(e.Payload)
		if len(e.Payload) == 0 {
			payloads[i] = "null"
		}
	}
	rows, err := s.pool.Query(ctx, insert, tenant, len(evs), batch, ids, payloads)
	if err != nil {
		return nil, err
	}
	got := make(map[string]int64, len(evs))
	var id string
	var seq int64
	_, err = pgx.ForEachRow(rows, []any{&id, &seq}, func() error { got[id] = seq; return nil })
	if err != nil {
		return nil, err
	}
	s.count.commits.Add(1)
	s.count.stored.Add(uint64(len(got)))
	if s.lose != nil && s.lose() {
		return nil, errLost
	}
	if len(got) < len(evs) {
		return s.lookup(ctx, tenant, evs, got)
	}
	return order(evs, got), nil
}

// lookup fills in got the numbers of evs stored already, and returns them all in order.
func (s *store) lookup(ctx context.Context, tenant string, evs []event, got map[string]int64) ([]int64, error) {
	missing, err := s.stored(ctx, tenant, evs, got)
	if err != nil {
		return nil, err
	}
	if missing > 0 {
		return nil, fmt.Errorf("%d events of tenant %q neither stored nor found", missing, tenant)
	}
	return order(evs, got), nil
}

// stored fills in got the numbers of those of evs, not in it yet, that are
// stored, and returns how many of evs are in it still not.
func (s *store) stored(ctx context.Context, tenant string, evs []event, got map[string]int64) (int, error) {
	var ids []string
	for _, e := range evs {
		if _, ok := got[e.ID]; !ok {
			ids = append(ids, e.ID)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT id, seq FROM events WHERE tenant = $1 AND id = ANY($2)`, tenant, ids)
	if err != nil {
		return 0, err
	}
	var id string
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error { got[id] = seq; return nil }); err != nil {
		return 0, err
	}
	missing := 0
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			missing++
		}
	}
	return missing, nil
}

func order(evs []event, got map[string]int64) []int64 {
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = got[e.ID]
	}
	return seqs
}

// committed tells whether batch, a try of tenant's whose connection failed
// after the statement was sent, committed all the same, and if so, and evs
// are all stored, returns their numbers (ok). The tenant's row names the last
// batch that wrote it, and a tenant's writes come one at a time (the ferry's
// one call per key, or the tenant's resume while the ferry holds it paused),
// so it names batch if and only if batch committed. (Another process writing
// the tenant in between, or -unbatched, whose writes of a tenant overlap,
// can make it say no where batch committed: the next try then finds the
// events stored and skips them.) An error is the check's own: it could not tell.
func (s *store) committed(ctx context.Context, tenant, batch string, evs []event) (seqs []int64, ok bool, err error) {
	s.count.checks.Add(1)
	var last string
	err = s.pool.QueryRow(ctx, `SELECT last_batch FROM tenants WHERE tenant = $1`, tenant).Scan(&last)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	case last != batch:
		return nil, false, nil
	}
	s.count.checked.Add(1)
	got := map[string]int64{}
	missing, err := s.stored(ctx, tenant, evs, got)
	if err != nil || missing > 0 {
		return nil, false, err // some were not in batch: the statement runs
	}
	return order(evs, got), true, nil
}

// ambiguous reports whether a failed statement may have committed: its
// connection failed after sending it. A statement the server answered with an
// error did not commit, nor did one that was never sent.
func ambiguous(err error) bool {
	var pe *pgconn.PgError
	return !errors.As(err, &pe) && !pgconn.SafeToRetry(err)
}

// retry is the policy of the ferry's Config.Retry (Service adds what it
// counts): whether a tenant's call whose attempt-th try failed with err goes
// again, and after how long. A transient error goes again, up to maxAttempts
// tries, after a backoff that doubles from 10 ms to at most 500 ms, with
// jitter; but a call that used its whole CallTimeout goes again once only: a
// second timeout in a row fails it for good (the tenant is paused) rather
// than hold a worker longer. The ferry runs it on the worker that made the
// call, which holds the tenant until the last try is over.
func retry(attempt int, err error) (time.Duration, bool) {
	if !retryable(err) || attempt >= maxAttempts || attempt >= maxTimeouts && errors.Is(err, ferry.ErrCallTimeout) {
		return 0, false
	}
	d := min(10*time.Millisecond<<(attempt-1), 500*time.Millisecond)
	return d/2 + rand.N(d/2+1), true
}

const (
	maxAttempts = 12 // tries of a call at most
	maxTimeouts = 2  // tries at most of one that used its whole CallTimeout
)

// retryable reports whether err, a call's, is transient: the connection
// failed or could not be made (the server restarting, a backend terminated),
// the server refused for a while (a deadlock, a serialization failure, a
// lock or statement timeout, too many connections, out of memory or disk),
// or the call's CallTimeout ended it (a table locked). A statement the
// server rejected for what it is (a missing table) is not, nor a panic.
func retryable(err error) bool {
	var pe *pgconn.PgError
	var panicked *ferry.PanicError
	switch {
	case errors.Is(err, ferry.ErrCallTimeout):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.As(err, &panicked):
		return false
	case !errors.As(err, &pe):
		return true // the connection's, not the statement's
	}
	switch {
	case strings.HasPrefix(pe.Code, "08"), // connection exception
		strings.HasPrefix(pe.Code, "53"),       // insufficient resources
		strings.HasPrefix(pe.Code, "57P"),      // admin or crash shutdown, cannot connect now
		pe.Code == "40001", pe.Code == "40P01", // serialization failure, deadlock
		pe.Code == "55P03", pe.Code == "57014": // lock not available, query canceled (statement_timeout)
		return true
	}
	return false
}

// refused reports whether PostgreSQL refused a statement for the data it
// holds (class 22, data exception: a number out of range, say): an event
// refused in a statement of its own is refused for good, which is its
// answer, not a failure of its tenant's writes.
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Code, "22")
}

// newBatchID is a random batch id: 128 bits, unique in practice.
func newBatchID() string { return crand.Text() }
