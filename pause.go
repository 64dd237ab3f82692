package ferry

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// This file is the paused keys (Config.PauseOnError) and the loop's handlers
// for them (pause, hold, resume, notified, ...), which follow pausing. The
// loop pauses a key whose call failed for good as it handles the call's
// release. The key's waiting inputs are answered then, and every later one at
// its admission, with the error pauses keeps for the key, until Resume. A
// paused key holds no lane, only an entry here. With HoldPaused the failed
// batch, parked with no deadline, holds the key's lane and its inputs until
// Resume (see hold); only inputs past the lane's share are refused. The
// notifier of a paused key's Submits and OnPause is worker.go's.

// pausing is a loop's paused keys, and the notifiers of paused keys in
// flight, by the fin each closes, with what each owes the Flush round in
// progress. loop: its methods run on the shard's loop goroutine.
type pausing[K comparable, I, O any] struct {
	keys    pauses[K]
	notes   peakMap[chan struct{}, pauseNote[K]]
	cleared []*waiter[K, I, O] // scratch: a paused key's waiting inputs, as it is paused
}

// pauseNote is a paused key's notifier in flight (see notifyPaused): its key,
// and what it owes the Flush round in progress, paid by its opNotified. It
// has no methods; pausing owns it.
type pauseNote[K comparable] struct {
	key K
	owe owed
}

// owe makes every notifier in flight owe the round that starts one thing,
// paid by its opNotified, and returns how many.
func (p *pausing[K, I, O]) owe(rs *rounds) int {
	for fin, pn := range p.notes.all() {
		pn.owe = rs.owe(1)
		p.notes.put(fin, pn)
	}
	return p.notes.len()
}

// pauses is a loop's paused keys, each with the error it answers its inputs
// with, which matches ErrPaused and the failure that paused the key. Each has
// its place among the ferry's pauses, as its failure was stamped (see
// counter), by which Ferry.Paused merges the shards' lists. It is pure
// bookkeeping: no channels, no clock, no user code. loop: its methods run on
// the shard's loop goroutine.
type pauses[K comparable] struct {
	keys peakMap[K, pausedKey[K]]
}

// pausedKey is one paused key: its error, and its failure's place among the
// ferry's (order); held: its lane holds its inputs (HoldPaused), which are
// not refused. It has no methods.
type pausedKey[K comparable] struct {
	key   K
	err   error
	order uint64
	held  bool
}

// pause pauses key after its call failed with failure, stamped order, held
// or not (see pausedKey), and returns the error its inputs get, and whether
// this paused it: a key paused already keeps its first error and order.
func (p *pauses[K]) pause(key K, failure error, order uint64, held bool) (error, bool) {
	if pk, ok := p.keys.lookup(key); ok {
		return pk.err, false
	}
	err := fmt.Errorf("%w: %w", ErrPaused, failure)
	p.keys.put(key, pausedKey[K]{key: key, err: err, order: order, held: held})
	return err, true
}

// of returns the error of key if it is paused and refuses its inputs: not
// held.
func (p *pauses[K]) of(key K) (error, bool) {
	if p.keys.len() == 0 { // the common case: one length check
		return nil, false
	}
	pk, ok := p.keys.lookup(key)
	return pk.err, ok && !pk.held
}

// err returns the error of key if it is paused, held or not, else nil.
func (p *pauses[K]) err(key K) error { return p.keys.get(key).err }

// resume lets key's inputs in again, and reports whether it was paused.
func (p *pauses[K]) resume(key K) bool {
	if _, ok := p.keys.lookup(key); !ok {
		return false
	}
	p.keys.del(key)
	return true
}

// list returns the paused keys in the order they paused, in a new slice
// (nil if none), which its receiver may keep.
func (p *pauses[K]) list() []pausedKey[K] {
	if p.keys.len() == 0 {
		return nil
	}
	ks := slices.Collect(maps.Values(p.keys.m))
	slices.SortFunc(ks, func(a, b pausedKey[K]) int { return cmp.Compare(a.order, b.order) })
	return ks
}

// count is the number of keys paused; none for a nil p.
func (p *pauses[K]) count() int {
	if p == nil {
		return 0
	}
	return p.keys.len()
}

// pause pauses key, whose call failed for good with failure, stamped
// order, and answers the inputs waiting in its lane with the key's error
// (see refuseLane); OnPause is told if the key was not paused already.
func (l *loop[K, I, O]) pause(key K, failure error, order uint64) {
	err, fresh := l.pauses.keys.pause(key, failure, order, false)
	l.refuseWaiting(key, err)
	var told error // what OnPause is told: nil, none
	if fresh && l.f.onPause != nil {
		told = failure
	}
	l.tally.PausedOut += uint64(l.refuseLane(key, err, told))
}

// refuseLane answers the inputs waiting in key's lane with err, and returns
// how many. A Do's and a DoMany's are answered here. The Submits' done, and
// OnPause with told if not nil, run on a goroutine of their own
// (notifyPaused), after the key's completions so far and before its next;
// the loop waits for it as for a worker. What the inputs owed the Flush round
// in progress is counted as they are answered: at once, or at the notifier's
// opNotified.
func (l *loop[K, I, O]) refuseLane(key K, err, told error) int {
	p := &l.pauses
	p.cleared = l.st.clearLane(key, p.cleared[:0])
	n := len(p.cleared)
	if n == 0 && told == nil {
		return 0
	}
	var subs []*waiter[K, I, O]
	seq, owes := l.rounds.seq(), 0
	for _, w := range p.cleared { // before reply: an answered waiter is its caller's
		switch counted := w.tk.seq <= seq; {
		case w.done != nil:
			subs = append(subs, w)
			if counted {
				owes++
			}
		default:
			l.rounds.countIf(counted)
		}
	}
	refuse(p.cleared, err, nil)
	clear(p.cleared)
	if len(subs) == 0 && told == nil {
		return n
	}
	l.notifyPaused(key, subs, err, told, owes)
	return n
}

// notifyPaused starts a paused key's notifier (see the function
// notifyPaused), after the key's completions so far, which owes the Flush
// round in progress owes.
func (l *loop[K, I, O]) notifyPaused(key K, subs []*waiter[K, I, O], err, told error, owes int) {
	after, fin := l.order.place(key)
	l.pauses.notes.put(fin, pauseNote[K]{key: key, owe: l.rounds.owe(owes)})
	go notifyPaused(l.s, key, subs, err, told, after, fin) // user code: off the loop
}

// notified counts out a goroutine that called Submits' done: close's, or
// (fin set) a paused key's, whose completions are over and which pays what
// it owed the Flush round (see pause).
func (l *loop[K, I, O]) notified(fin chan struct{}) {
	if fin == nil {
		l.life.notify--
		return
	}
	pn := l.pauses.notes.get(fin)
	l.pauses.notes.del(fin)
	l.rounds.paid(pn.owe)
	l.order.done(pn.key, fin)
}

// hold holds key's lane with h, the inputs of its batch that failed for good
// with failure, stamped order (HoldPaused). The lane is parked in the core
// with no deadline until Resume, its inputs and later ones waiting in order
// behind h; the key is paused, held. Meanwhile the batch's worker answers its
// other inputs (fl, the worker's flight: nil for a direct call's failure, see
// holdDirect), with the reports of its attempts so far. Then come OnPause, if the key was not paused already, and
// h's own completions once it is answered, each in its place after the
// key's last. What fl owed the Flush round, and CancelAbandoned's count of
// callers under a tag of its own, go with h. Once the room stops admitting
// (Shutdown), the hold ends at once: see stopHeld.
func (l *loop[K, I, O]) hold(key K, h, fl *flight[K, I, O], failure error, order uint64) {
	l.st.hold(key)
	if _, fresh := l.pauses.keys.pause(key, failure, order, true); fresh && l.f.onPause != nil {
		l.notifyPaused(key, nil, nil, failure, 0)
	}
	if fl != nil {
		h.owe, fl.owe = fl.owe, owed{}
		if fl.fin != nil { // its completions are ordered: h's too
			h.after, h.fin = l.order.place(key)
		}
		if fl.cancel != nil { // CancelAbandoned: a late drop of an input answered now counts for nothing
			l.parks.tags++
			h.cancel, h.tag = fl.cancel, inFlight(0, 1<<62|l.parks.tags).seq
			fl.tag, fl.live, fl.cancel = 0, 0, nil
			for _, w := range h.batch {
				w.tk = ticket{rank: w.tk.rank, seq: h.tag}
				if !w.gone {
					h.live++
				}
			}
			if h.live == 0 {
				h.cancel(ErrAbandoned) // only the ferry's contexts: no user code
			}
		}
	}
	if l.st.shuttingDown {
		l.stopHeld(key, h)
	}
}

// holdDirect holds key's lane, whose call failed for good with failure,
// stamped order, and left no input to hold (HoldPaused): a direct call's,
// whose caller has its answer, or a batch's whose callers all gave up. It
// holds as hold does, with a batch of no input, so that the key pauses as
// without HoldPaused.
func (l *loop[K, I, O]) holdDirect(key K, failure error, order uint64) {
	h := &flight[K, I, O]{key: key, batch: []*waiter[K, I, O]{}, ctx: l.s.ctx, held: true, attempt: 1,
		bs: []Batch[K]{}} // an attempt over, which its caller told OnBatch of
	l.parks.flights.put(key, h)
	l.hold(key, h, nil, failure, order)
}

// stopHolds ends the holds as the ferry shuts down. The inputs of each held
// lane are answered ErrClosed (the Submits' done after the key's completions
// so far). Its batch is due at once, for a worker to answer with ErrClosed
// and its failure, uncalled.
func (l *loop[K, I, O]) stopHolds() {
	for key, fl := range l.parks.flights.all() {
		if fl.held && fl.stop == nil {
			l.stopHeld(key, fl)
		}
	}
}

// stopHeld ends the hold of key's lane by h, as stopHolds does.
func (l *loop[K, I, O]) stopHeld(key K, h *flight[K, I, O]) {
	h.stop = ErrClosed
	l.refuseLane(key, ErrClosed, nil)
	l.st.unpark(key, l.f.clock())
}

// resume ends key's pause, with PauseOnError, and its park: its parked
// batch, if any, is due at once.
func (l *loop[K, I, O]) resume(key K, now time.Duration) {
	l.pauses.keys.resume(key)
	if l.parks.flights.get(key) != nil {
		l.st.unpark(key, l.timeNow(now))
	}
}
