// Command ingest is an HTTP ingestion service that stores events per tenant
// in PostgreSQL through a ferry: each tenant's events go in batches, one
// INSERT statement (one commit) per batch, numbered per tenant in the order
// they were accepted.
//
//	POST /events        {"tenant": "acme", "id": "e1", "payload": {...}}  201 {"seq": n} once committed (Do)
//	POST /events/async  the same                                          202 once admitted (Submit)
//	POST /events/bulk   [event, ...], up to 1000                          201 once all are committed (DoMany)
//	GET  /metrics       the ferry's (ferryprom) and the service's series
//
// A batch that fails for a while (a connection lost, the server restarting, a
// lock) is tried again by the ferry (Config.Retry), each try first checking
// that the last did not commit; a backoff holds no worker. A batch that still
// fails pauses its tenant (Config.PauseOnError, HoldPaused): the ferry holds
// its events, in order, and admits async ones behind them, until the service
// resumes it after a backoff (OnPause), when the failed batch is tried first;
// meanwhile its Do requests get 503. 429 is a full waiting room (ferry.ErrRejected), 504 a
// batch past -timeout or a request past -request-timeout, 422 an event that
// PostgreSQL refuses (an async one goes to the file -spool.dead). An event's
// (tenant, id) is stored once, so a client may post it again after any
// error. On SIGTERM the service stops taking requests, runs what waits for at
// most -drain, and writes the async events it could not store to the -spool
// file, which the next start stores before it listens.
//
//	go run ./ingest -dsn postgres://... [-addr 127.0.0.1:8080]
//	go run ./ingest -load -dsn postgres://...    # a service in this process, under load, then checked
//	go run ./ingest -load -target http://127.0.0.1:8080
//
// -load posts events from -writers clients to tenants drawn from a Zipf law,
// -n events in all for at most -duration, to 127.0.0.1 only, posting again
// what is not acknowledged, and prints the events per second, the 201 path's
// latency and the events per commit. Without -target it starts the service in
// this process, on -dsn, and then checks the database: every acknowledged
// event stored once, each tenant's in the order they were acknowledged.
// -compare runs it against the batched service, then against -unbatched (one
// INSERT per event, from the handler). -trace stdout writes spans to stdout:
// each request's, and each INSERT batch's, linked to its requests' spans.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	cfg := Config{Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	flag.StringVar(&cfg.DSN, "dsn", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	flag.StringVar(&cfg.Schema, "schema", defaults.Schema, "the tables' schema, created if missing")
	flag.StringVar(&cfg.Addr, "addr", defaults.Addr, "address to listen on")
	flag.StringVar(&cfg.Spool, "spool", defaults.Spool, "file of the accepted events left at shutdown, stored at the next start")
	flag.IntVar(&cfg.MaxBatch, "batch", defaults.MaxBatch, "events per INSERT at most (ferry's MaxBatchSize)")
	flag.DurationVar(&cfg.Delay, "delay", defaults.Delay, "how long a partial batch may wait (ferry's MaxBatchDelay)")
	flag.IntVar(&cfg.Workers, "workers", defaults.Workers, "INSERTs in flight (ferry's MaxInFlightBatches); the pool has 2 connections more")
	flag.IntVar(&cfg.MaxQueued, "queued", defaults.MaxQueued, "events waiting at most; beyond, 429 (ferry's MaxQueued)")
	flag.DurationVar(&cfg.CallTimeout, "timeout", defaults.CallTimeout, "each try's time to commit a batch (ferry's CallTimeout); a batch that times out twice pauses its tenant")
	flag.DurationVar(&cfg.Request, "request-timeout", defaults.Request, "how long a 201 may take, waiting included (then 504)")
	flag.DurationVar(&cfg.Drain, "drain", defaults.Drain, "at shutdown, how long what waits may run before the rest is spooled")
	flag.BoolVar(&cfg.Unbatched, "unbatched", false, "one INSERT per event, from the handler, without a ferry")
	stop := flag.Duration("shutdown", 30*time.Second, "at shutdown, how long requests in flight may take")
	traceTo := flag.String("trace", "", "stdout: write the spans of requests and of INSERT batches (linked) to stdout; empty: no tracing")
	var lc loadConfig
	load := flag.Bool("load", false, "generate load instead of serving")
	flag.StringVar(&lc.target, "target", "", "with -load: the service's URL, on 127.0.0.1 (default: one started in this process, on -dsn)")
	flag.IntVar(&lc.n, "n", 50000, "with -load: events to post at most")
	flag.DurationVar(&lc.duration, "duration", 10*time.Second, "with -load: how long to post new events at most")
	flag.IntVar(&lc.writers, "writers", 64, "with -load: clients, each posting one request at a time")
	flag.IntVar(&lc.tenants, "tenants", 100, "with -load: tenants")
	flag.Float64Var(&lc.zipf, "zipf", 1.1, "with -load: the Zipf law's exponent s > 1 over tenants (higher: more skewed)")
	mix := flag.String("mix", "do", "with -load: the paths' weights, as do=6,async=3,bulk=1")
	flag.IntVar(&lc.bulk, "bulk", 16, "with -load: events per bulk request")
	compare := flag.Bool("compare", false, "with -load and no -target: run batched, then -unbatched, and print both")
	flag.Parse()

	tp, endTrace, err := newTracer(*traceTo, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(2)
	}
	cfg.Tracer = tp
	switch {
	case *load:
		if lc.mix, err = parseMix(*mix); err == nil {
			err = runLoad(cfg, lc, *compare, os.Stdout)
		}
	case cfg.DSN == "":
		err = fmt.Errorf("no -dsn and no $DATABASE_URL")
	default:
		err = serve(cfg, *stop)
	}
	if terr := endTrace(context.Background()); err == nil {
		err = terr
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(1)
	}
}

// serve runs the service until SIGTERM or SIGINT, then shuts it down.
func serve(cfg Config, stop time.Duration) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	cfg.Logf("ingest: listening on %s", s.Addr())
	<-ctx.Done()
	cfg.Logf("ingest: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), stop)
	defer cancel()
	return s.Shutdown(sctx)
}

// runLoad runs the load generator against lc.target, or against services of
// its own, then checks the database when it knows it.
func runLoad(cfg Config, lc loadConfig, compare bool, out io.Writer) error {
	if lc.target != "" {
		r, err := generate(context.Background(), lc)
		if err != nil {
			return err
		}
		report(out, lc, []*loadResult{r})
		return nil
	}
	if cfg.DSN == "" {
		return fmt.Errorf("-load without -target starts a service: it needs -dsn or $DATABASE_URL")
	}
	modes := []bool{cfg.Unbatched}
	if compare {
		modes = []bool{false, true}
	}
	var rs []*loadResult
	for _, unbatched := range modes {
		c := cfg
		c.Unbatched, c.Addr = unbatched, "127.0.0.1:0"
		r, err := loadService(c, lc)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	report(out, lc, rs)
	for _, r := range rs {
		if f := r.figures; f.lost+f.duplicated+f.violations+f.wrongSeq > 0 {
			return fmt.Errorf("%s: %d acknowledged events lost, %d stored twice, %d out of order, %d with a wrong number",
				r.mode, f.lost, f.duplicated, f.violations, f.wrongSeq)
		}
	}
	return nil
}

// loadService starts a service on cfg, loads it, shuts it down and checks
// what it stored.
func loadService(cfg Config, lc loadConfig) (*loadResult, error) {
	ctx := context.Background()
	s, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	lc.target = "http://" + s.Addr()
	r, err := generate(ctx, lc)
	if serr := s.Shutdown(ctx); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	r.mode = cmp.Or(map[bool]string{true: "unbatched"}[cfg.Unbatched], "ferry")
	r.figures, err = verify(ctx, cfg.DSN, cfg.Schema, r.run, r.records)
	return r, err
}

// parseMix parses the paths' weights, as do=6,async=3,bulk=1.
func parseMix(s string) ([3]int, error) {
	var w [3]int
	for part := range strings.SplitSeq(s, ",") {
		name, n, found := strings.Cut(part, "=")
		v := 1
		if found {
			if _, err := fmt.Sscan(n, &v); err != nil || v < 0 {
				return w, fmt.Errorf("-mix %q: bad weight %q", s, n)
			}
		}
		i := map[string]int{"do": pathDo, "async": pathAsync, "bulk": pathBulk}[name]
		if name != "do" && i == pathDo {
			return w, fmt.Errorf("-mix %q: no path %q (do, async or bulk)", s, name)
		}
		w[i] = v
	}
	if w[0]+w[1]+w[2] == 0 {
		return w, fmt.Errorf("-mix %q: no weight", s)
	}
	return w, nil
}
