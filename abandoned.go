package ferry

import (
	"context"
	"time"
)

// This file is the loop's side of the callers who give up. A Do drops its
// input if it still waits (dropped), or keeps it if a call took it (kept).
// With CancelAbandoned the loop counts a batch's callers left, and cancels
// its call, parked or not, once none is. With Retry a retry leaves their
// inputs out (see takeParked). The callers' side is do.go's and many.go's
// abandon (a DoMany's drop is in parts.go).

// inFlight is the ticket of an input of the batch tagged n, taken by worker
// id, with CancelAbandoned: once taken an input's ticket is the loop's, and
// this one names no waiting input, as seqs never reach 1<<63. A batch's tag
// is its number among the shard's batches; a held batch's is tagged anew
// with bit 62 set (see loop.hold).
func inFlight(id int, n uint64) ticket { return ticket{rank: int64(id), seq: 1<<63 | n} }

// gaveUp counts down the batch in flight that holds w, whose caller has given
// up, and cancels its call once no caller is left, with CancelAbandoned; a
// parked batch is then due at once (see abandonParked). w may be in no
// batch, or in one that is over.
func (l *loop[K, I, O]) gaveUp(w *waiter[K, I, O], now time.Duration) {
	w.gone = true // not called again: see takeParked
	if w.tk.seq < 1<<63 {
		return // not flying: still waiting, or CancelAbandoned is off
	}
	wk := l.slots.at(w.tk.rank)
	if wk == nil || wk.fl.tag != w.tk.seq {
		l.abandonParked(w.key, w.tk.seq, now)
		return // parked, or its batch is over (and its worker given back)
	}
	fl := wk.fl
	if fl.live--; fl.live == 0 {
		fl.cancel(ErrAbandoned) // only the ferry's contexts: no user code
	}
}

// watch gives fl, the batch that worker id takes, a context of its own,
// with CancelAbandoned: the count of its callers left, and each input's
// ticket inFlight, so that gaveUp finds the batch.
func (l *loop[K, I, O]) watch(id int, fl *flight[K, I, O]) {
	fl.ctx, fl.cancel = context.WithCancelCause(l.s.ctx) // the ferry's: no user code
	fl.tag, fl.live = inFlight(id, l.tally.Batches).seq, len(fl.batch)
	for _, w := range fl.batch {
		w.tk = inFlight(id, l.tally.Batches)
	}
}

// drop drops w, whose Do's caller gave up, if it still waits, and gives the
// word errDropped; else it counts the caller out of w's batch and says
// errKept, unless w's answer is there already.
func (l *loop[K, I, O]) drop(w *waiter[K, I, O], now time.Duration) {
	if l.waits.line.leave(w) { // it waited for room: nothing was admitted
		w.c <- result[O]{err: errDropped}
		return
	}
	if _, ok := l.st.drop(w.key, w.tk, now); ok { // never for a zero ticket: seqs start at 1
		l.tally.Dropped++
		l.rounds.countIf(w.tk.seq <= l.rounds.seq())
		l.replyAfterLend(later[K, I, O]{c: w.c, r: result[O]{err: errDropped}}) // w.c is empty: it had no answer
		return
	}
	l.gaveUp(w, now)
	select {
	case w.c <- result[O]{err: errKept}:
	default: // w.c holds its answer, which says enough
	}
}
