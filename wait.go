package ferry

import (
	"time"

	"github.com/google/btree"
)

// This file is the line of admissions waiting for room (Config.WaitForRoom),
// and the loop's handlers for it. An admission is a Do's or a Submit's input,
// a DoMany's part, or a DoMany over several shards waiting for the room of
// all its inputs (a borrow). The loop lets them in in the order they came, as
// room frees (see loop.admitWaiting). While any waits, a new admission joins
// the back of the line even if it would fit.

// waitTicket is the ticket of an input waiting in the line as number n: it
// names no input in a lane, as seqs never reach 1<<62, nor one in flight
// (see inFlight, whose seqs have bit 63).
func waitTicket(n uint64) ticket { return ticket{seq: 1<<62 | n} }

// waitNumber is the number in the line of an input whose ticket is t, or 0
// if t is not a waitTicket.
func waitNumber(t ticket) uint64 {
	if t.seq>>62 != 1 {
		return 0
	}
	return t.seq &^ (1 << 62)
}

// waitEntry is an admission in the line, number n: a waiter (w), a DoMany's
// part (g and part), or, with borrow, all of g's inputs over several shards,
// which part 0's shard waits for. It has no methods: the line holds it.
type waitEntry[K comparable, I, O any] struct {
	n      uint64
	w      *waiter[K, I, O]
	g      *group[K, I, O]
	part   int32
	borrow bool
}

// waiting is a loop's admissions waiting for room: the line, the Submits
// among them by their word's channel (see leave), and, with one shard, the
// last wait number given (see nextWait). loop: its methods run on the
// shard's loop goroutine.
type waiting[K comparable, I, O any] struct {
	line waitLine[K, I, O]
	subs peakMap[chan result[O], *waiter[K, I, O]]
	last uint64
	left []waitEntry[K, I, O] // scratch: admissions out of the line at once, as the key is paused or the ferry closes
}

// waitLine is the admissions waiting for room, in the order they came, by
// number: numbers given in that order, across the shards (see
// loop.nextWait). Each is marked as it waits (a waiter's ticket is a waitTicket, a
// part's wait is its number), so that a caller who gives up is found and
// taken out where it stands. It is pure bookkeeping: no channels, no clock,
// no user code. Its zero value is an empty line. loop: its methods run on
// the shard's loop goroutine.
type waitLine[K comparable, I, O any] struct {
	t  *btree.BTreeG[waitEntry[K, I, O]] // nil until the first push
	in int                               // the inputs of the admissions in the line
}

// push puts w, a Do's or a Submit's input, at the back of the line as
// number n, above every number in it.
func (l *waitLine[K, I, O]) push(w *waiter[K, I, O], n uint64) {
	w.tk = waitTicket(n)
	l.insert(waitEntry[K, I, O]{n: n, w: w})
}

// pushPart puts part i of g (or, with borrow, all of g) at the back of the
// line as number n, above every number in it.
func (l *waitLine[K, I, O]) pushPart(g *group[K, I, O], i int32, borrow bool, n uint64) {
	g.parts[i].wait = n
	l.insert(waitEntry[K, I, O]{n: n, g: g, part: i, borrow: borrow})
}

func (l *waitLine[K, I, O]) insert(e waitEntry[K, I, O]) {
	l.in += size(e)
	if l.t == nil {
		l.t = btree.NewG(degree, func(a, b waitEntry[K, I, O]) bool { return a.n < b.n })
	}
	l.t.ReplaceOrInsert(e)
}

// front returns the first admission in the line; ok is false if it is empty.
func (l *waitLine[K, I, O]) front() (waitEntry[K, I, O], bool) {
	if l.t == nil {
		return waitEntry[K, I, O]{}, false
	}
	return l.t.Min()
}

// second returns the number of the admission behind the first, or 0.
func (l *waitLine[K, I, O]) second() uint64 {
	var n, seen uint64
	if l.t != nil {
		l.t.Ascend(func(e waitEntry[K, I, O]) bool {
			if seen++; seen == 2 {
				n = e.n
			}
			return seen < 2
		})
	}
	return n
}

// pop takes the first admission out of the line and unmarks it.
func (l *waitLine[K, I, O]) pop() waitEntry[K, I, O] {
	e, _ := l.t.DeleteMin()
	l.in -= size(e)
	unmark(e)
	return e
}

// leave takes w's input out of the line, if it waits there, and reports
// whether it did.
func (l *waitLine[K, I, O]) leave(w *waiter[K, I, O]) bool {
	return l.remove(waitNumber(w.tk))
}

// leavePart takes part i of g (or g's borrow) out of the line, if it waits
// there, and reports whether it did.
func (l *waitLine[K, I, O]) leavePart(g *group[K, I, O], i int32) bool {
	return l.remove(g.parts[i].wait)
}

func (l *waitLine[K, I, O]) remove(n uint64) bool {
	if n == 0 || l.t == nil {
		return false
	}
	e, ok := l.t.Delete(waitEntry[K, I, O]{n: n})
	if ok {
		l.in -= size(e)
		unmark(e)
	}
	return ok
}

// unmark clears e's mark: it no longer waits.
func unmark[K comparable, I, O any](e waitEntry[K, I, O]) {
	if e.w != nil {
		e.w.tk = ticket{}
	} else {
		e.g.parts[e.part].wait = 0
	}
}

// len is the number of admissions in the line.
func (l *waitLine[K, I, O]) len() int {
	if l.t == nil {
		return 0
	}
	return l.t.Len()
}

// inputs is the number of inputs the admissions in the line hold.
func (l *waitLine[K, I, O]) inputs() int { return l.in }

// size is the number of inputs e holds.
func size[K comparable, I, O any](e waitEntry[K, I, O]) int {
	switch {
	case e.w != nil:
		return 1
	case e.borrow:
		return len(e.g.ws)
	}
	return e.g.parts[e.part].n
}

// each calls f with every admission in the line, in order. f must not
// change the line.
func (l *waitLine[K, I, O]) each(f func(waitEntry[K, I, O])) {
	if l.t == nil {
		return
	}
	l.t.Ascend(func(e waitEntry[K, I, O]) bool { f(e); return true })
}

// clear empties the line, unmarking every admission, and returns them, in
// order, appended to buf.
func (l *waitLine[K, I, O]) clear(buf []waitEntry[K, I, O]) []waitEntry[K, I, O] {
	for l.len() > 0 {
		buf = append(buf, l.pop())
	}
	return buf
}

// refusesAtOnce reports whether w is refused without room, with
// WaitForRoom too: its key is paused, or held with its share of the room
// (see state.overHeld), or no room could ever hold it.
func (l *loop[K, I, O]) refusesAtOnce(w *waiter[K, I, O]) bool {
	_, paused := l.pauses.keys.of(w.key)
	return paused || w.weight > sharedWeight(l.lim) || l.f.hold && l.st.overHeld(w.key, w.weight)
}

// nextWait returns the next wait number, for an admission that begins to
// wait for room: with several shards from the shared room, so that the
// numbers order the admissions waiting in every shard (see share.number).
func (l *loop[K, I, O]) nextWait() uint64 {
	if l.shared {
		return l.share.number()
	}
	l.waits.last++
	return l.waits.last
}

// wait puts w at the back of the wait line.
func (l *loop[K, I, O]) wait(w *waiter[K, I, O]) {
	l.waits.line.push(w, l.nextWait())
	if w.done != nil {
		l.waits.subs.put(w.c, w)
	}
}

// admitWaiting lets in the admissions waiting for room, first come first
// in, while the room holds the first (see share.roomFor, which reserves
// what it lacks on the shared room), and tells the share whether any waits
// still. If the shared room says the ferry's end has begun, it starts it
// (see heedEnd), which answers the line.
func (l *loop[K, I, O]) admitWaiting(now time.Duration) {
	l.share.waiting(false)
	for l.admits() {
		e, ok := l.waits.line.front()
		if !ok {
			break
		}
		need := l.needOf(e)
		if !l.roomFor(need, e.n, l.waits.line.second()) {
			if l.share.ending() {
				l.heedEnd()
				continue // admits no more
			}
			l.share.waiting(true)
			break
		}
		l.waits.line.pop()
		switch {
		case e.w != nil:
			if e.w.done != nil {
				l.waits.subs.del(e.w.c)
			}
			l.letIn(e.w, now)
		case e.borrow:
			l.grant(e.g, e.part, need, now)
		default:
			l.letInPart(e.g, e.part, opAdmitMany, now)
		}
	}
}

// needOf is the room e takes as it is let in: none for a Do that claims its
// key or an input that is refused at once (see refusesAtOnce).
func (l *loop[K, I, O]) needOf(e waitEntry[K, I, O]) budget {
	switch {
	case e.w == nil && e.borrow:
		total := int64(0)
		for _, p := range e.g.parts {
			total = addWeight(total, p.total)
		}
		return budget{len(e.g.ws), total}
	case e.w == nil:
		n, total, _, _ := l.partNeed(e.g, e.part)
		return budget{n, total}
	}
	w := e.w
	if l.refusesAtOnce(w) {
		return budget{}
	}
	if w.done == nil && l.st.claims(w.key) {
		return budget{} // it claims the key
	}
	return budget{1, w.weight}
}

// grant gives a DoMany over several shards, waiting at the front of the
// line, the room of all its inputs, need, out of this shard's. Each part is
// granted: its shard adds the part's share to its own as it lets the part in
// (see borrow). Its part here, i, goes in now, before what waits behind it:
// the part's word says so. The other parts wait their turn in their shards'
// lines, where they come later.
func (l *loop[K, I, O]) grant(g *group[K, I, O], i int32, need budget, now time.Duration) {
	l.st.grow(-need.n, -need.w)
	for j := range g.parts {
		g.parts[j].granted = true
	}
	l.letInPart(g, i, opAdmitMany, now)
}

// borrowWait puts the room of all of g's inputs, a DoMany over several
// shards that spare could not grant, at the back of the line (see grant);
// at close it refuses it.
func (l *loop[K, I, O]) borrowWait(g *group[K, I, O], i int32) {
	if !l.admits() {
		g.parts[i].err = ErrClosed
		l.replyAfterLend(later[K, I, O]{p: &g.parts[i]})
		return
	}
	l.waits.line.pushPart(g, i, true, l.nextWait())
}

// leave takes a Submit's input or a DoMany's part (or its borrow), whose
// caller's ctx ended, out of the wait line, and says so on its channel
// (errDropped). If it is not there, its word was sent already, and leave
// does nothing. The Submit is named by its word's channel, m.word, not by
// its waiter, which may be a worker's by now.
func (l *loop[K, I, O]) leave(m msg[K, I, O]) {
	if g := m.g; g != nil {
		if l.waits.line.leavePart(g, m.part) {
			l.takeRoomOf(&g.parts[m.part]) // lent back as the wake-up ends
			g.parts[m.part].err = errDropped
			l.replyAfterLend(later[K, I, O]{p: &g.parts[m.part]})
		}
		return
	}
	if w, ok := l.waits.subs.lookup(m.word); ok {
		l.waits.subs.del(m.word)
		l.waits.line.leave(w)
		w.c <- result[O]{err: errDropped}
	}
}

// answerWaiting answers the admissions e out of the line with err: a Do's
// and a Submit's on their channel, a DoMany's part on its own.
func (l *loop[K, I, O]) answerWaiting(es []waitEntry[K, I, O], err error) {
	for _, e := range es {
		switch {
		case e.w != nil:
			if e.w.done != nil {
				l.waits.subs.del(e.w.c)
			}
			e.w.c <- result[O]{err: err}
		default:
			p := &e.g.parts[e.part]
			l.takeRoomOf(p)
			p.err = err
			p.c <- struct{}{}
		}
	}
}

// closeWaits answers every admission waiting for room with ErrClosed, as the
// room admits nothing any more.
func (l *loop[K, I, O]) closeWaits() {
	l.waits.left = l.waits.line.clear(l.waits.left[:0])
	l.answerWaiting(l.waits.left, ErrClosed)
	clear(l.waits.left)
}

// refuseWaiting answers the inputs of key that wait for room with err, the
// paused key's, as it would answer them at admission; a DoMany's part waits
// on, and is answered input by input as it is let in (see partNeed).
func (l *loop[K, I, O]) refuseWaiting(key K, err error) {
	if l.waits.line.len() == 0 {
		return
	}
	left := l.waits.left[:0]
	l.waits.line.each(func(e waitEntry[K, I, O]) {
		if e.w != nil && e.w.key == key {
			left = append(left, e)
		}
	})
	for _, e := range left {
		l.waits.line.leave(e.w)
	}
	l.answerWaiting(left, err)
	clear(left)
	l.waits.left = left
}

// roomFor reports whether the core has room unused for b, the need of the
// first admission in the line, number n, next behind it (0 if none). With
// several shards it gives what the core holds unused to the shared room and
// reserves b there first (see share.roomFor): then the core holds what the
// reservation held, once it is ready. Once the ferry's end has begun it
// reports false, the core's room unchanged.
func (l *loop[K, I, O]) roomFor(b budget, n, next uint64) bool {
	if !l.shared || b == (budget{}) {
		return l.st.unused().holds(b)
	}
	got, ok := l.share.roomFor(b, l.takeUnused(), n, next)
	l.st.grow(got.n, got.w)
	return ok && got.holds(b)
}
