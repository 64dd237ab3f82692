package load

import (
	"context"
	"errors"
	"hash/maphash"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/internal/keycheck"
)

// This file is the per-request memo: a map per loader and scope from id to
// an entry, loaded or loading. The maps are held in a channel of capacity
// 1 that a caller takes, changes and puts back: a request's concurrent
// resolvers share them without a lock.

// memoKey is the context key of a request's memo.
type memoKey struct{}

// memo is one request's memo: its tables, one per Loader and scope (a
// map[ID]*entry[V] under a tableKey), split over
// memoStripes channels by a hash of the id, each holding its part while no
// caller holds it, so that a request's concurrent resolvers seldom meet.
type memo struct {
	stripes [memoStripes]chan map[tableKey]any
}

// memoStripes is how many parts a memo is split into.
const memoStripes = 16

// memoSeed is the seed of the ids' hash, for every memo.
var memoSeed = maphash.MakeSeed()

// stripeOf is the index of the part of a memo that holds id, by its hash.
// It panics, holding nothing, for an id of an interface type that no map
// could hold.
func stripeOf[ID comparable](id ID) uint8 {
	return uint8(maphash.Comparable(memoSeed, id) % memoStripes)
}

// tableKey names a table of a memo's stripe: its Loader (a pointer) and
// scope. The ids of one scope share a table, so its keys are bare ids.
type tableKey struct {
	loader any
	scope  any
}

// entry is an id's load in a memo: v and err are written once, with the
// memo's tables in hand, before settled is set, and read after. done is made
// by the first Load that waits for it, with the tables in hand, and closed as
// the entry settles: an id loaded once makes no channel. gaveUp says that its
// loader's ctx ended first, so that those waiting for it load the id
// themselves. stripe is the part of the memo that holds it, so that settle
// need not hash its id again.
type entry[V any] struct {
	done    chan struct{}
	stripe  uint8
	settled bool
	v       V
	err     error
	gaveUp  bool
}

// WithMemo returns a ctx whose Loads share a new memo, for one request: an
// id loaded by one of them (found, or not found) is not fetched again, and
// one being loaded is waited for, whatever goroutine loads it. A fetch's
// other errors are given to the Loads that waited for it and not kept: a
// later Load fetches again. A Load whose ctx ends before its answer leaves
// the id to those still waiting, who load it again. The memo hides any
// memo ctx had, and its entries are per Loader and scope. It holds every
// value the request loaded until ctx is no longer used. It blocks on nothing.
func WithMemo(ctx context.Context) context.Context {
	m := &memo{}
	for i := range m.stripes {
		m.stripes[i] = make(chan map[tableKey]any, 1)
		m.stripes[i] <- map[tableKey]any{}
	}
	return context.WithValue(ctx, memoKey{}, m)
}

// memoOf is ctx's memo, nil if none.
func memoOf(ctx context.Context) *memo {
	m, _ := ctx.Value(memoKey{}).(*memo)
	return m
}

// table returns l's table of scope in tabs, the memo's, made if it had
// none. scope must pass checkScope.
func (l *Loader[ID, V]) table(tabs map[tableKey]any, scope any) map[ID]*entry[V] {
	k := tableKey{l, scope}
	t, ok := tabs[k].(map[ID]*entry[V])
	if !ok {
		t = map[ID]*entry[V]{}
		tabs[k] = t
	}
	return t
}

// checkScope refuses a scope that no map could hold as a key, as the
// ferry refuses such a key: the memo's tables are keyed on it first.
func checkScope(scope any) error { return keycheck.Err(scope, "load: scope") }

// claim finds the entries of ids in m, and makes those it lacks: mine
// lists the indexes of ids whose entries it made, which the caller must
// settle. Equal ids share one entry.
func (l *Loader[ID, V]) claim(m *memo, scope any, ids []ID) (es []*entry[V], mine []int) {
	es = make([]*entry[V], len(ids))
	for i, id := range ids {
		e, ok := l.claimOne(m, scope, id)
		if ok {
			mine = append(mine, i)
		}
		es[i] = e
	}
	return es, mine
}

// claimOne is claim for one id, without claim's slices: mine says that
// it made e, which the caller must settle.
func (l *Loader[ID, V]) claimOne(m *memo, scope any, id ID) (e *entry[V], mine bool) {
	i := stripeOf(id)
	c := m.stripes[i]
	tabs := <-c
	defer func() { c <- tabs }() // even if an id of an interface type panics as a key
	t := l.table(tabs, scope)
	if e, ok := t[id]; ok {
		if !e.settled && e.done == nil { // its caller waits for it: see await
			e.done = make(chan struct{})
		}
		return e, false
	}
	e = &entry[V]{stripe: i}
	t[id] = e
	return e, true
}

// settle gives e, the entry of id made by a claim, its answer, and takes
// it out of m unless it is kept: a value, or not found. gaveUp says that
// the claimer's ctx ended before the answer.
func (l *Loader[ID, V]) settle(m *memo, scope any, id ID, e *entry[V], v V, err error, gaveUp bool) {
	c := m.stripes[e.stripe]
	tabs := <-c
	e.v, e.err, e.gaveUp = v, err, gaveUp && err != nil
	e.settled = true
	if err != nil && (e.gaveUp || !errors.Is(err, ErrNotFound)) {
		if t := l.table(tabs, scope); t[id] == e {
			delete(t, id)
		}
	}
	done := e.done
	c <- tabs
	if done != nil {
		close(done)
	}
}

// await waits for e's answer or ctx's end; again says that e's claimer gave
// up while ctx holds, and the id must be loaded again.
func await[V any](ctx context.Context, e *entry[V]) (v V, again bool, err error) {
	if e.done != nil { // nil: settled before it was claimed
		select {
		case <-e.done:
		case <-ctx.Done():
			return v, false, ctx.Err()
		}
	}
	if e.gaveUp {
		if err := ctx.Err(); err != nil {
			return v, false, err
		}
		return v, true, nil
	}
	return e.v, false, e.err
}

// loadMemo is Load with a memo.
func (l *Loader[ID, V]) loadMemo(ctx context.Context, m *memo, scope any, id ID) (V, error) {
	if err := checkScope(scope); err != nil {
		var zero V
		return zero, err
	}
	for {
		e, mine := l.claimOne(m, scope, id)
		if mine {
			v, err := l.f.Do(ctx, req[ID]{scope, id})
			l.settle(m, scope, id, e, v, err, ctx.Err() != nil)
			return v, err
		}
		v, again, err := await(ctx, e)
		if !again {
			return v, err
		}
	}
}

// loadManyMemo is LoadMany with a memo: the ids m lacks are loaded in one
// admission, and those loading elsewhere are waited for, after.
func (l *Loader[ID, V]) loadManyMemo(ctx context.Context, m *memo, scope any, ids []ID) ([]V, error) {
	if len(ids) == 0 {
		return []V{}, nil
	}
	outs := make([]V, len(ids))
	if err := checkScope(scope); err != nil {
		return outs, perID(err, len(ids))
	}
	var errs ferry.Errors
	fail := func(i int, err error) {
		if errs == nil {
			errs = make(ferry.Errors, len(ids))
		}
		errs[i] = err
	}
	todo := make([]int, len(ids)) // indexes of the ids not answered yet
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		want := make([]ID, len(todo))
		for j, i := range todo {
			want[j] = ids[i]
		}
		es, mine := l.claim(m, scope, want)
		if len(mine) > 0 {
			got := make([]ID, len(mine))
			for j, w := range mine {
				got[j] = want[w]
			}
			vs, err := l.doMany(ctx, scope, got)
			gaveUp := ctx.Err() != nil
			for j, w := range mine {
				var e error
				if err != nil {
					e = err.(ferry.Errors)[j]
				}
				l.settle(m, scope, got[j], es[w], vs[j], e, gaveUp)
			}
		}
		// Every entry of want is answered now, or claimed by another Load.
		var again []int
		for j, i := range todo {
			v, retry, err := await(ctx, es[j])
			switch {
			case retry:
				again = append(again, i)
			case err != nil:
				fail(i, err)
			default:
				outs[i] = v
			}
		}
		todo = again
	}
	if errs != nil {
		return outs, errs
	}
	return outs, nil
}

// Prime puts v in the memo of ctx (WithMemo) as id's value in ctx's scope,
// and reports whether it did: not if ctx has no memo, its scope is not
// comparable, or the memo has id already, loaded or loading. A later Load
// of id with that memo gets v without a fetch. It blocks only while
// another Load of the request changes the memo.
func (l *Loader[ID, V]) Prime(ctx context.Context, id ID, v V) bool {
	m := memoOf(ctx)
	if m == nil {
		return false
	}
	scope := l.scopeOf(ctx)
	if checkScope(scope) != nil {
		return false
	}
	i := stripeOf(id)
	c := m.stripes[i]
	tabs := <-c
	defer func() { c <- tabs }()
	t := l.table(tabs, scope)
	if _, ok := t[id]; ok {
		return false
	}
	t[id] = &entry[V]{stripe: i, settled: true, v: v}
	return true
}
