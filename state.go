package ferry

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/google/btree"
)

// limits is the core's view of Config, validated and defaulted by New: the
// ferry's configuration, whatever room a shard holds (see state.room).
type limits struct {
	batchSize    int           // inputs per batch, > 0
	batchWeight  int64         // weight per batch; 0: no limit (newState makes it MaxInt64)
	delay        time.Duration // how long a partial batch may wait, >= 0
	queued       int           // inputs waiting across all keys, > 0
	queuedWeight int64         // their total weight; 0: no limit but MaxInt64's, as above
	direct       bool          // claim idle keys when delay is 0
	calls        int           // calls of a key in flight at once, >= 1 (newState makes 0 one)
}

// budget is an amount of room, inputs and weight; holds runs on any goroutine.
type budget struct {
	n int
	w int64
}

// holds reports whether b is at least need, in inputs and in weight.
func (b budget) holds(need budget) bool { return b.n >= need.n && b.w >= need.w }

// outcome is what admit did with an input.
type outcome uint8

const (
	admitted      outcome = iota // waiting in its lane
	claimed                      // the key is busy with this caller's direct call
	rejectedFull                 // the room is full by count or weight (or the total would pass MaxInt64)
	rejectedHeavy                // heavier than the whole room can ever hold
	refused                      // the room is closed (drained or shutting down)
	overHeld                     // its key's lane is held (see hold) and keeps its share of the room: see heldShare
)

// heldShare bounds a held key's lane (see hold) to 1/heldShare of the room's
// inputs and weight, one input at least, so that it never fills the room.
const heldShare = 8

// ticket names an admitted input, for drop.
type ticket struct {
	rank int64
	seq  uint64
}

// phase is where a lane stands in the state diagram.
type phase uint8

const (
	phaseBusy    phase = iota + 1 // calls in flight, and none to spare or no input: out of line
	phaseReady                    // in the ready line
	phaseWaiting                  // in the waiting tree until its deadline
	phaseParked                   // holds a continuation, in the parks tree until its deadline (held: in none)
)

// lane holds one key's waiting inputs. It exists while it has inputs or a call.
type lane[K comparable, E any] struct {
	key    K
	items  queue[E] // by (rank, seq)
	weight int64    // total weight of items
	phase  phase
	calls  int           // its calls in flight, batched and direct: lim.calls at most
	ref    uint64        // its place in the schedule: see schedule
	due    time.Duration // while waiting or parked: its deadline, since the origin
	cont   bool          // it holds a continuation: parked, or ready to hand it out
	held   bool          // parked with no deadline, in no tree, until unpark or drain (see hold)
}

// freeLanes bounds the lanes kept for reuse.
const freeLanes = 64

// A lane that holds more than hotLane items when taken is hot: its buffer
// keeps two batches, up to baseCap items; other lanes keep the smallest.
const hotLane = 16

const baseCap = 128

// state is the waiting room: a deterministic state machine with no
// goroutines, channels, clocks or callbacks. Time is an argument, a Duration
// since the ferry's origin (0 with zero delay), and each transition returns
// what the loop must do. Its zero value is not usable: use newState.
// loop: its methods run on the shard's loop goroutine, its only owner.
type state[K comparable, E any] struct {
	lim limits

	lanes peakMap[K, *lane[K, E]]
	sched schedule[K, E]

	queued int   // inputs waiting
	weight int64 // their total weight
	busy   int   // calls in flight, batched and direct
	conts  int   // lanes that hold a continuation, parked or ready: see park

	room      budget // what it may hold: lim's, or a shard's share of it (see grow)
	earmarked budget // room kept for inputs not yet entered: see earmark
	heldCap   budget // the most a held lane keeps: see heldShare

	seq          uint64 // last sequence handed out to an item
	closed       bool   // drained: nothing is admitted again
	shuttingDown bool   // nothing is admitted again, every lane is due: see shutdown
	flushed      uint64 // inputs with a seq up to this are due: see flush

	free      []*lane[K, E]
	itemsFree *btree.FreeListG[item[E]] // nodes for lanes whose ranks arrive out of order
}

func newState[K comparable, E any](lim limits) *state[K, E] {
	lim.batchWeight = cmp.Or(lim.batchWeight, math.MaxInt64)
	lim.queuedWeight = cmp.Or(lim.queuedWeight, math.MaxInt64)
	lim.calls = max(1, lim.calls)
	return &state[K, E]{
		lim:       lim,
		sched:     newSchedule[K, E](),
		room:      budget{lim.queued, lim.queuedWeight},
		heldCap:   budget{max(1, lim.queued/heldShare), max(1, lim.queuedWeight/heldShare)},
		itemsFree: btree.NewFreeListG[item[E]](btree.DefaultFreeListSize),
	}
}

func (s *state[K, E]) next() uint64 { s.seq++; return s.seq }

// dueAt is the deadline of an input submitted at at, saturated.
func (s *state[K, E]) dueAt(at time.Duration) time.Duration {
	if at > math.MaxInt64-s.lim.delay {
		return math.MaxInt64
	}
	return at + s.lim.delay
}

// admit takes one input (weight >= 0), submitted at at, into the room at now.
// If claims says so, it claims the key for the caller's direct call (busy, no
// items), unless the room is closed or the input too heavy; else it joins.
func (s *state[K, E]) admit(key K, weight, rank int64, at, now time.Duration, e E) (outcome, ticket) {
	if s.claims(key) {
		if o := s.fits(0, 0, weight); o != admitted {
			return o, ticket{}
		}
		s.claim(key)
		return claimed, ticket{}
	}
	return s.join(key, weight, rank, at, now, e)
}

// claims reports whether admit would claim key for a direct call rather
// than let its input join the lane. That needs direct calls, zero delay, no
// input of the key waiting, and a call of it to spare. admit and the loop's
// wait line ask it; share.need asks claimsLane.
func (s *state[K, E]) claims(key K) bool {
	l := s.lanes.m[key]
	return s.claimsLane(l != nil) || l != nil && s.claimsLane(false) &&
		l.phase == phaseBusy && l.calls < s.lim.calls && l.items.len() == 0
}

// claimsLane is claims for a key with no lane (exists false); with a lane,
// false, though several calls per key may claim it (see claims).
func (s *state[K, E]) claimsLane(exists bool) bool {
	return s.lim.direct && s.lim.delay == 0 && !exists
}

// laneOf reports whether key has a lane, and whether it holds inputs.
func (s *state[K, E]) laneOf(key K) (exists, items bool) {
	l := s.lanes.m[key]
	return l != nil, l != nil && l.items.len() > 0
}

// join takes one input into its lane if the room has space for it, and its
// lane, if held, its share (see overHeld); it never claims the key.
func (s *state[K, E]) join(key K, weight, rank int64, at, now time.Duration, e E) (outcome, ticket) {
	o := s.fits(1, weight, weight)
	if (o == admitted || o == rejectedFull) && s.overHeld(key, weight) { // after refused and heavy
		return overHeld, ticket{}
	}
	if o != admitted {
		return o, ticket{}
	}
	return admitted, s.enter(key, weight, rank, at, now, e)
}

// overHeld reports whether key's lane is held (see hold) and would keep
// more than its share of the room with one more input of weight: heldCap's
// inputs, or its weight once the lane holds one input.
func (s *state[K, E]) overHeld(key K, weight int64) bool {
	l := s.lanes.m[key]
	if l == nil || !l.held {
		return false
	}
	n := l.items.len()
	return n >= s.heldCap.n || n > 0 && weight > s.heldCap.w-l.weight
}

// fits reports whether n inputs weighing total together, the heaviest
// heaviest, may all join now: admitted, or why not. A total < 0 stands for a
// sum that passes MaxInt64, heavier than any room. Weights must not be negative.
func (s *state[K, E]) fits(n int, total, heaviest int64) outcome {
	switch {
	case s.closed || s.shuttingDown:
		return refused
	case heaviest > s.lim.queuedWeight || total < 0:
		return rejectedHeavy
	case n > s.room.n-s.queued-s.earmarked.n || total > s.room.w-s.weight-s.earmarked.w:
		return rejectedFull
	}
	return admitted
}

// grow adds n inputs and w of weight, either maybe negative, to a shard's
// share of a shared room. The room must stay within MaxInt64 and hold what
// waits and is earmarked; what outweighs the whole room stays rejectedHeavy.
func (s *state[K, E]) grow(n int, w int64) {
	s.room.n += n
	s.room.w += w
}

// unused is the room that neither waits nor is earmarked: inputs and weight.
func (s *state[K, E]) unused() budget {
	return budget{s.room.n - s.queued - s.earmarked.n, s.room.w - s.weight - s.earmarked.w}
}

// earmark keeps room for n inputs weighing total, that fits let in, until
// unearmark: a DoMany over several rooms earmarks each before it enters any.
func (s *state[K, E]) earmark(n int, total int64) {
	s.earmarked.n += n
	s.earmarked.w += total
}

// unearmark lets go of earmarked room, as its inputs enter or instead.
func (s *state[K, E]) unearmark(n int, total int64) {
	s.earmarked.n -= n
	s.earmarked.w -= total
}

// enter puts an input that fits let in into its lane, and returns its ticket.
func (s *state[K, E]) enter(key K, weight, rank int64, at, now time.Duration, e E) ticket {
	it := item[E]{rank: rank, seq: s.next(), weight: weight, entry: e}
	if s.lim.delay > 0 {
		it.at = at
	}
	s.queued++
	s.weight += weight
	l := s.lanes.m[key]
	if l == nil {
		l = s.newLane(key)
		s.insert(l, it)
		s.place(l, now)
		return ticket{rank, it.seq}
	}
	s.insert(l, it)
	if l.phase == phaseBusy && l.calls < s.lim.calls { // a call to spare: it goes again
		s.place(l, now)
	} else if l.phase == phaseWaiting {
		if s.full(l) {
			s.sched.promote(now) // the lanes due before it filled go first; l may be one
			if l.phase == phaseWaiting {
				s.sched.unwait(l)
				s.sched.push(l)
			}
		} else if d := s.dueAt(it.at); d < l.due {
			s.sched.rekey(l, d) // the new input is older than the oldest
		}
	}
	return ticket{rank, it.seq}
}

// claim counts a call of key's lane in flight, made busy if new: its
// caller makes a direct call.
func (s *state[K, E]) claim(key K) {
	l := s.lanes.m[key]
	if l == nil {
		l = s.newLane(key)
		l.phase = phaseBusy
	}
	l.calls++
	s.busy++
}

// take promotes the lanes due at now, then takes the first ready lane's batch
// into buf and marks it busy; ok is false if none is ready. A continuation
// goes alone, before the items: cont is true and batch is buf (the loop has it).
func (s *state[K, E]) take(now time.Duration, buf []E) (key K, batch []E, cont, ok bool) {
	l, ok := s.sched.pop(now)
	if !ok {
		return key, buf, false, false
	}
	l.phase = phaseBusy
	l.calls++
	s.busy++
	if l.cont { // the continuation alone, before the items behind it
		l.cont = false
		s.conts--
		return l.key, buf, true, true
	}
	if l.items.len() > hotLane {
		l.items.run.SetBaseCap(2 * min(s.lim.batchSize, baseCap/2))
	}
	// The batch's weight w is at most batchWeight, or one input's.
	batch, w := l.items.take(buf, s.lim.batchSize, s.lim.batchWeight)
	s.forget(l, len(batch)-len(buf), w)
	if l.calls < s.lim.calls && l.items.len() > 0 { // a call to spare: the rest go again
		s.place(l, now)
	}
	return l.key, batch, false, true
}

// release ends key's call in flight, after promoting the lanes due at now. A
// lane with inputs left goes to the back of the ready line if full or due,
// else back to waiting; an empty lane is removed. A key not busy panics.
func (s *state[K, E]) release(key K, now time.Duration) {
	l := s.busyLane(key, "release")
	l.calls--
	s.busy--
	s.sched.promote(now)
	switch {
	case l.phase != phaseBusy: // in line already, with a call to spare
	case l.items.len() > 0:
		s.place(l, now)
	case l.calls == 0:
		s.removeLane(l)
	}
}

// busyLane is key's lane, which must have a call in flight: else what panics.
func (s *state[K, E]) busyLane(key K, what string) *lane[K, E] {
	l := s.lanes.m[key]
	if l == nil || l.calls == 0 {
		panic(fmt.Sprintf("ferry: %s of a key of type %T that has no call in flight", what, key))
	}
	return l
}

// drop removes key's admitted input t before it is taken, at now, freeing its
// room at once; ok is false if it is not waiting (taken, dropped, drained). An
// empty idle lane is removed; a ready lane left partial and not due waits.
func (s *state[K, E]) drop(key K, t ticket, now time.Duration) (e E, ok bool) {
	l := s.lanes.m[key]
	if l == nil {
		return e, false
	}
	it, ok := l.items.remove(t.rank, t.seq)
	if !ok {
		return e, false
	}
	s.forget(l, 1, it.weight)
	if l.items.len() == 0 && !l.cont {
		s.unplace(l) // a stale ready ref is skipped by take
		return it.entry, true
	}
	switch {
	case l.phase == phaseWaiting && s.dueAt(it.at) == l.due:
		if d := s.deadline(l); d != l.due {
			s.sched.rekey(l, d) // the oldest input left
		}
	case l.phase == phaseReady && !l.cont && s.lim.delay > 0 && !s.shuttingDown && !s.full(l):
		if d := s.deadline(l); d > now {
			s.sched.unready(l)
			s.sched.wait(l, d) // Ready -> Waiting: it was ready only because full
		}
	}
	return it.entry, true
}

// clearLane removes the inputs waiting in key's lane, appending their entries
// to buf in lane order, and frees their room: for a key paused as its failed
// call is released. A busy lane, or one with a continuation, stays, empty; any
// other is removed. O(n) in its inputs, plus O(log L) for a lane removed.
func (s *state[K, E]) clearLane(key K, buf []E) []E {
	l := s.lanes.m[key]
	if l == nil {
		return buf
	}
	l.items.each(func(it item[E]) { buf = append(buf, it.entry) })
	s.forget(l, l.items.len(), l.weight)
	l.items.clear()
	if !l.cont {
		s.unplace(l)
	}
	return buf
}

// unplace takes l, with no inputs left, out of the schedule: removed if no
// call of it is in flight, else busy.
func (s *state[K, E]) unplace(l *lane[K, E]) {
	if l.calls == 0 {
		s.removeLane(l)
		return
	}
	s.sched.remove(l)
	l.phase = phaseBusy
}

// drain closes the room and removes every waiting input, appending its entry
// to buf in arrival order. Busy lanes stay busy and empty until released.
// Lanes with a continuation are ready at once, empty: the ready ones first,
// then the parked by deadline, then the held in the order they were held.
func (s *state[K, E]) drain(buf []E) []E {
	s.closed = true
	conts := s.sched.drain(func(l *lane[K, E]) bool { return l.cont }, nil)
	var all []item[E]
	var held []*lane[K, E] // with no deadline: last, in the order they were held
	for _, l := range s.lanes.all() {
		if l.held {
			held = append(held, l)
			l.held = false
		}
		l.items.each(func(it item[E]) { all = append(all, it) })
		l.items.clear()
		l.weight = 0
		switch l.phase = 0; { // out of the schedule, which drain emptied
		case l.calls > 0:
			l.phase = phaseBusy
		case !l.cont:
			s.removeLane(l)
		}
	}
	slices.SortFunc(all, func(a, b item[E]) int { return cmp.Compare(a.seq, b.seq) })
	for _, it := range all {
		buf = append(buf, it.entry)
	}
	s.queued, s.weight = 0, 0
	slices.SortFunc(held, func(a, b *lane[K, E]) int { return cmp.Compare(a.ref, b.ref) })
	for _, l := range append(conts, held...) {
		s.sched.push(l)
	}
	return buf
}

// park gives key's busy lane a continuation, its failed call to make again
// after d: parked until now+d (saturated), or ready at once if d <= 0 or the
// room is drained, after the lanes due at now. A key not busy panics.
func (s *state[K, E]) park(key K, d, now time.Duration) {
	l := s.busyLane(key, "park") // with one call per key: busy, out of line
	l.calls--
	s.busy--
	s.conts++
	l.cont = true
	s.sched.promote(now)
	if d <= 0 || s.closed {
		s.sched.push(l)
		return
	}
	due := time.Duration(math.MaxInt64)
	if now <= math.MaxInt64-d {
		due = now + d
	}
	s.sched.park(l, due)
}

// hold gives key's busy lane a continuation, its call that failed for good
// (Config.HoldPaused): parked with no deadline, in no tree, until unpark or
// drain, or ready if drained. Inputs join it up to its share (see overHeld).
// A key not busy panics.
func (s *state[K, E]) hold(key K) {
	l := s.busyLane(key, "hold")
	l.calls--
	s.busy--
	s.conts++
	l.cont = true
	if s.closed {
		s.sched.push(l)
		return
	}
	l.phase, l.held = phaseParked, true
	l.due = math.MaxInt64
	l.ref = s.sched.next()
}

// unpark makes key's parked lane (or held one: see hold) ready at once,
// after the lanes due at now, and reports whether it was parked.
func (s *state[K, E]) unpark(key K, now time.Duration) bool {
	l := s.lanes.m[key]
	if l == nil || l.phase != phaseParked {
		return false
	}
	if l.held {
		l.held = false
	} else {
		s.sched.unpark(l)
	}
	s.sched.pushDue(l, now)
	return true
}

// parked reports whether some lane is parked with a deadline: the loop reads
// the clock then, even with no delay.
func (s *state[K, E]) parked() bool { return s.sched.parked() }

// shutdown closes the room gracefully: nothing is admitted again, and every
// lane is due at once, now and when released.
func (s *state[K, E]) shutdown() {
	s.shuttingDown = true
	s.sched.readyWaiting()
}

// flush makes every input waiting now due, without closing the room: waiting
// lanes join the ready line, and a lane holding any of them is ready whenever
// placed again. Later inputs keep their own deadlines.
func (s *state[K, E]) flush() {
	s.flushed = s.seq
	s.sched.readyWaiting()
}

// idle reports whether nothing waits, is in flight or holds a continuation.
func (s *state[K, E]) idle() bool { return s.queued == 0 && s.busy == 0 && s.conts == 0 }

// full reports whether a lane holds a whole batch: batchSize inputs, or a
// weight of batchWeight or more.
func (s *state[K, E]) full(l *lane[K, E]) bool {
	return l.items.len() >= s.lim.batchSize || s.lim.batchWeight > 0 && l.weight >= s.lim.batchWeight
}

// deadline is the oldest waiting input's submission time plus the delay, or
// MinInt64 if flush made an input due. It scans the lane: partial lanes only.
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
			s.sched.wait(l, d)
			return
		}
	}
	s.sched.pushDue(l, now)
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
	s.lanes.put(key, l)
	return l
}

// removeLane forgets an empty lane, wherever it stands. A ready ref to it goes
// stale; a waiting ref is deleted.
func (s *state[K, E]) removeLane(l *lane[K, E]) {
	s.sched.remove(l)
	s.lanes.del(l.key)
	var zero K
	l.key, l.phase, l.ref, l.due, l.weight = zero, 0, 0, 0, 0
	if len(s.free) < freeLanes {
		s.free = append(s.free, l)
	}
}
