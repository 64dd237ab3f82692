package ferry

import (
	"fmt"
	"slices"
	"time"
)

// This file is the loop: one goroutine per shard (loop.run) owns the core's
// state and serialises every transition; workers run batched calls; callers
// run direct calls. All of them talk to the loop through one channel, s.inc,
// so that its order is the order of events: a worker's release is sent before
// it answers its callers, so it cannot be overtaken by their next Do.
//
// loop.go holds the loop's struct, its wake-up (run, receive), its dispatch
// table (handle), admission, release, dispatch and close. The loop's
// handlers for a feature live beside that feature's pure type: wait.go
// (waiting for room), pause.go (paused keys), park.go (batches parked for a
// retry), rounds.go (Flush), parts.go (a
// DoMany's parts), direct.go (direct calls and the order of completions) and
// abandoned.go (callers who give up: drops, and batches abandoned).

// loop is the state owned by the loop goroutine. loop: its methods run on
// the shard's loop goroutine, and on no other.
type loop[K comparable, I, O any] struct {
	f       *Ferry[K, I, O]
	s       *shard[K, I, O] // the loop's: its channel, its end and its calls' context
	lim     limits          // the shard's
	st      *state[K, *waiter[K, I, O]]
	alarm   alarm
	directs map[K]directCall                 // direct calls in flight, by key
	dpeak   int                              // most directs since the map was rebuilt; see shrink
	reports map[*waiter[K, I, O]]reported[K] // with OnBatch, direct calls released whose OnBatch runs, by waiter
	rpeak   int                              // most reports since the map was rebuilt

	// completing holds, for each key whose last batch (or direct call) has
	// completions to order (Submits' done, OnBatch) still running, a channel
	// closed once they are over: the next such batch of the key waits for it
	// before its own (see finish), so that they never overlap and come in order.
	completing map[K]chan struct{}

	waits    waitLine[K, I, O]                   // admissions waiting for room, with WaitForRoom: see wait.go
	waitSubs map[chan result[O]]*waiter[K, I, O] // the Submits among them, by their word's channel: see leave
	wpeak    int                                 // most waitSubs since the map was rebuilt; see shrink
	left     []waitEntry[K, I, O]                // admissions out of the line at once, as the key is paused or the ferry closes

	parks map[K]*parkedBatch[K, I, O] // the batches parked for a retry, by key: see park.go
	ppeak int                         // most parks since the map was rebuilt; see shrink

	paused  pauses[K]                      // the keys paused, with PauseOnError: see pause.go
	pausing map[chan struct{}]pauseNote[K] // paused keys' notifiers in flight, by the fin each closes
	cleared []*waiter[K, I, O]             // a paused key's waiting inputs, as it is paused

	rounds rounds // the Flushes: see rounds.go
	claims uint64 // direct calls claimed
	tags   uint64 // batches tagged, with CancelAbandoned: see inFlight
	notify int    // goroutines calling Submits' done that the loop waits for
	chains int    // goroutines closing an unused claim's fin that the loop waits for: see endClaim

	closing bool // drained, calls cancelled: ending once busy is 0
	stopped bool // its workers are stopped, as it ends: see slots.stopWorkers
	stops   int  // workers it stopped
	exited  int  // of those, gone

	tally Stats     // the counters since New; stats fills in the rest
	ops   sharedOps // operations on the channels the shards share: see sharedOps

	errFull, errFullWeight error
	drained                []*waiter[K, I, O]

	shared bool            // several shards share the room and the slots: see share, slots
	share  share[K, I, O]  // the room the shards share
	slots  slots[K, I, O]  // the workers it holds, and the slots the shards share
	batch  []msg[K, I, O]  // one wake-up's messages, with several shards: see receive
	out    outbox[K, I, O] // what the wake-up sends at its end: see sendOut

	stamps  bool          // OnBatch without a MaxBatchDelay: the loop stamps inputs, see stamp
	stamped bool          // at is this wake-up's
	at      time.Duration // by clock
}

func newLoop[K comparable, I, O any](s *shard[K, I, O], lim limits, most, own int) *loop[K, I, O] {
	f := s.f
	l := &loop[K, I, O]{
		f:          f,
		s:          s,
		lim:        lim,
		st:         newState[K, *waiter[K, I, O]](lim),
		alarm:      newAlarm(),
		directs:    make(map[K]directCall),
		reports:    make(map[*waiter[K, I, O]]reported[K]),
		completing: make(map[K]chan struct{}),
		stamps:     f.onBatch != nil && !f.stamp,
		errFull:    fmt.Errorf("%w: the room is full (MaxQueued %d)", ErrRejected, lim.queued),
		errFullWeight: fmt.Errorf("%w: the waiting weight would pass MaxQueuedWeight %d",
			ErrRejected, lim.queuedWeight),
	}
	l.share = newShare[K, I, O](lim, f.spare, f.waitForRoom, f.shards, slices.Index(f.shards, s), &l.ops)
	l.slots = slots[K, I, O]{pool: f.slots, shards: len(f.shards), own: own, most: most,
		start: func() *worker[K, I, O] { return newWorker(f) }, ops: &l.ops}
	if f.slots.free != nil {
		l.slots.poke = make(chan struct{}, 1)
	}
	if l.shared = f.spare != nil; l.shared { // the room starts in spare: see share
		l.st.grow(-lim.queued, -sharedWeight(lim))
	}
	if lim.queuedWeight == 0 {
		l.errFullWeight = fmt.Errorf("%w: the waiting weight would pass MaxInt64 (MaxQueuedWeight 0)", ErrRejected)
	}
	return l
}

// run is the loop: it sleeps until a message arrives or the alarm fires, then
// handles every message already queued, starts what batches it can and sets
// the alarm to the next deadline. Time is read once per wake-up. The timer's
// channel is in the select only while the alarm is set: a timer channel makes
// every select on it take the timer's lock and read the clock. So is the
// ferry's slots channel, only while the shard is starved of a slot below its
// share (see slots); the shard's slots poke, only while it is starved at its
// share and waits to hear of a slot given back (see slots.wakes); and its
// room poke, only while it has a reservation on the shared room (WaitForRoom).
func (l *loop[K, I, O]) run() {
	inc := l.s.inc
	for !l.end() {
		var fire <-chan time.Time
		if l.alarm.armed() {
			fire = l.alarm.t.C
		}
		var slot <-chan *worker[K, I, O]
		if l.slots.parked() {
			slot = l.slots.pool.free
			l.ops.add(1) // the select below waits on it
		}
		var poke <-chan struct{}
		if l.share.reserved {
			poke = l.share.poke
		}
		given := l.slots.wakes()
		if fire == nil && slot == nil && poke == nil && given == nil {
			l.receive(<-inc)
			continue
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
		case <-poke:
			l.dispatch(l.now())
		case <-given:
			l.slots.poked()
			l.dispatch(l.now())
		}
	}
}

// receive handles m and every message queued behind it, at one time, then
// starts what batches it can.
func (l *loop[K, I, O]) receive(m msg[K, I, O]) {
	now := l.now()
	l.stamped = false
	if l.share.spare == nil {
		l.handle(m, now)
		for n := len(l.s.inc); n > 0; n-- {
			l.handle(<-l.s.inc, now)
		}
	} else { // read them all first, to borrow the room they ask for at once
		l.batch = append(l.batch[:0], m)
		for n := len(l.s.inc); n > 0; n-- {
			l.batch = append(l.batch, <-l.s.inc)
		}
		l.borrowRoom(l.batch)
		l.heedEnd() // before the admissions: refused, if the ferry's end has begun
		for _, m := range l.batch {
			l.handle(m, now)
		}
		clear(l.batch)
	}
	// Each feature that is off is skipped here, at its if.
	if l.f.waitForRoom {
		l.admitWaiting(now) // into what the messages freed, before it is lent
	}
	if l.shared {
		l.giveBackRoom() // what the messages freed, before their words: see replyAfterLend
	}
	if l.rounds.cur != nil {
		l.settle() // before dispatch, as a round it starts makes lanes due
	}
	if l.outPending() {
		l.sendOut() // the words, then the Flushes' answers
	}
	l.dispatch(now)
}

// outPending reports whether the outbox holds anything to send.
func (l *loop[K, I, O]) outPending() bool {
	o := &l.out
	return len(o.words)+len(o.cancels)+len(o.flushes)+len(o.starts) > 0
}

// now is the time since the ferry's origin (its clock), read only when
// deadlines exist: with zero delay and no lane parked the core never looks
// at it, and it is 0.
func (l *loop[K, I, O]) now() time.Duration {
	if l.lim.delay == 0 && !l.st.parked() {
		return 0
	}
	return l.f.clock()
}

// handle is the loop's dispatch table: one call per message kind.
func (l *loop[K, I, O]) handle(m msg[K, I, O], now time.Duration) {
	switch m.op {
	case opAdmit:
		l.admit(m.w, now)
	case opAdmitMany, opHold, opUnhold:
		l.admitPart(m.g, m.part, m.op, now)
	case opDrop:
		l.drop(m.w, now)
	case opDropMany:
		l.dropPart(m.g, m.part, now)
	case opStart:
		l.directStarted(m.key, m.cancel)
	case opRelease:
		l.release(m, now)
	case opIdle:
		l.idleWorker(int(m.worker))
	case opPark:
		l.park(m)
	case opReported:
		l.reported(m.w, m.panicked)
	case opNotified:
		l.notified(m.fin, m.panicked)
	case opChained:
		l.chains--
	case opDonePanicked:
		l.tally.DonePanics++
	case opOnBatchPanicked:
		l.tally.OnBatchPanics++
	case opFlush:
		l.flush(m.flushed)
	case opExit:
		l.exited++
	case opStats:
		m.stats <- l.stats()
	case opPaused:
		l.pausedKeys(m.paused)
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
		l.share.pressed = true // give back all the room spare as the wake-up ends
	}
}

// admit admits a Do's or a Submit's input, or claims its key for a direct
// call, or refuses it, and gives its caller the word; with WaitForRoom, it
// waits for room behind those already waiting, or if the room lacks it.
func (l *loop[K, I, O]) admit(w *waiter[K, I, O], now time.Duration) {
	if l.f.waitForRoom && l.waits.len() > 0 && l.admits() && !l.refusesAtOnce(w) {
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
		if err, ok := l.paused.of(w.key); ok && l.admits() {
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
		l.stamp(w) // after admit: with OnBatch, delay is 0 and the core keeps no time
		w.tk = tk
		l.tally.Admitted++
		if w.done != nil {
			w.c <- result[O]{err: errAdmitted}
		}
	case claimed:
		l.claim(w)
	case overHeld:
		w.c <- result[O]{err: l.paused.err(w.key)}
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

// releaseSlot frees m.key, whose call is over: a worker's (its context is freed)
// or a direct call's (see endDirect); then pauses the key if the call failed
// for good, with PauseOnError.
func (l *loop[K, I, O]) release(m msg[K, I, O], now time.Duration) {
	held := l.f.hold && m.fail != nil && l.admits() // a worker's batch with inputs to hold holds with opPark
	if !held {
		l.st.release(m.key, now)
	}
	if m.worker != byCaller {
		if wk := l.slots.workers[m.worker]; wk.cancel != nil {
			wk.cancel(nil) // the call is over: free its context
			wk.tag, wk.live, wk.cancel = 0, 0, nil
		}
	} else {
		l.endDirect(m)
	}
	switch { // after endDirect, which may give the key's completions back
	case held:
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

// stamp gives w, as it is admitted, the time of this wake-up as its
// submission time, for OnBatch's Wait, if callers do not stamp their own: the
// clock is read once per wake-up that admits, not once per input. The stamp
// is later than the caller's by the input's time in the inbound channel.
func (l *loop[K, I, O]) stamp(w *waiter[K, I, O]) {
	if !l.stamps {
		return
	}
	if !l.stamped {
		l.at, l.stamped = l.f.clock(), true
	}
	w.at = l.at
}

// reject is the error for n inputs weighing total, the heaviest heaviest, that the room
// did not admit with outcome o, and counts all of them as rejected, for the
// same reason: all the inputs of a DoMany over several shards, if not n.
func (l *loop[K, I, O]) reject(o outcome, n int, heaviest, total int64, all int) error {
	if o == refused {
		return ErrClosed
	}
	l.tally.Rejected += uint64(all)
	lim := l.lim
	spare, _ := l.st.spare() // the shard's: with several, what it holds of the shared room
	// Inputs that no room could hold are refused for that (with several
	// shards, their shard borrowed no room for them: see share.need); the
	// others for what the room lacks now.
	tooHeavy := lim.queuedWeight > 0 && total > lim.queuedWeight
	switch {
	case o == rejectedHeavy:
		l.tally.RejectedHeavy += uint64(all)
	case n > lim.queued || n > spare && !tooHeavy:
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
	case n == 1 && spare < 1:
		return l.errFull
	case n == 1:
		return l.errFullWeight
	case n > spare && !tooHeavy: // all of a DoMany's inputs, some perhaps in other shards
		return fmt.Errorf("%w: %d inputs, more than the room has spare (MaxQueued %d)", ErrRejected, all, lim.queued)
	}
	return fmt.Errorf("%w (%d inputs)", l.errFullWeight, all)
}

// idleWorker frees worker id, which has answered its batch, and counts what
// its batch owed the round in progress.
func (l *loop[K, I, O]) idleWorker(id int) {
	wk := l.slots.workers[id]
	if wk.fin != nil {
		l.done(wk.key, wk.fin)
		var zero K
		wk.fin, wk.key = nil, zero
	}
	if l.rounds.cur != nil {
		l.rounds.paid(wk.owe)
	}
	wk.owe = owed{}
	if cap(wk.buf) > keepCap {
		wk.buf = nil
	}
	l.slots.releaseSlot(id)
}

// dispatch lets in the admissions waiting for room that the room holds, and
// starts a batch on every idle worker while a lane is ready, again while the
// batches taken free room for those waiting; then it lends what room the
// shard holds spare, and sets the alarm to the earliest deadline left, which
// is in the future if a worker is idle.
func (l *loop[K, I, O]) dispatch(now time.Duration) {
	st := l.st
	if l.shared {
		l.slots.dispatching() // only a shard of several starves
	}
	for {
		if l.f.waitForRoom {
			l.admitWaiting(now)
		}
		if !l.take(now) || !l.f.waitForRoom || l.waits.len() == 0 {
			break
		}
	}
	if l.shared {
		l.slots.giveBackIdleSlots() // none unused if starved; else no lane is ready, or no worker is free
		l.giveBackRoom()            // before the batches start: their callers may come back to another shard
	}
	if l.outPending() {
		l.sendOut() // the words of the admissions waiting let in, then the batches
	}
	// With every worker busy, or no slot, nothing can start before a release
	// or a slot, which wake the loop anyway; a due lane must not keep the
	// alarm ringing meanwhile.
	t, ok := st.earliest()
	if ok {
		now = l.timeNow(now) // a lane parked in this wake-up, with no delay
	}
	l.alarm.arm(t, ok && l.slots.mayTake(), now)
}

// takeSlot starts a batch on every idle worker while a lane is ready, and
// reports whether it took any: room freed, for the admissions waiting.
func (l *loop[K, I, O]) take(now time.Duration) bool {
	st := l.st
	took := false
	for st.hasReady(now) {
		id, ok := l.slots.takeSlot()
		if !ok {
			break
		}
		wk := l.slots.workers[id]
		key, batch, _ := st.take(now, wk.buf[:0])
		if pb := batch[0].pb; pb != nil { // a parked batch, due
			clear(batch)
			l.takeParked(id, wk, key, pb)
			continue
		}
		wk.buf, wk.idle, wk.owe = batch, false, owed{}
		l.tally.Batches++
		l.tally.Taken += uint64(len(batch))
		j := job[K, I, O]{s: l.s, id: int32(id), key: key, batch: batch, ctx: l.s.ctx}
		if l.rounds.cur != nil { // what the batch owes the round in progress
			n, seq := 0, l.rounds.seq()
			for _, w := range batch {
				if w.tk.seq <= seq {
					n++
				}
			}
			wk.owe = l.rounds.owe(n)
		}
		if l.f.onBatch != nil || hasSubmit(batch) { // its completions come after the key's last
			j.after, j.fin = l.place(key)
			wk.fin, wk.key = j.fin, key
		}
		if l.f.cancelAbandoned { // after the round's look at the tickets
			j.ctx = l.watch(id, wk, batch)
		}
		l.out.starts = append(l.out.starts, j)
		took = true
	}
	return took
}

// close drains the room, answering every waiting caller with ErrClosed, and
// cancels the calls in flight, batched and direct. A direct call's context is
// a child of its caller's, and cancelling it calls that context's Done and
// Value methods, which are user code: each runs on a goroutine of its own.
func (l *loop[K, I, O]) close() {
	if l.closing {
		return
	}
	l.closing = true
	l.closeWaits()
	l.drained = l.st.drain(l.drained[:0])
	var subs []*waiter[K, I, O]
	for _, i := range refuse(l.drained, ErrClosed, nil) {
		subs = append(subs, l.drained[i])
	}
	if len(subs) > 0 { // done is user code: off the loop, which waits for it
		l.notify++
		var after []chan struct{} // the completions of batches in flight come first
		for _, c := range l.completing {
			after = append(after, c)
		}
		go callDoneAll(l.s, subs, ErrClosed, after)
	}
	clear(l.drained)
	l.s.cancel(ErrClosed)
	for _, d := range l.directs {
		if d.cancel != nil {
			l.out.cancels = append(l.out.cancels, d.cancel)
		}
	}
	for _, c := range l.rounds.abort() {
		l.out.flushes = append(l.out.flushes, flushAnswer{c, ErrClosed})
	}
}

// end moves the close along and reports whether the loop is over: a room
// shutting down that has emptied closes; a closing ferry with no call in
// flight, every worker idle and every direct call's OnBatch reported stops
// its workers; once they have gone, done is closed.
func (l *loop[K, I, O]) end() bool {
	st := l.st
	if st.shuttingDown && st.idle() {
		l.close()
		l.sendOut()
	}
	if !l.closing || st.busy > 0 || st.conts > 0 || l.notify > 0 || l.chains > 0 || len(l.pausing) > 0 || l.slots.busy() > 0 || len(l.reports) > 0 {
		return false
	}
	if !l.stopped {
		l.stopped = true
		l.stops = l.slots.stopWorkers(l.s)
	}
	if l.exited < l.stops {
		return false
	}
	l.alarm.t.Stop()
	l.s.last, l.s.lastPaused = l.stats(), l.paused.list()
	l.s.ops = l.ops
	close(l.s.done)
	// Every message sent before done was closed is in inc now. await waits
	// for the answer to it without watching done, so answer those.
	for n := len(l.s.inc); n > 0; n-- {
		switch m := <-l.s.inc; m.op {
		case opAdmit:
			m.w.c <- result[O]{err: ErrClosed}
		case opAdmitMany, opHold, opBorrowWait:
			p := &m.g.parts[m.part]
			p.err = ErrClosed
			p.c <- struct{}{}
		case opUnhold, opDropMany:
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
	t.Queued, t.Weight, t.Busy, t.Lanes = st.queued, st.weight, st.busy, len(st.lanes)
	t.Paused = l.paused.count()
	t.Parked = st.conts
	t.WaitingForRoom = l.waits.inputs()
	t.Waiting = t.WaitingForRoom // the deprecated name
	return t
}
