package ferry

import (
	"cmp"
	"slices"
)

// This file is the room no shard of a ferry holds, which they all share: the
// room channel, the ledger it passes, and the reservations of those that wait
// for room (Config.WaitForRoom). It also holds wakeups, the pokes of those
// that wait for something given back, room or a slot. Each shard's side of
// the room, what it borrows, keeps and gives back, is share.go's.

// room is the room that no shard of a ferry holds: a channel of one ledger.
// Whoever takes it (a loop, or a DoMany's caller: see borrow) changes the
// ledger and puts it back at once, blocking on nothing in between, so no one
// waits on it for longer than that, and no put ever blocks. Nil with one
// shard. Its methods run on the loops and on DoMany's callers.
type room chan *ledger

// newRoom returns a room that holds b, free.
func newRoom(b budget) room {
	r := make(room, 1)
	r <- &ledger{free: b}
	return r
}

// take takes the ledger, waiting while another holds it for a moment.
func (r room) take() *ledger { return <-r }

// end marks the room as ending, as Close (o opClose) or Shutdown (o
// opShutdown) begins, before either tells any shard. A shard that takes the
// ledger after this hears of it (see share.heard) and starts that end
// itself. So no room freed by a shard that ends first lets another's
// waiting admission in, nor a new one. A close outranks a shutdown.
func (r room) end(o op) {
	p := r.take()
	if p.end != opClose {
		p.end = o
	}
	p.wake() // those waiting for room back hear of it
	r.put(p)
}

// put puts back the ledger taken, then pokes those its change woke (see
// wakeups, ledger.fill).
func (r room) put(p *ledger) {
	pokes := p.pokes.take()
	r <- p
	pokes.poke()
}

// wakeups are the pokes of those who wait for something given back (room,
// a slot): each a channel of one, its owner's. A give-back takes them all,
// and pokes them once what was given back is where they look, so that no
// one polls. A poke never blocks: a second one says nothing more. Its
// methods run on whoever holds it: the room's ledger, or the slots' wants.
type wakeups []chan struct{}

// add adds poke to those waiting.
func (w *wakeups) add(poke chan struct{}) { *w = append(*w, poke) }

// take returns those waiting, to poke, and forgets them.
func (w *wakeups) take() wakeups {
	ws := *w
	*w = nil
	return ws
}

// moveTo moves those waiting to the end of to, keeping w's array for the
// next: only for a to read under the same lock (the ledger's pokes).
func (w *wakeups) moveTo(to *wakeups) {
	*to = append(*to, *w...)
	clear(*w)
	*w = (*w)[:0]
}

// poke pokes each, never blocking.
func (w wakeups) poke() {
	for _, c := range w {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// ledger is what a room holds: the room free, and, with WaitForRoom, the
// reservations of the shards whose first waiting admission lacks room. They
// are in the order those admissions began to wait, by their wait numbers
// (next is the last number given, to any shard: see share.number). Room
// given back fills them in that order before any of it is free (see fill).
// So the admissions waiting over all the shards are let in first come, first
// in, and a shard is woken only once its reservation holds all it needs: no
// shard polls. end is the ferry's end once it has begun (see room.end). It
// is pure bookkeeping: the room's channel is its lock, and whoever holds it
// calls its methods; pokes is what room.put sends.
//
// Without WaitForRoom a shard keeps room unused between its wake-ups, an
// allowance (see share.giveBackRoom): marks marks, by shard, those that may
// keep some, and waiters are those that lack room while one does (see
// share.borrowRoom, borrow). They are poked as room comes back, or once no
// shard keeps any.
type ledger struct {
	free    budget
	resv    []reservation
	pokes   wakeups // to poke once the ledger is back: see room.put
	next    uint64
	end     op // opClose, opShutdown, or 0
	marks   []bool
	waiters wakeups
}

// reservation is a shard's claim on the room given back, for the first
// admission in its wait line, number n, which needs need. got is what it has
// so far; next is the number of the admission behind it in its line (0:
// none). It is ready once got reaches need and every reservation before it
// is ready too, unless an admission behind one of theirs began to wait
// before its own. That one is let in first, once its shard has let its first
// in and reserved for it. Its shard may claim it only once it is ready. poke, the
// shard's, capacity 1, names it and wakes its loop as it becomes ready. It
// has no methods: its ledger changes it.
type reservation struct {
	need, got budget
	n, next   uint64
	ready     bool
	poke      chan struct{}
}

// borrow takes from free up to want of each, and returns what it took.
func (p *ledger) borrow(want budget) budget {
	got := budget{min(p.free.n, want.n), min(p.free.w, want.w)}
	p.free.n -= got.n
	p.free.w -= got.w
	return got
}

// give adds b to free, then fills the reservations from it; if it gives
// any, it wakes the waiters.
func (p *ledger) give(b budget) {
	p.free.n += b.n
	p.free.w += b.w // within the room's total: no wrap
	p.fill()
	if b != (budget{}) {
		p.wake()
	}
}

// mark records whether shard i may keep room unused between its wake-ups;
// once none does, it wakes the waiters.
func (p *ledger) mark(i int, on bool) {
	if i >= len(p.marks) {
		if !on {
			return
		}
		p.marks = append(p.marks, make([]bool, i+1-len(p.marks))...)
	}
	p.marks[i] = on
	if !on && !p.marked(-1) {
		p.wake()
	}
}

// marked reports whether a shard but shard me (-1: none) may keep room.
func (p *ledger) marked(me int) bool {
	for i, m := range p.marks {
		if m && i != me {
			return true
		}
	}
	return false
}

// markedBut appends to to the shards but me that may keep room.
func (p *ledger) markedBut(me int, to []int) []int {
	for i, m := range p.marks {
		if m && i != me {
			to = append(to, i)
		}
	}
	return to
}

// wake makes the waiters poked as the ledger goes back (see room.put).
func (p *ledger) wake() { p.waiters.moveTo(&p.pokes) }

// reserve makes poke's reservation the one of admission n, which needs need,
// with next behind it in its line. It stands in its place among the others
// by n (where it stands already if n is its number), keeping what it had;
// what it has beyond need goes back to free. Then it fills the
// reservations.
func (p *ledger) reserve(poke chan struct{}, need budget, n, next uint64) {
	i := p.find(poke)
	if i < 0 || p.resv[i].n != n {
		r := reservation{poke: poke, n: n}
		if i >= 0 {
			r.got = p.resv[i].got
			p.resv = slices.Delete(p.resv, i, i+1)
		}
		i, _ = slices.BinarySearchFunc(p.resv, n, func(r reservation, n uint64) int { return cmp.Compare(r.n, n) })
		p.resv = slices.Insert(p.resv, i, r)
	}
	r := &p.resv[i]
	if r.need, r.next = need, next; !full(r) { // ready anew, and poked, once it has the new need
		r.ready = false
	}
	if over := (budget{max(0, r.got.n-need.n), max(0, r.got.w-need.w)}); over != (budget{}) {
		r.got.n -= over.n
		r.got.w -= over.w
		p.free.n += over.n
		p.free.w += over.w
	}
	p.fill()
}

// claim returns what poke's reservation has if it is ready, which it
// keeps (and its place) with nothing in it; else nothing.
func (p *ledger) claim(poke chan struct{}) budget {
	i := p.find(poke)
	if i < 0 || !p.resv[i].ready {
		return budget{}
	}
	got := p.resv[i].got
	p.resv[i].got, p.resv[i].ready = budget{}, false
	return got
}

// cancel ends poke's reservation: what it had is free, and fills the others.
func (p *ledger) cancel(poke chan struct{}) {
	i := p.find(poke)
	if i < 0 {
		return
	}
	got := p.resv[i].got
	p.resv = slices.Delete(p.resv, i, i+1)
	p.give(got)
}

// fill moves room into the reservations, in their order, each up to its
// need, inputs and weight alike. It takes from free, and then from what the
// later reservations have, the last first, so that the first always gets all
// the room not waiting in a lane. A need never passes the whole room: an
// admission that no room could hold is refused, not kept waiting. A
// reservation is ready once it is full and so is every one before it, and
// no admission behind one of those began to wait before its own. It records
// the pokes of those it makes ready.
func (p *ledger) fill() {
	open := true                 // every reservation so far is ready
	var first uint64 = 1<<64 - 1 // the least next of those so far
	for i := range p.resv {
		r := &p.resv[i]
		move(&p.free, &r.got, r.need)
		for j := len(p.resv) - 1; j > i && !full(r); j-- {
			move(&p.resv[j].got, &r.got, r.need)
		}
		was := r.ready
		r.ready = open && full(r) && first > r.n
		open = r.ready
		if r.next != 0 {
			first = min(first, r.next)
		}
		if r.ready && !was {
			p.pokes.add(r.poke)
		}
	}
}

// move moves from from to to what to lacks of need, as much as from has.
func move(from, to *budget, need budget) {
	dn := min(from.n, max(0, need.n-to.n))
	dw := min(from.w, max(0, need.w-to.w))
	from.n -= dn
	from.w -= dw
	to.n += dn
	to.w += dw
}

// full reports whether r has all it needs.
func full(r *reservation) bool { return r.got.holds(r.need) }

// find is the index of poke's reservation, or -1.
func (p *ledger) find(poke chan struct{}) int {
	for i := range p.resv {
		if p.resv[i].poke == poke {
			return i
		}
	}
	return -1
}
