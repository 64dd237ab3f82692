// Command graphql serves the example's GraphQL API on PostgreSQL, its N+1
// fields served one of three ways (-mode ferry|dataloadgen|naive). It seeds
// the data the first time (10,000 users, 50,000 posts, 200,000 comments, in
// a schema of their own). From examples/:
//
//	go run ./graphql -dsn postgres://user@127.0.0.1/db -mode ferry
//	curl -d '{"query":"{ user(id: 7) { name posts { title } } }"}' localhost:8080/query
//	go run ./graphql/loadgen -dsn ...   # ferry against dataloadgen, under load
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/ferrygo/ferry/examples/graphql/server"
)

func main() {
	dsn := flag.String("dsn", os.Getenv("DATABASE_URL"), "PostgreSQL address (or $DATABASE_URL)")
	mode := flag.String("mode", "ferry", "how N+1 fields are served: ferry, dataloadgen or naive")
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve on")
	conns := flag.Int("conns", 16, "PostgreSQL connections")
	slowID := flag.Int("slow-id", 0, "a user id whose read sleeps -slow-for (0: none)")
	slowFor := flag.Duration("slow-for", 2*time.Second, "how long the slow id's read sleeps")
	flag.Parse()
	m, err := server.ParseMode(*mode)
	if err != nil {
		log.Fatal(err)
	}
	if *dsn == "" {
		log.Fatal("graphql: give -dsn or $DATABASE_URL")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var tr server.Tracer
	pool, err := server.Connect(ctx, *dsn, server.Full, *conns, &tr)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	s, err := server.New(pool, &tr, server.Options{Mode: m, SlowID: *slowID, SlowFor: *slowFor})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	srv := &http.Server{Addr: *addr, Handler: s}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	log.Printf("graphql: %s mode on http://%s/query", m, *addr)
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
