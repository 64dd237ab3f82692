package ferry

import (
	"cmp"
	"math"
	"time"
)

// This file is a loop's side of the room the shards of a ferry share. The
// configured bounds are totals, shared by the shards: the room (MaxQueued,
// MaxQueuedWeight, see share) and the batched calls in flight
// (MaxInFlightBatches, see slots.go). The room no shard holds, spare, and its
// ledger are pool.go's.

// share is a loop's side of the room the shards of its ferry share: spare,
// the room no shard holds. With one shard spare is nil and share holds
// nothing back. It holds no pointer into the loop's core or its paused keys:
// the core's unused room comes in and goes out as values, and need reads the
// core and the paused keys it is given. loop: its methods run on the
// shard's loop goroutine. docs/design.md (Shards) tells how it borrows,
// keeps an allowance, presses and gives back.
type share[K comparable, I, O any] struct {
	lim limits // the ferry's

	spare room // the ferry's, with several shards

	lanes   map[K]laneGuess // need's guesses within one wake-up, with direct calls: see claims
	resumed map[K]bool      // keys need read a Resume of within one wake-up
	direct  bool            // a Do may claim its key (DirectCalls, no delay): need guesses lanes

	// With WaitForRoom and several shards: the shard's reservation on the
	// room given back (see ledger), for the first admission in its wait line.
	poke     chan struct{} // the shard's, capacity 1: wakes its loop once the reservation is full
	reserved bool          // the shard has a reservation in spare: see roomFor
	wants    bool          // an admission waits for room: see loop.admitWaiting

	end op // the ferry's end, as spare said it has begun (see room.end): opClose, opShutdown, or 0

	// Without WaitForRoom: the allowance (see allowance, giveBackRoom).
	me      int               // the shard's index in shards, and in the ledger's marks
	shards  []*shard[K, I, O] // the ferry's: those that may keep room are asked for it
	keeps   bool              // it keeps an allowance: several shards, no WaitForRoom
	marked  bool              // the ledger marks it as one that may
	pressed bool              // a shard waits for room: give it all back once the messages are handled
	used    budget            // the most room in use at a give-back in this window
	last    budget            // and in the window before
	turns   int               // give-backs in this window
	asks    []int             // the shards to ask for room back: see askBack

	msgs []msg[K, I, O] // scratch: one wake-up's messages, read first (see loop.receiveShared)
	ops  *sharedOps     // the loop's count of operations on spare: see sharedOps
}

// newShare returns the share of shards[me] in spare, the ferry's shared
// room (nil with one shard), whose limits are lim, counting its operations
// on spare in ops. With several shards it has a poke: with WaitForRoom for
// its reservation, else to wait for room back (and it keeps an allowance).
func newShare[K comparable, I, O any](lim limits, spare room, waitForRoom bool, shards []*shard[K, I, O], me int, ops *sharedOps) share[K, I, O] {
	sh := share[K, I, O]{lim: lim, spare: spare, ops: ops, shards: shards, me: me, direct: lim.direct && lim.delay == 0}
	if spare != nil {
		sh.poke = make(chan struct{}, 1)
		sh.keeps = !waitForRoom
	}
	return sh
}

// heard records the ferry's end, o, that the ledger says has begun (see
// room.end, which alone ranks a close over a shutdown: the ledger's mark
// only rises), if it has: the loop starts it (see loop.heedEnd).
func (sh *share[K, I, O]) heard(o op) {
	if o != 0 {
		sh.end = o
	}
}

// number returns the next wait number from spare, for an admission that
// begins to wait for room, so that the numbers order the admissions waiting
// in every shard by when they began to wait (see ledger).
func (sh *share[K, I, O]) number() uint64 {
	if countOps {
		sh.ops.add(2)
	}
	p := sh.spare.take()
	p.next++
	n := p.next
	sh.heard(p.end)
	sh.spare.put(p)
	return n
}

// waiting records whether an admission waits for room in this shard (see
// loop.admitWaiting): giveBackRoom ends the shard's reservation once none
// does.
func (sh *share[K, I, O]) waiting(wants bool) { sh.wants = wants }

// ending reports whether the ferry's end has begun, as spare said.
func (sh *share[K, I, O]) ending() bool { return sh.end != 0 }

// press records a shard's ask for room back (opGiveBack): giveBackRoom gives
// all back once the wake-up's messages are handled.
func (sh *share[K, I, O]) press() { sh.pressed = true }

// borrowRoom borrows from spare what this shard lacks of room for the
// admissions among one wake-up's messages, need, or as much as spare has,
// so that the core refuses one only if the shared room cannot hold it. has
// is what the core holds unused, used what it holds in use; it returns
// what the core holds unused after.
//
// If spare falls short while another shard may keep an allowance, it gives
// spare all it has and what it took, and asks those shards for theirs (see
// askBack). It waits for its poke (ledger.wake) and borrows again, until
// spare has what it lacks or no other shard keeps any. This is the one wait
// of the loop (see loop.run). Those asked never wait for it: a
// shard that waits keeps nothing. Room borrowed and not used goes back, or
// stays as the allowance, with giveBackRoom at the end of the wake-up.
//
// A shard that keeps an allowance borrows ahead: beside what it lacks, as
// much again as its core holds in use, if spare has it, so that a shard
// whose callers grow borrows once per doubling, not once per wake-up.
func (sh *share[K, I, O]) borrowRoom(need, has, used budget) budget {
	whole := sharedWeight(sh.lim)
	if need.w < 0 { // past MaxInt64: more than the room
		need.w = whole
	}
	want := budget{min(need.n, sh.lim.queued), min(need.w, whole)}
	for {
		short := budget{max(0, want.n-has.n), max(0, want.w-has.w)}
		if short == (budget{}) {
			return has
		}
		ask := short
		if sh.keeps {
			ask = budget{min(short.n, sh.lim.queued-used.n) + used.n, min(short.w, whole-used.w) + used.w}
		}
		if countOps {
			sh.ops.add(2)
		}
		p := sh.spare.take()
		if sh.heard(p.end); sh.end != 0 { // the ferry ends: its admissions are refused
			sh.spare.put(p)
			return has
		}
		got := p.borrow(ask)
		if got.holds(short) || !p.marked(sh.me) {
			if sh.keeps && len(p.waiters) == 0 { // what is left stays, if the allowance keeps it
				p.mark(sh.me, true)
				sh.marked = true
			}
			sh.pressed = sh.pressed || len(p.waiters) > 0
			sh.spare.put(p)
			return budget{has.n + got.n, has.w + got.w}
		}
		p.give(budget{has.n + got.n, has.w + got.w}) // within the room's total
		p.mark(sh.me, false)
		sh.marked, has = false, budget{}
		p.waiters.add(sh.poke)
		sh.asks = p.markedBut(sh.me, sh.asks[:0])
		sh.spare.put(p)
		for _, i := range sh.asks {
			askBack(sh.shards[i])
		}
		<-sh.poke
	}
}

// askBack asks s's loop for the room it keeps (opGiveBack): it gives it
// back once it has handled its next wake-up's messages. The send never
// blocks: if s's channel is full, a goroutine of its own sends, or gives up
// once s has ended.
func askBack[K comparable, I, O any](s *shard[K, I, O]) {
	m := msg[K, I, O]{op: opGiveBack}
	select {
	case s.inc <- m:
	default:
		go s.send(m)
	}
}

// need is the room that the admissions among ms take if the core lets them
// all in, in their order: a Do's or a Submit's input, a DoMany's part. It
// counts none for what takes none in one loop. Such is an input heavier than
// the whole room, or a part that no room could hold (more inputs than
// MaxQueued, or heavier than the room). So is a part whose room is earmarked
// already or came with it (granted), and a Do that claims its key for a
// direct call. So is an input of a paused key (refused as ErrPaused), unless
// need read a Resume of it first. A key paused within the wake-up is counted:
// that room is given back at its end. A total past MaxInt64 is -1. core is
// the loop's core as the wake-up starts, whose rules need asks (see
// state.claimsLane), and paused its paused keys (nil without
// PauseOnError): read, not kept.
func (sh *share[K, I, O]) need(ms []msg[K, I, O], core *state[K, *waiter[K, I, O]], paused *pauses[K]) budget {
	whole := sharedWeight(sh.lim)
	var need budget
	for _, m := range ms {
		switch m.op {
		case opAdmit:
			switch w := m.w; {
			case w.weight > whole: // rejectedHeavy
			case sh.pausedKey(paused, w.key):
			case sh.direct && w.done == nil && sh.claims(core, w.key):
			default:
				need.n++
				need.w = addWeight(need.w, w.weight)
				if sh.direct {
					sh.joins(w.key) // a Submit's input makes a lane too
				}
			}
		case opAdmitMany, opEarmark:
			p := &m.g.parts[m.part]
			switch {
			case p.earmarked, p.granted:
			case p.neverFits(sh.lim):
			case m.op == opAdmitMany && paused != nil && paused.count() > 0: // an earmark keeps room for them all
				need = sh.unpaused(paused, need, m.g, m.part)
			default:
				need.n += p.n
				need.w = addWeight(need.w, p.total)
			}
			if sh.direct && m.op == opAdmitMany {
				for i := range m.g.ws {
					if w := &m.g.ws[i]; w.part == m.part {
						sh.joins(w.key)
					}
				}
			}
		case opRelease:
			if sh.direct {
				sh.released(core, m.key)
			}
		case opResume:
			if paused != nil && paused.count() > 0 {
				if sh.resumed == nil {
					sh.resumed = make(map[K]bool)
				}
				sh.resumed[m.key] = true
			}
		}
	}
	clear(sh.lanes)
	clear(sh.resumed)
	return need
}

// pausedKey reports whether key's inputs are refused as paused, as need
// reads them: paused as the wake-up started, and no Resume read since.
func (sh *share[K, I, O]) pausedKey(paused *pauses[K], key K) bool {
	if paused == nil || paused.count() == 0 {
		return false
	}
	_, ok := paused.of(key)
	return ok && !sh.resumed[key]
}

// unpaused adds to need the inputs of part i of g whose keys are not paused
// (see pausedKey), which the loop admits without the others (see
// loop.letInPart).
func (sh *share[K, I, O]) unpaused(paused *pauses[K], need budget, g *group[K, I, O], i int32) budget {
	for j := range g.ws {
		if w := &g.ws[j]; w.part == i && !sh.pausedKey(paused, w.key) {
			need.n++
			need.w = addWeight(need.w, w.weight)
		}
	}
	return need
}

// laneGuess is what need expects of a key's lane at a point in a wake-up:
// whether it exists, and whether it may hold inputs.
type laneGuess struct{ exists, items bool }

// guess is need's view of key's lane after the messages it has read: the
// core's lane as the wake-up started, changed by what need read since.
func (sh *share[K, I, O]) guess(core *state[K, *waiter[K, I, O]], key K) laneGuess {
	if g, ok := sh.lanes[key]; ok {
		return g
	}
	exists, items := core.laneOf(key)
	return laneGuess{exists, items}
}

// claims reports whether a Do for key will claim it, as the core answers for
// the lane need guesses (see state.claimsLane). With direct calls on, the
// core claims a key that has no lane, and a Do that does not claim it joins
// the lane. Either way the key has a lane after.
func (sh *share[K, I, O]) claims(core *state[K, *waiter[K, I, O]], key K) bool {
	if sh.lanes == nil {
		sh.lanes = make(map[K]laneGuess)
	}
	g := sh.guess(core, key)
	sh.lanes[key] = laneGuess{exists: true, items: g.exists}
	return core.claimsLane(g.exists)
}

// joins records that inputs may join key's lane.
func (sh *share[K, I, O]) joins(key K) {
	if sh.lanes == nil {
		sh.lanes = make(map[K]laneGuess)
	}
	sh.lanes[key] = laneGuess{exists: true, items: true}
}

// released records a release of key's call: the core removes a lane left
// with nothing waiting, so the next Do for the key claims it. A lane that
// may hold inputs is kept, which can only make need count more, not less.
func (sh *share[K, I, O]) released(core *state[K, *waiter[K, I, O]], key K) {
	if g := sh.guess(core, key); g.exists && !g.items {
		if sh.lanes == nil {
			sh.lanes = make(map[K]laneGuess)
		}
		sh.lanes[key] = laneGuess{}
	}
}

// sharedWeight is the weight of the whole room that the shards share:
// MaxQueuedWeight, or MaxInt64 without one, as one loop's room has.
func sharedWeight(lim limits) int64 { return cmp.Or(lim.queuedWeight, math.MaxInt64) }

// giveBackRoom gives back to spare the room this shard holds unused, but
// for its allowance, and returns what it keeps. It keeps an allowance only
// while the shard keeps one (no WaitForRoom), admits (admits), the ferry's
// end has not begun, and no shard waits for room: else it gives all back,
// and the ledger no longer marks it (see ledger.mark). Room given back fills
// the reservations in their order, this shard's too, which keeps its place
// while an admission waits for room here (wants), and ends once none does.
// The mark stays while the shard keeps none, until it is asked: it takes
// spare only when it gives back room, or its mark changes.
func (sh *share[K, I, O]) giveBackRoom(unused, used budget, admits bool) budget {
	ending := sh.reserved && !sh.wants
	active := sh.keeps && admits && sh.end == 0 && !sh.pressed
	var keep budget
	if active {
		keep = sh.allowance(unused, used)
	}
	mark := active && (sh.marked || keep != (budget{})) // a mark stays while it keeps none
	if unused == keep && !ending && mark == sh.marked {
		return keep // nothing to give back, and the mark stands
	}
	if countOps {
		sh.ops.add(2)
	}
	p := sh.spare.take()
	if sh.heard(p.end); sh.end != 0 || len(p.waiters) > 0 {
		keep, mark = budget{}, false
	}
	p.give(budget{unused.n - keep.n, unused.w - keep.w})
	if ending {
		p.cancel(sh.poke)
		sh.reserved = false
	}
	if mark != sh.marked {
		p.mark(sh.me, mark)
		sh.marked = mark
	}
	sh.pressed = false
	sh.spare.put(p)
	return keep
}

// allowance is what the shard keeps of unused, the room it holds unused, with
// used the room in use in its core (queued inputs and their weight). It keeps
// all of it, unless it passes twice the most in use at a give-back in this
// window or the last (64 give-backs each), in inputs or in weight; then it
// keeps that most.
func (sh *share[K, I, O]) allowance(unused, used budget) budget {
	sh.used = budget{max(sh.used.n, used.n), max(sh.used.w, used.w)}
	if sh.turns++; sh.turns == 64 {
		sh.last, sh.used, sh.turns = sh.used, used, 0
	}
	top := budget{max(sh.used.n, sh.last.n), max(sh.used.w, sh.last.w)}
	if unused.n-top.n > top.n || unused.w-top.w > top.w { // no wrap: all >= 0
		return budget{min(unused.n, top.n), min(unused.w, top.w)}
	}
	return unused
}

// roomFor reserves room for b, the need of the first admission in the
// shard's wait line, number n (next behind it, 0 if none), with several
// shards (see loop.roomFor). It first gives back has, what the core held
// unused, which fills the reservations in their order. It makes its own
// reservation the one of n, needing b, in n's place among the others. Then
// it takes what its reservation has, once it is ready (see ledger.fill). So the
// room freed goes to the shards' first waiting admissions in the order
// they began to wait, this shard's own too. What it took and does not use
// goes back with giveBackRoom, into the reservation, which keeps its place.
// roomFor returns what the loop puts back in the core. Once the ferry's end
// has begun (see room.end) it returns has and false, and changes nothing:
// the loop hears of it (end) and answers its line.
func (sh *share[K, I, O]) roomFor(b, has budget, n, next uint64) (budget, bool) {
	if countOps {
		sh.ops.add(2)
	}
	p := sh.spare.take()
	if sh.heard(p.end); sh.end != 0 {
		sh.spare.put(p)
		return has, false
	}
	p.give(has)
	p.reserve(sh.poke, b, n, next)
	sh.reserved = true
	got := p.claim(sh.poke)
	sh.spare.put(p)
	return got, true
}

// receiveShared is receive with several shards: it reads m and every
// message queued behind it first, to borrow the room they ask for at once,
// then handles them. It gives back what the messages freed, and all it
// keeps if a shard asked, before dispatch takes batches (see giveBackRoom).
func (l *loop[K, I, O]) receiveShared(m msg[K, I, O], now time.Duration) {
	ms := append(l.share.msgs[:0], m)
	for n := len(l.s.inc); n > 0; n-- {
		ms = append(ms, <-l.s.inc)
	}
	l.borrowRoom(ms)
	if l.share.end != 0 {
		l.heedEnd() // before the admissions: refused, as the ferry's end has begun
	}
	for _, m := range ms {
		l.handle(m, now)
	}
	clear(ms)
	l.share.msgs = ms
	if l.f.waitForRoom {
		l.admitWaiting(now) // into what the messages freed, before it is lent
	}
	l.giveBackRoom()
}

// borrowRoom borrows from spare what the admissions among ms, one
// wake-up's messages, lack in the core (see share.borrowRoom), unless the
// core refuses every admission.
func (l *loop[K, I, O]) borrowRoom(ms []msg[K, I, O]) {
	if l.st.closed || l.st.shuttingDown {
		return
	}
	var paused *pauses[K] // need reads it only with PauseOnError
	if l.f.pauseOnError {
		paused = &l.pauses.keys
	}
	need := l.share.need(ms, l.st, paused)
	if need == (budget{}) {
		return
	}
	has := l.st.unused()
	got := l.share.borrowRoom(need, has, budget{l.st.queued, l.st.weight})
	if got != has {
		l.st.grow(got.n-has.n, got.w-has.w)
	}
}

// giveBackRoom gives the room the core holds unused back to spare, but for
// the allowance, with several shards (see share.giveBackRoom).
func (l *loop[K, I, O]) giveBackRoom() {
	unused := l.st.unused()
	admits := !l.st.closed && !l.st.shuttingDown
	if kept := l.share.giveBackRoom(unused, budget{l.st.queued, l.st.weight}, admits); kept != unused {
		l.st.grow(kept.n-unused.n, kept.w-unused.w)
	}
}

// takeUnused takes the room the core holds unused out of it, and returns it.
func (l *loop[K, I, O]) takeUnused() budget {
	b := l.st.unused()
	l.st.grow(-b.n, -b.w)
	return b
}

// borrow takes from spare, in one step, the room for all of g's inputs, a
// DoMany over several shards, and marks each part granted. A part's shard
// adds the part's room to its own as it lets the part in, and refuses it
// only if it is closing. While a shard may keep the room it lacks as its
// allowance, borrow asks for it and waits, as a shard does (see
// share.borrowRoom). It reports false, and takes nothing, if spare lacks
// that room (the room is full but for room a shard holds within a wake-up)
// or the ferry's end has begun (see room.end). The parts then earmark room
// shard by shard (see group.admit), or are refused.
func borrow[K comparable, I, O any](f *Ferry[K, I, O], g *group[K, I, O], total int64) bool {
	var asks []int
	var poke chan struct{}
	for {
		p := f.spare.take()
		if p.end != 0 {
			f.spare.put(p)
			return false
		}
		if p.free.holds(budget{len(g.ws), total}) {
			p.borrow(budget{len(g.ws), total})
			f.spare.put(p)
			break
		}
		if !p.marked(-1) {
			f.spare.put(p)
			return false
		}
		if poke == nil { // a shard may keep the room as its allowance: ask, and wait
			poke = make(chan struct{}, 1)
		}
		p.waiters.add(poke)
		asks = p.markedBut(-1, asks[:0])
		f.spare.put(p)
		for _, i := range asks {
			askBack(f.shards[i])
		}
		<-poke
	}
	for i := range g.parts {
		g.parts[i].granted = true
	}
	return true
}

// addWeight is total plus w, for a DoMany: -1 once the sum passes MaxInt64,
// and from then on, as room reads a total < 0.
func addWeight(total, w int64) int64 {
	if total < 0 || w > math.MaxInt64-total {
		return -1
	}
	return total + w
}

// heedEnd starts the ferry's end that the shared room says has begun (see
// room.end), if this shard's own message has not come yet. With several
// shards, Close and Shutdown mark the room before they tell any shard, so
// that no room a shard frees as it ends lets another's admissions in.
func (l *loop[K, I, O]) heedEnd() {
	switch l.share.end {
	case opClose:
		l.close()
	case opShutdown:
		l.shutdown()
	}
}
