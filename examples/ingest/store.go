package main

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

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
// and run on their caller's goroutine: a ferry's worker, or a handler when
// unbatched.
type store struct {
	pool  *pgxpool.Pool
	count *counters
	// lose, if not nil, is asked after each try that committed; true makes
	// the try fail as if its connection broke before the answer came. For
	// tests.
	lose func() bool
}

// errLost is the error of a try that lose made fail.
var errLost = errors.New("ingest: the answer was lost (a test's fault)")

// counters are the store's totals, read by the metrics at a scrape.
type counters struct {
	commits, stored, retries, checks, checked atomic.Uint64
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
	return &store{pool: pool, count: new(counters)}, nil
}

// write stores evs, all of tenant, in one statement, and returns their
// sequence numbers, in order. It tries again while retry allows, and before
// each new try checks whether the failed one committed after all (see
// committed), so a batch is never written twice and never given numbers
// twice. It returns the last try's error when retry refuses or ctx ends.
func (s *store) write(ctx context.Context, tenant string, evs []event) ([]int64, error) {
	batch := newBatchID()
	for attempt := 1; ; attempt++ {
		seqs, err := s.insert(ctx, tenant, batch, evs)
		if err == nil {
			return seqs, nil
		}
		if ambiguous(err) {
			if seqs, ok := s.committed(ctx, tenant, batch, evs); ok {
				return seqs, nil
			}
		}
		backoff, again := retry(tenant, attempt, err)
		if !again || ctx.Err() != nil {
			return nil, err
		}
		s.count.retries.Add(1)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
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
	var missing []string
	for _, e := range evs {
		if _, ok := got[e.ID]; !ok {
			missing = append(missing, e.ID)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT id, seq FROM events WHERE tenant = $1 AND id = ANY($2)`, tenant, missing)
	if err != nil {
		return nil, err
	}
	var id string
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error { got[id] = seq; return nil }); err != nil {
		return nil, err
	}
	for _, id := range missing {
		if _, ok := got[id]; !ok {
			return nil, fmt.Errorf("event %q of tenant %q: neither stored nor found", id, tenant)
		}
	}
	return order(evs, got), nil
}

func order(evs []event, got map[string]int64) []int64 {
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = got[e.ID]
	}
	return seqs
}

// committed tells whether the try of batch that failed committed all the
// same: the connection broke after the statement reached the server, so its
// answer was lost. The tenant's row names the last batch that wrote it, and
// only one batch of a tenant is written at a time, so it names batch if and
// only if batch committed (another process writing the tenant in between
// makes it say no: the next try then finds the events stored and skips
// them). It has a context of its own, as ctx may be what ended the try.
func (s *store) committed(ctx context.Context, tenant, batch string, evs []event) ([]int64, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.count.checks.Add(1)
	var last string
	if err := s.pool.QueryRow(ctx, `SELECT last_batch FROM tenants WHERE tenant = $1`, tenant).Scan(&last); err != nil || last != batch {
		return nil, false
	}
	s.count.checked.Add(1)
	seqs, err := s.lookup(ctx, tenant, evs, map[string]int64{})
	return seqs, err == nil
}

// ambiguous reports whether a failed statement may have committed: its
// connection failed after sending it. A statement the server answered with an
// error did not commit, nor did one that was never sent.
func ambiguous(err error) bool {
	var pe *pgconn.PgError
	return !errors.As(err, &pe) && !pgconn.SafeToRetry(err)
}

// retry is the policy for a tenant's batch whose attempt-th try failed with
// err: whether it goes again, and after how long. A retryable error goes
// again up to maxAttempts tries, after a backoff that doubles from 10 ms to
// at most 500 ms, with jitter. store.write runs it between its tries, inside
// the Call, so the tries of a batch end with the call's context (CallTimeout
// or close). It reads nothing but its arguments, so that whatever runs the
// tries can call it.
func retry(tenant string, attempt int, err error) (time.Duration, bool) {
	_ = tenant // one policy for all tenants
	if attempt >= maxAttempts || !retryable(err) {
		return 0, false
	}
	d := min(10*time.Millisecond<<(attempt-1), 500*time.Millisecond)
	return d/2 + rand.N(d/2+1), true
}

const maxAttempts = 12

// retryable reports whether err is transient: the connection failed or could
// not be made (the server restarting, a backend terminated), or the server
// refused for a while (a deadlock, a serialization failure, a lock or
// statement timeout, too many connections, out of memory or disk). A
// statement the server rejected for what it is (bad data, a missing table)
// is not, nor is a context's end.
func retryable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
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

// newBatchID is a random batch id: 128 bits, unique in practice.
func newBatchID() string { return crand.Text() }
