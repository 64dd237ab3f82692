package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The test's cluster: its lease TTL, partitions, tenants and clients.
const (
	ttl        = 2 * time.Second
	partitions = 64
	tenants    = 300
	writers    = 24
)

// TestCluster runs three node processes against the real etcd and
// PostgreSQL that CI starts (FERRY_ETCD, FERRY_PG_DSN). Clients post
// numbered events of a few hundred tenants to random nodes, and post again
// what was not acknowledged. Midway one node is killed with SIGKILL, and
// another gets SIGTERM; both are started again. A third is paused with
// SIGSTOP while it holds a batch, until the others have claimed its
// partitions and set their fences, then continued.
//
// Then it checks the tables. Every acknowledged event is stored exactly
// once, under the number its 201 gave, each tenant's in the order they were
// acknowledged. No write committed under a claim that a newer one had fenced
// out, and each under a claim etcd gave its node. The partitions were owned
// again within twice the lease's TTL, and the fence refused the paused
// node's old batches. The node stopped by SIGTERM failed no request as it
// stopped, and its partitions were claimed again as soon as it exited.
//
// Its subtest unfenced builds the nodes without the fence check (the tag
// cluster_unfenced) and pauses one: the old batch must then commit, and the
// check see it, so that the test's "none" is not vacuous.
func TestCluster(t *testing.T) {
	e := clusterEnv(t)
	bin := buildNode(t, "")
	r := newRig(t, e, bin, "cluster_test")
	res := r.run(faults{kill: true, term: true, pause: true})
	f := res.figures
	if f.lost+f.duplicated+f.violations+f.wrongSeq > 0 {
		t.Errorf("%d acknowledged events lost, %d stored twice, %d out of order, %d with a wrong number",
			f.lost, f.duplicated, f.violations, f.wrongSeq)
	}
	if f.stale > 0 || f.unclaimed > 0 {
		t.Errorf("%d writes committed under a fenced-out claim, %d under no claim of their node", f.stale, f.unclaimed)
	}
	if f.acked < 1000 {
		t.Errorf("%d events acknowledged: want 1000 or more", f.acked)
	}
	if f.unacked > 0 {
		t.Errorf("%d events never acknowledged", f.unacked)
	}
	if res.fenced == 0 {
		t.Error("no batch was refused by the fence: the paused node held none under its old claims")
	}
	if res.termFailed != 0 || res.handover > ttl/2 {
		t.Errorf("the node stopped by SIGTERM failed %d requests as it stopped (-1: it printed no stats), and its partitions were owned again %v after it exited: want none, and at once (it drains, then revokes its lease)",
			res.termFailed, res.handover)
	}
	for _, o := range res.reown {
		if o.took > 2*ttl {
			t.Errorf("after %s, the partitions were owned again in %v: want %v at most", o.fault, o.took, 2*ttl)
		}
	}
	t.Run("unfenced", func(t *testing.T) {
		r := newRig(t, e, buildNode(t, "cluster_unfenced"), "cluster_test_unfenced")
		res := r.run(faults{pause: true})
		if res.figures.stale == 0 || !res.figures.heldStale {
			t.Errorf("without the fence check, the paused node committed %d writes under its old claims (the held batch: %v): want some, the held one among them",
				res.figures.stale, res.figures.heldStale)
		}
	})
}

// env is where the test's servers are.
type env struct {
	dsn  string
	etcd []string
}

// clusterEnv reads the servers' addresses from FERRY_PG_DSN and FERRY_ETCD
// (comma-separated endpoints). Without them the test is skipped, or fails if
// CI is set.
func clusterEnv(t *testing.T) env {
	e := env{dsn: os.Getenv("FERRY_PG_DSN")}
	if v := os.Getenv("FERRY_ETCD"); v != "" {
		e.etcd = strings.Split(v, ",")
	}
	if e.dsn == "" || len(e.etcd) == 0 {
		msg := "this test needs PostgreSQL (FERRY_PG_DSN) and etcd (FERRY_ETCD); " +
			"`sh examples/cluster/run.sh` starts throwaway servers and runs it (apt-get install postgresql etcd-server)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + " (CI is set: it must run)")
		}
		t.Skip(msg)
	}
	return e
}

// buildNode builds the command into a temporary directory, with the race
// detector if the test has it, and with tags.
func buildNode(t *testing.T, tags string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "cluster")
	args := []string{"build", "-o", bin}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	start := time.Now()
	if out, err := exec.Command(goCmd, append(args, ".")...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("go %s: %v", strings.Join(args[3:], " "), time.Since(start).Round(time.Millisecond))
	return bin
}

// rig is one run's cluster: the node processes, by name, and the test's own
// view of the claims in etcd. Its methods run on the test's goroutine.
type rig struct {
	t              *testing.T
	env            env
	bin            string
	schema, prefix string
	dir            string
	ports          map[string]int
	procs          map[string]*proc // the latest process of each name
	exited         []*proc          // all, once exited
	cli            *clientv3.Client
	w              *watcher
	httpc          *http.Client
	held           string // the tenant of hold's batch
}

// newRig drops schema, and watches a prefix of etcd of its own.
func newRig(t *testing.T, e env, bin, schema string) *rig {
	r := &rig{
		t: t, env: e, bin: bin, schema: schema, prefix: "/ferry-cluster-test/" + crand.Text()[:8] + "/",
		dir: t.TempDir(), ports: map[string]int{}, procs: map[string]*proc{},
		httpc: &http.Client{Timeout: 2 * time.Second},
	}
	r.sql(func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		return err
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.cli = cli
	ctx, cancel := context.WithCancel(context.Background())
	r.w = watch(t, ctx, cli, r.prefix)
	t.Cleanup(func() {
		for _, p := range r.procs {
			p.kill()
		}
		cancel()
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		_, _ = cli.Delete(dctx, r.prefix, clientv3.WithPrefix())
		cli.Close()
		if t.Failed() {
			for _, p := range append(r.exited, slices.Collect(maps.Values(r.procs))...) {
				if b, err := os.ReadFile(p.errPath); err == nil {
					t.Logf("%s's stderr:\n%s", p.name, tail(b, 3000))
				}
			}
		}
	})
	return r
}

// sql runs f on a connection of the test's own, again after a failure (the
// server may restart under examples/ingest's test, which runs beside this
// one), for 30 s at most.
func (r *rig) sql(f func(ctx context.Context, c *pgx.Conn) error) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, r.env.dsn)
		if err == nil {
			err = f(ctx, c)
			c.Close(ctx)
		}
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			r.t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// faults are the faults of a run.
type faults struct{ kill, term, pause bool }

// result is a run's figures, the nodes' counters added up, and the times
// to own the partitions again after each fault.
type result struct {
	figures
	fenced, fencedEvents, forwarded uint64
	reown                           []reown
	termFailed                      int           // requests that the node stopped by SIGTERM failed as it stopped; -1: no stats
	handover                        time.Duration // from its exit to the last claim of its partitions
}

type reown struct {
	fault string
	took  time.Duration
}

// run starts nodes n1, n2 and n3, loads them, makes the faults, stops the
// load, stops the nodes and checks the tables.
func (r *rig) run(f faults) result {
	t := r.t
	all := []string{"n1", "n2", "n3"}
	for _, name := range all {
		r.start(name)
	}
	r.waitBalanced(all)
	urls := make([]string, len(all))
	for i, name := range all {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", r.ports[name])
	}
	l := startLoad(urls)
	var res result
	more := func(n int64) {
		target := l.acked.Load() + n
		r.waitFor(30*time.Second, fmt.Sprintf("%d events acknowledged", target), func() bool { return l.acked.Load() >= target })
	}
	more(400)
	if f.kill {
		t0 := time.Now()
		r.procs["n2"].signal(syscall.SIGKILL)
		r.waitExit("n2")
		res.reown = append(res.reown, reown{"SIGKILL", r.waitOwned([]string{"n1", "n3"}).Sub(t0)})
		more(300)
		r.start("n2")
		r.waitBalanced(all)
	}
	if f.term {
		before, err := r.nodeStats("n3")
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		r.procs["n3"].signal(syscall.SIGTERM)
		last := r.waitOwned([]string{"n1", "n2"})
		p := r.waitExit("n3")
		res.reown = append(res.reown, reown{"SIGTERM", last.Sub(t0)})
		res.handover, res.termFailed = last.Sub(p.exitedAt), -1
		if after := p.stats; after != nil {
			res.termFailed = int(after.Failed - before.Failed)
		}
		r.start("n3")
		r.waitBalanced(all)
		more(300)
	}
	if f.pause {
		// Paused while it holds a batch under its claim (see hold), and
		// continued once the others have claimed its partitions and set
		// their fences. It then tries to write that batch, and the requests
		// it had taken, under claims fenced out.
		unlock := r.hold(l, "n1")
		t0 := time.Now()
		r.procs["n1"].signal(syscall.SIGSTOP)
		r.waitFor(5*time.Second, "n1 stopped", func() bool { return r.procs["n1"].state() == "T" })
		unlock()
		res.reown = append(res.reown, reown{"SIGSTOP", r.waitOwned([]string{"n2", "n3"}).Sub(t0)})
		r.waitFences()
		r.procs["n1"].signal(syscall.SIGCONT)
		r.waitBalanced(all)
	}
	more(300)
	l.stop(30 * time.Second)
	for _, name := range all {
		r.procs[name].signal(syscall.SIGTERM)
		r.waitExit(name)
	}
	for _, p := range r.exited {
		if p.stats != nil {
			res.fenced += p.stats.Fenced
			res.fencedEvents += p.stats.FencedEvents
			res.forwarded += p.stats.Forwarded
		}
	}
	res.figures = r.check(l)
	t.Logf("events posted %d, acknowledged %d, never acknowledged %d, re-sent %d; responses %v",
		res.posted, res.acked, res.unacked, res.resent, l.statuses())
	t.Logf("stored %d, lost %d, stored twice %d, out of order %d, wrong numbers %d",
		res.stored, res.lost, res.duplicated, res.violations, res.wrongSeq)
	t.Logf("writes %d (batches %d, fences set %d); committed under a fenced-out claim %d, under no claim of their node %d",
		res.writes, res.batches, res.fences, res.stale, res.unclaimed)
	t.Logf("fenced batch tries refused %d (%d events); requests forwarded %d", res.fenced, res.fencedEvents, res.forwarded)
	for _, o := range res.reown {
		t.Logf("partitions owned again %v after %s (lease TTL %v)", o.took.Round(time.Millisecond), o.fault, ttl)
	}
	if f.term {
		t.Logf("SIGTERM: requests failed by the node as it stopped %d; its last partition claimed again %v after it exited",
			res.termFailed, res.handover.Round(time.Millisecond))
	}
	return res
}

// proc is one node process.
type proc struct {
	name, errPath string
	cmd           *exec.Cmd
	exited        chan struct{} // closed once it has exited and its output is read
	exitedAt      time.Time     // when it was seen to exit, once exited is closed
	stats         *Stats        // from its last line, if it printed one
}

// start starts node name, on its port (the same at each start), and waits
// until it answers.
func (r *rig) start(name string) {
	r.t.Helper()
	if r.ports[name] == 0 {
		r.ports[name] = freePort(r.t)
	}
	p := &proc{name: name, exited: make(chan struct{}),
		errPath: filepath.Join(r.dir, fmt.Sprintf("%s.%d.stderr", name, len(r.exited)+len(r.procs)))}
	p.cmd = exec.Command(r.bin,
		"-name", name, "-dsn", r.env.dsn, "-etcd", strings.Join(r.env.etcd, ","),
		"-prefix", r.prefix, "-schema", r.schema, "-addr", fmt.Sprintf("127.0.0.1:%d", r.ports[name]),
		"-ttl", ttl.String(), "-partitions", strconv.Itoa(partitions),
		"-batch", "64", "-delay", "2ms", "-workers", "4", "-timeout", "2s",
		"-request-timeout", "10s", "-drain", "5s", "-shutdown", "15s")
	// No second at exit for the race detector's reports: a node stopped by
	// SIGTERM exits as soon as it has released its partitions.
	p.cmd.Env = append(os.Environ(), "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	errf, err := os.Create(p.errPath)
	if err != nil {
		r.t.Fatal(err)
	}
	p.cmd.Stderr = errf
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "stats "); ok {
				var st Stats
				if json.Unmarshal([]byte(s), &st) == nil {
					p.stats = &st
				}
			}
		}
		_ = p.cmd.Wait()
		p.exitedAt = time.Now()
		errf.Close()
		close(p.exited)
	}()
	r.procs[name] = p
	url := fmt.Sprintf("http://127.0.0.1:%d/stats", r.ports[name])
	r.waitFor(15*time.Second, name+" answering", func() bool {
		select {
		case <-p.exited:
			r.t.Fatalf("%s exited at its start", name)
		default:
		}
		resp, err := r.httpc.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func (p *proc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
}

// kill ends the process, if it still runs, and waits for it.
func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

// waitExit waits for node name's process to exit, and returns it. A node
// not killed must exit with status 0 (66: the race detector found a race).
func (r *rig) waitExit(name string) *proc {
	r.t.Helper()
	p := r.procs[name]
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		r.t.Fatalf("%s did not exit", name)
	}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() && ws.ExitStatus() != 0 {
		r.t.Errorf("%s exited: %v", name, p.cmd.ProcessState)
	}
	r.exited = append(r.exited, p)
	delete(r.procs, name)
	return p
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitFor waits until cond holds, looking every 10 ms, or fails the test
// after d.
func (r *rig) waitFor(d time.Duration, what string, cond func() bool, state ...func() string) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range state {
				what += "; " + s()
			}
			r.t.Fatalf("no %s after %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitBalanced waits until live own every partition, each its share, and
// each serves its share (its fences set).
func (r *rig) waitBalanced(live []string) {
	r.t.Helper()
	var counts map[string]int
	var served []int
	r.waitFor(30*time.Second, fmt.Sprintf("fair share of the partitions among %v", live), func() bool {
		counts, served = r.w.counts(), nil
		ok := true
		for i, name := range live {
			st, err := r.nodeStats(name)
			served = append(served, st.Served)
			ok = ok && err == nil && counts[name] == share(partitions, len(live), i) && st.Served == counts[name]
		}
		return ok
	}, func() string { return fmt.Sprintf("claims %v, served %v", counts, served) })
}

func (r *rig) nodeStats(name string) (Stats, error) {
	var st Stats
	resp, err := r.httpc.Get(fmt.Sprintf("http://127.0.0.1:%d/stats", r.ports[name]))
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// waitOwned waits until live own every partition, and returns the time of
// the last claim.
func (r *rig) waitOwned(live []string) time.Time {
	r.t.Helper()
	r.waitFor(10*ttl, fmt.Sprintf("every partition owned by %v", live), func() bool {
		counts := r.w.counts()
		n := 0
		for _, name := range live {
			n += counts[name]
		}
		return n == partitions
	})
	var last time.Time
	r.w.mu.Lock()
	for _, at := range r.w.at {
		if at.After(last) {
			last = at
		}
	}
	r.w.mu.Unlock()
	return last
}

// hold makes node name hold a batch under its claim, waiting in PostgreSQL.
// It picks a tenant of a partition the node serves and posts an event of it,
// which creates the tenant's row. It locks that row from a transaction of
// its own, and posts three more events of the tenant to the node. It returns
// once a transaction waits for the lock; unlock ends the lock's transaction.
func (r *rig) hold(l *load, name string) (unlock func()) {
	r.t.Helper()
	tenant := ""
	r.w.mu.Lock()
	for k := 0; tenant == ""; k++ {
		if t := fmt.Sprintf("held-%d", k); r.w.owner[partition(t, partitions)] == name {
			tenant = t
		}
	}
	r.w.mu.Unlock()
	r.held = tenant
	url := fmt.Sprintf("http://127.0.0.1:%d", r.ports[name])
	l.sendTo(url, tenant, "first", 1, true)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, r.env.dsn)
	if err != nil {
		r.t.Fatal(err)
	}
	tx, err := c.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT 1 FROM "+r.schema+".tenants WHERE tenant = $1 FOR UPDATE", tenant)
	}
	if err != nil {
		c.Close(ctx)
		r.t.Fatal(err)
	}
	pid := c.PgConn().PID()
	l.sendTo(url, tenant, "held", 3, false)
	r.waitFor(10*time.Second, "a batch waiting for the test's lock", func() bool {
		n := 0
		r.sql(func(ctx context.Context, c *pgx.Conn) error {
			return c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))", pid).Scan(&n)
		})
		return n > 0
	})
	return func() {
		_ = tx.Rollback(ctx)
		c.Close(ctx)
	}
}

// state is the process's state in /proc: "T" once stopped.
func (p *proc) state() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if i := bytes.LastIndexByte(b, ')'); err == nil && i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return ""
}

// waitFences waits until each partition's fence in PostgreSQL holds the
// token of its claim in etcd: from then on, a write under an older claim is
// refused.
func (r *rig) waitFences() {
	r.t.Helper()
	r.waitFor(10*ttl, "every partition's fence set to its claim", func() bool {
		var fences map[int]int64
		r.sql(func(ctx context.Context, c *pgx.Conn) error {
			fences = map[int]int64{}
			rows, _ := c.Query(ctx, "SELECT part, token FROM "+r.schema+".parts")
			var p int
			var tok int64
			_, err := pgx.ForEachRow(rows, []any{&p, &tok}, func() error { fences[p] = tok; return nil })
			return err
		})
		r.w.mu.Lock()
		defer r.w.mu.Unlock()
		for p, tok := range r.w.token {
			if tok == 0 || fences[p] != tok {
				return false
			}
		}
		return true
	})
}

// watcher is the test's view of the claims in etcd: each partition's
// owner, its token and when it was claimed, and every claim seen.
type watcher struct {
	mu     sync.Mutex
	owner  []string
	token  []int64
	at     []time.Time
	claims map[[2]int64]string // {partition, token}: node
}

// watch watches prefix, empty, until ctx ends.
func watch(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string) *watcher {
	w := &watcher{owner: make([]string, partitions), token: make([]int64, partitions),
		at: make([]time.Time, partitions), claims: map[[2]int64]string{}}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(gctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	wch := cli.Watch(ctx, prefix+partsDir, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		for wr := range wch {
			now := time.Now()
			w.mu.Lock()
			for _, ev := range wr.Events {
				p, err := strconv.Atoi(strings.TrimPrefix(string(ev.Kv.Key), prefix+partsDir))
				if err != nil || p < 0 || p >= partitions {
					continue
				}
				if ev.Type == clientv3.EventTypeDelete {
					w.owner[p], w.token[p] = "", 0
					continue
				}
				w.owner[p], w.token[p], w.at[p] = string(ev.Kv.Value), ev.Kv.CreateRevision, now
				w.claims[[2]int64{int64(p), ev.Kv.CreateRevision}] = string(ev.Kv.Value)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// counts is the partitions owned by each node.
func (w *watcher) counts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := map[string]int{}
	for _, o := range w.owner {
		if o != "" {
			c[o]++
		}
	}
	return c
}

// load is the clients: writers, each posting one event at a time to a
// random node, again until a 201.
type load struct {
	urls    []string
	run     string
	client  *http.Client
	stopNew chan struct{} // closed: post no new event
	giveUp  chan struct{} // closed: post nothing more
	acked   atomic.Int64
	wg      sync.WaitGroup
	ws      []*loadWriter
}

// record is one event a writer posted.
type record struct {
	tenant, id string
	sent, ack  time.Time // its first post, and its 201 (zero if none)
	seq        int64     // from the 201
	posts      int
}

// loadWriter is one client; its fields are its own until load.stop.
type loadWriter struct {
	records  []record
	statuses map[int]int // responses by status; 0: none came
}

func startLoad(urls []string) *load {
	l := &load{
		urls: urls, run: crand.Text()[:10],
		client:  &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: writers}},
		stopNew: make(chan struct{}), giveUp: make(chan struct{}),
	}
	for i := range writers {
		w := &loadWriter{statuses: map[int]int{}}
		l.ws = append(l.ws, w)
		l.wg.Go(func() { l.write(i, w) })
	}
	return l
}

// stop ends the posting of new events, waits for those posted to be
// acknowledged, for grace at most, and for the writers.
func (l *load) stop(grace time.Duration) {
	close(l.stopNew)
	t := time.AfterFunc(grace, func() { close(l.giveUp) })
	l.wg.Wait()
	t.Stop()
	l.client.CloseIdleConnections()
}

func (l *load) write(i int, w *loadWriter) {
	rng := rand.New(rand.NewPCG(1, uint64(i)))
	zipf := rand.NewZipf(rng, 1.1, 1, tenants-1)
	for k := 0; ; k++ {
		select {
		case <-l.stopNew:
			return
		default:
		}
		tenant, id := fmt.Sprintf("t%03d", zipf.Uint64()), fmt.Sprintf("%s-%d-%d", l.run, i, k)
		w.records = append(w.records, l.send(w, rng, "", tenant, id))
	}
}

// send posts an event until a 201, to first and then to random nodes (to
// random nodes only if first is ""), and returns its record.
func (l *load) send(w *loadWriter, rng *rand.Rand, first, tenant, id string) record {
	rec := record{tenant: tenant, id: id, sent: time.Now()}
	body, _ := json.Marshal(event{Tenant: tenant, ID: id, Payload: json.RawMessage(fmt.Sprintf(`{"id":%q}`, id))})
	backoff := 5 * time.Millisecond
	for url := first; ; url = "" {
		if url == "" {
			url = l.urls[rng.IntN(len(l.urls))]
		}
		rec.posts++
		code, rep := l.post(url, body)
		w.statuses[code]++
		switch {
		case code == http.StatusCreated:
			rec.ack, rec.seq = time.Now(), rep.Seq
			l.acked.Add(1)
			return rec
		case code == http.StatusBadRequest:
			return rec
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.giveUp:
			t.Stop()
			return rec
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

// sendTo posts n events of tenant to url at once, each until a 201 as the
// writers do (to random nodes after a failure), and returns without waiting
// for their answers. With wait, it posts them one after the other and waits.
func (l *load) sendTo(url, tenant, tag string, n int, wait bool) {
	for i := range n {
		w := &loadWriter{statuses: map[int]int{}}
		l.ws = append(l.ws, w)
		id := fmt.Sprintf("%s-%s-%s%d", l.run, tenant, tag, i)
		send := func() { w.records = append(w.records, l.send(w, rand.New(rand.NewPCG(2, uint64(i))), url, tenant, id)) }
		if wait {
			send()
		} else {
			l.wg.Go(send)
		}
	}
}

// post posts body once: the status (0 if no response came) and the reply.
func (l *load) post(url string, body []byte) (int, reply) {
	var rep reply
	resp, err := l.client.Post(url+"/events", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, rep
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusCreated && json.NewDecoder(resp.Body).Decode(&rep) != nil {
		return 0, rep // a torn answer: posted again
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, rep
}

// statuses adds up the writers' responses by status.
func (l *load) statuses() map[int]int {
	m := map[int]int{}
	for _, w := range l.ws {
		for c, n := range w.statuses {
			m[c] += n
		}
	}
	return m
}

// figures are what the tables hold of a run.
type figures struct {
	posted, acked, unacked, resent int
	stored                         int  // rows of the run's events
	lost                           int  // acknowledged, not stored
	duplicated                     int  // acknowledged, stored more than once
	violations                     int  // stored before an event of its tenant acknowledged before it was first posted
	wrongSeq                       int  // a 201 whose number is not the stored one
	writes, batches, fences        int  // rows of writes: all, batches, claims' fences
	stale                          int  // writes committed after a newer claim's of their partition
	heldStale                      bool // one of them is the held tenant's (see hold)
	unclaimed                      int  // writes under a token that etcd never gave their node for their partition
}

// check reads the tables and checks the load's records against them.
func (r *rig) check(l *load) figures {
	var f figures
	type acked struct {
		seq       int64
		sent, ack time.Time
	}
	var stored map[string][]int64 // by tenant and id
	r.sql(func(ctx context.Context, c *pgx.Conn) error {
		stored, f.stored = map[string][]int64{}, 0
		rows, _ := c.Query(ctx, "SELECT tenant, id, seq FROM "+r.schema+".events WHERE id LIKE $1", l.run+"-%")
		var tenant, id string
		var seq int64
		_, err := pgx.ForEachRow(rows, []any{&tenant, &id, &seq}, func() error {
			stored[tenant+"/"+id] = append(stored[tenant+"/"+id], seq)
			f.stored++
			return nil
		})
		return err
	})
	byTenant := map[string][]acked{}
	for _, w := range l.ws {
		for _, rec := range w.records {
			f.posted++
			f.resent += rec.posts - 1
			if rec.ack.IsZero() {
				f.unacked++
				continue
			}
			f.acked++
			seqs := stored[rec.tenant+"/"+rec.id]
			switch {
			case len(seqs) == 0:
				f.lost++
				continue
			case len(seqs) > 1:
				f.duplicated++
			}
			if rec.seq != seqs[0] {
				f.wrongSeq++
			}
			byTenant[rec.tenant] = append(byTenant[rec.tenant], acked{seqs[0], rec.sent, rec.ack})
		}
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
	// Within a partition, writes commit one claim after another, as a
	// claim's fence waits for the batches holding the old one; writes' n
	// follows. So a token lower than an earlier one's is a write committed
	// after a newer claim had fenced its own out.
	r.w.mu.Lock()
	claims := maps.Clone(r.w.claims)
	r.w.mu.Unlock()
	r.sql(func(ctx context.Context, c *pgx.Conn) error {
		rows, _ := c.Query(ctx, "SELECT part, token, node, coalesce(tenant, '') FROM "+r.schema+".writes ORDER BY part, n")
		var part int
		var token int64
		var node, tenant string
		last, newest := -1, int64(0)
		f.writes, f.fences, f.batches, f.stale, f.heldStale, f.unclaimed = 0, 0, 0, 0, false, 0
		_, err := pgx.ForEachRow(rows, []any{&part, &token, &node, &tenant}, func() error {
			f.writes++
			if tenant == "" {
				f.fences++
			} else {
				f.batches++
			}
			if part != last {
				last, newest = part, 0
			}
			if token < newest {
				f.stale++
				f.heldStale = f.heldStale || tenant == r.held && r.held != ""
			}
			newest = max(newest, token)
			if claims[[2]int64{int64(part), token}] != node {
				f.unclaimed++
			}
			return nil
		})
		return err
	})
	return f
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
