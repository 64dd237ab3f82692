package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrygo/ferry"
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
	http *httptest.Server
}

func newModeServer(t *testing.T, dsn string, o Options) *modeServer {
	t.Helper()
	m := &modeServer{}
	pool, err := Connect(context.Background(), dsn, small, 8, &m.tr)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	m.Server, err = New(pool, &m.tr, o)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	m.http = httptest.NewServer(m.Server)
	t.Cleanup(m.http.Close)
	return m
}

// ask posts query q with vars and returns the response's data, requiring
// no error.
func (m *modeServer) ask(t *testing.T, q string, vars map[string]any) json.RawMessage {
	t.Helper()
	data, err := m.post(q, vars)
	require.NoError(t, err)
	return data
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
func (m *modeServer) statements(t *testing.T, q string, vars map[string]any) int64 {
	t.Helper()
	before := m.tr.Sent()
	m.ask(t, q, vars)
	return m.tr.Sent() - before
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
// N+1 gone: the posts query (50 posts, their authors, 10 comments each and
// their authors) sends 601 statements in the naive mode, and a handful in
// the others. Mutation: Post.author reading through a naive loader in the
// ferry mode (r.ld.user -> naive{r.db}.user) fails its count.
func TestModesAgree(t *testing.T) {
	dsn := pgDSN(t)
	servers := map[Mode]*modeServer{}
	for _, mode := range []Mode{Naive, Ferry, Dataloadgen} {
		servers[mode] = newModeServer(t, dsn, Options{Mode: mode})
	}
	for name, q := range queries {
		want := servers[Naive].ask(t, q.q, q.vars)
		for _, mode := range []Mode{Ferry, Dataloadgen} {
			assert.JSONEq(t, string(want), string(servers[mode].ask(t, q.q, q.vars)), "%s, %s mode", name, mode)
		}
	}
	posts := queries["posts"]
	// Naive: exactly 1 + 50 + 50 + 500. With loaders, at least one per
	// level (4), and more as batches go while a level's loads still arrive
	// (dataloadgen's after its 1 ms wait, ferry's as direct calls and as
	// soon as the key is free): 9 to 18 in either mode here, on 2 cores.
	for mode, bound := range map[Mode]int64{Naive: 601, Ferry: 60, Dataloadgen: 60} {
		n := servers[mode].statements(t, posts.q, posts.vars)
		t.Logf("posts query, %s mode: %d statements", mode, n)
		if mode == Naive {
			assert.Equal(t, bound, n)
			continue
		}
		assert.LessOrEqual(t, n, bound, "%s mode", mode)
		assert.GreaterOrEqual(t, n, int64(4), "%s mode: a statement per level at least", mode)
	}
}

// The user page of a user whose read sleeps 2 s does not hold the user
// page of another, which is answered while it sleeps: in the dataloadgen
// mode each request has its loaders; in the ferry mode the users loader has
// several fetches in flight (MaxCallsPerKey), and the slow request's load
// was a fetch of its own. Mutation: the ferry mode's loaders with
// MaxCallsPerKey 1 (Options.Load) fail it.
func TestSlowIDHoldsOnlyItsRequest(t *testing.T) {
	dsn := pgDSN(t)
	const slowID, otherID = 11, 12
	for _, mode := range []Mode{Ferry, Dataloadgen} {
		t.Run(string(mode), func(t *testing.T) {
			if mode == Ferry && !callsPerKeyInEffect(t) {
				t.Skip("ferry's MaxCallsPerKey is not in effect yet: one call in flight per key")
			}
			m := newModeServer(t, dsn, Options{Mode: mode, SlowID: slowID, SlowFor: 2 * time.Second})
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
			require.Eventually(t, func() bool { return m.tr.InFlight() == 1 }, 10*time.Second, time.Millisecond,
				"the slow statement never started")
			other := m.ask(t, page, map[string]any{"id": otherID})
			took := time.Since(start)
			select {
			case <-slow:
				t.Fatalf("the slow request was answered before the other, after %v", time.Since(start))
			default:
			}
			assert.Contains(t, string(other), fmt.Sprintf(`"name":"user %d"`, otherID))
			t.Logf("%s mode: the other request answered %v after the slow one began", mode, took)
			a := <-slow
			require.NoError(t, a.err)
			assert.Contains(t, string(a.data), fmt.Sprintf(`"name":"user %d"`, slowID))
			assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
		})
	}
}

// callsPerKeyInEffect says whether ferry honours Config.MaxCallsPerKey: a
// second Do of a key whose direct call runs makes a direct call of its own
// under MaxCallsPerKey 2, rather than wait in the lane.
func callsPerKeyInEffect(t *testing.T) (ok bool) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		f, err := ferry.New(func(_ context.Context, _ int, ins []int) ([]int, error) {
			<-release
			return ins, nil
		}, ferry.Config[int, int]{Key: func(int) int { return 0 }, DirectCalls: true, MaxCallsPerKey: 2})
		require.NoError(t, err)
		for i := range 2 {
			go f.Do(context.Background(), i)
			synctest.Wait()
		}
		ok = f.Stats().DirectCalls == 2
		close(release)
		f.Close()
	})
	return ok
}
