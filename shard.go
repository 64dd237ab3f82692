package ferry

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
)

// This file spreads keys over shards. A shard is one loop with its own core
// state, workers, timer and inbound channel; a key always goes to the same
// shard, by a hash of the key, so every guarantee per key holds as it does
// with one loop. The configured bounds are totals, shared by the shards:
// the room (MaxQueued, MaxQueuedWeight, see budget) and the batched calls in
// flight (MaxInFlightBatches, see slot). What is not per key becomes per
// shard: fairness (the ready line, and the wait for a free slot).

// shard is one loop and what talks to it.
type shard[K comparable, I, O any] struct {
	f      *Ferry[K, I, O]
	inc    chan msg[K, I, O] // from callers, workers and direct calls -> loop
	done   chan struct{}     // closed by the loop when every goroutine has gone
	last   Stats             // written by the loop before done is closed
	ctx    context.Context   // of batched calls; cancelled with ErrClosed on close
	cancel context.CancelCauseFunc
}

// budget is an amount of room: inputs and their weight. The shards of a
// ferry share its room: what no shard holds is in spare, a channel of one
// budget that a loop (or a DoMany's caller, see borrow) empties, changes and
// fills again at once, so that no one blocks on it for longer than that. A
// shard's core room is what it holds: as a wake-up starts it borrows, in one
// go, what it lacks for the admissions among its messages (reserve), and as
// the wake-up ends, before the batches it took start, it gives back all it
// holds spare (lend). So the shards never hold more than the configured room
// between them, and a shard rejects only when the room is full: but for room
// another shard holds within a wake-up in progress (borrowed for an
// admission it then claimed for a direct call or refused, or freed by a
// batch it took or a drop), as one loop would have ordered the two; the
// callers of those batches and drops hear of them only after the lend (see
// free). Borrowing ahead would save channel operations and break that: a
// room sized for exactly its callers would reject some. A weight with no
// limit (MaxQueuedWeight 0) is not shared: every shard's core has MaxInt64
// of it.
type budget struct {
	n int
	w int64
}

// reserve borrows from spare what this shard lacks of room for the
// admissions among ms, one wake-up's messages, or as much as spare has, so
// that the core refuses one only if the shared room cannot hold it. What is
// borrowed and not used (a rejection for another reason, a direct call) goes
// back with lend at the end of the wake-up.
func (l *loop[K, I, O]) reserve(ms []msg[K, I, O]) {
	var need budget
	for _, m := range ms {
		switch m.op {
		case opAdmit:
			need.n++
			need.w = addWeight(need.w, m.w.weight)
		case opAdmitMany, opHold:
			switch p := &m.w.g.parts[m.worker]; {
			case p.held, p.granted: // its room is held already, or comes with it
			case p.total < 0:
				need.n, need.w = need.n+p.n, -1
			default:
				need.n, need.w = need.n+p.n, addWeight(need.w, p.total)
			}
		}
	}
	fn, fw := l.st.spare()
	short := budget{n: max(0, min(need.n, l.lim.queued)-fn)}
	if l.lim.queuedWeight > 0 { // need.w < 0: past MaxInt64, more than the room
		if need.w < 0 {
			need.w = l.lim.queuedWeight
		}
		short.w = max(0, min(need.w, l.lim.queuedWeight)-fw)
	}
	if short == (budget{}) {
		return
	}
	b := <-l.spare
	got := budget{min(b.n, short.n), min(b.w, short.w)}
	l.spare <- budget{b.n - got.n, b.w - got.w}
	l.st.grow(got.n, got.w)
}

// lend gives back to spare all the room this shard holds spare, for the
// other shards.
func (l *loop[K, I, O]) lend() {
	if l.spare == nil {
		return
	}
	back := budget{}
	back.n, back.w = l.st.spare()
	if l.lim.queuedWeight == 0 {
		back.w = 0 // not shared
	}
	if back == (budget{}) {
		return
	}
	l.st.grow(-back.n, -back.w)
	b := <-l.spare
	l.spare <- budget{b.n + back.n, b.w + back.w} // within the room's total: no wrap
}

// grow adds n inputs weighing w to the shard's room: room a DoMany's caller
// took from spare for its part here (see borrow). A weight with no limit is
// not shared.
func (l *loop[K, I, O]) grow(n int, w int64) {
	if l.lim.queuedWeight == 0 {
		w = 0
	}
	l.st.grow(n, w)
}

// borrow takes from spare, in one step, the room for all of g's inputs, a
// DoMany over several shards, and marks each part granted: its shard adds
// the part's room to its own as it lets the part in, and refuses it only if
// it is closing. It reports false, and takes nothing, if spare lacks that
// room (the room is full but for room that a shard holds within a wake-up),
// or if a shard might refuse a part for its weight: with no MaxQueuedWeight,
// weight is not shared and each shard keeps its own waiting weight within
// MaxInt64, which only inputs of weight 1 (no Weight func) cannot pass, as
// their weight is at most their count. The parts then hold room shard by
// shard (see group.admit). So two DoManys over the same shards that borrow
// never each hold room the other needs, as they can holding it shard by shard.
func (f *Ferry[K, I, O]) borrow(g *group[K, I, O], total int64) bool {
	if f.lim.queuedWeight == 0 {
		if f.weight != nil && total > 0 {
			return false
		}
		total = 0 // not shared
	}
	b := <-f.spare
	if b.n < len(g.ws) || b.w < total {
		f.spare <- b
		return false
	}
	f.spare <- budget{b.n - len(g.ws), b.w - total}
	for i := range g.parts {
		g.parts[i].granted = true
	}
	return true
}

// never reports whether no room could ever hold all of g's inputs, however
// empty: more of them than MaxQueued, one heavier than MaxQueuedWeight, or a
// total weight past it or past MaxInt64 (total < 0). Such a DoMany over
// several shards is refused by one shard, as one loop refuses it.
func (f *Ferry[K, I, O]) never(g *group[K, I, O], total int64) bool {
	lim := f.lim
	if len(g.ws) > lim.queued || total < 0 {
		return true
	}
	if lim.queuedWeight == 0 {
		return false
	}
	heaviest := int64(0)
	for _, p := range g.parts {
		heaviest = max(heaviest, p.heaviest)
	}
	return heaviest > lim.queuedWeight || total > lim.queuedWeight
}

// merge makes g's inputs one part, in the first part's shard: for a DoMany
// that never fits (see never), which that shard refuses whole. It never lets
// them in, as their keys are in other shards too.
func (g *group[K, I, O]) merge(total int64) {
	p := part[K, I, O]{s: g.parts[0].s, total: total}
	for i := range g.ws {
		w := &g.ws[i]
		w.part = 0
		p.n++
		p.heaviest = max(p.heaviest, w.weight)
	}
	clear(g.parts)
	g.parts = append(g.parts[:0], p)
}

// freed is the loop's word on a drop, or on a DoMany's part (which may let
// go of room held or granted): a result on c, or else word(i) on g.c.
type freed[K comparable, I, O any] struct {
	c chan result[O]
	r result[O]
	g *group[K, I, O]
	i int32
}

func (x freed[K, I, O]) send() {
	if x.g != nil {
		x.g.c <- word(x.i)
	} else {
		x.c <- x.r
	}
}

// free sends x, a word on room that may have been freed, at once with one
// shard; with several, once the wake-up has handled its messages and lent
// what they freed (see lend), so that the caller, who may ask another shard
// for room as soon as it has the word, finds it there, as it would in one
// loop. Until then the room stays with this shard, for the admissions among
// the wake-up's messages. The words go before a Flush that waits for them is
// told (see receive).
func (l *loop[K, I, O]) free(x freed[K, I, O]) {
	if l.spare == nil {
		x.send()
		return
	}
	l.freed = append(l.freed, x)
}

// slot reports whether this shard may start a batch, taking a slot from the
// ferry's pool if it must: with several shards, a shard holds slots, each
// good for one batch in flight, and all of them together are
// MaxInFlightBatches, so that the batched calls in flight across shards never
// pass it while one shard may run all of them. The pool is a channel holding
// the slots no shard holds. A shard that finds none there is starved: its
// loop then waits for one beside its inbound channel (see run). As a batch
// ends, a shard keeps its slot if it holds no more than its own share (own),
// so that busy shards do not pass slots back and forth, and else gives it
// back, where a starved shard gets it; at the end of each turn it gives back
// the slots it holds and does not use (see keep).
func (l *loop[K, I, O]) slot() bool {
	if l.slots == nil || l.flying < l.held {
		return true
	}
	select {
	case <-l.slots:
		l.held++
		return true
	default:
		l.starved = true
		return false
	}
}

// unslot gives back the slot of a batch that ended, if the shard holds more
// than its share. The pool never fills: no send on it blocks.
func (l *loop[K, I, O]) unslot() {
	if l.slots == nil {
		return
	}
	if l.flying--; l.held > l.own {
		l.held--
		l.slots <- struct{}{}
	}
}

// keep gives back the slots this shard holds and does not use, at the end of
// each turn, for the other shards.
func (l *loop[K, I, O]) keep() {
	for l.slots != nil && l.held > l.flying {
		l.held--
		l.slots <- struct{}{}
	}
}

// share is shard i's part of total split n ways: total/n, and one more for
// the first total%n shards. The shares sum to total.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

// shardOf returns the shard of key k.
func (f *Ferry[K, I, O]) shardOf(k K) *shard[K, I, O] {
	if len(f.shards) == 1 {
		return f.shards[0]
	}
	return f.shards[maphash.Comparable(f.seed, k)%uint64(len(f.shards))]
}

// addWeight is total plus w, for a DoMany: -1 once the sum passes MaxInt64,
// and from then on, as room reads a total < 0.
func addWeight(total, w int64) int64 {
	if total < 0 || w > math.MaxInt64-total {
		return -1
	}
	return total + w
}

// shardCount is how many shards a ferry with these totals gets: n, or by
// default one per processor (GOMAXPROCS, which procs is), at most one per
// worker. One loop is one core: past one processor a second loop took the
// headline workload from 1.9x dataloadgen's cost to 1.3x (see the README).
func shardCount(n, workers, procs int) (int, error) {
	switch {
	case n == 0:
		return max(1, min(procs, workers)), nil
	case n > workers:
		return 0, fmt.Errorf("ferry: Config.Shards is %d, more than MaxInFlightBatches (%d): one worker per shard at least", n, workers)
	}
	return n, nil
}

// send delivers m to the loop, or reports false once the shard has ended. A
// message sent as it ends may be read by no one: wait for its reply with done
// in view, as Do explains.
func (s *shard[K, I, O]) send(m msg[K, I, O]) bool {
	select {
	case s.inc <- m:
		return true
	default:
	}
	select {
	case s.inc <- m:
		return true
	case <-s.done:
		return false
	}
}

// stats is the shard's snapshot, taken by its loop, or its last one.
func (s *shard[K, I, O]) stats() Stats {
	c := make(chan Stats, 1)
	if !s.send(msg[K, I, O]{op: opStats, stats: c}) {
		return s.last
	}
	select {
	case st := <-c:
		return st
	case <-s.done:
		select {
		case st := <-c:
			return st
		default:
			return s.last
		}
	}
}

// add adds t to s. Weight saturates at MaxInt64: each shard's is within it,
// their sum may not be.
func (s *Stats) add(t Stats) {
	s.Queued += t.Queued
	if s.Weight > math.MaxInt64-t.Weight {
		s.Weight = math.MaxInt64
	} else {
		s.Weight += t.Weight
	}
	s.Busy += t.Busy
	s.Lanes += t.Lanes
	s.Admitted += t.Admitted
	s.Rejected += t.Rejected
	s.Dropped += t.Dropped
	s.Batches += t.Batches
	s.DirectCalls += t.DirectCalls
	s.DonePanics += t.DonePanics
	s.Taken += t.Taken
	s.RejectedFull += t.RejectedFull
	s.RejectedWeight += t.RejectedWeight
	s.RejectedHeavy += t.RejectedHeavy
	s.OnBatchPanics += t.OnBatchPanics
}
