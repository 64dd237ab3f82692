package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is the cluster's tables. parts holds each partition's fence: the
// token of the newest claim that wrote it. writes logs every committed write
// with the token it ran under, a claim's fence (tenant NULL) or a batch, in
// commit order within a partition. tenants and events are as in
// examples/ingest. An event's (tenant, id) is unique, so an event written
// twice (a client's retry, a batch tried again) is stored once.
const schema = `
CREATE TABLE IF NOT EXISTS parts (
	part  int PRIMARY KEY,
	token bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS writes (
	n      bigserial PRIMARY KEY,
	part   int NOT NULL,
	token  bigint NOT NULL,
	node   text NOT NULL,
	tenant text,
	events int NOT NULL,
	at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS tenants (
	tenant text PRIMARY KEY,
	seq    bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
	tenant  text NOT NULL,
	seq     bigint NOT NULL,
	id      text NOT NULL,
	payload jsonb,
	write_n bigint NOT NULL,
	PRIMARY KEY (tenant, seq),
	UNIQUE (tenant, id)
);`

// fenceSQL is a batch's fence check: it reads the partition's fence and
// holds it, shared, to the commit. So a newer claim's fence (an UPDATE)
// waits for the batches that passed the check, and the batches after it see
// the new token. Batches of one partition under one claim run side by side.
const fenceSQL = `SELECT token FROM parts WHERE part = $1 FOR SHARE`

// insertSQL writes one tenant's batch: a row in writes with the batch's
// token, the next numbers of the tenant (its row lock orders the tenant's
// writers), and the events numbered in slice order. Events stored already
// are skipped; only the new ones come back.
const insertSQL = `
WITH w AS (
	INSERT INTO writes (part, token, node, tenant, events) VALUES ($1, $2, $3, $4, cardinality($5::text[]))
	RETURNING n
), t AS (
	INSERT INTO tenants AS t (tenant, seq) VALUES ($4, cardinality($5::text[]))
	ON CONFLICT (tenant) DO UPDATE SET seq = t.seq + excluded.seq
	RETURNING seq
)
INSERT INTO events (tenant, seq, id, payload, write_n)
SELECT $4, t.seq - cardinality($5::text[]) + e.n, e.id, e.payload::jsonb, w.n
FROM w, t, unnest($5::text[], $6::text[]) WITH ORDINALITY AS e(id, payload, n)
ON CONFLICT (tenant, id) DO NOTHING
RETURNING id, seq`

// claimSQL sets a partition's fence to a new claim's token, unless a newer
// claim's is there, and logs it in writes. No row: the claim is stale.
const claimSQL = `
WITH u AS (UPDATE parts SET token = $2 WHERE part = $1 AND token <= $2 RETURNING part)
INSERT INTO writes (part, token, node, events) SELECT part, $2, $3, 0 FROM u
RETURNING n`

// idleInTransaction ends the session of a transaction left open this long
// between statements: a process paused mid-batch (a stop, a long GC, a VM
// frozen) would otherwise hold its partition's fence, and the new owner's
// claim would wait for it.
const idleInTransaction = time.Second

// errFenced is the error of a write whose claim a newer one superseded: the
// partition has another owner, and the write must not commit.
var errFenced = errors.New("cluster: fenced: the partition's claim is no longer this node's")

// store writes events to PostgreSQL under the fence. Its methods are safe for
// concurrent use, and run on their caller's goroutine: a ferry worker, or
// the claims' loop for fence.
type store struct {
	pool *pgxpool.Pool
	node string
}

// openStore connects to dsn, with the tables in schemaName (created if
// missing, under an advisory lock, as several nodes start at once) and a
// row in parts for each of n partitions.
func openStore(ctx context.Context, dsn, schemaName, node string, n, conns int, timeout time.Duration) (*store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	rt := cfg.ConnConfig.RuntimeParams
	rt["application_name"] = "cluster"
	rt["search_path"] = schemaName
	rt["statement_timeout"] = fmt.Sprint(timeout.Milliseconds())
	rt["idle_in_transaction_session_timeout"] = fmt.Sprint(idleInTransaction.Milliseconds())
	// A cancelled statement is cancelled on the server too, and its
	// connection kept.
	cfg.ConnConfig.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: c, DeadlineDelay: time.Second}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('ferry cluster schema'))`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schemaName}.Sanitize()+";"+schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO parts SELECT g, 0 FROM generate_series(0, $1::int - 1) AS g ON CONFLICT DO NOTHING`, n)
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating the tables: %w", err)
	}
	return &store{pool: pool, node: node}, nil
}

// fence sets partition part's fence to token, the token of this node's new
// claim, before the node serves it: from then on a write under an older
// claim is refused. It returns errFenced if a newer claim's token is there.
func (s *store) fence(ctx context.Context, part int, token int64) error {
	var n int64
	err := s.pool.QueryRow(ctx, claimSQL, part, token, s.node).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return errFenced
	}
	return err
}

// write stores evs, all of tenant in partition part, in one transaction
// under the claim token, and returns their sequence numbers, in order. The
// transaction first checks the fence: if a newer claim's token is there, it
// commits nothing and returns errFenced. Events stored already are not
// stored again; their numbers come from the table.
func (s *store) write(ctx context.Context, part int, token int64, tenant string, evs []event) ([]int64, error) {
	ids, payloads := make([]string, len(evs)), make([]string, len(evs))
	for i, e := range evs {
		ids[i], payloads[i] = e.ID, string(e.Payload)
		if len(e.Payload) == 0 {
			payloads[i] = "null"
		}
	}
	got := make(map[string]int64, len(evs))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var fence int64
		if err := tx.QueryRow(ctx, fenceSQL, part).Scan(&fence); err != nil {
			return fmt.Errorf("reading partition %d's fence: %w", part, err)
		}
		if checkFence && fence > token {
			return fmt.Errorf("%w (partition %d: claim %d, fence %d)", errFenced, part, token, fence)
		}
		rows, err := tx.Query(ctx, insertSQL, part, token, s.node, tenant, ids, payloads)
		if err != nil {
			return err
		}
		var id string
		var seq int64
		if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error { got[id] = seq; return nil }); err != nil {
			return err
		}
		if len(got) == len(evs) {
			return nil
		}
		return lookup(ctx, tx, tenant, ids, got)
	})
	if err != nil {
		return nil, err
	}
	seqs := make([]int64, len(evs))
	for i, e := range evs {
		seqs[i] = got[e.ID]
	}
	return seqs, nil
}

// lookup fills in got the numbers of the events of ids stored before, or
// fails if one is not stored.
func lookup(ctx context.Context, tx pgx.Tx, tenant string, ids []string, got map[string]int64) error {
	rows, err := tx.Query(ctx, `SELECT id, seq FROM events WHERE tenant = $1 AND id = ANY($2)`, tenant, ids)
	if err != nil {
		return err
	}
	var id string
	var seq int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &seq}, func() error { got[id] = seq; return nil }); err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			return fmt.Errorf("event %q of tenant %q neither stored nor found", id, tenant)
		}
	}
	return nil
}

// retry is the ferry's Retry policy. A transient error goes again, up to
// maxAttempts tries, after a backoff that doubles from 10 ms to at most
// 500 ms, with jitter. A call that used its whole CallTimeout goes again
// once only. A fenced write never goes again: its node no longer owns the
// partition, and its callers are told to post elsewhere.
func retry(attempt int, err error) (time.Duration, bool) {
	if !retryable(err) || attempt >= maxAttempts || attempt >= maxTimeouts && errors.Is(err, ferry.ErrCallTimeout) {
		return 0, false
	}
	d := min(10*time.Millisecond<<(attempt-1), 500*time.Millisecond)
	return d/2 + rand.N(d/2+1), true
}

const (
	maxAttempts = 8 // tries of a call at most
	maxTimeouts = 2 // tries at most of one that used its whole CallTimeout
)

// retryable reports whether err, a call's, is transient, as in
// examples/ingest. It is if the connection failed (the server restarting, a
// backend terminated, a session ended idle in its transaction). So it is if
// the server refused for a while (a deadlock, a serialization failure, a
// lock or statement timeout, too many connections), or CallTimeout ended the
// call. A fenced write is not, nor a statement the server rejected for what
// it is.
func retryable(err error) bool {
	var pe *pgconn.PgError
	var panicked *ferry.PanicError
	switch {
	case errors.Is(err, errFenced):
		return false
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
		pe.Code == "25P03",                     // idle-in-transaction session timeout
		pe.Code == "40001", pe.Code == "40P01", // serialization failure, deadlock
		pe.Code == "55P03", pe.Code == "57014": // lock not available, query canceled
		return true
	}
	return false
}
