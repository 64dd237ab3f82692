// Command cluster is an ingestion service of several processes, the nodes,
// that share the tenants through etcd. Each tenant has one writer across all
// of them: its events go through one node's ferry, in batches, one
// PostgreSQL transaction per batch.
//
//	POST /events  {"tenant": "acme", "id": "e1", "payload": {...}}  201 {"seq": n, "node": ..., "token": ...} once committed
//	GET  /stats   the node's counters
//
// Tenants hash to a fixed number of partitions (-partitions). Each node holds
// an etcd lease (-ttl) and claims its fair share of the partitions under it;
// it watches the claims, and forwards a request for a partition it does not
// serve to the node that does. When a node dies its lease ends, and the
// others claim its partitions: its tenants wait -ttl at most.
//
// A claim's token is its etcd revision, which only grows. The new owner
// writes it to the partition's fence in PostgreSQL before it serves the
// partition, and every batch's transaction checks the fence. So a node that
// lost its claim (paused, cut off, its lease expired) cannot commit the
// batches it still holds after the new owner's claim. Its callers get 503,
// and the client posts again; an event's (tenant, id) is stored once.
//
// On SIGTERM a node stops taking requests and runs what its ferry holds.
// Only then does it revoke its lease: the next owners start after its last
// batch committed.
//
//	go run ./cluster -dsn postgres://... -etcd 127.0.0.1:2379 -addr 127.0.0.1:8081 -name n1
//	sh cluster/run.sh    # etcd and PostgreSQL on 127.0.0.1, then the test: 3 nodes, kill -9, SIGTERM, SIGSTOP
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	cfg := Config{Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
	flag.StringVar(&cfg.Name, "name", "", "the node's name, unique in the cluster (default: its address)")
	flag.StringVar(&cfg.DSN, "dsn", os.Getenv("DATABASE_URL"), "PostgreSQL connection string (default $DATABASE_URL)")
	flag.StringVar(&cfg.Schema, "schema", defaults.Schema, "the tables' schema, created if missing")
	etcd := flag.String("etcd", "127.0.0.1:2379", "etcd's endpoints, comma-separated")
	flag.StringVar(&cfg.Prefix, "prefix", defaults.Prefix, "the cluster's keys in etcd")
	flag.StringVar(&cfg.Addr, "addr", defaults.Addr, "address to listen on, advertised to the other nodes")
	flag.IntVar(&cfg.Partitions, "partitions", defaults.Partitions, "partitions of the tenants; the same on every node")
	flag.DurationVar(&cfg.TTL, "ttl", defaults.TTL, "the etcd lease's TTL, whole seconds: how long a dead node's tenants wait")
	flag.IntVar(&cfg.MaxBatch, "batch", defaults.MaxBatch, "events per transaction at most (ferry's MaxBatchSize)")
	flag.DurationVar(&cfg.Delay, "delay", defaults.Delay, "how long a partial batch may wait (ferry's MaxBatchDelay)")
	flag.IntVar(&cfg.Workers, "workers", defaults.Workers, "transactions in flight (ferry's MaxInFlightBatches)")
	flag.IntVar(&cfg.MaxQueued, "queued", defaults.MaxQueued, "events waiting at most; beyond, 429 (ferry's MaxQueued)")
	flag.DurationVar(&cfg.CallTimeout, "timeout", defaults.CallTimeout, "each try's time to commit a batch (ferry's CallTimeout)")
	flag.DurationVar(&cfg.Request, "request-timeout", defaults.Request, "how long a 201 may take, waiting and forwarding included")
	flag.DurationVar(&cfg.Drain, "drain", defaults.Drain, "at shutdown, how long what waits may run")
	stop := flag.Duration("shutdown", 30*time.Second, "at shutdown, how long requests in flight may take")
	flag.Parse()
	cfg.Etcd = strings.Split(*etcd, ",")
	if err := serve(cfg, *stop); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// serve runs a node until SIGTERM or SIGINT, then shuts it down and prints
// its counters on stdout, as a line "stats {...}".
func serve(cfg Config, stop time.Duration) error {
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer cancel()
	s, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	s.cfg.Logf("cluster: %s listening on %s", s.Name(), s.Addr())
	<-ctx.Done()
	s.cfg.Logf("cluster: %s shutting down", s.Name())
	sctx, cancel := context.WithTimeout(context.Background(), stop)
	defer cancel()
	err = s.Shutdown(sctx)
	line, _ := json.Marshal(s.Stats())
	fmt.Printf("stats %s\n", line)
	return err
}
