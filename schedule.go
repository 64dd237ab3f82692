package ferry

import (
	"time"

	"github.com/gammazero/deque"
	"github.com/google/btree"
)

// schedule is the core's order of lanes: the ready line, first come first
// served, and two deadline trees, of waiting lanes and of parked ones, by
// (due, seq). The trees share one sequence, so that lanes due at one instant
// become ready in the order they began to wait or were parked. It keeps each
// lane's phase, ref and due in step with where the lane stands. It is pure:
// no goroutines, channels or clock; time comes in. loop: its methods run on
// the shard's loop goroutine, as part of the core's state.
//
// A ready ref whose seq no longer matches its lane (the lane emptied, was
// taken out of line, or reused) is stale: pop skips it, and tidy compacts
// the line once the stale refs outnumber the ready lanes plus staleSlack.
type schedule[K comparable, E any] struct {
	ready   deque.Deque[readyRef[K, E]] // may hold stale refs
	nready  int                         // lanes in phase ready
	waiting *btree.BTreeG[waitRef[K, E]]
	parks   *btree.BTreeG[waitRef[K, E]] // parked lanes with a deadline
	seq     uint64                       // the last ref handed out
}

// readyRef is a lane's place in the ready line.
type readyRef[K comparable, E any] struct {
	l   *lane[K, E]
	seq uint64
}

// waitRef is a lane's place in the waiting tree or the parks tree.
type waitRef[K comparable, E any] struct {
	due time.Duration
	seq uint64
	l   *lane[K, E]
}

// staleSlack is how many stale refs the ready line may hold beyond one per
// ready lane before it is compacted.
const staleSlack = 4

// degree is the btrees' degree: lanes' items and the deadline trees.
const degree = 16

func newSchedule[K comparable, E any]() schedule[K, E] {
	return schedule[K, E]{waiting: btree.NewG(degree, waitLess[K, E]), parks: btree.NewG(degree, waitLess[K, E])}
}

func waitLess[K comparable, E any](a, b waitRef[K, E]) bool {
	return a.due < b.due || a.due == b.due && a.seq < b.seq
}

// next is a new ref, for a lane that takes a place.
func (sc *schedule[K, E]) next() uint64 { sc.seq++; return sc.seq }

// push puts l at the back of the ready line.
func (sc *schedule[K, E]) push(l *lane[K, E]) {
	l.phase = phaseReady
	l.ref = sc.next()
	sc.ready.PushBack(readyRef[K, E]{l, l.ref})
	sc.nready++
}

// pushDue puts l at the back of the ready line, after the lanes due at now:
// a lane's place is when it became ready.
func (sc *schedule[K, E]) pushDue(l *lane[K, E], now time.Duration) {
	sc.promote(now)
	sc.push(l)
}

// pop promotes the lanes due at now, then takes the first ready lane out of
// the line; ok is false if none is ready. The lane's phase is left for its
// taker to set.
func (sc *schedule[K, E]) pop(now time.Duration) (l *lane[K, E], ok bool) {
	sc.promote(now)
	for sc.ready.Len() > 0 {
		r := sc.ready.PopFront()
		if r.l.phase != phaseReady || r.l.ref != r.seq {
			continue // stale
		}
		sc.nready--
		sc.tidy()
		return r.l, true
	}
	return nil, false
}

// unready takes a ready lane out of line: its ref goes stale.
func (sc *schedule[K, E]) unready(l *lane[K, E]) {
	l.phase = 0
	sc.nready--
	sc.tidy()
}

// tidy compacts the ready line once its stale refs outnumber the ready lanes
// plus staleSlack, so that it holds O(ready lanes) refs whatever the drops.
// A compaction of n refs follows at least n/2 refs going stale since the
// last, so it costs O(1) amortized.
func (sc *schedule[K, E]) tidy() {
	if sc.ready.Len()-sc.nready <= sc.nready+staleSlack {
		return
	}
	for range sc.ready.Len() {
		if r := sc.ready.PopFront(); r.l.phase == phaseReady && r.l.ref == r.seq {
			sc.ready.PushBack(r)
		}
	}
}

// wait puts l in the waiting tree until due.
func (sc *schedule[K, E]) wait(l *lane[K, E], due time.Duration) {
	l.phase = phaseWaiting
	l.due = due
	l.ref = sc.next()
	sc.waiting.ReplaceOrInsert(waitRef[K, E]{due, l.ref, l})
}

// rekey moves a waiting lane to a new deadline; it keeps its place among ties.
func (sc *schedule[K, E]) rekey(l *lane[K, E], due time.Duration) {
	sc.unwait(l)
	l.due = due
	sc.waiting.ReplaceOrInsert(waitRef[K, E]{due, l.ref, l})
}

// unwait takes a waiting lane out of its tree; its phase is the caller's.
func (sc *schedule[K, E]) unwait(l *lane[K, E]) {
	sc.waiting.Delete(waitRef[K, E]{due: l.due, seq: l.ref})
}

// park puts l in the parks tree until due.
func (sc *schedule[K, E]) park(l *lane[K, E], due time.Duration) {
	l.phase = phaseParked
	l.due = due
	l.ref = sc.next()
	sc.parks.ReplaceOrInsert(waitRef[K, E]{due, l.ref, l})
}

// unpark takes a parked lane out of its tree; its phase is the caller's.
func (sc *schedule[K, E]) unpark(l *lane[K, E]) {
	sc.parks.Delete(waitRef[K, E]{due: l.due, seq: l.ref})
}

// remove takes l out of the line or the waiting tree, wherever it stands.
func (sc *schedule[K, E]) remove(l *lane[K, E]) {
	switch l.phase {
	case phaseWaiting:
		sc.unwait(l)
	case phaseReady:
		sc.unready(l)
	}
}

// promote moves every waiting or parked lane whose deadline is at or before
// now to the back of the ready line, in deadline order, ties in the order
// they began to wait or were parked.
func (sc *schedule[K, E]) promote(now time.Duration) {
	for {
		t := sc.waiting
		r, ok := t.Min()
		if p, pok := sc.parks.Min(); pok && (!ok || waitLess(p, r)) {
			t, r, ok = sc.parks, p, true
		}
		if !ok || r.due > now {
			return
		}
		t.DeleteMin()
		sc.push(r.l)
	}
}

// readyWaiting makes every waiting lane ready now, in deadline order; parked
// lanes keep their deadlines.
func (sc *schedule[K, E]) readyWaiting() {
	for sc.waiting.Len() > 0 {
		r, _ := sc.waiting.DeleteMin()
		sc.push(r.l)
	}
}

// earliest is the first deadline of a waiting or parked lane; ok is false if
// none waits.
func (sc *schedule[K, E]) earliest() (time.Duration, bool) {
	r, ok := sc.waiting.Min()
	if p, pok := sc.parks.Min(); pok && (!ok || p.due < r.due) {
		return p.due, true
	}
	return r.due, ok
}

// hasReady reports whether a lane is ready at now: in line, or due.
func (sc *schedule[K, E]) hasReady(now time.Duration) bool {
	if sc.nready > 0 {
		return true
	}
	t, ok := sc.earliest()
	return ok && t <= now
}

// parked reports whether a lane waits in the parks tree.
func (sc *schedule[K, E]) parked() bool { return sc.parks.Len() > 0 }

// drain empties the line and both trees, for a drained room, and returns
// the lanes for which cont is true: those ready first, in line, then the
// parked ones by deadline, appended to buf.
func (sc *schedule[K, E]) drain(cont func(*lane[K, E]) bool, buf []*lane[K, E]) []*lane[K, E] {
	for i := range sc.ready.Len() {
		if r := sc.ready.At(i); r.l.phase == phaseReady && r.l.ref == r.seq && cont(r.l) {
			buf = append(buf, r.l)
		}
	}
	sc.parks.Ascend(func(r waitRef[K, E]) bool { buf = append(buf, r.l); return true })
	sc.waiting.Clear(false)
	sc.parks.Clear(false)
	sc.ready.Clear()
	sc.nready = 0
	return buf
}
