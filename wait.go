package ferry

import "github.com/google/btree"

// This file is the line of admissions waiting for room, with
// Config.WaitForRoom: a Do's or a Submit's input, a DoMany's part, or a
// DoMany over several shards waiting for the room of all its inputs (a
// borrow). The loop lets them in in the order they came, as room frees (see
// loop.admitWaiting); while any waits, a new admission joins the back of
// the line even if it would fit, so that a waiting DoMany is not starved by
// a stream of single inputs.

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

// waitLine is the admissions waiting for room, in the order they came, by
// number: numbers given in that order, across the shards (see
// share.number). Each is marked as it waits (a waiter's ticket is a waitTicket, a
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
