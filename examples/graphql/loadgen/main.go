// Command loadgen compares the GraphQL example's ferry mode with its
// dataloadgen mode under load, and prints ferry / dataloadgen ratios. From
// examples/, on a database it seeds the first time (as ./graphql does):
//
//	go run ./graphql/loadgen -dsn postgres://user@127.0.0.1/db
//	go run ./graphql/loadgen -ferry http://host:8080 -dataloadgen http://host:8081
//
// The first starts both servers in this process; the second targets two
// running ones (./graphql -mode ferry, and -mode dataloadgen). Closed-loop
// clients post one of two queries: "user page" (a user, their 5 posts and
// each post's author) and "posts" (50 posts, their authors, 10 comments each
// and their authors). For each query and number of clients the modes take
// turns, in an order that alternates from round to round, and each run
// reports requests/s, p50 and p99 latency, and statements per request (from
// the server's GET /stats). The table gives each figure's median over the
// rounds, and ferry's ratio to dataloadgen.
//
// Then the slow run: one user's read sleeps 2 s (pg_sleep), one client
// asks for that user's page over and over, and the other clients for other
// users' pages; it prints the others' median and p99 latency in each mode.
// With -ferry and -dataloadgen the servers must have been started with
// -slow-id (the same id as here) for that run; -slow-id 0 skips it. -delay,
// -calls and -batch set the ferry mode's MaxBatchDelay, MaxCallsPerKey and
// MaxBatchSize; -queries picks the queries.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrygo/ferry/examples/graphql/server"
	"github.com/ferrygo/ferry/load"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	userPage = `query($id: ID!) { user(id: $id) { id name email posts { id title author { id name } } } }`
	posts    = `query($after: ID) { posts(first: 50, after: $after) {
		id title author { id name } comments { id body author { id name } } } }`
)

// target is one mode's server: its URL and how many statements it has sent.
type target struct {
	mode server.Mode
	url  string
}

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL address, to start both servers here (or $DATABASE_URL)")
	ferryURL := flag.String("ferry", "", "a running server in ferry mode (with -dataloadgen)")
	dlgURL := flag.String("dataloadgen", "", "a running server in dataloadgen mode (with -ferry)")
	clientsFlag := flag.String("clients", "1,16,64,256", "numbers of concurrent clients")
	rounds := flag.Int("rounds", 3, "rounds: each runs every query, client count and mode once")
	dur := flag.Duration("dur", 3*time.Second, "how long each run is measured at least, after a warm-up")
	conns := flag.Int("conns", 16, "PostgreSQL connections of each server started here")
	slowID := flag.Int("slow-id", 13, "the slow run's user (0: no slow run)")
	slowClients := flag.Int("slow-clients", 64, "clients of the slow run, the slow one among them")
	delay := flag.Duration("delay", 0, "the ferry mode's MaxBatchDelay, for servers started here")
	calls := flag.Int("calls", 0, "the ferry mode's MaxCallsPerKey, for servers started here (0: load's default)")
	batch := flag.Int("batch", 0, "the ferry mode's MaxBatchSize, for servers started here (0: load's default)")
	queriesFlag := flag.String("queries", "user page,posts", "the queries to run: user page, posts, or both")
	flag.Parse()
	var clients []int
	for _, s := range strings.Split(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			log.Fatalf("loadgen: bad -clients %q", *clientsFlag)
		}
		clients = append(clients, n)
	}
	var queries []string
	for _, q := range strings.Split(*queriesFlag, ",") {
		if q = strings.TrimSpace(q); q != "user page" && q != "posts" {
			log.Fatalf("loadgen: bad -queries %q: user page, posts", *queriesFlag)
		}
		queries = append(queries, q)
	}
	ctx := context.Background()
	var modes, slow [2]target
	switch {
	case *ferryURL != "" && *dlgURL != "":
		modes = [2]target{{server.Ferry, *ferryURL}, {server.Dataloadgen, *dlgURL}}
		slow = modes
	case *dsn != "":
		modes, slow = startServers(ctx, *dsn, *conns, *slowID, load.Config{MaxBatchDelay: *delay, MaxCallsPerKey: *calls, MaxBatchSize: *batch})
	default:
		log.Fatal("loadgen: give -dsn (or $DATABASE_URL), or -ferry and -dataloadgen")
	}
	sizes := server.Full
	http.DefaultTransport.(*http.Transport).MaxIdleConnsPerHost = 1024

	fmt.Printf("loadgen: %d rounds of %v per run, clients %v; ferry's MaxBatchDelay %v, MaxCallsPerKey %d (0: %d), MaxBatchSize %d (0: %d)\n\n",
		*rounds, *dur, clients, *delay, *calls, load.DefaultMaxCallsPerKey, *batch, load.DefaultMaxBatchSize)
	type cell struct {
		query   string
		clients int
		mode    server.Mode
	}
	results := map[cell][]result{}
	for r := range *rounds {
		for _, q := range queries {
			for _, n := range clients {
				order := modes
				if (r+n)%2 == 1 {
					order[0], order[1] = order[1], order[0]
				}
				for _, t := range order {
					res := run(t, n, *dur, func(rnd *rand.Rand) (string, map[string]any) {
						if q == "user page" {
							return userPage, map[string]any{"id": 1 + rnd.IntN(sizes.Users)}
						}
						return posts, map[string]any{"after": rnd.IntN(sizes.Commented() - 50)}
					})
					c := cell{q, n, t.mode}
					results[c] = append(results[c], res)
					fmt.Fprintf(os.Stderr, "round %d, %s, %d clients, %s: %s\n", r+1, q, n, t.mode, res)
				}
			}
		}
	}
	fmt.Println("| query | clients | ferry req/s | dataloadgen req/s | req/s ratio | p50 ratio | p99 ratio | ferry stmt/req | dataloadgen stmt/req | stmt ratio |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, q := range queries {
		for _, n := range clients {
			f, d := median(results[cell{q, n, server.Ferry}]), median(results[cell{q, n, server.Dataloadgen}])
			fmt.Printf("| %s | %d | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", q, n,
				f.rps, d.rps, f.rps/d.rps, ratio(f.p50, d.p50), ratio(f.p99, d.p99), f.stmts, d.stmts, f.stmts/d.stmts)
		}
	}
	if *slowID == 0 {
		return
	}
	fmt.Printf("\nslow run: user %d's read sleeps 2 s; 1 client asks for their page, %d others for other users'\n\n",
		*slowID, *slowClients-1)
	others := map[server.Mode][]result{}
	for r := range *rounds {
		order := slow
		if r%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, t := range order {
			res := runSlow(t, *slowClients, 3*time.Second, *slowID, sizes)
			others[t.mode] = append(others[t.mode], res)
			fmt.Fprintf(os.Stderr, "slow round %d, %s: others %s\n", r+1, t.mode, res)
		}
	}
	f, d := median(others[server.Ferry]), median(others[server.Dataloadgen])
	fmt.Println("| others' | ferry | dataloadgen | ratio |")
	fmt.Println("|---|---:|---:|---:|")
	fmt.Printf("| p50 | %v | %v | %.2f |\n", f.p50, d.p50, ratio(f.p50, d.p50))
	fmt.Printf("| p99 | %v | %v | %.2f |\n", f.p99, d.p99, ratio(f.p99, d.p99))
	fmt.Printf("| req/s | %.0f | %.0f | %.2f |\n", f.rps, d.rps, f.rps/d.rps)
}

// startServers starts a server per mode in this process, each on a pool of
// conns connections of its own. For the slow run it starts one more per
// mode, on the same pool, whose user slowID's read sleeps 2 s. cfg
// configures the ferry mode's loaders.
func startServers(ctx context.Context, dsn string, conns, slowID int, cfg load.Config) (modes, slow [2]target) {
	for i, m := range []server.Mode{server.Ferry, server.Dataloadgen} {
		tr := new(server.Tracer)
		pool, err := server.Connect(ctx, dsn, server.Full, conns, tr)
		if err != nil {
			log.Fatal(err)
		}
		modes[i] = target{m, serve(pool, tr, server.Options{Mode: m, Load: cfg})}
		slow[i] = target{m, serve(pool, tr, server.Options{Mode: m, Load: cfg, SlowID: slowID, SlowFor: 2 * time.Second})}
	}
	return modes, slow
}

// serve starts a Server on a port of its own and returns its URL.
func serve(pool *pgxpool.Pool, tr *server.Tracer, o server.Options) string {
	s, err := server.New(pool, tr, o)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go http.Serve(ln, s)
	return "http://" + ln.Addr().String()
}

// result is one run's figures: requests/s, latency percentiles and
// statements per request.
type result struct {
	rps      float64
	p50, p99 time.Duration
	stmts    float64
}

func (r result) String() string {
	return fmt.Sprintf("%.0f req/s, p50 %v, p99 %v, %.2f statements/req", r.rps, r.p50, r.p99, r.stmts)
}

// median is the median of each figure over rs.
func median(rs []result) result {
	if len(rs) == 0 {
		return result{}
	}
	mid := func(vs []float64) float64 {
		slices.Sort(vs)
		if len(vs)%2 == 1 {
			return vs[len(vs)/2]
		}
		return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
	}
	var rps, p50, p99, st []float64
	for _, r := range rs {
		rps, p50, p99, st = append(rps, r.rps), append(p50, float64(r.p50)), append(p99, float64(r.p99)), append(st, r.stmts)
	}
	return result{mid(rps), time.Duration(mid(p50)), time.Duration(mid(p99)), mid(st)}
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// run drives n closed-loop clients against t, asking what next returns:
// a warm-up until every client has had an answer and dur/6 has passed,
// then a window of dur, or twice the warm-up if longer. It reports the requests answered in the window,
// per second, their latencies, and the statements t sent in the window
// per request answered in it.
func run(t target, n int, dur time.Duration, next func(*rand.Rand) (string, map[string]any)) result {
	type done struct{ start, end time.Time }
	var stop atomic.Bool
	var mu sync.Mutex
	var all []done
	var wg sync.WaitGroup
	var errs atomic.Int64
	warm := make(chan struct{}, n)
	for c := range n {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			var mine []done
			for i := 0; !stop.Load(); i++ {
				q, vars := next(rnd)
				start := time.Now()
				if err := ask(t.url, q, vars); err != nil && errs.Add(1) <= 3 {
					log.Printf("loadgen: %s: %v", t.mode, err)
				}
				mine = append(mine, done{start, time.Now()})
				if i == 0 {
					warm <- struct{}{}
				}
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		})
	}
	began := time.Now()
	warmup := time.After(dur / 6)
	for range n {
		<-warm
	}
	<-warmup
	// A window shorter than a few latencies counts too few answers: at 256
	// clients of the posts query a request takes seconds on 2 cores.
	window := max(dur, 2*time.Since(began))
	before := statements(t.url)
	t0 := time.Now()
	time.Sleep(window)
	sent := statements(t.url) - before
	t1 := time.Now()
	stop.Store(true)
	wg.Wait()
	if errs.Load() > 0 {
		log.Fatalf("loadgen: %s: %d errors", t.mode, errs.Load())
	}
	var lats []time.Duration
	for _, d := range all {
		if !d.end.Before(t0) && d.end.Before(t1) {
			lats = append(lats, d.end.Sub(d.start))
		}
	}
	if len(lats) == 0 {
		log.Fatalf("loadgen: %s: no request answered in %v; give a longer -dur", t.mode, dur)
	}
	slices.Sort(lats)
	return result{
		rps:   float64(len(lats)) / t1.Sub(t0).Seconds(),
		p50:   lats[len(lats)/2],
		p99:   lats[len(lats)*99/100],
		stmts: float64(sent) / float64(len(lats)),
	}
}

// runSlow runs n clients against t for dur: one asks for user slowID's
// page again and again, the others for other users' pages. It returns the
// others' figures.
func runSlow(t target, n int, dur time.Duration, slowID int, sizes server.Sizes) result {
	var slowDone sync.WaitGroup
	stop := make(chan struct{})
	slowDone.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := ask(t.url, userPage, map[string]any{"id": slowID}); err != nil {
				log.Printf("loadgen: slow client: %v", err)
			}
		}
	})
	res := run(t, n-1, dur, func(rnd *rand.Rand) (string, map[string]any) {
		id := 1 + rnd.IntN(sizes.Users)
		if id == slowID {
			id++
		}
		return userPage, map[string]any{"id": id}
	})
	close(stop)
	slowDone.Wait()
	return res
}

// ask posts a query and fails on any GraphQL error.
func ask(url, q string, vars map[string]any) error {
	body, err := json.Marshal(map[string]any{"query": q, "variables": vars})
	if err != nil {
		return err
	}
	resp, err := http.Post(url+"/query", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || bytes.Contains(b, []byte(`"errors"`)) {
		return fmt.Errorf("%s: %.300s", resp.Status, b)
	}
	return nil
}

// statements reads the server's count of statements sent.
func statements(url string) int64 {
	resp, err := http.Get(url + "/stats")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var s server.Stats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		log.Fatal(err)
	}
	return s.Statements
}
