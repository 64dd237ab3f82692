// Package server is the GraphQL example's server: a gqlgen schema of
// users, posts and comments on PostgreSQL, its N+1 fields served in one of
// three modes (ferry, dataloadgen, naive).
package server

import (
	"cmp"
	"encoding/json"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/ferrygo/ferry/load"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configures a Server.
type Options struct {
	Mode Mode
	// Load configures the ferry mode's loaders: the load package's
	// defaults when zero, but MaxQueued, RoomIDs when zero.
	Load load.Config
	// SlowID, if not 0, is a user id whose read sleeps SlowFor in
	// PostgreSQL (pg_sleep), with the other ids of its statement.
	SlowID  int
	SlowFor time.Duration
}

// RoomIDs is the ferry mode's MaxQueued, in ids, unless Options.Load sets
// it: 256 clients of the posts query (550 loads each) hold up to 140,800
// ids at once, past the load package's default of 65,536.
const RoomIDs = 1 << 18

// Server serves POST /query in its mode, and GET /stats.
type Server struct {
	mode  Mode
	tr    *Tracer
	fl    *ferryLoaders
	http  http.Handler
	start time.Time
}

// New returns a Server over pool, whose statements tr counts. Close
// releases the ferry mode's loaders.
func New(pool *pgxpool.Pool, tr *Tracer, o Options) (*Server, error) {
	db := &store{pool: pool, slowID: o.SlowID, slowFor: o.SlowFor}
	s := &Server{mode: o.Mode, tr: tr, start: time.Now()}
	r := &Resolver{db: db}
	switch o.Mode {
	case Ferry:
		cfg := o.Load
		cfg.MaxQueued = cmp.Or(cfg.MaxQueued, RoomIDs)
		fl, err := newFerryLoaders(db, cfg)
		if err != nil {
			return nil, err
		}
		s.fl, r.ld = fl, fl
	case Dataloadgen:
		r.ld = dataloadgenLoaders{}
	default:
		r.ld = naive{db}
	}
	gql := handler.New(NewExecutableSchema(Config{Resolvers: r}))
	gql.AddTransport(transport.POST{})
	var h http.Handler = gql
	switch o.Mode {
	case Ferry:
		next := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r.WithContext(load.WithMemo(r.Context()))) // a memo per request
		})
	case Dataloadgen:
		h = dataloadgenMiddleware(db, h)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /query", h)
	mux.HandleFunc("GET /stats", s.stats)
	s.http = mux
	return s, nil
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.http.ServeHTTP(w, r) }

// Stats is what GET /stats answers.
type Stats struct {
	Mode       Mode  `json:"mode"`
	Statements int64 `json:"statements"` // sent since the pool was made
	InFlight   int64 `json:"in_flight"`  // statements in flight now
}

func (s *Server) stats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(Stats{Mode: s.mode, Statements: s.tr.Sent(), InFlight: s.tr.InFlight()})
}

// Close releases the ferry mode's loaders: their waiting loads get
// ferry.ErrClosed.
func (s *Server) Close() {
	if s.fl != nil {
		s.fl.close()
	}
}
