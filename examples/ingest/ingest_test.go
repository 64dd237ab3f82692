package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// TestIngest runs the service against a real PostgreSQL server under load,
// with a fault in the middle, and checks the database after: no acknowledged
// event lost or stored twice, each 201's number the stored one, and each
// tenant's events stored in the order they were acknowledged. Each fault is a
// subtest of about 6 s.
func TestIngest(t *testing.T) {
	env := pgEnv(t)
	callTimeout := 500 * time.Millisecond
	for _, c := range []struct {
		name  string
		fault func(t *testing.T, r *rig)
		check func(t *testing.T, r *rig, res *loadResult)
	}{
		{"terminate", terminate, func(t *testing.T, r *rig, _ *loadResult) {
			if r.total.retries == 0 {
				t.Error("no batch was tried again: the backends were not terminated under it")
			}
		}},
		{"restart", restart, func(t *testing.T, r *rig, _ *loadResult) {
			if r.total.retries == 0 {
				t.Error("no batch was tried again: the server did not restart under it")
			}
		}},
		{"lock", lock, func(t *testing.T, r *rig, res *loadResult) {
			if res.statuses[504] == 0 || r.total.pauses == 0 || r.total.resumed == 0 {
				t.Errorf("no 504 (a call past its timeout), no pause or no resume: %v, %d pauses, %d resumes",
					res.statuses, r.total.pauses, r.total.resumed)
			}
		}},
		{"sigterm", sigterm, func(t *testing.T, r *rig, _ *loadResult) {
			if r.total.spooled == 0 || r.total.replayed != r.total.spooled {
				t.Errorf("%d events spooled, %d replayed: want some, all replayed", r.total.spooled, r.total.replayed)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "restart" && (env.ctl == "" || env.data == "") {
				env.missing(t, "FERRY_PG_CTL and FERRY_PG_DATA, to restart the server")
			}
			r := newRig(t, env, c.name, callTimeout)
			lc := loadConfig{
				n: 1 << 20, duration: 5 * time.Second, grace: 15 * time.Second,
				writers: 16, tenants: 20, zipf: 1.3, mix: [3]int{6, 3, 1}, bulk: 8, seed: 1,
				target: "http://" + r.cfg.Addr,
			}
			done := make(chan *loadResult, 1)
			go func() {
				res, err := generate(context.Background(), lc)
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			time.Sleep(1500 * time.Millisecond)
			c.fault(t, r)
			res := <-done
			r.stop()
			if _, err := os.Stat(r.cfg.Spool); err == nil { // the last shutdown spooled: store it
				r.start()
				r.stop()
			}
			f, err := verify(context.Background(), env.dsn, r.cfg.Schema, res.run, res.records)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: acknowledged %d, stored %d, lost %d, duplicated %d, order violations %d, wrong numbers %d",
				c.name, f.acked, f.stored, f.lost, f.duplicated, f.violations, f.wrongSeq)
			t.Logf("%s: responses %v; retries %d, commit checks %d (committed %d), pauses %d, resumes %d, spooled %d, replayed %d, dead letters %d",
				c.name, res.statuses, r.total.retries, r.total.checks, r.total.checked, r.total.pauses, r.total.resumed, r.total.spooled, r.total.replayed, r.total.dead)
			if f.lost+f.duplicated+f.violations+f.wrongSeq > 0 {
				t.Error("an acknowledged event was lost, stored twice, stored out of order or given a wrong number")
			}
			if f.acked < 500 || f.stored < f.acked {
				t.Errorf("%d events acknowledged, %d stored: want 500 or more, all stored", f.acked, f.stored)
			}
			if r.total.dead > 0 {
				t.Errorf("%d dead letters", r.total.dead)
			}
			if _, err := os.Stat(r.cfg.Spool + ".dead"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a dead-letter file: %v", err)
			}
			c.check(t, r, res)
		})
	}
}

// env is where the test's PostgreSQL server is. Its method runs on a test's goroutine.
type env struct {
	dsn, ctl, data string
}

// pgEnv reads the server's address from FERRY_PG_DSN. Without it the test
// is skipped, or fails if CI is set.
func pgEnv(t *testing.T) env {
	e := env{dsn: os.Getenv("FERRY_PG_DSN"), ctl: os.Getenv("FERRY_PG_CTL"), data: os.Getenv("FERRY_PG_DATA")}
	if e.dsn == "" {
		e.missing(t, "FERRY_PG_DSN")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatalf("FERRY_PG_DSN is set, but: %v", err)
	}
	conn.Close(ctx)
	return e
}

// missing skips the test for want, or fails it if CI is set.
func (e env) missing(t *testing.T, want string) {
	t.Helper()
	msg := "no PostgreSQL server: this test needs " + want +
		"; `sh examples/ingest/pg.sh` starts a throwaway server and runs it (PostgreSQL installed: apt-get install postgresql)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set: it must run)")
	}
	t.Skip(msg)
}

// rig is one subtest's service, restarted as its fault needs, and the
// totals of the instances it ran. Its methods run on the subtest's goroutine
// or on the goroutine of its fault.
type rig struct {
	t     *testing.T
	env   env
	cfg   Config
	s     *Service
	total struct{ retries, checks, checked, pauses, resumed, spooled, replayed, dead uint64 }
}

// newRig starts a service with tables of its own, in schema ingest_test_name.
func newRig(t *testing.T, e env, name string, callTimeout time.Duration) *rig {
	return newRigConfig(t, e, name, func(c *Config) {
		c.CallTimeout, c.Request = callTimeout, 2*callTimeout
	})
}

// newRigConfig is newRig with the config that set sets.
func newRigConfig(t *testing.T, e env, name string, set func(*Config)) *rig {
	r := &rig{t: t, env: e, cfg: Config{
		DSN: e.dsn, Schema: "ingest_test_" + name, Addr: "127.0.0.1:0",
		Spool:    filepath.Join(t.TempDir(), "spool"),
		MaxBatch: 128, Delay: 2 * time.Millisecond, Workers: 4, MaxQueued: 4096,
		Drain: 2 * time.Second,
		Logf:  t.Logf,
	}}
	set(&r.cfg)
	if err := r.admin(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+r.cfg.Schema+" CASCADE")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.start()
	r.cfg.Addr = r.s.Addr() // a restarted service listens where the clients post
	return r
}

func (r *rig) start() {
	r.t.Helper()
	s, err := Start(context.Background(), r.cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	r.s = s
}

// stop shuts the service down, as on SIGTERM, and adds up its counters.
func (r *rig) stop() {
	r.t.Helper()
	if err := r.s.Shutdown(context.Background()); err != nil {
		r.t.Error(err)
	}
	c := r.s.st.count
	r.total.retries += r.s.retries.Load()
	r.total.checks += c.checks.Load()
	r.total.checked += c.checked.Load()
	r.total.pauses += r.s.pauses.Load()
	r.total.resumed += r.s.resumed.Load()
	r.total.spooled += r.s.spooled.Load()
	r.total.replayed += r.s.replayed.Load()
	r.total.dead += r.s.dead.Load()
}

// admin runs f on a connection of its own, and returns its error.
func (r *rig) admin(f func(ctx context.Context, c *pgx.Conn) error) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, r.env.dsn)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return f(ctx, c)
}

// terminate ends the service's backends five times, 300 ms apart.
func terminate(t *testing.T, r *rig) {
	n := 0
	for range 5 {
		if err := r.admin(func(ctx context.Context, c *pgx.Conn) error {
			var k int
			err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = 'ingest' AND pid <> pg_backend_pid()`).Scan(&k)
			n += k
			return err
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if n == 0 {
		t.Error("no backend to terminate")
	}
}

// restart restarts the server in fast mode (its sessions are ended), as the
// owner of its data directory, with its options of the last start and its
// output to the file log in that directory.
func restart(t *testing.T, r *rig) {
	cmd := exec.Command(r.env.ctl, "restart", "-D", r.env.data, "-m", "fast", "-w", "-l", filepath.Join(r.env.data, "log"))
	if os.Getuid() == 0 { // pg_ctl refuses root
		fi, err := os.Stat(r.env.data)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: st.Uid, Gid: st.Gid}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl restart: %v\n%s", err, out)
	}
}

// lock holds the events table for three call timeouts.
func lock(t *testing.T, r *rig) {
	if err := hold(r, 3*r.cfg.CallTimeout, nil); err != nil {
		t.Fatal(err)
	}
}

// hold locks the events table for d, and closes locked, if not nil, once it
// has the lock.
func hold(r *rig, d time.Duration, locked chan<- struct{}) error {
	return r.admin(func(ctx context.Context, c *pgx.Conn) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, "LOCK TABLE "+r.cfg.Schema+".events IN ACCESS EXCLUSIVE MODE"); err != nil {
			return err
		}
		if locked != nil {
			close(locked)
		}
		time.Sleep(d)
		return tx.Commit(ctx)
	})
}

// sigterm runs the service's shutdown mid-load, with a short drain, while
// the events table is locked (so that accepted events wait, and are
// spooled), then starts a new instance where the clients post, which stores
// the spool before it listens.
func sigterm(t *testing.T, r *rig) {
	locked := make(chan struct{})
	go func() {
		defer close(locked)
		if err := hold(r, 5*r.cfg.CallTimeout, nil); err != nil {
			t.Error(err)
		}
	}()
	time.Sleep(r.cfg.CallTimeout)
	r.cfg.Drain = 100 * time.Millisecond
	r.stop()
	r.cfg.Drain = 2 * time.Second
	if _, err := os.Stat(r.cfg.Spool); err != nil {
		t.Errorf("no spool after the shutdown: %v", err)
	}
	<-locked
	r.start()
	if r.s.Addr() != r.cfg.Addr {
		t.Fatalf("the new instance listens on %s, not %s", r.s.Addr(), r.cfg.Addr)
	}
}

// A try whose answer was lost but which committed is found committed by the
// next write of its events (the ferry's retry of them), which runs no
// statement: no number is spent twice. The same events written again later
// (a client posting them again) are stored once, with the numbers they had.
// A try that did not commit is found so, and its events are written.
func TestCommitCheck(t *testing.T) {
	e := pgEnv(t)
	ctx := context.Background()
	r := &rig{t: t, env: e, cfg: Config{Schema: "ingest_test_commit"}}
	if err := r.admin(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+r.cfg.Schema+" CASCADE")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	st, err := openStore(ctx, e.dsn, r.cfg.Schema, "ingest-test", 2, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.pool.Close()
	lost := 0
	st.lose = func() bool { lost++; return lost == 1 }
	evs := []event{{Tenant: "x", ID: "a"}, {Tenant: "x", ID: "b"}, {Tenant: "x", ID: "c"}}
	if _, err := st.write(ctx, "x", evs); !errors.Is(err, errLost) {
		t.Fatalf("the first write: %v, want its answer lost", err)
	}
	for range 2 {
		seqs, err := st.write(ctx, "x", evs)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(seqs, []int64{1, 2, 3}) {
			t.Errorf("numbers %v, want 1 2 3", seqs)
		}
	}
	st.setUnsure("x", "a batch that did not commit")
	if seqs, err := st.write(ctx, "x", []event{{Tenant: "x", ID: "d"}}); err != nil || !slices.Equal(seqs, []int64{7}) {
		t.Errorf("after a try that did not commit: %v, %v; want 7", seqs, err)
	}
	c := st.count
	if c.checks.Load() != 2 || c.checked.Load() != 1 || c.commits.Load() != 3 || c.stored.Load() != 4 {
		t.Errorf("checks %d, found committed %d, commits %d, stored %d: want 2, 1, 3, 4",
			c.checks.Load(), c.checked.Load(), c.commits.Load(), c.stored.Load())
	}
	var last int64
	if err := st.pool.QueryRow(ctx, "SELECT seq FROM tenants WHERE tenant = 'x'").Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last != 7 {
		t.Errorf("the tenant's last number is %d, want 7: 3 for the write that committed, 3 for the one that found them stored, 1 for d", last)
	}
}

// The HTTP answers: 201 with the stored number, the same for an event posted
// again; 400 for a bad body; 422 for an event PostgreSQL refuses (an async
// one goes to the dead letters); 429 when the room is full; 503 for a Do of a
// tenant paused after its call failed for good (timed out twice), whose
// accepted async events the ferry holds and stores, in order, once the
// database takes them.
func TestHTTP(t *testing.T) {
	e := pgEnv(t)
	r := newRigConfig(t, e, "http", func(c *Config) {
		c.Workers, c.MaxQueued, c.Delay, c.CallTimeout, c.Request = 1, 2, 0, 300*time.Millisecond, time.Second
	})
	base := "http://" + r.cfg.Addr
	post := func(path, body string) (int, string) {
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	for _, c := range []struct {
		path, body string
		code       int
		reply      string
	}{
		{"/events", `{"tenant":"a","id":"1"}`, 201, `{"tenant":"a","id":"1","seq":1}`},
		{"/events", `{"tenant":"a","id":"1","payload":{"again":true}}`, 201, `{"tenant":"a","id":"1","seq":1}`},
		{"/events/bulk", `[{"tenant":"a","id":"1"},{"tenant":"b","id":"1"}]`, 201, `[{"tenant":"a","id":"1","seq":1},{"tenant":"b","id":"1","seq":1}]`},
		{"/events/bulk", `[{"tenant":"a","id":"2"},{"tenant":"a","id":"3"},{"tenant":"a","id":"4"}]`, 429, ""}, // more than the room
		{"/events", `{"tenant":"a"`, 400, ""},
		{"/events", `{"id":"1"}`, 400, ""},
		{"/events/bulk", `[]`, 400, ""},
		{"/events", `{"tenant":"a","id":"n","payload":"\u0000"}`, 400, ""},
		// PostgreSQL refuses the number: that event is refused alone, and p is not paused.
		{"/events/bulk", `[{"tenant":"p","id":"1","payload":1e1000000},{"tenant":"p","id":"2"}]`, 422,
			`[{"tenant":"p","id":"1","error":"ERROR: value overflows numeric format (SQLSTATE 22003)"},{"tenant":"p","id":"2","seq":1}]`},
		{"/events/async", `{"tenant":"a","id":"2"}`, 202, `{"tenant":"a","id":"2"}`},
		{"/events", `{"tenant":"p","id":"3","payload":1e1000000}`, 422, ""},
		{"/events", `{"tenant":"p","id":"4"}`, 201, `{"tenant":"p","id":"4","seq":2}`},
		{"/events/async", `{"tenant":"q","id":"1","payload":1e1000000}`, 202, `{"tenant":"q","id":"1"}`}, // to the dead letters
	} {
		code, reply := post(c.path, c.body)
		if code != c.code || c.reply != "" && reply != c.reply {
			t.Errorf("POST %s %s: %d %s, want %d %s", c.path, c.body, code, reply, c.code, c.reply)
		}
	}

	// The table locked: a's call holds its worker, two events wait, and
	// the room refuses the next. Once the call has timed out twice (a try
	// and a retry), a is paused: the ferry holds its events, in order, and
	// its Do requests get 503.
	if err := r.s.f.Flush(context.Background()); err != nil { // all the above stored
		t.Fatal(err)
	}
	locked, released := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(released)
		if err := hold(r, 2*time.Second, locked); err != nil {
			t.Error(err)
		}
	}()
	<-locked
	var accepted []string
	rejected := false
	for i := 4; i < 10 && !rejected; i++ {
		id := fmt.Sprint(i)
		switch code, reply := post("/events/async", `{"tenant":"a","id":"`+id+`"}`); code {
		case 202:
			accepted = append(accepted, id)
		case 429:
			rejected = true
		default:
			t.Fatalf("async %s: %d %s", id, code, reply)
		}
	}
	if !rejected || len(accepted) < 2 {
		t.Errorf("accepted %v, then no 429", accepted)
	}
	for deadline := time.Now().Add(1500 * time.Millisecond); ; time.Sleep(20 * time.Millisecond) {
		code, reply := post("/events", `{"tenant":"a","id":"x"}`)
		if code == 503 {
			break
		}
		if code != 429 || time.Now().After(deadline) {
			t.Fatalf("Do while a's calls fail: %d %s, want 429 until a is paused, then 503", code, reply)
		}
	}
	<-released
	// a resumes after a backoff: its held events are stored, in order, and
	// an event accepted then is stored after them. Until then the room
	// refuses it (429), or a's held share of the room does (503).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, reply := post("/events/async", `{"tenant":"a","id":"after"}`)
		if code == 202 {
			accepted = append(accepted, "after")
			break
		}
		if code != 429 && code != 503 || time.Now().After(deadline) {
			t.Fatalf("async after the lock: %d %s, want 429 or 503, then 202 once a resumes", code, reply)
		}
	}
	r.stop()
	if r.total.pauses == 0 || r.total.resumed == 0 {
		t.Errorf("%d pauses, %d resumes: want some", r.total.pauses, r.total.resumed)
	}
	if dead, err := readSpool(r.cfg.Spool + ".dead"); err != nil || len(dead) != 1 || dead[0].ID != "1" || r.total.dead != 1 {
		t.Errorf("dead letters %v (%v), counted %d: want q's 1", dead, err, r.total.dead)
	}
	// Every accepted event is stored, in the order it was accepted.
	var seqs []int64
	if err := r.admin(func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT array_agg(seq ORDER BY array_position($1::text[], id)) FROM "+r.cfg.Schema+
			".events WHERE tenant = 'a' AND id = ANY($1)", accepted).Scan(&seqs)
	}); err != nil {
		t.Fatal(err)
	}
	if len(seqs) != len(accepted) || !slices.IsSorted(seqs) {
		t.Errorf("accepted %v, stored as %v: want all, in order", accepted, seqs)
	}
}

// TestTrace runs the service on PostgreSQL with its Tracer recording in
// memory: each request's span is linked from the span of the INSERT batch
// that stored its events, whose own outcome is ok.
func TestTrace(t *testing.T) {
	e := pgEnv(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	r := newRigConfig(t, e, "trace", func(c *Config) { c.Tracer, c.Delay = tp, 50*time.Millisecond })
	base := "http://" + r.cfg.Addr
	var wg sync.WaitGroup
	for i := range 6 {
		path, body := "/events", fmt.Sprintf(`{"tenant":"t%d","id":"%d"}`, i%2, i)
		if i == 5 {
			path, body = "/events/bulk", `[{"tenant":"t0","id":"b1"},{"tenant":"t1","id":"b2"}]`
		}
		wg.Go(func() {
			resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("POST %s %s: %d", path, body, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	r.stop()
	inserts := checkLinks(t, sr.Ended(), 6, http.StatusCreated)
	for _, s := range inserts {
		for _, a := range s.Attributes() {
			if a.Key == "ferry.outcome" && a.Value.AsString() != "ok" {
				t.Errorf("an INSERT's outcome: %s", a.Value.AsString())
			}
		}
	}
	if len(inserts) < 2 {
		t.Errorf("%d INSERT spans, want 2 or more (2 tenants)", len(inserts))
	}
}
