package ferry

import (
	"fmt"
	"time"
)

// This file is the loop: one goroutine per shard (loop.run) owns the core's
// state and serialises every transition; workers run batched calls; callers
// run direct calls. All of them talk to the loop through one channel, s.inc,
// so that its order is the order of events: a worker's release is sent before
// it answers its callers, so it cannot be overtaken by their next Do.
//
// loop.go holds the loop's struct, its wake-up (run, receive), its dispatch
// table (handle), admission, release, dispatch, close and end. The loop's
// handlers for a feature live beside that feature's component: wait.go,
// park.go, pause.go, rounds.go, parts.go, direct.go, abandoned.go, share.go.

// loop is the state owned by the loop goroutine: the wiring, the core, one
// component per feature, and the counters. loop: its methods run on the
// shard's loop goroutine, and on no other.
type loop[K comparable, I, O any] struct {
	// Wiring, fixed by newLoop.
	f      *Ferry[K, I, O]
	s      *shard[K, I, O] // the loop's: its channel, its end and its calls' context
	lim    limits          // the ferry's configuration
	shared bool            // several shards share the room and the slots: see share, slots
	errs   refusals        // the errors of a full room, made once

	// The core, and its one timer.
	st    *state[K, *waiter[K, I, O]]
	alarm alarm

	// The features, each in the file of its handlers.
	waits   waiting[K, I, O]   // admissions waiting for room (wait.go)
	parks   parked[K, I, O]    // batches parked for a retry, or held (park.go)
	pauses  pausing[K, I, O]   // paused keys, and their notifiers (pause.go)
	directs directs[K, I, O]   // direct calls in flight (direct.go)
	order   completions[K]     // each key's order of completions (direct.go)
	rounds  rounds             // Flushes (rounds.go)
	share   share[K, I, O]     // the room the shards share (share.go)
	slots   slots[K, I, O]     // the workers it holds, and the slots the shards share (slots.go)
	life    lifecycle[K, I, O] // its close and its end (here)
	stamps  stamps             // admission times, for OnBatch (here)
	out     outbox[K, I, O]    // what a wake-up sends at its end (outbox.go)

	tally Stats     // the counters since New; stats fills in the rest
	ops   sharedOps // operations on the channels the shards share: see sharedOps
}

// refusals are the errors of a room full by count or by weight, made once
// by newLoop. It has no methods.
type refusals struct{ full, weight error }

// lifecycle is a loop's close and end: whether it closes, and the
// goroutines it waits for before it ends. loop: the loop owns it.
type lifecycle[K comparable, I, O any] struct {
	closing bool               // drained, calls cancelled: ending once nothing is in flight
	stopped bool               // its workers are stopped, as it ends: see slots.stopWorkers
	stops   int                // workers it stopped
	exited  int                // of those, gone
	notify  int                // goroutines calling Submits' done at close, which it waits for
	drained []*waiter[K, I, O] // scratch: the inputs a close drains
}

func newLoop[K comparable, I, O any](s *shard[K, I, O], lim limits, most, own int, me int) *loop[K, I, O] {
	f := s.f
	lim.calls = max(1, lim.calls)
	l := &loop[K, I, O]{
		f:      f,
		s:      s,
		lim:    lim,
		st:     newState[K, *waiter[K, I, O]](lim),
		alarm:  newAlarm(),
		stamps: stamps{on: f.onBatch != nil && !f.stamp},
		errs: refusals{fmt.Errorf("%w: the room is full (MaxQueued %d)", ErrRejected, lim.queued),
			fmt.Errorf("%w: the waiting weight would pass MaxQueuedWeight %d", ErrRejected, lim.queuedWeight)},
	}
	if lim.queuedWeight == 0 {
		l.errs.weight = fmt.Errorf("%w: the waiting weight would pass MaxInt64 (MaxQueuedWeight 0)", ErrRejected)
	}
	l.share = newShare[K, I, O](lim, f.spare, f.waitForRoom, f.shards, me, &l.ops)
	l.slots = newSlots(f.slots, len(f.shards), own, most, func() *worker[K, I, O] { return newWorker(f) }, &l.ops)
	if l.shared = f.spare != nil; l.shared { // the room starts in spare: see share
		l.st.grow(-lim.queued, -sharedWeight(lim))
	}
	return l
}

// run is the loop: it sleeps until a message arrives or the alarm fires, then
// handles every message already queued, starts what batches it can and sets
// the alarm to the next deadline. Time is read once per wake-up. It selects
// on the timer only while the alarm is set. With several shards it also
// waits, while starved, for a slot or a poke that one was given back (see
// slots.waitOn), and, while it reserves room, for its room's poke. It blocks
// nowhere else but in one place: a shard short of room, while another keeps
// some, waits within its wake-up for that room back (see share.borrowRoom).
func (l *loop[K, I, O]) run() {
	inc := l.s.inc
	for !l.end() {
		var fire <-chan time.Time
		if l.alarm.set {
			fire = l.alarm.t.C
		}
		if !l.shared {
			if fire == nil {
				l.receive(<-inc)
				continue
			}
			select {
			case m := <-inc:
				l.receive(m)
			case <-fire:
				l.alarm.fired()
				l.dispatch(l.now())
			}
			continue
		}
		var slot <-chan *worker[K, I, O]
		var given, poke <-chan struct{}
		if l.slots.starved {
			slot, given = l.slots.waitOn()
		}
		if l.share.reserved {
			poke = l.share.poke
		}
		select {
		case m := <-inc:
			l.receive(m)
		case <-fire:
			l.alarm.fired()
			l.dispatch(l.now())
		case wk := <-slot:
			l.slots.gotSlot(wk)
			l.dispatch(l.now())
		case <-given:
			l.slots.poked()
			l.dispatch(l.now())
		case <-poke:
			l.dispatch(l.now())
		}
	}
}

// receive handles m and every message queued behind it, at one time, then
// starts what batches it can.
func (l *loop[K, I, O]) receive(m msg[K, I, O]) {
	now := l.now()
	l.stamps.stamped = false
	if !l.shared {
		l.handle(m, now)
		for n := len(l.s.inc); n > 0; n-- {
			l.handle(<-l.s.inc, now)
		}
	} else {
		l.receiveShared(m, now)
	}
	if l.rounds.cur != nil {
		l.settle() // before dispatch, as a round it starts makes lanes due
	}
	l.dispatch(now)
}

// now is the time since the ferry's origin (its clock), read only when
// deadlines exist: with zero delay and no lane parked the core never looks
// at it, and it is 0.
func (l *loop[K, I, O]) now() time.Duration {
	if l.lim.delay == 0 && (l.f.retry == nil || !l.st.parked()) {
		return 0
	}
	return l.f.clock()
}

// timeNow is now, the wake-up's time, or the clock if now is not one: with
// no delay, the loop reads no clock unless a lane is parked (see now).
func (l *loop[K, I, O]) timeNow(now time.Duration) time.Duration {
	if l.lim.delay == 0 && now == 0 {
		return l.f.clock()
	}
	return now
}

// handle is the loop's dispatch table: one call per message kind.
func (l *loop[K, I, O]) handle(m msg[K, I, O], now time.Duration) {
	switch m.op {
	case opAdmit:
		l.admit(m.w, now)
	case opAdmitMany, opEarmark, opUnearmark:
		l.admitPart(m.g, m.part, m.op, now)
	case opDrop:
		l.drop(m.w, now)
	case opDropMany:
		l.dropPart(m.g, m.part, now)
	case opStart:
		l.directStarted(m.w, m.cancel)
	case opRelease:
		l.release(m, now)
	case opIdle:
		l.idleWorker(int(m.worker))
	case opPark:
		l.park(m)
	case opReported:
		l.reported(m.fin)
	case opNotified:
		l.notified(m.fin)
	case opChained:
		l.directs.chains--
	case opDonePanicked:
		l.tally.DonePanics++
	case opOnBatchPanicked:
		l.tally.OnBatchPanics++
	case opOnPausePanicked:
		l.tally.OnPausePanics++
	case opFlush:
		l.flush(m.flushed)
	case opExit:
		l.life.exited++
	case opStats:
		m.stats <- l.stats()
	case opPaused:
		m.paused <- l.pauses.keys.list()
	case opClose:
		l.close()
	case opShutdown:
		l.shutdown()
	case opResume:
		l.resume(m.key, now)
	case opBorrowWait:
		l.borrowWait(m.g, m.part)
	case opLeave:
		l.leave(m)
	case opGiveBack:
		l.share.press() // give back all the room kept as the wake-up ends
	}
}

// admit admits a Do's or a Submit's input, claims its key for a direct call,
// or refuses it, and gives its caller the word. With WaitForRoom the input
// waits for room if others wait already or the room lacks it.
func (l *loop[K, I, O]) admit(w *waiter[K, I, O], now time.Duration) {
	if l.f.waitForRoom && l.waits.line.len() > 0 && l.admits() && !l.refusesAtOnce(w) {
		l.wait(w)
		return
	}
	if !l.letIn(w, now) {
		l.wait(w)
	}
}

// letIn admits w, claims its key for a direct call (a Do's), or refuses it,
// and gives its caller the word. It reports false, and does nothing, if w
// is to wait for room (WaitForRoom, a room full for it).
func (l *loop[K, I, O]) letIn(w *waiter[K, I, O], now time.Duration) bool {
	if l.f.pauseOnError {
		if err, ok := l.pauses.keys.of(w.key); ok && l.admits() {
			w.c <- result[O]{err: err}
			return true
		}
	}
	var o outcome
	var tk ticket
	if w.done != nil { // a Submit never claims
		o, tk = l.st.join(w.key, w.weight, w.rank, w.at, now, w)
	} else {
		o, tk = l.st.admit(w.key, w.weight, w.rank, w.at, now, w)
	}
	switch o {
	case admitted:
		if l.stamps.on { // after admit: with OnBatch, delay is 0 and the core keeps no time
			l.stamp(w)
		}
		w.tk = tk
		l.tally.Admitted++
		if w.done != nil {
			w.c <- result[O]{err: errAdmitted}
		}
	case claimed:
		l.claim(w)
	case overHeld:
		w.c <- result[O]{err: l.pauses.keys.err(w.key)}
	case rejectedFull:
		if l.f.waitForRoom {
			return false
		}
		fallthrough
	default:
		w.c <- result[O]{err: l.reject(o, 1, w.weight, w.weight, 1)}
	}
	return true
}

// admits reports whether the room admits inputs: it is neither closed nor
// shutting down. A paused key's input is refused as ErrPaused only then;
// after, ErrClosed, as every other input.
func (l *loop[K, I, O]) admits() bool { return !l.st.closed && !l.st.shuttingDown }

// stamps is how the loop stamps the inputs it admits with their submission
// time, for OnBatch's Wait, when callers do not stamp their own (no
// MaxBatchDelay): the clock is read once per wake-up that admits. It has no
// methods; the loop owns it (see stamp).
type stamps struct {
	on      bool          // OnBatch without a MaxBatchDelay
	stamped bool          // at is this wake-up's
	at      time.Duration // by clock
}

// stamp gives w, as it is admitted, the time of this wake-up as its
// submission time. The stamp is later than the caller's by the input's time
// in the inbound channel.
func (l *loop[K, I, O]) stamp(w *waiter[K, I, O]) {
	if !l.stamps.stamped {
		l.stamps.at, l.stamps.stamped = l.f.clock(), true
	}
	w.at = l.stamps.at
}

// reject is the error for n inputs weighing total, the heaviest heaviest,
// that the room did not admit with outcome o. It counts all inputs as
// rejected, for that reason: a DoMany's over several shards, if not n.
func (l *loop[K, I, O]) reject(o outcome, n int, heaviest, total int64, all int) error {
	if o == refused {
		return ErrClosed
	}
	l.tally.Rejected += uint64(all)
	lim := l.lim
	unused := l.st.unused().n // the shard's: with several, of what it holds of the shared room
	// Inputs that no room could hold are refused for that (with several
	// shards, their shard borrowed no room for them: see share.need); the
	// others for what the room lacks now.
	tooHeavy := lim.queuedWeight > 0 && total > lim.queuedWeight
	switch {
	case o == rejectedHeavy:
		l.tally.RejectedHeavy += uint64(all)
	case n > lim.queued || n > unused && !tooHeavy:
		l.tally.RejectedFull += uint64(all)
	default:
		l.tally.RejectedWeight += uint64(all)
	}
	switch {
	case o == rejectedHeavy && lim.queuedWeight > 0 && heaviest > lim.queuedWeight:
		return fmt.Errorf("%w: input weight %d is more than MaxQueuedWeight %d", ErrRejected, heaviest, lim.queuedWeight)
	case o == rejectedHeavy:
		return fmt.Errorf("%w: the inputs' total weight passes MaxInt64", ErrRejected)
	case n > lim.queued:
		return fmt.Errorf("%w: %d inputs, more than MaxQueued %d", ErrRejected, n, lim.queued)
	case n == 1 && unused < 1:
		return l.errs.full
	case n == 1:
		return l.errs.weight
	case n > unused && !tooHeavy: // all of a DoMany's inputs, some perhaps in other shards
		return fmt.Errorf("%w: %d inputs, more than the room has free (MaxQueued %d)", ErrRejected, all, lim.queued)
	}
	return fmt.Errorf("%w (%d inputs)", l.errs.weight, all)
}

// release frees m.key, whose call is over: a worker's (its context is freed)
// or a direct call's (see endDirect). If the call failed for good, with
// PauseOnError, it then pauses the key; with HoldPaused a direct call's
// failure holds its lane instead (see holdDirect).
func (l *loop[K, I, O]) release(m msg[K, I, O], now time.Duration) {
	holds := m.fail != nil && l.f.hold && l.admits() // a worker's batch with inputs to hold holds with opPark
	if !holds {
		l.st.release(m.key, now)
	}
	if m.worker != byCaller {
		if fl := l.slots.workers[m.worker].fl; fl.cancel != nil {
			fl.cancel(nil) // the call is over: free its context
			fl.tag, fl.live, fl.cancel = 0, 0, nil
		}
	} else {
		l.endDirect(m)
	}
	switch { // after endDirect, which may give the key's completions back
	case holds:
		l.holdDirect(m.key, m.fail, m.order)
	case m.fail != nil && !l.f.hold: // with HoldPaused nothing holds once shutting down
		l.pause(m.key, m.fail, m.order)
	}
}

// shutdown starts a graceful close, once: see state.shutdown.
func (l *loop[K, I, O]) shutdown() {
	if !l.st.closed && !l.st.shuttingDown {
		l.st.shutdown()
		l.closeWaits()
		if l.f.hold {
			l.stopHolds()
		}
	}
}

// idleWorker frees worker id, which has answered its batch, and counts what
// its batch owed the round in progress.
func (l *loop[K, I, O]) idleWorker(id int) {
	fl := l.slots.workers[id].fl
	if fl.fin != nil {
		l.order.done(fl.key, fl.fin)
	}
	if l.rounds.cur != nil {
		l.rounds.paid(fl.owe)
	}
	fl.owe = owed{}
	if cap(fl.batch) > keepCap {
		fl.batch = nil
	}
	l.slots.releaseSlot(id)
}

// dispatch lets in the admissions waiting for room that the room holds, and
// starts a batch on every idle worker while a lane is ready, again while the
// batches taken free room for those waiting. Then it gives back the room the
// shard keeps unused, sends the outbox, and sets the alarm to the earliest
// deadline left, which is in the future if a worker is idle.
func (l *loop[K, I, O]) dispatch(now time.Duration) {
	if l.slots.starved || l.slots.waiting { // only a shard of several starves
		l.slots.dispatching()
	}
	for {
		if l.f.waitForRoom {
			l.admitWaiting(now)
		}
		if !l.take(now) || !l.f.waitForRoom || l.waits.line.len() == 0 {
			break
		}
	}
	if l.shared {
		if len(l.slots.idle) > 0 || l.slots.gave > 0 {
			l.slots.giveBackIdleSlots() // none unused if starved; else no lane is ready, or no worker is free
		}
		l.giveBackRoom() // before the words and batches: their callers may come back to another shard
	}
	if o := &l.out; len(o.words)+len(o.cancels)+len(o.flushes)+len(o.starts) > 0 {
		l.sendOut()
	}
	if l.lim.delay == 0 && l.f.retry == nil {
		return // no deadlines: a held lane has none
	}
	// With every worker busy, or no slot, nothing can start before a release
	// or a slot, which wake the loop anyway; a due lane must not keep the
	// alarm ringing meanwhile.
	t, ok := l.st.sched.earliest()
	if ok {
		now = l.timeNow(now) // a lane parked in this wake-up, with no delay
	}
	l.alarm.arm(t, ok && l.slots.mayTake(), now)
}

// take starts a batch on every idle worker while a lane is ready, and
// reports whether it took any: room freed, for the admissions waiting.
func (l *loop[K, I, O]) take(now time.Duration) bool {
	took := false
	for l.st.sched.hasReady(now) {
		id, ok := l.slots.takeSlot()
		if !ok {
			break
		}
		wk := l.slots.workers[id]
		key, batch, cont, _ := l.st.take(now, wk.fl.batch[:0])
		if cont { // a parked batch, due
			l.takeParked(id, wk, key)
			continue
		}
		*wk.fl = flight[K, I, O]{key: key, batch: batch, ctx: l.s.ctx}
		fl := wk.fl
		wk.idle = false
		l.tally.Batches++
		l.tally.Taken += uint64(len(batch))
		if l.rounds.cur != nil { // what the batch owes the round in progress
			n, seq := 0, l.rounds.seq()
			for _, w := range batch {
				if w.tk.seq <= seq {
					n++
				}
			}
			fl.owe = l.rounds.owe(n)
		}
		if l.lim.calls == 1 && (l.f.onBatch != nil || hasSubmit(batch)) { // its completions come after the key's last
			fl.after, fl.fin = l.order.place(key)
		}
		if l.f.cancelAbandoned { // after the round's look at the tickets
			l.watch(id, fl)
		}
		l.out.starts = append(l.out.starts, job[K, I, O]{s: l.s, id: int32(id), fl: fl})
		took = true
	}
	return took
}

// hasSubmit reports whether a Submit's input is among ws.
func hasSubmit[K comparable, I, O any](ws []*waiter[K, I, O]) bool {
	for _, w := range ws {
		if w.done != nil {
			return true
		}
	}
	return false
}

// close drains the room, answering every waiting caller with ErrClosed, and
// cancels the calls in flight, batched and direct. A direct call's context is
// a child of its caller's, and cancelling it calls that context's Done and
// Value methods, which are user code: each runs on a goroutine of its own.
func (l *loop[K, I, O]) close() {
	if l.life.closing {
		return
	}
	l.life.closing = true
	l.closeWaits()
	l.life.drained = l.st.drain(l.life.drained[:0])
	var subs []*waiter[K, I, O]
	for _, i := range refuse(l.life.drained, ErrClosed, nil) {
		subs = append(subs, l.life.drained[i])
	}
	if len(subs) > 0 { // done is user code: off the loop, which waits for it
		l.life.notify++
		after, fin := l.order.all(), make(chan struct{}) // after the completions of the batches in flight
		for _, w := range subs {
			l.order.last.put(w.key, fin) // and before any that a failure handled after the close brings
		}
		go callDoneAll(l.s, subs, ErrClosed, after, fin)
	}
	clear(l.life.drained)
	l.s.cancel(ErrClosed)
	l.out.cancels = l.directs.cancels(l.out.cancels)
	for _, c := range l.rounds.abort() {
		l.out.flushes = append(l.out.flushes, flushAnswer{c, ErrClosed})
	}
}

// end moves the close along and reports whether the loop is over. A room
// shutting down that has emptied closes. A closing loop stops its workers
// once nothing is in flight: no call, no busy worker, no direct call's
// OnBatch unreported, no goroutine calling dones. Once its workers have
// gone, it closes done.
func (l *loop[K, I, O]) end() bool {
	st := l.st
	if st.shuttingDown && st.idle() {
		l.close()
		l.sendOut()
	}
	if !l.life.closing || !st.idle() || l.life.notify > 0 || l.directs.pending() || l.pauses.notes.len() > 0 || l.slots.busy() > 0 {
		return false
	}
	if !l.life.stopped {
		l.life.stopped = true
		l.life.stops = l.slots.stopWorkers(l.s)
	}
	if l.life.exited < l.life.stops {
		return false
	}
	l.alarm.t.Stop()
	l.s.last, l.s.lastPaused = l.stats(), l.pauses.keys.list()
	l.s.ops = l.ops
	close(l.s.done)
	// Every message sent before done was closed is in inc now. await waits
	// for the answer to it without watching done, so answer those.
	for n := len(l.s.inc); n > 0; n-- {
		switch m := <-l.s.inc; m.op {
		case opAdmit:
			m.w.c <- result[O]{err: ErrClosed}
		case opAdmitMany, opEarmark, opBorrowWait:
			p := &m.g.parts[m.part]
			p.err = ErrClosed
			p.c <- struct{}{}
		case opUnearmark, opDropMany:
			m.g.parts[m.part].c <- struct{}{}
		case opFlush:
			m.flushed <- ErrClosed
		case opStats:
			m.stats <- l.s.last
		case opPaused:
			m.paused <- l.s.lastPaused
		}
	}
	return true
}

func (l *loop[K, I, O]) stats() Stats {
	st, t := l.st, l.tally
	t.Queued, t.Weight, t.Busy, t.Lanes = st.queued, st.weight, st.busy, st.lanes.len()
	t.Paused = l.pauses.keys.count()
	t.Parked = st.conts
	t.WaitingForRoom = l.waits.line.inputs()
	t.Waiting = t.WaitingForRoom // the deprecated name
	return t
}
