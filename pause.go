package ferry

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
)

// This file is the paused keys (Config.PauseOnError): a key whose call failed
// for good is paused by the loop as it handles the call's release, which a
// worker (or a direct call's caller) sends before it answers its callers, so
// that their next input of the key finds it paused. The key's waiting inputs
// are answered then, and every later one at its admission, with the error
// pauses keeps for the key, until Resume. A paused key holds no lane: what
// it costs is one entry here. With HoldPaused a pause refuses nothing: the
// failed batch, parked with no deadline, holds the key's lane and its inputs
// until Resume (hold). The loop's handlers (pause, hold, notified, ...)
// follow pauses; the notifier of a paused key's Submits and OnPause is
// worker.go's.

// pauses is a loop's paused keys, each with the error it answers its
// inputs with, which matches ErrPaused and the failure that paused the key,
// and its place among the ferry's pauses, as its failure was stamped (see
// counter), by which Ferry.Paused merges the shards' lists. It is pure
// bookkeeping: no channels, no clock, no user code. loop: its methods run on
// the shard's loop goroutine.
type pauses[K comparable] struct {
	keys map[K]pausedKey[K] // nil until a key is paused
	peak int                // most keys since the map was rebuilt: see shrink
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
	if pk, ok := p.keys[key]; ok {
		return pk.err, false
	}
	if p.keys == nil {
		p.keys = make(map[K]pausedKey[K])
	}
	err := fmt.Errorf("%w: %w", ErrPaused, failure)
	p.keys[key] = pausedKey[K]{key: key, err: err, order: order, held: held}
	p.peak = max(p.peak, len(p.keys))
	return err, true
}

// of returns the error of key if it is paused and refuses its inputs: not
// held.
func (p *pauses[K]) of(key K) (error, bool) {
	if len(p.keys) == 0 { // the common case: one length check
		return nil, false
	}
	pk, ok := p.keys[key]
	return pk.err, ok && !pk.held
}

// err returns the error of key if it is paused, held or not, else nil.
func (p *pauses[K]) err(key K) error { return p.keys[key].err }

// resume lets key's inputs in again, and reports whether it was paused.
func (p *pauses[K]) resume(key K) bool {
	if _, ok := p.keys[key]; !ok {
		return false
	}
	delete(p.keys, key)
	p.keys = shrink(p.keys, &p.peak)
	return true
}

// list returns the paused keys in the order they paused, in a new slice
// (nil if none), which its receiver may keep.
func (p *pauses[K]) list() []pausedKey[K] {
	if len(p.keys) == 0 {
		return nil
	}
	ks := slices.Collect(maps.Values(p.keys))
	slices.SortFunc(ks, func(a, b pausedKey[K]) int { return cmp.Compare(a.order, b.order) })
	return ks
}

// count is the number of keys paused; none for a nil p.
func (p *pauses[K]) count() int {
	if p == nil {
		return 0
	}
	return len(p.keys)
}

// pauseNote is a paused key's notifier in flight: the goroutine that calls
// the done of the Submits that waited in the key's lane as it was paused,
// and OnPause (see notifyPaused), and what it owes the Flush round in progress, told by
// its opNotified. It has no methods; the loop owns it.
type pauseNote[K comparable] struct {
	key K
	owe owed
}

// pause pauses key, whose call failed for good with failure, and answers
// the inputs waiting in its lane with the key's error: a Do's and a
// DoMany's here; the Submits' done, and OnPause if the key was not paused
// already, from a goroutine of their own (notifyPaused), after the key's
// completions so far and before its next, which the loop waits for as for
// a worker. What the inputs owed the Flush round in progress is counted as
// they are answered: at once, or at the notifier's opNotified.
func (l *loop[K, I, O]) pause(key K, failure error, order uint64) {
	err, fresh := l.paused.pause(key, failure, order, false)
	l.refuseWaiting(key, err)
	var told error // what OnPause is told: nil, none
	if fresh && l.f.onPause != nil {
		told = failure
	}
	l.tally.PausedOut += uint64(l.refuseLane(key, err, told))
}

// refuseLane answers the inputs waiting in key's lane with err, and returns
// how many: a Do's and a DoMany's here; the Submits' done, and OnPause with
// told if not nil, from a goroutine of their own (notifyPaused), after the
// key's completions so far and before its next, which the loop waits for
// as for a worker.
func (l *loop[K, I, O]) refuseLane(key K, err, told error) int {
	l.cleared = l.st.clearLane(key, l.cleared[:0])
	n := len(l.cleared)
	if n == 0 && told == nil {
		return 0
	}
	var subs []*waiter[K, I, O]
	seq, owes := l.rounds.seq(), 0
	for _, w := range l.cleared { // before reply: an answered waiter is its caller's
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
	refuse(l.cleared, err, nil)
	clear(l.cleared)
	if len(subs) == 0 && told == nil {
		return n
	}
	after, fin := l.place(key)
	l.notifyPaused(key, subs, err, told, after, fin, owes)
	return n
}

// notifyPaused starts a paused key's notifier (see the function
// notifyPaused), which owes the Flush round in progress owes.
func (l *loop[K, I, O]) notifyPaused(key K, subs []*waiter[K, I, O], err, told error, after, fin chan struct{}, owes int) {
	if l.pausing == nil {
		l.pausing = make(map[chan struct{}]pauseNote[K])
	}
	l.pausing[fin] = pauseNote[K]{key: key, owe: l.rounds.owe(owes)}
	go notifyPaused(l.s, key, subs, err, told, after, fin) // user code: off the loop
}

// hold holds key's lane with pb, the inputs of its batch that failed for
// good with failure, stamped order (HoldPaused): parked in the core with no
// deadline, until Resume, while the lane's inputs and those that join
// later wait in order behind pb; the key is paused, held. The batch's other
// inputs are answered by its worker meanwhile, with the completions of its
// attempts so far, which close done. Then come OnPause, if the key was not
// paused already, and pb's own completions once it is answered: with
// completions to order (done not nil, or a direct call's, holdDirect's),
// each in its place after the key's last. Once the room stops admitting
// (Shutdown), the hold ends at once: see stopHeld.
func (l *loop[K, I, O]) hold(key K, pb *parkedBatch[K, I, O], failure error, order uint64, done chan struct{}) {
	pb.held = true
	l.st.parkHeld(key, pb.w)
	if _, fresh := l.paused.pause(key, failure, order, true); fresh && l.f.onPause != nil {
		after, fin := l.place(key)
		l.notifyPaused(key, nil, nil, failure, after, fin, 0)
	}
	if done != nil {
		pb.after, pb.fin = l.place(key)
	}
	if l.st.shuttingDown {
		l.stopHeld(key, pb)
	}
}

// holdDirect holds key's lane, whose call failed for good with failure,
// stamped order, and left no input to hold (HoldPaused): a direct call's,
// whose caller has its answer, or a batch's whose callers all gave up. It
// holds as hold does, with a batch of no input, so that the key pauses as
// without HoldPaused.
func (l *loop[K, I, O]) holdDirect(key K, failure error, order uint64) {
	pb := &parkedBatch[K, I, O]{batch: []*waiter[K, I, O]{}, ctx: l.s.ctx, bs: []Batch[K]{}} // no OnBatch: the caller told it
	pb.w = &waiter[K, I, O]{pb: pb}
	if l.parks == nil {
		l.parks = make(map[K]*parkedBatch[K, I, O])
	}
	l.parks[key] = pb
	l.ppeak = max(l.ppeak, len(l.parks))
	l.hold(key, pb, failure, order, nil)
}

// stopHolds ends the holds as the ferry shuts down: the inputs of each held
// lane are answered ErrClosed (the Submits' done after the key's
// completions so far), and its batch is due at once, to be answered by a
// worker with ErrClosed and its failure, uncalled.
func (l *loop[K, I, O]) stopHolds() {
	for key, pb := range l.parks {
		if pb.held && pb.stop == nil {
			l.stopHeld(key, pb)
		}
	}
}

// stopHeld ends the hold of key's lane by pb, as stopHolds does.
func (l *loop[K, I, O]) stopHeld(key K, pb *parkedBatch[K, I, O]) {
	pb.stop = ErrClosed
	l.refuseLane(key, ErrClosed, nil)
	l.st.unpark(key, l.f.clock())
}

// pausedKeys answers a Paused: the keys paused, in the order they paused.
func (l *loop[K, I, O]) pausedKeys(c chan []pausedKey[K]) {
	c <- l.paused.list()
}

// notified counts out a goroutine that called Submits' done: close's, or
// (fin set) a paused key's, whose completions are over and which pays what
// it owed the Flush round (see pause); panicked: its OnPause panicked.
func (l *loop[K, I, O]) notified(fin chan struct{}, panicked bool) {
	if panicked {
		l.tally.OnPausePanics++
	}
	if fin == nil {
		l.notify--
		return
	}
	pn := l.pausing[fin]
	delete(l.pausing, fin)
	l.rounds.paid(pn.owe)
	l.done(pn.key, fin)
}
