package ferry

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/ferrygo/ferry/internal/keycheck"
)

// This file holds one input on its way: the waiter, filled in on the caller's
// goroutine, the key checks, and the pools the callers take their waiters from.

// waiter is one input in progress: a Do's, a Submit's (done is set) or one
// of a DoMany's (g is set). The caller writes its fields before it sends it
// to the loop; after that only the loop-owned ones are written, by the loop.
// callers: its one method, prepare, runs on the caller's goroutine.
type waiter[K comparable, I, O any] struct {
	in     [1]I // an array, so that a direct call passes in[:] without allocating
	key    K
	weight int64
	rank   int64
	at     time.Duration  // submission time, by clock: the caller's with stamp, the loop's with OnBatch (see loop.stamp), else zero
	tk     ticket         // loop-owned: the input's ticket once admitted, else zero
	c      chan result[O] // a Do's answer; a Submit's admission word, on a channel it holds until then

	done    func(O, error) // Submit: called once, off the loop, with the answer
	g       *group[K, I, O]
	i       int   // DoMany: its index in g
	part    int32 // DoMany: its part of g, the inputs in its shard
	dropped bool  // DoMany: dropped for its caller, before any call: loop-owned, written before the part's word; caller-owned if its part never went in (see group.admit)
	refused bool  // DoMany: answered before any call (its key paused, the ferry closed, its part never let in): written with its answer, as dropped
	gone    bool  // loop-owned: taken by a call, and its caller has given up since (Do, DoMany): not retried

	after, fin chan struct{} // a direct call's, with OnBatch, written by the loop before errClaimed: see loop.completing

	ctx context.Context // with KeepContexts: its caller's, for Callers (see callers.go); the loop never calls it
}

// prepare fills in w's input, key, weight and rank, and refuses a key that no
// lane can hold or a negative weight.
func (w *waiter[K, I, O]) prepare(f *Ferry[K, I, O], in I) error {
	w.in[0], w.key, w.weight, w.rank = in, f.key(in), 1, 0
	if f.check {
		if err := keycheck.Err(w.key, "ferry: key"); err != nil {
			return err
		}
	}
	if f.weight != nil {
		if w.weight = f.weight(in); w.weight < 0 {
			return fmt.Errorf("ferry: negative weight %d", w.weight)
		}
	}
	if f.rank != nil {
		w.rank = f.rank(in)
	}
	return nil
}

// mayBeBadKey reports whether a value of type t may be unequal to itself (a
// NaN) or panic when compared (an interface holding a slice, map or func).
func mayBeBadKey(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.Interface:
		return true
	case reflect.Array:
		return mayBeBadKey(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if mayBeBadKey(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// pools are a ferry's pools of what callers use once per input. A value goes
// back only when no one else can still touch it. Its zero value is not
// usable: see init. callers: its methods run on the callers' goroutines (and
// putSub on whatever calls a Submit's done).
type pools[K comparable, I, O any] struct {
	do     sync.Pool // of a Do's *waiter, whose reply channel is empty and will stay so
	subs   sync.Pool // of a Submit's *waiter, which has no channel: see Submit
	words  sync.Pool // of a Submit's chan result[O] for its admission word, empty
	groups sync.Pool // of *group that no one else holds
}

// init makes the pools ready for use.
func (p *pools[K, I, O]) init() {
	p.do.New = func() any { return &waiter[K, I, O]{c: make(chan result[O], 1)} }
	p.subs.New = func() any { return new(waiter[K, I, O]) }
	p.words.New = func() any { return make(chan result[O], 1) }
}

// getDo returns a Do's waiter, with an empty reply channel.
func (p *pools[K, I, O]) getDo() *waiter[K, I, O] { return p.do.Get().(*waiter[K, I, O]) }

// putDo pools a Do's waiter, whose reply channel is empty and will stay so.
func (p *pools[K, I, O]) putDo(w *waiter[K, I, O]) {
	var zero waiter[K, I, O]
	c := w.c
	*w = zero
	w.c = c
	p.do.Put(w)
}

// getSub returns a Submit's waiter, with no channel.
func (p *pools[K, I, O]) getSub() *waiter[K, I, O] { return p.subs.Get().(*waiter[K, I, O]) }

// putSub pools a Submit's waiter, which no one else holds.
func (p *pools[K, I, O]) putSub(w *waiter[K, I, O]) {
	*w = waiter[K, I, O]{}
	p.subs.Put(w)
}

// getWord returns an empty channel for a Submit's admission word.
func (p *pools[K, I, O]) getWord() chan result[O] { return p.words.Get().(chan result[O]) }

// putWord pools c, from which the one word sent on it has been read.
func (p *pools[K, I, O]) putWord(c chan result[O]) { p.words.Put(c) }

// getGroup returns a group for n inputs, from the pool if one is big enough.
func (p *pools[K, I, O]) getGroup(n int) *group[K, I, O] {
	if g, _ := p.groups.Get().(*group[K, I, O]); g != nil && cap(g.ws) >= n {
		g.ws, g.errs = g.ws[:n], g.errs[:n]
		return g
	}
	return &group[K, I, O]{
		ws: make([]waiter[K, I, O], n), errs: make([]error, n), count: newCountdown(),
	}
}

// putGroup pools g, with its parts' channels, empty, unless a shard may yet
// send a word into it (lost).
func (p *pools[K, I, O]) putGroup(g *group[K, I, O]) {
	if g.lost {
		return
	}
	clear(g.ws)
	clear(g.errs)
	for i := range g.parts {
		g.parts[i] = part[K, I, O]{c: g.parts[i].c}
	}
	g.outs, g.parts = nil, g.parts[:0]
	p.groups.Put(g)
}
