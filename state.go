package ferry

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gammazero/deque"
	"github.com/google/btree"
)

// This file is the waiting room: a deterministic state machine with one owner
// (the loop goroutine). It has no goroutines, channels, clocks or callbacks:
// time is an argument, and every transition returns what the loop must do.
// The same state and the same input always give the same output.
//
// Costs, with n the inputs in one lane, b the batch size and L the lanes
// waiting for a deadline: admit O(1) when ranks arrive in order (always, with
// equal ranks), else O(log n), plus O(log L); take O(b) plus O(log L) for each
// due lane it promotes; release O(b + log L); drop O(log n + b + log L); drain
// O(N log N) over all N waiting inputs. Nothing is linear in a lane's length:
// the deadline scan covers a partial lane only, which holds fewer than b inputs.
//
// Time is a Duration since the ferry's origin (its clock), for submission
// times and now alike. With zero delay time never matters: the core keeps no
// submission time, nothing waits for a deadline, and the shell does not read
// the clock (it passes 0).
//
// No sum wraps. Weights are refused rather than saturated: the room admits an
// input only if the waiting total stays within MaxQueuedWeight, or MaxInt64
// when that is 0, so every lane's total and every batch's fits an int64.
// Deadlines saturate: a submission time plus the delay that passes MaxInt64 ns
// after the origin is due at MaxInt64 ns (about 292 years: never, in effect).
//
// A lane may hold a continuation: one opaque entry, a batch whose call failed
// and is to be retried (Config.Retry), handed back by park. Its inputs are in
// flight, as a busy lane's are: they count in no room. The lane waits, parked,
// in the parks tree until its deadline (park's now plus a backoff, saturated
// as above), or until unpark; then it is ready, and take hands out the
// continuation alone, before the lane's items, which wait behind it. While it
// holds a continuation no other call of the key runs. Neither flush nor
// shutdown ends a park; drain makes every parked lane ready at once, so that
// its continuation is answered (the loop's workers do that). A lane held
// (Config.HoldPaused: see parkHeld) is parked with no deadline, in no tree: only
// unpark and drain end it.

// limits is the core's view of Config, validated and defaulted by New.
type limits struct {
	batchSize    int           // inputs per batch, > 0
	batchWeight  int64         // weight per batch; 0: no limit (newState makes it MaxInt64)
	delay        time.Duration // how long a partial batch may wait, >= 0
	queued       int           // inputs waiting across all keys, > 0
	queuedWeight int64         // their total weight; 0: no limit but MaxInt64's, as above
	direct       bool          // claim idle keys when delay is 0
}

// outcome is what admit did with an input.
type outcome uint8

const (
	admitted      outcome = iota // waiting in its lane
	claimed                      // the key is busy with this caller's direct call
	rejectedFull                 // the room is full by count or weight (or the total would pass MaxInt64)
	rejectedHeavy                // heavier than the whole room can ever hold
	refused                      // the room is closed (drained or shutting down)
	overHeld                     // its key's lane is held (parkHeld) and holds its share of the room: see heldShare
)

// heldShare bounds what the lane of a held key (see parkHeld) keeps: at
// most 1/heldShare of the room's inputs and weight, and one input at least,
// so that a key held through a long outage never fills the room.
const heldShare = 8

// ticket names an admitted input, for drop.
type ticket struct {
	rank int64
	seq  uint64
}

// item is one waiting input. Items are ordered by (rank, seq) in their lane.
type item[E any] struct {
	rank   int64
	seq    uint64
	at     time.Duration // submission time, since the origin; 0 with zero delay
	weight int64
	entry  E
}

// phase is where a lane stands in the state diagram.
type phase uint8

const (
	phaseBusy    phase = iota + 1 // a call is in flight; never in ready or waiting
	phaseReady                    // in the ready line
	phaseWaiting                  // in the waiting tree until its deadline
	phaseParked                   // holds a continuation, in the parks tree until its deadline (held forever: in none)
)

// lane holds one key's waiting inputs. It exists while it has inputs or a call.
type lane[K comparable, E any] struct {
	key    K
	items  queue[E] // by (rank, seq)
	weight int64    // total weight of items
	phase  phase
	ref    uint64        // while ready: the sequence of its ready ref; while waiting or parked: of its tree's ref
	due    time.Duration // while waiting or parked: its deadline, since the origin
	cont   E             // its continuation, while held: see park
	held   bool          // it holds cont: parked, or ready to hand it out
	ever   bool          // while parked: held with no deadline, in no tree (see parkHeld)
}

// readyRef is a lane's place in the ready line. A ref whose seq no longer
// matches its lane (the lane emptied, or was reused) is stale and skipped.
type readyRef[K comparable, E any] struct {
	l   *lane[K, E]
	seq uint64
}

// waitRef is a lane's place in the waiting tree or the parks tree, by (due, seq).
type waitRef[K comparable, E any] struct {
	due time.Duration
	seq uint64
	l   *lane[K, E]
}

// shrinkLanes is the size past which a map that has shrunk to a quarter of
// its peak is rebuilt, so that memory follows what waits, not the most that
// ever waited: Go's maps never give memory back.
const shrinkLanes = 1024

// staleSlack is how many stale refs the ready line may hold beyond one per
// ready lane before it is compacted.
const staleSlack = 4

// freeLanes bounds the lanes kept for reuse.
const freeLanes = 64

// A lane that holds more than hotLane items when taken is hot: it keeps a
// buffer of up to baseCap items (two batches), so that it neither grows nor
// shrinks every busy period. Other lanes keep the deque's smallest buffer.
const hotLane = 16

const baseCap = 128

// state is the waiting room. Its zero value is not usable: use newState.
// loop: its methods run on the shard's loop goroutine, its only owner.
type state[K comparable, E any] struct {
	lim limits

	lanes   map[K]*lane[K, E]
	ready   deque.Deque[readyRef[K, E]] // first come, first served; may hold stale refs
	nready  int                         // lanes in phase ready
	waiting *btree.BTreeG[waitRef[K, E]]
	parks   *btree.BTreeG[waitRef[K, E]] // parked lanes, by deadline; refs share seq with waiting's

	queued int   // inputs waiting
	weight int64 // their total weight
	busy   int   // calls in flight, batched and direct
	conts  int   // lanes that hold a continuation, parked or ready: see park

	held       int    // room held for inputs not yet entered: see hold
	heldWeight int64  // and their weight; queued+held and weight+heldWeight stay within the limits
	heavy      int64  // the whole room's weight: lim.queuedWeight unless grow changed that
	heldCap    budget // the most a held lane keeps: see heldShare

	seq          uint64 // last sequence handed out, for items and refs
	closed       bool   // drained: nothing is admitted again
	shuttingDown bool   // nothing is admitted again, every lane is due: see shutdown
	flushed      uint64 // inputs with a seq up to this are due: see flush
	peak         int    // most lanes since the map was last rebuilt; see shrink

	free      []*lane[K, E]
	itemsFree *btree.FreeListG[item[E]] // nodes for lanes whose ranks arrive out of order
}

// btree degree for lanes and the waiting tree.
const degree = 16

func newState[K comparable, E any](lim limits) *state[K, E] {
	lim.batchWeight = cmp.Or(lim.batchWeight, math.MaxInt64)
	lim.queuedWeight = cmp.Or(lim.queuedWeight, math.MaxInt64)
	return &state[K, E]{
		lim:       lim,
		heavy:     lim.queuedWeight,
		heldCap:   budget{max(1, lim.queued/heldShare), max(1, lim.queuedWeight/heldShare)},
		lanes:     make(map[K]*lane[K, E]),
		waiting:   btree.NewG(degree, waitLess[K, E]),
		parks:     btree.NewG(degree, waitLess[K, E]),
		itemsFree: btree.NewFreeListG[item[E]](btree.DefaultFreeListSize),
	}
}

func itemLess[E any](a, b item[E]) bool {
	return a.rank < b.rank || a.rank == b.rank && a.seq < b.seq
}

func waitLess[K comparable, E any](a, b waitRef[K, E]) bool {
	return a.due < b.due || a.due == b.due && a.seq < b.seq
}

func (s *state[K, E]) next() uint64 { s.seq++; return s.seq }

// dueAt is the deadline of an input submitted at at, saturated.
func (s *state[K, E]) dueAt(at time.Duration) time.Duration {
	if at > math.MaxInt64-s.lim.delay {
		return math.MaxInt64
	}
	return at + s.lim.delay
}

// admit takes one input, submitted at at, into the room at now, as one step:
// with direct calls on, zero delay and no lane for the key, the key is claimed
// (busy, no items) and the caller makes the call, unless the room is closed or
// the input heavier than the room; else it is join. weight must not be negative.
func (s *state[K, E]) admit(key K, weight, rank int64, at, now time.Duration, e E) (outcome, ticket) {
	if s.claims(key) {
		if o := s.room(0, 0, weight); o != admitted {
			return o, ticket{}
		}
		s.claim(key)
		return claimed, ticket{}
	}
	return s.join(key, weight, rank, at, now, e)
}

// claims reports whether admit would claim key for a direct call rather
// than let its input join the lane (if the room holds it): the rule, asked
// by admit, by the loop's wait line and, with its guess of the lane, by
// share.need (see claimsLane).
func (s *state[K, E]) claims(key K) bool { return s.claimsLane(s.lanes[key] != nil) }

// claimsLane is claims for a key whose lane exists or not: direct calls are
// on (no delay) and the key has no lane.
func (s *state[K, E]) claimsLane(exists bool) bool {
	return s.lim.direct && s.lim.delay == 0 && !exists
}

// laneOf reports whether key has a lane, and whether it holds inputs.
func (s *state[K, E]) laneOf(key K) (exists, items bool) {
	l := s.lanes[key]
	return l != nil, l != nil && l.items.len() > 0
}

// join takes one input into its lane if the room has space for it, and its
// lane, if held, its share (see overHeld); it never claims the key.
func (s *state[K, E]) join(key K, weight, rank int64, at, now time.Duration, e E) (outcome, ticket) {
	if s.overHeld(key, weight) && !s.closed && !s.shuttingDown {
		return overHeld, ticket{}
	}
	if o := s.room(1, weight, weight); o != admitted {
		return o, ticket{}
	}
	return admitted, s.enter(key, weight, rank, at, now, e)
}

// overHeld reports whether key's lane is held (see parkHeld) and would keep
// more than its share of the room with one more input of weight: heldCap's
// inputs, or its weight once the lane holds one input.
func (s *state[K, E]) overHeld(key K, weight int64) bool {
	l := s.lanes[key]
	if l == nil || l.phase != phaseParked || !l.ever {
		return false
	}
	n := l.items.len()
	return n >= s.heldCap.n || n > 0 && weight > s.heldCap.w-l.weight
}

// room reports whether n inputs weighing total together, the heaviest
// heaviest, may all join now: admitted, or why not. A total < 0 stands for a
// sum that passes MaxInt64, heavier than any room. Weights must not be negative.
func (s *state[K, E]) room(n int, total, heaviest int64) outcome {
	switch {
	case s.closed || s.shuttingDown:
		return refused
	case heaviest > s.heavy || total < 0:
		return rejectedHeavy
	case n > s.lim.queued-s.queued-s.held || total > s.lim.queuedWeight-s.weight-s.heldWeight:
		return rejectedFull
	}
	return admitted
}

// grow adds n inputs and w of weight to the room (either may be negative):
// a shard's share of a room that several share, which it borrows and lends
// as it needs. What is heavier than the whole room stays rejectedHeavy. The
// room must not shrink below what waits and is held, nor pass MaxInt64.
func (s *state[K, E]) grow(n int, w int64) {
	s.lim.queued += n
	s.lim.queuedWeight += w
}

// spare is the room that neither waits nor is held: inputs and weight.
func (s *state[K, E]) spare() (int, int64) {
	return s.lim.queued - s.queued - s.held, s.lim.queuedWeight - s.weight - s.heldWeight
}

// hold keeps room for n inputs weighing total, that room let in, so that
// nothing else takes it until unhold. A DoMany over several rooms holds room
// in each before it enters any, so that it enters all or none.
func (s *state[K, E]) hold(n int, total int64) {
	s.held += n
	s.heldWeight += total
}

// unhold lets go of room that hold kept, before its inputs enter or instead.
func (s *state[K, E]) unhold(n int, total int64) {
	s.held -= n
	s.heldWeight -= total
}

// enter puts an input that room let in into its lane, and returns its ticket.
func (s *state[K, E]) enter(key K, weight, rank int64, at, now time.Duration, e E) ticket {
	it := item[E]{rank: rank, seq: s.next(), weight: weight, entry: e}
	if s.lim.delay > 0 {
		it.at = at
	}
	s.queued++
	s.weight += weight
	l := s.lanes[key]
	if l == nil {
		l = s.newLane(key)
		s.insert(l, it)
		s.place(l, now)
		return ticket{rank, it.seq}
	}
	s.insert(l, it)
	if l.phase == phaseWaiting {
		if s.full(l) {
			s.promote(now) // the lanes due before it filled go first; l may be one
			if l.phase == phaseWaiting {
				s.unwait(l)
				s.pushReady(l)
			}
		} else if d := s.dueAt(it.at); d < l.due {
			s.rekey(l, d) // the new input is older than the oldest
		}
	}
	return ticket{rank, it.seq}
}

// claim makes key a busy lane with no items: its caller makes a direct call.
func (s *state[K, E]) claim(key K) {
	l := s.newLane(key)
	l.phase = phaseBusy
	s.busy++
}

// take promotes the lanes due at now, then takes the first ready lane's batch,
// appended to buf, and marks the lane busy. ok is false when no lane is ready.
func (s *state[K, E]) take(now time.Duration, buf []E) (key K, batch []E, ok bool) {
	s.promote(now)
	for s.ready.Len() > 0 {
		r := s.ready.PopFront()
		if r.l.phase != phaseReady || r.l.ref != r.seq {
			continue // stale: the lane emptied, or was reused since
		}
		l := r.l
		s.nready--
		s.tidy()
		l.phase = phaseBusy
		s.busy++
		if l.held { // the continuation alone, before the items behind it
			var zero E
			batch = append(buf, l.cont)
			l.cont, l.held = zero, false
			s.conts--
			return l.key, batch, true
		}
		if l.items.len() > hotLane {
			l.items.run.SetBaseCap(2 * min(s.lim.batchSize, baseCap/2))
		}
		// The batch's weight w is at most batchWeight, or one input's.
		batch, w := l.items.take(buf, s.lim.batchSize, s.lim.batchWeight)
		s.forget(l, len(batch)-len(buf), w)
		return l.key, batch, true
	}
	return key, buf, false
}

// release ends the call in flight for key. Lanes due at now are promoted first;
// then a lane with inputs left goes to the back of the ready line if it is full
// or due, else back to waiting; an empty lane is removed. Releasing a key that
// is not busy panics.
func (s *state[K, E]) release(key K, now time.Duration) {
	l := s.lanes[key]
	if l == nil || l.phase != phaseBusy {
		panic(fmt.Sprintf("ferry: release of a key of type %T that has no call in flight", key))
	}
	s.busy--
	s.promote(now)
	if l.items.len() == 0 {
		s.removeLane(l)
		return
	}
	s.place(l, now)
}

// drop removes the admitted input t of key before it is taken, at now,
// freeing its count and weight at once. ok is false if it is not waiting
// (taken, dropped or drained). A lane left empty and idle is removed; a ready
// lane left partial and not yet due goes back to waiting.
func (s *state[K, E]) drop(key K, t ticket, now time.Duration) (e E, ok bool) {
	l := s.lanes[key]
	if l == nil {
		return e, false
	}
	it, ok := l.items.remove(t.rank, t.seq)
	if !ok {
		return e, false
	}
	s.forget(l, 1, it.weight)
	if l.items.len() == 0 && l.phase != phaseBusy && !l.held {
		s.removeLane(l) // a stale ready ref is skipped by take
		return it.entry, true
	}
	switch {
	case l.phase == phaseWaiting && s.dueAt(it.at) == l.due:
		if d := s.deadline(l); d != l.due {
			s.rekey(l, d) // the oldest input left
		}
	case l.phase == phaseReady && !l.held && s.lim.delay > 0 && !s.shuttingDown && !s.full(l):
		if d := s.deadline(l); d > now {
			s.unready(l)
			s.wait(l, d) // Ready -> Waiting: it was ready only because full
		}
	}
	return it.entry, true
}

// clearLane removes every input waiting in key's lane, appending their
// entries to buf in the lane's order, and frees their count and weight at
// once: for a key paused as its failed call is released, which the loop
// does right after. A busy lane, or one that holds a continuation, stays as
// it is with no items; any other is removed. O(n) in the lane's inputs, plus
// O(log L) for a lane removed.
func (s *state[K, E]) clearLane(key K, buf []E) []E {
	l := s.lanes[key]
	if l == nil {
		return buf
	}
	l.items.each(func(it item[E]) { buf = append(buf, it.entry) })
	s.forget(l, l.items.len(), l.weight)
	l.items.clear()
	if l.phase != phaseBusy && !l.held {
		s.removeLane(l)
	}
	return buf
}

// drain closes the room: nothing is admitted again, and every waiting input
// is removed and its entry appended to buf, in arrival order. Lanes with a call
// in flight stay busy, with no items, until released. A lane that holds a
// continuation is ready at once, with no items: those ready already first,
// in line, then the parked ones by deadline.
func (s *state[K, E]) drain(buf []E) []E {
	s.closed = true
	var all []item[E]
	var conts []*lane[K, E]
	for i := range s.ready.Len() {
		if r := s.ready.At(i); r.l.phase == phaseReady && r.l.ref == r.seq && r.l.held {
			conts = append(conts, r.l)
		}
	}
	s.parks.Ascend(func(r waitRef[K, E]) bool { conts = append(conts, r.l); return true })
	var ever []*lane[K, E] // held with no deadline: last, in the order they were held
	for _, l := range s.lanes {
		if l.phase == phaseParked && l.ever {
			ever = append(ever, l)
			l.ever = false
		}
		l.items.each(func(it item[E]) { all = append(all, it) })
		l.items.clear()
		l.weight = 0
		if l.phase != phaseBusy && !l.held {
			s.removeLane(l)
		}
	}
	slices.SortFunc(all, func(a, b item[E]) int { return cmp.Compare(a.seq, b.seq) })
	for _, it := range all {
		buf = append(buf, it.entry)
	}
	s.waiting.Clear(false)
	s.parks.Clear(false)
	s.ready.Clear()
	s.nready = 0
	s.queued, s.weight = 0, 0
	slices.SortFunc(ever, func(a, b *lane[K, E]) int { return cmp.Compare(a.ref, b.ref) })
	for _, l := range append(conts, ever...) {
		s.pushReady(l)
	}
	return buf
}

// park hands key's busy lane the continuation c of its call, which failed
// and is to be retried after d, at now: the lane is parked until now+d
// (saturated at MaxInt64), or ready at once if d <= 0 or the room is drained.
// Lanes due at now are promoted first. Parking a key that is not busy panics.
func (s *state[K, E]) park(key K, c E, d, now time.Duration) {
	l := s.lanes[key]
	if l == nil || l.phase != phaseBusy {
		panic(fmt.Sprintf("ferry: park of a key of type %T that has no call in flight", key))
	}
	s.busy--
	s.conts++
	l.cont, l.held = c, true
	s.promote(now)
	if d <= 0 || s.closed {
		s.pushReady(l)
		return
	}
	due := time.Duration(math.MaxInt64)
	if now <= math.MaxInt64-d {
		due = now + d
	}
	l.phase = phaseParked
	l.due = due
	l.ref = s.next()
	s.parks.ReplaceOrInsert(waitRef[K, E]{due, l.ref, l})
}

// parkHeld hands key's busy lane the continuation c of its call, which failed
// for good (Config.HoldPaused): the lane is parked with no deadline, in no
// tree, until unpark or drain; at once ready if the room is drained. Its
// items wait behind c, and inputs join it as a parked lane's do. Holding a
// key that is not busy panics.
func (s *state[K, E]) parkHeld(key K, c E) {
	l := s.lanes[key]
	if l == nil || l.phase != phaseBusy {
		panic(fmt.Sprintf("ferry: parkHeld of a key of type %T that has no call in flight", key))
	}
	s.busy--
	s.conts++
	l.cont, l.held = c, true
	if s.closed {
		s.pushReady(l)
		return
	}
	l.phase, l.ever = phaseParked, true
	l.due = math.MaxInt64
	l.ref = s.next()
}

// unpark makes key's parked lane (or held one: see parkHeld) ready at once,
// after the lanes due at now, and reports whether it was parked.
func (s *state[K, E]) unpark(key K, now time.Duration) bool {
	l := s.lanes[key]
	if l == nil || l.phase != phaseParked {
		return false
	}
	if l.ever {
		l.ever = false
	} else {
		s.parks.Delete(waitRef[K, E]{due: l.due, seq: l.ref})
	}
	s.promote(now)
	s.pushReady(l)
	return true
}

// parked reports whether some lane is parked: the loop reads the clock then,
// even with no delay.
func (s *state[K, E]) parked() bool { return s.parks.Len() > 0 }

// shutdown closes the room gracefully: nothing is admitted again, and every lane
// is due at once, now and when released, so what waits runs without waiting
// for deadlines.
func (s *state[K, E]) shutdown() {
	s.shuttingDown = true
	for s.waiting.Len() > 0 {
		r, _ := s.waiting.DeleteMin()
		s.pushReady(r.l)
	}
}

// flush makes every input waiting now due now, without closing the room:
// waiting lanes join the ready line, and a lane that holds any of these
// inputs is ready whenever it is placed again. Later inputs keep their own
// deadlines.
func (s *state[K, E]) flush() {
	s.flushed = s.seq
	for s.waiting.Len() > 0 {
		r, _ := s.waiting.DeleteMin()
		s.pushReady(r.l)
	}
}

// promote moves every waiting or parked lane whose deadline is at or before
// now to the back of the ready line, in deadline order, ties in the order
// they started waiting or were parked.
func (s *state[K, E]) promote(now time.Duration) {
	for {
		t := s.waiting
		r, ok := t.Min()
		if p, pok := s.parks.Min(); pok && (!ok || waitLess(p, r)) {
			t, r, ok = s.parks, p, true
		}
		if !ok || r.due > now {
			return
		}
		t.DeleteMin()
		s.pushReady(r.l)
	}
}

// earliest is the first deadline of a waiting or parked lane; ok is false if
// none waits.
func (s *state[K, E]) earliest() (time.Duration, bool) {
	r, ok := s.waiting.Min()
	if p, pok := s.parks.Min(); pok && (!ok || p.due < r.due) {
		return p.due, true
	}
	return r.due, ok
}

// hasReady reports whether take at now would find a batch.
func (s *state[K, E]) hasReady(now time.Duration) bool {
	if s.nready > 0 {
		return true
	}
	t, ok := s.earliest()
	return ok && t <= now
}

// idle reports whether nothing waits, no call is in flight and no lane holds
// a continuation.
func (s *state[K, E]) idle() bool { return s.queued == 0 && s.busy == 0 && s.conts == 0 }

// full reports whether a lane's next batch could not grow: it has batchSize
// inputs, or weighs at least batchWeight, or its next input would not fit.
// Inputs fit in rank order, so this follows from the lane's totals alone.
func (s *state[K, E]) full(l *lane[K, E]) bool {
	return l.items.len() >= s.lim.batchSize || s.lim.batchWeight > 0 && l.weight >= s.lim.batchWeight
}

// deadline is the oldest waiting input's submission time plus the delay, or
// MinInt64 if flush made one of its inputs due. It scans the lane, so it is
// called on partial lanes only: fewer than batchSize.
func (s *state[K, E]) deadline(l *lane[K, E]) time.Duration {
	oldest, first := l.items.min().at, l.items.min().seq
	l.items.each(func(it item[E]) { oldest, first = min(oldest, it.at), min(first, it.seq) })
	if first <= s.flushed {
		return math.MinInt64
	}
	return s.dueAt(oldest)
}

// place puts an idle lane with items where it belongs at now: the ready
// line if it is full, shutting down, or due; else the waiting tree. Lanes due at
// now go into the line before it: a lane's place is when it became ready.
func (s *state[K, E]) place(l *lane[K, E], now time.Duration) {
	if s.lim.delay > 0 && !s.shuttingDown && !s.full(l) {
		if d := s.deadline(l); d > now {
			s.wait(l, d)
			return
		}
	}
	s.promote(now)
	s.pushReady(l)
}

func (s *state[K, E]) pushReady(l *lane[K, E]) {
	l.phase = phaseReady
	l.ref = s.next()
	s.ready.PushBack(readyRef[K, E]{l, l.ref})
	s.nready++
}

// unready takes a ready lane out of line: its ref goes stale.
func (s *state[K, E]) unready(l *lane[K, E]) {
	l.phase = 0
	s.nready--
	s.tidy()
}

// tidy compacts the ready line once its stale refs outnumber the ready lanes
// plus staleSlack, so that it holds O(ready lanes) refs whatever the drops.
// It is called wherever nready falls. A compaction of n refs follows at least
// n/2 refs going stale since the last one, so it costs O(1) amortized.
func (s *state[K, E]) tidy() {
	if s.ready.Len()-s.nready <= s.nready+staleSlack {
		return
	}
	for range s.ready.Len() {
		if r := s.ready.PopFront(); r.l.phase == phaseReady && r.l.ref == r.seq {
			s.ready.PushBack(r)
		}
	}
}

func (s *state[K, E]) wait(l *lane[K, E], due time.Duration) {
	l.phase = phaseWaiting
	l.due = due
	l.ref = s.next()
	s.waiting.ReplaceOrInsert(waitRef[K, E]{due, l.ref, l})
}

// rekey moves a waiting lane to a new deadline; it keeps its place among ties.
func (s *state[K, E]) rekey(l *lane[K, E], due time.Duration) {
	s.unwait(l)
	l.due = due
	s.waiting.ReplaceOrInsert(waitRef[K, E]{due, l.ref, l})
}

func (s *state[K, E]) unwait(l *lane[K, E]) {
	s.waiting.Delete(waitRef[K, E]{due: l.due, seq: l.ref})
}

func (s *state[K, E]) insert(l *lane[K, E], it item[E]) {
	l.items.push(it, s.itemsFree)
	l.weight += it.weight
}

// forget accounts for n items weighing w that have left l's items.
func (s *state[K, E]) forget(l *lane[K, E], n int, w int64) {
	l.weight -= w
	s.queued -= n
	s.weight -= w
}

func (s *state[K, E]) newLane(key K) *lane[K, E] {
	var l *lane[K, E]
	if n := len(s.free); n > 0 {
		l, s.free = s.free[n-1], s.free[:n-1]
	} else {
		l = new(lane[K, E])
	}
	l.key = key
	s.lanes[key] = l
	s.peak = max(s.peak, len(s.lanes))
	return l
}

// shrink returns m, or a copy of it once it holds a quarter of its peak or
// less and that peak was past shrinkLanes; peak is then reset to its size. As
// a rebuild of n entries follows 3n deletions, it costs O(1) amortized.
func shrink[K comparable, V any](m map[K]V, peak *int) map[K]V {
	if *peak <= shrinkLanes || len(m) > *peak/4 {
		return m
	}
	c := make(map[K]V, len(m))
	maps.Copy(c, m)
	*peak = len(m)
	return c
}

// removeLane forgets an empty lane, wherever it stands. A ready ref to it goes
// stale; a waiting ref is deleted.
func (s *state[K, E]) removeLane(l *lane[K, E]) {
	switch l.phase {
	case phaseWaiting:
		s.unwait(l)
	case phaseReady:
		s.unready(l)
	}
	delete(s.lanes, l.key)
	s.lanes = shrink(s.lanes, &s.peak)
	var zero K
	l.key, l.phase, l.ref, l.due, l.weight = zero, 0, 0, 0, 0
	if len(s.free) < freeLanes {
		s.free = append(s.free, l)
	}
}
