// Package load is a loader for id-to-value reads in front of a ferry: many
// goroutines Load ids, and the ids of one scope that wait together reach the
// user's fetch as one batch, equal ids once. It is the N+1 fix of a GraphQL
// server, shared by every request of the process rather than made per request.
//
// A Loader is one ferry whose key is the caller's scope (Config.Scope: a
// tenant, a user, a role), so batches cross requests but never scopes. It
// makes direct calls: an idle scope's Load is fetched at once by its
// caller, and batching grows with load. WithMemo gives a request a memo, so
// that an id it loaded, or is loading, is not fetched again within it.
package load

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ferrygo/ferry"
)

// Defaults for the zero fields of Config, chosen for reads. Two fetches per
// scope is the least that keeps a slow fetch to its own batch; each more
// adds a fetch per level to a lone request's fan-out. docs/reads.md gives
// the measurements.
const (
	DefaultMaxBatchSize       = 250   // ids per fetch
	DefaultMaxCallsPerKey     = 2     // fetches of one scope in flight at once
	DefaultMaxInFlightBatches = 16    // batched fetches in flight across scopes
	DefaultMaxQueued          = 65536 // ids waiting across scopes
)

// ErrNotFound is matched by the error of a Load whose id was missing from
// the map its fetch returned; the id's other callers get it too, and the
// batch's other ids are not affected.
var ErrNotFound = errors.New("load: not found")

// Fetch returns the values of ids, which are distinct, in one round trip.
// An id missing from the map is not found (ErrNotFound for its callers); an
// error fails every id of the batch. ctx is the batch's: ScopeOf gives its
// scope. A batched fetch's ctx carries no caller's values; a direct one's is
// its caller's (see ferry.Call). ids is reused after it returns.
type Fetch[ID comparable, V any] func(ctx context.Context, ids []ID) (map[ID]V, error)

// Config configures a Loader. Every zero field means its documented
// default, and a negative one is invalid: New rejects it. The bounds are
// those of the ferry under the Loader (see ferry.Config), whose key is the
// scope, and whose inputs are ids.
type Config struct {
	// Scope returns the scope of a Load's ctx (a tenant, a user, a role): a
	// comparable value, the ferry's key, so that one fetch never serves two
	// scopes. It runs on the caller's goroutine, once per Load or LoadMany.
	// A scope that is not comparable, or not equal to itself, is an error
	// from Load. nil: one scope, nil, for every Load.
	Scope func(ctx context.Context) any

	MaxBatchSize       int           // ids per fetch, counting repeats; 0: DefaultMaxBatchSize
	MaxBatchDelay      time.Duration // how long a partial batch waits for more ids; 0: none, and direct calls
	MaxCallsPerKey     int           // fetches of one scope in flight at once, batched and direct; 0: DefaultMaxCallsPerKey
	MaxInFlightBatches int           // batched fetches in flight across scopes; 0: DefaultMaxInFlightBatches
	MaxQueued          int           // ids waiting across scopes (each Load is one, each id of a LoadMany one); beyond it ferry.ErrRejected; 0: DefaultMaxQueued
	CallTimeout        time.Duration // a fetch's ctx ends this long after it starts (ferry.ErrCallTimeout); 0: none
	Shards             int           // the ferry's loops, scopes spread by hash; 0: one without Scope (one key needs one loop), else GOMAXPROCS, at most MaxInFlightBatches

	// OnBatch is told of every finished fetch, off the ferry's loop, as
	// ferry.Config.OnBatch: Key is the scope, Size the ids (repeats
	// counted), Err the fetch's error, or a ferry.Errors naming the ids not
	// found. nil: none.
	OnBatch func(ferry.Batch[any])
}

// req is one id waiting, with its scope, the ferry's key.
type req[ID comparable] struct {
	scope any
	id    ID
}

// Loader loads values by id in batches, one ferry under it. Create one with
// New; its zero value is not usable. Its methods are safe for concurrent
// use and run on their callers' goroutines.
type Loader[ID comparable, V any] struct {
	f     *ferry.Ferry[any, req[ID], V]
	fetch Fetch[ID, V]
	scope func(context.Context) any
}

// New returns a running Loader over fetch. It returns an error if fetch is
// nil or a field of cfg is invalid (named as the ferry names it). Release
// it with Close.
func New[ID comparable, V any](fetch Fetch[ID, V], cfg Config) (*Loader[ID, V], error) {
	if fetch == nil {
		return nil, errors.New("load: fetch is nil")
	}
	l := &Loader[ID, V]{fetch: fetch, scope: cfg.Scope}
	fc := ferry.Config[any, req[ID]]{
		Key:                func(r req[ID]) any { return r.scope },
		MaxBatchSize:       cmp.Or(cfg.MaxBatchSize, DefaultMaxBatchSize),
		MaxBatchDelay:      cfg.MaxBatchDelay,
		MaxCallsPerKey:     cmp.Or(cfg.MaxCallsPerKey, DefaultMaxCallsPerKey),
		MaxInFlightBatches: cmp.Or(cfg.MaxInFlightBatches, DefaultMaxInFlightBatches),
		MaxQueued:          cmp.Or(cfg.MaxQueued, DefaultMaxQueued),
		CallTimeout:        cfg.CallTimeout,
		Shards:             cfg.Shards,
		OnBatch:            cfg.OnBatch,
		DirectCalls:        true,
	}
	if fc.Shards == 0 && cfg.Scope == nil {
		fc.Shards = 1 // one scope: the other loops would only share its room and slots
	}
	f, err := ferry.New(l.call, fc)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	l.f = f
	return l, nil
}

// scopeKey is the context key of a fetch's scope.
type scopeKey struct{}

// ScopeOf returns, inside a fetch, the scope of its batch (what Config.Scope
// returned for its ids' callers; nil with one scope). Elsewhere it returns
// nil. It reads ctx.Value and blocks on nothing.
func ScopeOf(ctx context.Context) any {
	return ctx.Value(scopeKey{})
}

// call is the ferry's call: one fetch of the batch's distinct ids, and each
// input's value, or ErrNotFound for an id missing from the map.
func (l *Loader[ID, V]) call(ctx context.Context, scope any, reqs []req[ID]) ([]V, error) {
	ids := make([]ID, 0, len(reqs))
	if len(reqs) == 1 {
		ids = append(ids, reqs[0].id)
	} else {
		seen := make(map[ID]struct{}, len(reqs))
		for _, r := range reqs {
			if _, ok := seen[r.id]; !ok {
				seen[r.id] = struct{}{}
				ids = append(ids, r.id)
			}
		}
	}
	m, err := l.fetch(context.WithValue(ctx, scopeKey{}, scope), ids)
	if err != nil {
		return nil, err
	}
	outs := make([]V, len(reqs))
	var errs ferry.Errors
	for i, r := range reqs {
		v, ok := m[r.id]
		if !ok {
			if errs == nil {
				errs = make(ferry.Errors, len(reqs))
			}
			errs[i] = notFound(r.id)
			continue
		}
		outs[i] = v
	}
	if errs != nil {
		return outs, errs
	}
	return outs, nil
}

// notFound is the error of an id missing from its fetch's map.
func notFound[ID comparable](id ID) error {
	return fmt.Errorf("%w: id %v", ErrNotFound, id)
}

// scopeOf is the scope of ctx, nil without Config.Scope.
func (l *Loader[ID, V]) scopeOf(ctx context.Context) any {
	if l.scope == nil {
		return nil
	}
	return l.scope(ctx)
}

// Load returns the value of id in the scope of ctx. It blocks until the
// fetch of its batch returns (an idle scope's Load makes that fetch itself,
// in ctx), or ctx ends (then an error matching ctx's, as ferry.Ferry.Do's).
// The error matches ErrNotFound if the fetch's map lacks id, is the fetch's
// error if it failed (a *ferry.PanicError if it panicked), and is
// ferry.ErrRejected when MaxQueued ids wait, or ferry.ErrClosed after Close.
// With a memo in ctx (WithMemo), an id the request loaded, or is loading,
// is not fetched again: Load waits for that load's answer, or ctx's end.
func (l *Loader[ID, V]) Load(ctx context.Context, id ID) (V, error) {
	scope := l.scopeOf(ctx)
	if m := memoOf(ctx); m != nil {
		return l.loadMemo(ctx, m, scope, id)
	}
	return l.f.Do(ctx, req[ID]{scope, id})
}

// LoadMany returns the values of ids in the scope of ctx, in order, after
// one admission for them all (ferry.Ferry.DoMany): none waits if the room
// cannot hold them all. It blocks until every id is answered or ctx ends.
// When any id failed, the error is a ferry.Errors with one entry per id
// (ErrNotFound, the fetch's error, ferry.ErrRejected, ctx's error: as
// Load's), and the values of the others are filled in. Equal ids are
// fetched once per batch. An empty ids gives (empty, nil). With a memo in
// ctx, as Load, the ids it lacks are loaded in one admission.
func (l *Loader[ID, V]) LoadMany(ctx context.Context, ids []ID) ([]V, error) {
	scope := l.scopeOf(ctx)
	if m := memoOf(ctx); m != nil {
		return l.loadManyMemo(ctx, m, scope, ids)
	}
	return l.doMany(ctx, scope, ids)
}

// doMany loads ids through DoMany, its error made an Errors.
func (l *Loader[ID, V]) doMany(ctx context.Context, scope any, ids []ID) ([]V, error) {
	if len(ids) == 0 {
		return []V{}, nil
	}
	reqs := make([]req[ID], len(ids))
	for i, id := range ids {
		reqs[i] = req[ID]{scope, id}
	}
	outs, err := l.f.DoMany(ctx, reqs)
	if outs == nil {
		outs = make([]V, len(ids))
	}
	return outs, perID(err, len(ids))
}

// perID makes err, DoMany's, one with an entry per input: itself if it is
// an Errors already, else an Errors of n entries of err. nil stays nil.
func perID(err error, n int) error {
	if err == nil {
		return nil
	}
	if errs, ok := err.(ferry.Errors); ok {
		return errs
	}
	errs := make(ferry.Errors, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// Close answers every waiting Load with ferry.ErrClosed, cancels the
// fetches in flight and blocks until they return (as ferry.Ferry.Close).
// It returns nil, and may be called more than once.
func (l *Loader[ID, V]) Close() error {
	return l.f.Close()
}

// Stats returns a snapshot of the ferry under the Loader (ferry.Ferry.Stats):
// Queued counts ids, Batches and DirectCalls the fetches. It blocks only for
// the ferry's loops' turns.
func (l *Loader[ID, V]) Stats() ferry.Stats {
	return l.f.Stats()
}
