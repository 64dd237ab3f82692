package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// small is the test's dataset: 5 posts per user, 200 posts with 10
// comments each.
var small = Sizes{Users: 500, Posts: 2500, Comments: 2000}

// The queries the test asks in every mode, by name.
var queries = map[string]struct {
	q    string
	vars map[string]any
}{
	"user page": {`query($id: ID!) { user(id: $id) { id name email posts { id title author { id name } } } }`,
		map[string]any{"id": 7}},
	"posts": {`query($after: ID) { posts(first: 50, after: $after) {
		id title author { id name } comments { id body author { id name } } } }`, map[string]any{"after": 20}},
	"comment's post":     {`{ posts(first: 5) { id comments { id post { id title author { name } } } } }`, nil},
	"users, one missing": {`{ users(ids: [3, 999999, 3, 12]) { id name } }`, nil},
	"no such user":       {`{ user(id: 999999) { id } }`, nil},
}

// modeServer is a Server of one mode on a pool of its own, so that its
// statements are its own.
type modeServer struct {
	*Server
	tr   Tracer
	pool *pgxpool.Pool
	http *httptest.Server
}

func newModeServer(t *testing.T, dsn string, o Options) *modeServer {
	t.Helper()
	m := &modeServer{}
	var err error
	m.pool, err = Connect(context.Background(), dsn, small, 8, &m.tr)
	require.NoError(t, err)
	t.Cleanup(m.pool.Close)
	m.Server, err = New(m.pool, &m.tr, o)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	m.http = httptest.NewServer(m.Server)
	t.Cleanup(m.http.Close)
	return m
}

// post posts query q with vars and returns the response's data, or an
// error that says what went wrong, GraphQL's errors included.
func (m *modeServer) post(q string, vars map[string]any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"query": q, "variables": vars})
	if err != nil {
		return nil, err
	}
	resp, err := http.Post(m.http.URL+"/query", "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Data   json.RawMessage
		Errors []any
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if len(r.Errors) > 0 {
		return nil, fmt.Errorf("%s: %v", q, r.Errors)
	}
	return r.Data, nil
}

// statements returns the statements q sent, asked alone.
func (m *modeServer) statements(q string, vars map[string]any) (int64, error) {
	before := m.tr.Sent()
	_, err := m.post(q, vars)
	return m.tr.Sent() - before, err
}

// pgDSN reads the server's address from FERRY_PG_DSN. Without it the test
// is skipped, or fails under CI (.ci/run starts a server and sets it).
func pgDSN(t *testing.T) string {
	dsn := os.Getenv("FERRY_PG_DSN")
	if dsn == "" {
		msg := "FERRY_PG_DSN is not set: run sh examples/ingest/pg.sh go test -v ./graphql/..."
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// The ferry and dataloadgen modes answer as the naive mode does, with the
// N+1 gone. The posts query (50 posts, their authors, 10 comments each and
// their authors) sends 601 statements in the naive mode, and a handful in
// the others. Mutation: Comment.author reading through the naive mode's
// loaders in every mode (naive{r.db}.user) fails the counts.
func TestModesAgree(t *testing.T) {
	dsn := pgDSN(t)
	modes := []Mode{Naive, Ferry, Dataloadgen}
	servers := map[Mode]*modeServer{}
	for _, mode := range modes {
		servers[mode] = newModeServer(t, dsn, Options{Mode: mode})
	}
	answers := map[string]map[Mode]string{}
	counts := map[Mode]int64{}
	posts := queries["posts"]
	again(t, dsn, servers, func() error {
		for name, q := range queries {
			answers[name] = map[Mode]string{}
			for _, mode := range modes {
				data, err := servers[mode].post(q.q, q.vars)
				if err != nil {
					return err
				}
				answers[name][mode] = string(data)
			}
		}
		for _, mode := range modes {
			n, err := servers[mode].statements(posts.q, posts.vars)
			if err != nil {
				return err
			}
			counts[mode] = n
		}
		return nil
	})
	for name, as := range answers {
		for _, mode := range []Mode{Ferry, Dataloadgen} {
			assert.JSONEq(t, as[Naive], as[mode], "%s, %s mode", name, mode)
		}
	}
	// Naive: exactly 1 + 50 + 50 + 500. With loaders, at least one per
	// level (4), and more as batches go while a level's loads still arrive:
	// dataloadgen's after its 1 ms wait, ferry's as direct calls and as soon
	// as the key is free. Here, on 2 cores: 4 to 18 in either mode.
	t.Logf("posts query, statements: %v", counts)
	assert.Equal(t, int64(601), counts[Naive])
	for _, mode := range []Mode{Ferry, Dataloadgen} {
		assert.LessOrEqual(t, counts[mode], int64(60), "%s mode", mode)
		assert.GreaterOrEqual(t, counts[mode], int64(4), "%s mode: a statement per level at least", mode)
	}
}

// The user page of a user whose read sleeps 2 s does not hold the user
// page of another, which is answered while it sleeps. In the dataloadgen
// mode each request has its loaders. In the ferry mode the users loader has
// several fetches in flight (MaxCallsPerKey), and the slow request's load
// was a fetch of its own. Mutation: the ferry mode's loaders with
// MaxCallsPerKey 1 (Options.Load) fail it.
func TestSlowIDHoldsOnlyItsRequest(t *testing.T) {
	dsn := pgDSN(t)
	const slowID, otherID = 11, 12
	for _, mode := range []Mode{Ferry, Dataloadgen} {
		t.Run(string(mode), func(t *testing.T) {
			m := newModeServer(t, dsn, Options{Mode: mode, SlowID: slowID, SlowFor: 2 * time.Second})
			again(t, dsn, map[Mode]*modeServer{mode: m}, func() error { return slowAndOther(t, m, slowID, otherID) })
		})
	}
}

// slowAndOther asks m for slowID's page, and once its statement sleeps,
// for otherID's, which must come back first. It returns an error for a
// request that failed (PostgreSQL went away, say) and fails t for an
// answer that breaks the rule.
func slowAndOther(t *testing.T, m *modeServer, slowID, otherID int) error {
	page := queries["user page"].q
	type answer struct {
		data json.RawMessage
		err  error
	}
	slow := make(chan answer, 1)
	start := time.Now()
	go func() {
		data, err := m.post(page, map[string]any{"id": slowID})
		slow <- answer{data, err}
	}()
	for m.tr.InFlight() != 1 { // the slow statement sleeps
		select {
		case a := <-slow:
			return fmt.Errorf("the slow request ended before its statement was seen: %v", a.err)
		case <-time.After(time.Millisecond):
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the slow statement never started")
		}
	}
	other, err := m.post(page, map[string]any{"id": otherID})
	if err != nil {
		return err
	}
	took := time.Since(start)
	select {
	case a := <-slow:
		if a.err != nil {
			return a.err
		}
		t.Fatalf("the slow request was answered before the other, after %v", time.Since(start))
	default:
	}
	assert.Contains(t, string(other), fmt.Sprintf(`"name":"user %d"`, otherID))
	t.Logf("%s mode: the other request answered %v after the slow one began", m.mode, took)
	a := <-slow
	if a.err != nil {
		return a.err
	}
	assert.Contains(t, string(a.data), fmt.Sprintf(`"name":"user %d"`, slowID))
	assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
	return nil
}

// again runs f, and again while it fails because PostgreSQL went away (3
// tries in all): examples/ingest's test, which may run beside this one,
// restarts the server CI gives both. Between tries it waits for the server
// to answer, and resets the pools of servers, whose connections died.
func again(t *testing.T, dsn string, servers map[Mode]*modeServer, f func() error) {
	t.Helper()
	for try := 1; ; try++ {
		err := f()
		if err == nil {
			return
		}
		if try == 3 || !wentAway(err) {
			t.Fatal(err)
		}
		t.Logf("PostgreSQL went away; trying again: %v", err)
		waitUp(t, dsn)
		for _, m := range servers {
			m.pool.Reset()
		}
	}
}

// wentAway says whether err is a connection's end or refusal, as a
// restart of the server gives, rather than a wrong answer.
func wentAway(err error) bool {
	msg := err.Error()
	for _, s := range []string{"SQLSTATE 57P01", "SQLSTATE 57P02", "SQLSTATE 57P03", "failed to connect",
		"conn closed", "unexpected EOF", "connection reset", "broken pipe", "connection refused"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// waitUp waits until PostgreSQL at dsn answers, 60 s at most.
func waitUp(t *testing.T, dsn string) {
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL did not come back: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the next try, not a wait for things to settle
	}
}
