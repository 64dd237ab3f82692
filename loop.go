package ferry

import (
	"context"
	"fmt"
	"time"
)

// This file is the loop: one goroutine per shard (loop.run) owns the core's
// state and serialises every transition; workers run batched calls; callers
// run direct calls. All of them talk to the loop through one channel, s.inc,
// so that its order is the order of events: a worker's release is sent before
// it answers its callers, so it cannot be overtaken by their next Do.

// inFlight is the ticket of an input in batch n, taken by worker id, with
// CancelAbandoned: once taken an input's ticket is the loop's, and this one
// names no waiting input, as seqs never reach 1<<63.
func inFlight(id int, n uint64) ticket { return ticket{rank: int64(id), seq: 1<<63 | n} }

// directCall is a direct call in flight: its claim's number and, once it
// runs, how to cancel it; with OnBatch, its place among its key's
// completions (see completing). It has no methods; the loop owns it.
type directCall struct {
	n          uint64
	cancel     context.CancelCauseFunc
	after, fin chan struct{}
}

// reported is a direct call released whose OnBatch runs: its claim's number,
// its key and its fin (see completing). It has no methods; the loop owns it.
type reported[K comparable] struct {
	n   uint64
	key K
	fin chan struct{}
}

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

	paused  pauses[K]                      // the keys paused, with PauseOnError: see pause.go
	pausing map[chan struct{}]pauseNote[K] // paused keys' notifiers in flight, by the fin each closes
	cleared []*waiter[K, I, O]             // a paused key's waiting inputs, as it is paused

	rounds rounds // the Flushes: see rounds.go
	claims uint64 // direct calls claimed
	notify int    // goroutines calling Submits' done that the loop waits for
	chains int    // goroutines closing an unused claim's fin that the loop waits for: see endClaim

	closing bool // drained, calls cancelled: ending once busy is 0
	stopped bool // its workers are stopped, as it ends: see share.stopWorkers
	stops   int  // workers it stopped
	exited  int  // of those, gone

	tally Stats // the counters since New; stats fills in the rest

	errFull, errFullWeight error
	drained                []*waiter[K, I, O]

	share   share[K, I, O] // the room and the slots the shards share
	batch   []msg[K, I, O] // one wake-up's messages, with several shards: see receive
	started []job[K, I, O] // the batches a dispatch took, sent once it has lent its room

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
	l.share = share[K, I, O]{st: l.st, lim: lim, own: own, most: most, f: f, paused: &l.paused}
	if n := len(f.shards); n > 1 { // the room starts in spare: see share
		l.share.spare, l.share.slots = f.spare, f.slots
		l.st.grow(-lim.queued, -sharedWeight(lim))
		if f.waitForRoom {
			l.share.poke = make(chan struct{}, 1)
		}
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
// ferry's slots channel, only while the shard is starved of a slot, and its
// poke, only while it has a reservation on the shared room (WaitForRoom).
func (l *loop[K, I, O]) run() {
	inc := l.s.inc
	for !l.end() {
		var fire <-chan time.Time
		if l.alarm.armed() {
			fire = l.alarm.t.C
		}
		var slot <-chan any
		if l.share.starved {
			slot = l.share.slots.free
		}
		var poke <-chan struct{}
		if l.share.reserved {
			poke = l.share.poke
		}
		if fire == nil && slot == nil && poke == nil {
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
			l.share.gotSlot(wk)
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
		l.share.borrowRoom(l.batch)
		l.heedEnd() // before the admissions: refused, if the ferry's end has begun
		for _, m := range l.batch {
			l.handle(m, now)
		}
		clear(l.batch)
	}
	l.admitWaiting(now)    // into what the messages freed, before it is lent
	l.share.giveBackRoom() // what the messages freed, before their words: see replyAfterLend
	l.share.sendReplies()
	l.settle() // after the words, which Flush waits for; before dispatch, as a round it starts makes lanes due
	l.dispatch(now)
}

// now is the time since the ferry's origin (its clock), read only when
// deadlines exist: with zero delay the core never looks at it, and it is 0.
func (l *loop[K, I, O]) now() time.Duration {
	if l.lim.delay == 0 {
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
		l.admitPart(m.w.g, m.part, m.op, now)
	case opDrop:
		l.drop(m.w, now)
	case opDropMany:
		l.dropPart(m.w.g, m.part, now)
	case opStart:
		l.directStarted(m.key, m.cancel)
	case opRelease:
		l.release(m, now)
	case opIdle:
		l.idleWorker(int(m.worker))
	case opRetry:
		l.retryWanted(m)
	case opReported:
		l.reported(m.w, m.panicked)
	case opNotified:
		l.notified(m.fin)
	case opChained:
		l.chains--
	case opDonePanicked:
		l.tally.DonePanics++
	case opOnBatchPanicked:
		l.tally.OnBatchPanics++
	case opFlush:
		l.flush(m.cancel)
	case opExit:
		l.exited++
	case opStats:
		m.stats <- l.stats()
	case opClose:
		l.close()
	case opShutdown:
		l.shutdown()
	case opResume:
		l.paused.resume(m.key)
	case opBorrowWait:
		l.borrowWait(m.w.g, m.part)
	case opLeave:
		l.leave(m)
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
	if err, ok := l.paused.of(w.key); ok && l.admits() {
		w.c <- result[O]{err: err}
		return true
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
		l.tally.DirectCalls++
		l.claims++
		d := directCall{n: l.claims}
		if l.f.onBatch != nil { // its OnBatch comes after the key's last completions
			d.after, d.fin = l.completing[w.key], make(chan struct{})
			l.completing[w.key] = d.fin
			w.after, w.fin = d.after, d.fin
		}
		l.directs[w.key] = d
		l.dpeak = max(l.dpeak, len(l.directs))
		w.c <- result[O]{err: errClaimed}
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

// refusesAtOnce reports whether w is refused without room, with
// WaitForRoom too: its key is paused, or no room could ever hold it.
func (l *loop[K, I, O]) refusesAtOnce(w *waiter[K, I, O]) bool {
	_, paused := l.paused.of(w.key)
	return paused || w.weight > sharedWeight(l.lim)
}

// wait puts w at the back of the wait line.
func (l *loop[K, I, O]) wait(w *waiter[K, I, O]) {
	l.waits.push(w, l.share.number())
	if w.done != nil {
		if l.waitSubs == nil {
			l.waitSubs = make(map[chan result[O]]*waiter[K, I, O])
		}
		l.waitSubs[w.c] = w
		l.wpeak = max(l.wpeak, len(l.waitSubs))
	}
}

// unwaitSub forgets w, a Submit's input out of the wait line.
func (l *loop[K, I, O]) unwaitSub(w *waiter[K, I, O]) {
	delete(l.waitSubs, w.c)
	l.waitSubs = shrink(l.waitSubs, &l.wpeak)
}

// admitWaiting lets in the admissions waiting for room, first come first
// in, while the room holds the first (see share.roomFor, which reserves
// what it lacks on the shared room), and tells the share whether any waits
// still. If the shared room says the ferry's end has begun, it starts it
// (see heedEnd), which answers the line.
func (l *loop[K, I, O]) admitWaiting(now time.Duration) {
	l.share.wants = false
	for l.admits() {
		e, ok := l.waits.front()
		if !ok {
			break
		}
		need := l.needOf(e)
		if !l.share.roomFor(need, e.n, l.waits.second()) {
			if l.share.end != 0 {
				l.heedEnd()
				continue // admits no more
			}
			l.share.wants = true
			break
		}
		l.waits.pop()
		switch {
		case e.w != nil:
			if e.w.done != nil {
				l.unwaitSub(e.w)
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
// key or an input of a paused key, which is refused.
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
	if _, ok := l.paused.of(w.key); ok {
		return budget{}
	}
	if w.done == nil && l.lim.direct && l.lim.delay == 0 && l.st.lanes[w.key] == nil {
		return budget{} // it claims the key
	}
	return budget{1, w.weight}
}

// grant gives a DoMany over several shards, waiting at the front of the
// line, the room of all its inputs, need, out of this shard's: each part is
// granted, and its shard adds the part's share to its own as it lets the
// part in (see borrow). Its part here, i, goes in now, in the DoMany's turn,
// before what waits behind it: the part's word says so. The other parts
// wait their turn in their shards' lines, where they come later.
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
		l.share.replyAfterLend(later[K, I, O]{p: &g.parts[i]})
		return
	}
	l.waits.pushPart(g, i, true, l.share.number())
}

// leave takes a Submit's input or a DoMany's part (or its borrow) out of
// the wait line, whose caller's ctx ended, and says so on its channel
// (errDropped); if it is not there its word was sent already, and leave does
// nothing. The Submit is named by its word's channel, m.w.c: m.w is a waiter
// made for the message, as the Submit's own may be a worker's by now.
func (l *loop[K, I, O]) leave(m msg[K, I, O]) {
	if g := m.w.g; g != nil {
		if l.waits.leavePart(g, m.part) {
			l.takeRoomOf(&g.parts[m.part]) // lent back as the wake-up ends
			g.parts[m.part].err = errDropped
			l.share.replyAfterLend(later[K, I, O]{p: &g.parts[m.part]})
		}
		return
	}
	if w, ok := l.waitSubs[m.w.c]; ok {
		l.unwaitSub(w)
		l.waits.leave(w)
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
				l.unwaitSub(e.w)
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

// admits reports whether the room admits inputs: it is neither closed nor
// shutting down. A paused key's input is refused as ErrPaused only then;
// after, ErrClosed, as every other input.
func (l *loop[K, I, O]) admits() bool { return !l.st.closed && !l.st.shuttingDown }

// drop drops w, whose Do's caller gave up, if it still waits, and gives the
// word errDropped; else it counts the caller out of w's batch and says
// errKept, unless w's answer is there already.
func (l *loop[K, I, O]) drop(w *waiter[K, I, O], now time.Duration) {
	if l.waits.leave(w) { // it waited for room: nothing was admitted
		w.c <- result[O]{err: errDropped}
		return
	}
	if _, ok := l.st.drop(w.key, w.tk, now); ok { // never for a zero ticket: seqs start at 1
		l.tally.Dropped++
		l.rounds.countIf(w.tk.seq <= l.rounds.seq())
		l.share.replyAfterLend(later[K, I, O]{c: w.c, r: result[O]{err: errDropped}}) // w.c is empty: it had no answer
		return
	}
	l.gaveUp(w)
	select {
	case w.c <- result[O]{err: errKept}:
	default: // w.c holds its answer, which says enough
	}
}

// dropPart drops what still waits of part i of g, whose DoMany's caller gave
// up, marks those inputs dropped and counts them in the part; it counts the
// caller out of the batches that hold the others.
func (l *loop[K, I, O]) dropPart(g *group[K, I, O], i int32, now time.Duration) {
	p := &g.parts[i]
	p.dropped = 0
	for j := range g.ws {
		switch w := &g.ws[j]; {
		case w.part != i:
		case l.dropOne(w, now):
			p.dropped++
			w.dropped = true
			l.rounds.countIf(w.tk.seq <= l.rounds.seq())
		default:
			l.gaveUp(w)
		}
	}
	l.share.replyAfterLend(later[K, I, O]{p: p})
}

// directStarted records how to cancel key's direct call, which runs now, or
// cancels it at once if the ferry is closing.
func (l *loop[K, I, O]) directStarted(key K, cancel context.CancelCauseFunc) {
	if l.closing {
		go cancel(ErrClosed) // see close
		return
	}
	d := l.directs[key]
	d.cancel = cancel
	l.directs[key] = d
}

// release frees m.key, whose call is over: a worker's (its context is freed)
// or a direct call's (see endDirect); then pauses the key if the call failed
// for good, with PauseOnError.
func (l *loop[K, I, O]) release(m msg[K, I, O], now time.Duration) {
	l.st.release(m.key, now)
	if m.worker != byCaller {
		if wk := l.share.workers[m.worker]; wk.cancel != nil {
			wk.cancel(nil) // the call is over: free its context
			wk.tag, wk.live, wk.cancel = 0, 0, nil
		}
	} else {
		l.endDirect(m)
	}
	if m.fail != nil { // after endDirect, which may give the key's completions back
		l.pause(m.key, m.fail)
	}
}

// endDirect forgets m.key's direct call, released, or keeps it until its
// OnBatch is reported (m.w set).
func (l *loop[K, I, O]) endDirect(m msg[K, I, O]) {
	d := l.directs[m.key]
	delete(l.directs, m.key)
	l.directs = shrink(l.directs, &l.dpeak)
	if m.w != nil { // its OnBatch runs now: a Flush and the end wait for its report
		l.reports[m.w] = reported[K]{d.n, m.key, d.fin}
		l.rpeak = max(l.rpeak, len(l.reports))
		return
	}
	if d.fin != nil { // no OnBatch after all (Goexit, or abandoned): see endClaim
		l.endClaim(m.key, d)
	}
	l.rounds.countIf(l.rounds.claimed(d.n))
}

// endClaim gives back the place among key's completions that direct call d
// took at its claim and will not use, as it ends with no OnBatch: the key's
// next completions wait for its earlier ones, and d.fin, which close's
// notifier may wait on already, is closed once those are over, now if there
// are none, else on a goroutine of its own (chainFin), which the loop
// waits for.
func (l *loop[K, I, O]) endClaim(key K, d directCall) {
	if l.completing[key] == d.fin {
		if d.after != nil {
			l.completing[key] = d.after
		} else {
			delete(l.completing, key)
		}
	}
	if d.after == nil {
		close(d.fin)
		return
	}
	l.chains++
	go chainFin(l.s, d.after, d.fin)
}

// pause pauses key, whose call failed for good with failure, and answers
// the inputs waiting in its lane with the key's error: a Do's and a
// DoMany's here; the Submits' done from a goroutine of their own
// (notifyPaused), after the key's completions so far and before its next,
// which the loop waits for as for a worker. What the inputs owed the Flush
// round in progress is counted as they are answered: at once, or at the
// notifier's opNotified.
func (l *loop[K, I, O]) pause(key K, failure error) {
	err := l.paused.pause(key, failure)
	l.refuseWaiting(key, err)
	l.cleared = l.st.clearLane(key, l.cleared[:0])
	if len(l.cleared) == 0 {
		return
	}
	l.tally.PausedOut += uint64(len(l.cleared))
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
	if len(subs) == 0 {
		return
	}
	fin := make(chan struct{})
	after := l.completing[key]
	l.completing[key] = fin
	if l.pausing == nil {
		l.pausing = make(map[chan struct{}]pauseNote[K])
	}
	l.pausing[fin] = pauseNote[K]{key: key, owe: l.rounds.owe(owes)}
	go notifyPaused(l.s, subs, err, after, fin) // done is user code: off the loop
}

// refuseWaiting answers the inputs of key that wait for room with err, the
// paused key's, as it would answer them at admission; a DoMany's part waits
// on, and is answered input by input as it is let in (see partNeed).
func (l *loop[K, I, O]) refuseWaiting(key K, err error) {
	if l.waits.len() == 0 {
		return
	}
	l.left = l.left[:0]
	l.waits.each(func(e waitEntry[K, I, O]) {
		if e.w != nil && e.w.key == key {
			l.left = append(l.left, e)
		}
	})
	for _, e := range l.left {
		l.waits.leave(e.w)
	}
	l.answerWaiting(l.left, err)
	clear(l.left)
}

// reported forgets the direct call of w, whose OnBatch has returned, and
// counts it for its Flush round.
func (l *loop[K, I, O]) reported(w *waiter[K, I, O], panicked bool) {
	rp := l.reports[w]
	l.done(rp.key, rp.fin)
	delete(l.reports, w)
	l.reports = shrink(l.reports, &l.rpeak)
	l.rounds.countIf(l.rounds.claimed(rp.n))
	if panicked {
		l.tally.OnBatchPanics++
	}
}

// notified counts out a goroutine that called Submits' done: close's, or
// (fin set) a paused key's, whose completions are over and which pays what
// it owed the Flush round (see pause).
func (l *loop[K, I, O]) notified(fin chan struct{}) {
	if fin == nil {
		l.notify--
		return
	}
	pn := l.pausing[fin]
	delete(l.pausing, fin)
	l.rounds.paid(pn.owe)
	l.done(pn.key, fin)
}

// flush makes a Flush wait for a round, starting one if none is in progress;
// at close it answers ErrClosed.
func (l *loop[K, I, O]) flush(reply context.CancelCauseFunc) {
	if l.closing {
		reply(ErrClosed)
		return
	}
	if l.rounds.wait(reply) {
		l.startRound()
	}
}

// heedEnd starts the ferry's end that the shared room says has begun (see
// room.end), if this shard's own message has not come yet: with several
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

// shutdown starts a graceful close, once: see state.shutdown.
func (l *loop[K, I, O]) shutdown() {
	if !l.st.closed && !l.st.shuttingDown {
		l.st.shutdown()
		l.closeWaits()
	}
}

// closeWaits answers every admission waiting for room with ErrClosed, as the
// room admits nothing any more.
func (l *loop[K, I, O]) closeWaits() {
	l.left = l.waits.clear(l.left[:0])
	l.answerWaiting(l.left, ErrClosed)
	clear(l.left)
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

// gaveUp counts down the batch in flight that holds w, whose caller has given
// up, and cancels its call once no caller is left, with CancelAbandoned. w
// may be in no batch, or in one that is over.
func (l *loop[K, I, O]) gaveUp(w *waiter[K, I, O]) {
	w.gone = true // not retried: see retryWanted
	if w.tk.seq < 1<<63 {
		return // not flying: still waiting, or CancelAbandoned is off
	}
	wk := l.share.workers[w.tk.rank]
	if wk == nil || wk.tag != w.tk.seq {
		return // its batch is over (and its worker given back)
	}
	if wk.live--; wk.live == 0 {
		wk.cancel(ErrAbandoned) // only the ferry's contexts: no user code
	}
}

// retryWanted answers a worker about to retry its batch: of the batch's
// indexes it asks about, it keeps those whose callers still wait, in order,
// leaving out the inputs whose callers gave up since the call took them.
func (l *loop[K, I, O]) retryWanted(m msg[K, I, O]) {
	batch, a := l.share.workers[m.worker].buf, m.ask
	n := 0
	for _, i := range a.idx {
		if !batch[i].gone {
			a.idx[n] = i
			n++
		}
	}
	a.idx = a.idx[:n]
	a.c <- struct{}{}
}

// admitPart handles part i of a DoMany: admits all its inputs, in order, or
// none; or, over several shards, holds room for them first, or lets it go.
// The room held is let go before the part is admitted or refused. With
// WaitForRoom a part waits for room, as a Do's input does, behind those
// waiting, or if the room cannot hold it now (and could). One whose room
// came with it (granted) waits its turn too, and for its room in its turn:
// the room it came with goes into the shard's, lent as the wake-up ends,
// as holding it aside would deadlock (an admission before it in the line
// may need that very room; found by model/wait.pml).
func (l *loop[K, I, O]) admitPart(g *group[K, I, O], i int32, o op, now time.Duration) {
	if o == opAdmitMany && l.f.waitForRoom && l.waits.len() > 0 && l.admits() && !g.parts[i].neverFits(l.lim) {
		l.takeRoomOf(&g.parts[i]) // lent as the wake-up ends: see admitPart's doc
		l.waits.pushPart(g, i, false, l.share.number())
		return
	}
	if !l.letInPart(g, i, o, now) {
		l.waits.pushPart(g, i, false, l.share.number())
	}
}

// letInPart does what admitPart does once the part's turn has come. It
// reports false, and does nothing but take in the room the part held or was
// granted, if the part is to wait for room (WaitForRoom, opAdmitMany, a
// room full for it).
func (l *loop[K, I, O]) letInPart(g *group[K, I, O], i int32, o op, now time.Duration) bool {
	p := &g.parts[i]
	l.takeRoomOf(p)
	n, total, heaviest, paused := p.n, p.total, p.heaviest, 0
	never := o == opAdmitMany && p.neverFits(l.lim)
	if o == opAdmitMany && !never {
		n, total, heaviest, paused = l.partNeed(g, i)
	}
	switch r := l.st.room(n, total, heaviest); {
	case o == opUnhold:
	case r == rejectedFull && o == opAdmitMany && l.f.waitForRoom && !never:
		return false
	case r != admitted && (n > 0 || never):
		p.err = l.reject(r, n, heaviest, total, len(g.ws))
	case o == opHold:
		l.st.hold(p.n, p.total)
		p.held = true
	default:
		for j := range g.ws {
			w := &g.ws[j]
			if w.part != i {
				continue
			}
			if err, ok := l.paused.of(w.key); ok && paused > 0 {
				g.errs[w.i], w.refused = err, true
				continue
			}
			l.stamp(w)
			w.tk = l.st.enter(w.key, w.weight, w.rank, w.at, now, w)
		}
		l.tally.Admitted += uint64(n)
		if paused > 0 { // answered: the caller reads them once the part's word has come
			g.count.done(paused)
		}
	}
	l.share.replyAfterLend(later[K, I, O]{p: p}) // room held or granted may have been let go
	return true
}

// takeRoomOf adds to the shard's room the room p held or was granted (see
// borrow), which is the part's to enter with.
func (l *loop[K, I, O]) takeRoomOf(p *part[K, I, O]) {
	if p.held {
		l.st.unhold(p.n, p.total)
		p.held = false
	}
	if p.granted {
		l.share.addGranted(p.n, p.total)
		p.granted = false
	}
}

// partNeed returns the count, the total weight and the heaviest of the
// inputs of part i of g that the room is to hold, and how many are paused,
// whose inputs are answered at once: all of them, unless some keys are
// paused. A total past MaxInt64 for the whole group stands (see doInputs).
func (l *loop[K, I, O]) partNeed(g *group[K, I, O], i int32) (n int, total, heaviest int64, paused int) {
	p := &g.parts[i]
	if l.paused.count() == 0 || !l.admits() {
		return p.n, p.total, p.heaviest, 0
	}
	for j := range g.ws {
		w := &g.ws[j]
		switch _, ok := l.paused.of(w.key); {
		case w.part != i:
		case ok:
			paused++
		default:
			n++
			total = addWeight(total, w.weight)
			heaviest = max(heaviest, w.weight)
		}
	}
	if p.total < 0 {
		total = p.total
	}
	return n, total, heaviest, paused
}

// dropOne drops w if it still waits, and counts it.
func (l *loop[K, I, O]) dropOne(w *waiter[K, I, O], now time.Duration) bool {
	_, ok := l.st.drop(w.key, w.tk, now)
	if ok {
		l.tally.Dropped++
	}
	return ok
}

// done forgets key's completions, over with fin, unless a later batch's are
// its key's already.
func (l *loop[K, I, O]) done(key K, fin chan struct{}) {
	if fin != nil && l.completing[key] == fin {
		delete(l.completing, key)
	}
}

// idleWorker frees worker id, which has answered its batch, and counts what
// its batch owed the round in progress.
func (l *loop[K, I, O]) idleWorker(id int) {
	wk := l.share.workers[id]
	if wk.fin != nil {
		l.done(wk.key, wk.fin)
		var zero K
		wk.fin, wk.key = nil, zero
	}
	l.rounds.paid(wk.owe)
	wk.owe = owed{}
	if cap(wk.buf) > keepCap {
		wk.buf = nil
	}
	l.share.releaseSlot(id)
}

// startRound starts a round for the Flushes waiting: every input waiting is due
// now, and it waits for those, for the direct calls in flight and their
// OnBatch (their reports: those released already, and those in flight, at
// their report rather than their release), for Submits' done in flight, and
// for every worker busy with a batch: its opIdle comes once it
// has answered the batch, so the round needs no word from an idle worker.
// No busy worker owes an older round anything: a round ends only once all it
// was owed has come, and close, which ends one early, starts no other.
func (l *loop[K, I, O]) startRound() {
	left := l.st.queued + len(l.directs) + len(l.reports) + l.notify + len(l.pausing)
	for _, wk := range l.share.workers {
		if wk != nil && !wk.idle {
			left++
		}
	}
	l.rounds.start(l.st.seq, l.claims, left)
	for _, wk := range l.share.workers {
		if wk != nil && !wk.idle {
			wk.owe = l.rounds.owe(1)
		}
	}
	for fin, pn := range l.pausing {
		pn.owe = l.rounds.owe(1)
		l.pausing[fin] = pn
	}
	l.st.flush()
}

// settle ends the round once it has nothing left, and starts the next. Only
// messages count a round down, so it runs once a wake-up has handled them,
// before its dispatch: the next round may have nothing left (it ends at once) or
// lanes it made due, and a shard may have no worker to ping, whose answer
// would wake the loop again.
func (l *loop[K, I, O]) settle() {
	for {
		replies, ok := l.rounds.over()
		if !ok {
			return
		}
		for _, tell := range replies {
			tell(nil)
		}
		if l.rounds.pending() && !l.closing {
			l.startRound()
		}
	}
}

// dispatch lets in the admissions waiting for room that the room holds, and
// starts a batch on every idle worker while a lane is ready, again while the
// batches taken free room for those waiting; then it lends what room the
// shard holds spare, and sets the alarm to the earliest deadline left, which
// is in the future if a worker is idle.
func (l *loop[K, I, O]) dispatch(now time.Duration) {
	st := l.st
	l.share.starved = false
	for {
		l.admitWaiting(now)
		if !l.take(now) || l.waits.len() == 0 {
			break
		}
	}
	l.share.giveBackIdleSlots() // none unused if starved; else no lane is ready, or no worker is free
	l.share.giveBackRoom()      // before the batches start: their callers may come back to another shard
	l.share.sendReplies()       // of the admissions waiting let in, after the lend
	for _, j := range l.started {
		l.share.workers[j.id].jobs <- j
	}
	clear(l.started)
	l.started = l.started[:0]
	// With every worker busy, or no slot, nothing can start before a release
	// or a slot, which wake the loop anyway; a due lane must not keep the
	// alarm ringing meanwhile.
	t, ok := st.earliest()
	l.alarm.arm(t, ok && l.share.mayTake(), now)
}

// take starts a batch on every idle worker while a lane is ready, and
// reports whether it took any: room freed, for the admissions waiting.
func (l *loop[K, I, O]) take(now time.Duration) bool {
	st := l.st
	took := false
	for st.hasReady(now) {
		id, ok := l.share.takeSlot()
		if !ok {
			break
		}
		wk := l.share.workers[id]
		key, batch, _ := st.take(now, wk.buf[:0])
		wk.buf, wk.idle, wk.owe = batch, false, owed{}
		l.tally.Batches++
		l.tally.Taken += uint64(len(batch))
		j := job[K, I, O]{s: l.s, id: int32(id), key: key, batch: batch, ctx: l.s.ctx}
		if seq := l.rounds.seq(); seq > 0 {
			n := 0
			for _, w := range batch {
				if w.tk.seq <= seq {
					n++
				}
			}
			wk.owe = l.rounds.owe(n)
		}
		if l.f.onBatch != nil || hasSubmit(batch) { // its completions come after the key's last
			j.after, j.fin = l.completing[key], make(chan struct{})
			l.completing[key], wk.fin, wk.key = j.fin, j.fin, key
		}
		if l.f.cancelAbandoned { // after the round's look at the tickets
			j.ctx, wk.cancel = context.WithCancelCause(l.s.ctx) // the ferry's: no user code
			wk.tag, wk.live = inFlight(id, l.tally.Batches).seq, len(batch)
			for _, w := range batch {
				w.tk = inFlight(id, l.tally.Batches)
			}
		}
		l.started = append(l.started, j)
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
			go d.cancel(ErrClosed)
		}
	}
	for _, tell := range l.rounds.abort() {
		tell(ErrClosed)
	}
}

// refuse answers ws, inputs that waited in lanes and that no call took,
// with err, as reply does, and returns the Submits' indexes appended to
// subs: a DoMany's are marked refused first, before their answer counts
// down (see group.abandon). It runs on the loop.
func refuse[K comparable, I, O any](ws []*waiter[K, I, O], err error, subs []int) []int {
	for _, w := range ws {
		if w.g != nil {
			w.refused = true
		}
	}
	return reply(ws, nil, nil, err, subs)
}

// end moves the close along and reports whether the loop is over: a room
// shutting down that has emptied closes; a closing ferry with no call in
// flight, every worker idle and every direct call's OnBatch reported stops
// its workers; once they have gone, done is closed.
func (l *loop[K, I, O]) end() bool {
	st := l.st
	if st.shuttingDown && st.idle() {
		l.close()
	}
	if !l.closing || st.busy > 0 || l.notify > 0 || l.chains > 0 || len(l.pausing) > 0 || l.share.busy() > 0 || len(l.reports) > 0 {
		return false
	}
	if !l.stopped {
		l.stopped = true
		l.stops = l.share.stopWorkers(l.s)
	}
	if l.exited < l.stops {
		return false
	}
	l.alarm.t.Stop()
	l.s.last = l.stats()
	close(l.s.done)
	// Every message sent before done was closed is in inc now. await waits
	// for the answer to it without watching done, so answer those.
	for n := len(l.s.inc); n > 0; n-- {
		switch m := <-l.s.inc; m.op {
		case opAdmit:
			m.w.c <- result[O]{err: ErrClosed}
		case opAdmitMany, opHold:
			p := &m.w.g.parts[m.part]
			p.err = ErrClosed
			p.c <- struct{}{}
		case opUnhold, opDropMany:
			m.w.g.parts[m.part].c <- struct{}{}
		case opBorrowWait:
			p := &m.w.g.parts[m.part]
			p.err = ErrClosed
			p.c <- struct{}{}
		case opFlush:
			m.cancel(ErrClosed)
		case opStats:
			m.stats <- l.s.last
		}
	}
	return true
}

func (l *loop[K, I, O]) stats() Stats {
	st, t := l.st, l.tally
	t.Queued, t.Weight, t.Busy, t.Lanes = st.queued, st.weight, st.busy, len(st.lanes)
	t.Paused = l.paused.count()
	t.Waiting = l.waits.inputs()
	return t
}
