package ferry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is the shell around the core: one goroutine (loop.run) owns the
// state and serialises every transition; workers run batched calls; callers
// run direct calls. All of them talk to the loop through one channel, s.inc,
// so that its order is the order of events: a worker's release is sent before
// it answers its callers, so it cannot be overtaken by their next Do.

// op is what a message asks of the loop.
type op uint8

const (
	opAdmit     op = iota // from Do or Submit: admit m.w
	opAdmitMany           // from DoMany: admit all of part m.worker of m.w.g, or none
	opHold                // from DoMany over several shards: hold room for part m.worker of m.w.g
	opUnhold              // from DoMany over several shards: let go of the room held
	opDrop                // from Do or a Submit whose ctx ended: drop m.w if it still waits
	opDropMany            // from DoMany whose ctx ended: drop what still waits of part m.worker of m.w.g
	opStart               // from a direct call: it runs, and close cancels it with m.cancel
	opRelease             // from a worker or a direct call: m.key's call is over
	opAnswered            // from a worker: it has answered a job that asked for it (a Flush)
	opNotified            // from a goroutine that called Submits' done: it has finished
	opPanicked            // a Submit's done panicked, or OnBatch (m.worker 1)
	opExit                // from a worker: it has gone
	opStats               // from Stats: reply on m.stats
	opFlush               // from Flush: m.cancel is its reply
	opClose               // from Close
	opShutdown            // from Shutdown
)

// direct is the worker of a release from a direct call.
const direct = -1

type msg[K comparable, I, O any] struct {
	op     op
	worker int32 // opRelease: the worker that is free again, or direct; a DoMany's: its part
	key    K     // opRelease
	w      *waiter[K, I, O]
	stats  chan Stats
	cancel context.CancelCauseFunc // opStart; for opFlush, the reply
}

// waiter is one input in progress: a Do's, a Submit's (done is set) or one
// of a DoMany's (g is set). The caller writes its fields before it sends it
// to the loop; after that only the loop-owned ones are written, by the loop.
type waiter[K comparable, I, O any] struct {
	in     [1]I // an array, so that a direct call passes in[:] without allocating
	key    K
	weight int64
	rank   int64
	at     time.Duration  // submission time, by clock: the caller's with stamp, the loop's with OnBatch (see loop.stamp), else zero
	tk     ticket         // loop-owned: the input's ticket once admitted, else zero
	c      chan result[O] // a Do's answer; a Submit's admission word, on a channel it holds until then

	done func(O, error) // Submit: called once, off the loop, with the answer
	stop func() bool    // Submit whose ctx can end: stops watching it
	drop chan result[O] // Submit whose ctx ended: the loop's word on its drop
	g    *group[K, I, O]
	i    int // DoMany: its index in g; Submit, loop-owned: the number of its drop, for Flush

	seen, withdrawn bool  // loop-owned, Submit: its admission was handled; its drop came first
	part            int32 // DoMany: its part of g, the inputs in its shard
}

// group is one DoMany in progress: its inputs, and where their answers go.
// Answers are written by index, then counted down in left; the caller reads
// them once fin says none is left. Its inputs are in one part per shard.
type group[K comparable, I, O any] struct {
	ws    []waiter[K, I, O]
	outs  []O
	errs  []error
	c     chan int      // word(i): a loop's word on part i, in its err or dropped
	left  chan int      // the count of inputs not yet answered, taken and put back: see answered
	fin   chan struct{} // sent once, by what answers the last input
	parts []part[K, I, O]
	lost  bool // a shard may yet send a word on c that no one waits for: never pooled
}

// part is a group's inputs in one shard, which that shard's loop admits,
// holds room for and drops; it writes err and dropped before its word.
type part[K comparable, I, O any] struct {
	s               *shard[K, I, O]
	n               int   // inputs
	total, heaviest int64 // their weights; total < 0: the sum passes MaxInt64
	held            bool  // loop-owned: the room holds n and total for it
	granted         bool  // the caller took the part's room from spare: the loop adds it to its own
	err             error
	dropped         int
	gone            bool // caller-owned: not admitted, and answered already
}

// result is an answer to a waiter, sent on its channel, which is buffered 1.
// A waiter gets one answer, and its caller reads one. If the caller gave up
// and asked for a drop, the loop's word on it (errDropped or errKept) is
// sent only into an empty channel; a call's answer may follow an errKept,
// into the channel the caller has emptied, so no send blocks.
type result[O any] struct {
	out O
	err error
}

// Internal answers to a waiter, never returned by Do.
var (
	errClaimed   = errors.New("ferry: key claimed for a direct call") // the caller makes the call itself
	errDropped   = errors.New("ferry: input dropped")                 // to opDrop: it was waiting, and is gone
	errKept      = errors.New("ferry: input not waiting")             // to opDrop: it was not waiting
	errAdmitted  = errors.New("ferry: input admitted")                // to a Submit: it waits
	errWithdrawn = errors.New("ferry: input withdrawn")               // to a Submit whose drop came first
)

// start is a batch for worker id, sent once the wake-up has lent its room.
type start[K comparable, I, O any] struct {
	id int
	j  job[K, I, O]
}

// job is a batch for a worker, and its call's context. With ack set the
// worker sends opAnswered once it has answered the batch; an empty batch asks
// for that alone.
type job[K comparable, I, O any] struct {
	key   K
	batch []*waiter[K, I, O]
	ack   bool
	ctx   context.Context
}

// worker is the loop's handle on one worker goroutine. The loop fills its
// two batch buffers in turn: the worker may still be answering the callers of
// its previous batch, after its release, while the loop fills the other.
type worker[K comparable, I, O any] struct {
	jobs chan job[K, I, O] // loop -> worker; a batch only while idle, and a Flush's ping
	bufs [2][]*waiter[K, I, O]
	flip int
	owed []owed // acks to come, in order

	// With CancelAbandoned, while a batch is in flight: its tag (see flying),
	// its inputs whose callers have not given up, and how to cancel its call.
	tag    uint64
	live   int
	cancel context.CancelCauseFunc
}

// flying is the ticket of an input in batch n, taken by worker id, with
// CancelAbandoned: once taken an input's ticket is the loop's, and this one
// names no waiting input, as seqs never reach 1<<63.
func flying(id int, n uint64) ticket { return ticket{rank: int64(id), seq: 1<<63 | n} }

// owed is an ack a worker owes a Flush round: n of its inputs.
type owed struct {
	round uint64
	n     int
}

// round is a Flush in progress: it is over when left, the inputs admitted
// before it and the calls and answers in flight then, reaches 0.
type round struct {
	id      uint64
	seq     uint64 // inputs with seqs up to this count
	claims  uint64 // direct calls claimed up to this one count
	drops   uint64 // Submits' drops up to this one count, until their done returns
	left    int
	replies []context.CancelCauseFunc
}

// call is a direct call in flight: its claim's number and, once it runs, how
// to cancel it.
type call struct {
	n      uint64
	cancel context.CancelCauseFunc
}

// loop is the state owned by the loop goroutine.
type loop[K comparable, I, O any] struct {
	f       *Ferry[K, I, O]
	s       *shard[K, I, O] // the loop's: its channel, its end and its calls' context
	lim     limits          // the shard's
	st      *state[K, *waiter[K, I, O]]
	workers []worker[K, I, O]
	most    int   // workers it may start
	idle    []int // workers with no batch
	alarm   alarm
	directs map[K]call // direct calls in flight, by key
	dpeak   int        // most directs since the map was rebuilt; see shrink

	round    *round                    // the Flush in progress
	flushers []context.CancelCauseFunc // Flushes for the round after it
	rounds   uint64                    // rounds started
	claims   uint64                    // direct calls claimed
	drops    uint64                    // Submits dropped
	notify   int                       // goroutines calling Submits' done that the loop waits for

	closing bool // drained, calls cancelled: ending once busy is 0
	stopped bool // worker channels closed
	exited  int  // workers gone

	tally Stats // the counters since New; stats fills in the rest

	errFull, errFullWeight error
	drained                []*waiter[K, I, O]

	spare chan budget // the ferry's, with several shards: see budget

	slots   chan struct{}  // the ferry's, with several shards: see slot
	starved bool           // a lane is ready and a worker free, but no slot: run waits for one
	held    int            // slots the shard holds, in use or not
	flying  int            // batches in flight, each on a slot it holds
	own     int            // its share of the slots: see slot
	batch   []msg[K, I, O] // one wake-up's messages, with several shards: see receive
	started []start[K, I, O]
	freed   []freed[K, I, O] // words on room freed, with several shards: see free

	stamps  bool          // OnBatch without a MaxBatchDelay: the loop stamps inputs, see stamp
	stamped bool          // at is this wake-up's
	at      time.Duration // by clock
}

func newLoop[K comparable, I, O any](s *shard[K, I, O], lim limits, most, own int) *loop[K, I, O] {
	f := s.f
	l := &loop[K, I, O]{
		f:       f,
		s:       s,
		lim:     lim,
		st:      newState[K, *waiter[K, I, O]](lim, f.origin),
		workers: make([]worker[K, I, O], 0, most),
		most:    most,
		own:     own,
		alarm:   newAlarm(),
		directs: make(map[K]call),
		stamps:  f.onBatch != nil && !f.stamp,
		errFull: fmt.Errorf("%w: the room is full (MaxQueued %d)", ErrRejected, lim.queued),
		errFullWeight: fmt.Errorf("%w: the waiting weight would pass MaxQueuedWeight %d",
			ErrRejected, lim.queuedWeight),
	}
	if n := len(f.shards); n > 1 { // the room starts in spare: see budget
		l.spare, l.slots = f.spare, f.slots
		l.st.grow(-lim.queued, -lim.queuedWeight)
	}
	if lim.queuedWeight == 0 {
		l.errFullWeight = fmt.Errorf("%w: the waiting weight would pass MaxInt64 (MaxQueuedWeight 0)", ErrRejected)
	}
	return l
}

// spawn starts a worker, idle. Workers start as batches need them, up to most.
func (l *loop[K, I, O]) spawn() {
	id := len(l.workers)
	c := make(chan job[K, I, O], 2)                         // a batch and a ping
	l.workers = append(l.workers, worker[K, I, O]{jobs: c}) // within cap: pointers stay
	l.idle = append(l.idle, id)
	go l.s.work(id, c)
}

// idler returns an idle worker for a batch, with a slot (see slot), starting
// one if none is idle and fewer than most run; ok is false if it cannot.
func (l *loop[K, I, O]) idler() (id int, ok bool) {
	if len(l.idle) == 0 && len(l.workers) == l.most || !l.slot() {
		return 0, false
	}
	if len(l.idle) == 0 {
		l.spawn()
	}
	id = l.idle[len(l.idle)-1]
	l.idle = l.idle[:len(l.idle)-1]
	return id, true
}

// run is the loop: it sleeps until a message arrives or the alarm fires, then
// handles every message already queued, starts what batches it can and sets
// the alarm to the next deadline. Time is read once per wake-up. The timer's
// channel is in the select only while the alarm is set: a timer channel makes
// every select on it take the timer's lock and read the clock. So is the
// ferry's slots channel, only while the shard is starved of a slot.
func (l *loop[K, I, O]) run() {
	inc := l.s.inc
	for !l.end() {
		var fire <-chan time.Time
		if l.alarm.armed() {
			fire = l.alarm.t.C
		}
		var slot <-chan struct{}
		if l.starved {
			slot = l.slots
		}
		if fire == nil && slot == nil {
			l.receive(<-inc)
			continue
		}
		select {
		case m := <-inc:
			l.receive(m)
		case <-fire:
			l.alarm.fired()
			l.turn(l.now())
		case <-slot:
			l.held++
			l.turn(l.now())
		}
	}
}

// receive handles m and every message queued behind it, at one time, then
// starts what batches it can.
func (l *loop[K, I, O]) receive(m msg[K, I, O]) {
	now := l.now()
	l.stamped = false
	if l.spare == nil {
		l.handle(m, now)
		for n := len(l.s.inc); n > 0; n-- {
			l.handle(<-l.s.inc, now)
		}
	} else { // read them all first, to borrow the room they ask for at once
		l.batch = append(l.batch[:0], m)
		for n := len(l.s.inc); n > 0; n-- {
			l.batch = append(l.batch, <-l.s.inc)
		}
		l.reserve(l.batch)
		for _, m := range l.batch {
			l.handle(m, now)
		}
		clear(l.batch)
	}
	l.lend() // what the messages freed, before their words: see free
	for _, x := range l.freed {
		x.send()
	}
	clear(l.freed)
	l.freed = l.freed[:0]
	l.settle() // after the words, which Flush waits for; before turn, as a round it starts makes lanes due
	l.turn(now)
}

// now is the time, read only when deadlines exist: with zero delay the core
// never looks at it.
func (l *loop[K, I, O]) now() time.Time {
	if l.lim.delay == 0 {
		return time.Time{}
	}
	return l.f.origin.Add(l.f.clock())
}

func (l *loop[K, I, O]) handle(m msg[K, I, O], now time.Time) {
	st := l.st
	switch m.op {
	case opAdmit:
		w := m.w
		if w.done != nil {
			l.submit(w, now)
			return
		}
		o, tk := st.admit(w.key, w.weight, w.rank, w.at, now, w)
		switch o {
		case admitted:
			l.stamp(w) // after admit: with OnBatch, delay is 0 and the core keeps no time
			w.tk = tk
			l.tally.Admitted++
		case claimed:
			l.tally.DirectCalls++
			l.claims++
			l.directs[w.key] = call{n: l.claims}
			l.dpeak = max(l.dpeak, len(l.directs))
			w.c <- result[O]{err: errClaimed}
		default:
			w.c <- result[O]{err: l.refusal(o, 1, w.weight, 1)}
		}
	case opAdmitMany, opHold, opUnhold:
		l.admitMany(m.w.g, m.worker, m.op, now)
	case opDrop:
		w := m.w
		if w.done != nil {
			l.withdraw(w, now)
			return
		}
		if _, ok := st.drop(w.key, w.tk, now); ok { // never for a zero ticket: seqs start at 1
			l.tally.Dropped++
			l.count(w.tk.seq <= l.flushed())
			l.free(freed[K, I, O]{c: w.c, r: result[O]{err: errDropped}}) // w.c is empty: it had no answer
			return
		}
		l.gaveUp(w)
		select {
		case w.c <- result[O]{err: errKept}:
		default: // w.c holds its answer, which says enough
		}
	case opDropMany:
		g, p := m.w.g, &m.w.g.parts[m.worker]
		p.dropped = 0
		for i := range g.ws {
			switch w := &g.ws[i]; {
			case w.part != m.worker:
			case l.dropOne(w, now):
				p.dropped++
				l.count(w.tk.seq <= l.flushed())
			default:
				l.gaveUp(w)
			}
		}
		l.free(freed[K, I, O]{g: g, i: m.worker})
	case opStart:
		if l.closing {
			go m.cancel(ErrClosed) // see close
		} else {
			l.directs[m.key] = call{l.directs[m.key].n, m.cancel}
		}
	case opRelease:
		st.release(m.key, now)
		if m.worker == direct {
			l.count(l.round != nil && l.directs[m.key].n <= l.round.claims)
			delete(l.directs, m.key)
			l.directs = shrink(l.directs, &l.dpeak)
		} else {
			l.unslot()
			l.idle = append(l.idle, int(m.worker))
			if wk := &l.workers[m.worker]; wk.cancel != nil {
				wk.cancel(nil) // the call is over: free its context
				wk.tag, wk.live, wk.cancel = 0, 0, nil
			}
		}
	case opAnswered:
		wk := &l.workers[m.worker]
		o := wk.owed[0]
		wk.owed = wk.owed[1:]
		if l.round != nil && o.round == l.round.id {
			l.round.left -= o.n
		}
	case opNotified:
		l.notify--
		if w := m.w; w != nil {
			l.count(l.round != nil && (uint64(w.i) <= l.round.drops || w.tk.seq <= l.round.seq))
		}
	case opPanicked:
		if m.worker == 1 {
			l.tally.OnBatchPanics++
		} else {
			l.tally.DonePanics++
		}
	case opFlush:
		if l.closing {
			m.cancel(ErrClosed)
			return
		}
		l.flushers = append(l.flushers, m.cancel)
		if l.round == nil {
			l.flush()
		}
	case opExit:
		l.exited++
	case opStats:
		m.stats <- l.stats()
	case opClose:
		l.close()
	case opShutdown:
		if !st.closed && !st.flushing {
			st.flush()
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

// refusal is the error for n inputs, the heaviest heaviest, that the room
// did not admit with outcome o, and counts all of them as rejected, for the
// same reason: all the inputs of a DoMany over several shards, if not n.
func (l *loop[K, I, O]) refusal(o outcome, n int, heaviest int64, all int) error {
	if o == refused {
		return ErrClosed
	}
	l.tally.Rejected += uint64(all)
	lim := l.lim
	room, _ := l.st.spare() // the shard's: with several, what it holds of the shared room
	switch {
	case o == rejectedHeavy:
		l.tally.RejectedHeavy += uint64(all)
	case n > room:
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
	case n == 1 && room < 1:
		return l.errFull
	case n == 1:
		return l.errFullWeight
	case n > room: // all of a DoMany's inputs, some perhaps in other shards
		return fmt.Errorf("%w: %d inputs, more than the room has spare (MaxQueued %d)", ErrRejected, all, lim.queued)
	}
	return fmt.Errorf("%w (%d inputs)", l.errFullWeight, all)
}

// submit admits a Submit's input, never claiming its key, and gives the
// Submit its word: errAdmitted, errWithdrawn if its drop came first, or why not.
func (l *loop[K, I, O]) submit(w *waiter[K, I, O], now time.Time) {
	w.seen = true
	if w.withdrawn {
		w.drop <- result[O]{err: errKept}
		w.c <- result[O]{err: errWithdrawn}
		return
	}
	o, tk := l.st.join(w.key, w.weight, w.rank, w.at, now, w)
	if o != admitted {
		w.c <- result[O]{err: l.refusal(o, 1, w.weight, 1)}
		return
	}
	l.stamp(w)
	w.tk = tk
	l.tally.Admitted++
	w.c <- result[O]{err: errAdmitted}
}

// withdraw is a drop for a Submit whose ctx ended: the word goes to w.drop,
// and if the input is dropped its done is called by the goroutine that asked,
// which the loop then waits for. A drop that comes before its admission
// withdraws the input.
func (l *loop[K, I, O]) withdraw(w *waiter[K, I, O], now time.Time) {
	switch {
	case !w.seen:
		w.withdrawn = true // submit answers both
	case l.dropOne(w, now):
		l.drops++
		w.i = int(l.drops)
		l.notify++
		l.free(freed[K, I, O]{c: w.drop, r: result[O]{err: errDropped}})
	default:
		l.gaveUp(w)
		w.drop <- result[O]{err: errKept}
	}
}

// gaveUp counts down the batch in flight that holds w, whose caller has given
// up, and cancels its call once no caller is left, with CancelAbandoned. w
// may be in no batch, or in one that is over.
func (l *loop[K, I, O]) gaveUp(w *waiter[K, I, O]) {
	if w.tk.seq < 1<<63 {
		return // not flying: still waiting, or CancelAbandoned is off
	}
	wk := &l.workers[w.tk.rank]
	if wk.tag != w.tk.seq {
		return // its batch is over
	}
	if wk.live--; wk.live == 0 {
		wk.cancel(ErrAbandoned) // only the ferry's contexts: no user code
	}
}

// admitMany handles part i of a DoMany: admits all its inputs, in order, or
// none; or, over several shards, holds room for them first, or lets it go.
// The room held is let go before the part is admitted or refused.
func (l *loop[K, I, O]) admitMany(g *group[K, I, O], i int32, o op, now time.Time) {
	p := &g.parts[i]
	if p.held {
		l.st.unhold(p.n, p.total)
		p.held = false
	}
	if p.granted { // its room, from spare: see borrow
		l.grow(p.n, p.total)
		p.granted = false
	}
	switch r := l.st.room(p.n, p.total, p.heaviest); {
	case o == opUnhold:
	case r != admitted:
		p.err = l.refusal(r, p.n, p.heaviest, len(g.ws))
	case o == opHold:
		l.st.hold(p.n, p.total)
		p.held = true
	default:
		for j := range g.ws {
			if w := &g.ws[j]; w.part == i {
				l.stamp(w)
				w.tk = l.st.enter(w.key, w.weight, w.rank, w.at, now, w)
			}
		}
		l.tally.Admitted += uint64(p.n)
	}
	l.free(freed[K, I, O]{g: g, i: i}) // room held or granted may have been let go
}

// word is a loop's word on part i of a group, on its channel: the part's
// own, so that a word that no one waited for, from a shard that ended, is
// told from the next.
func word(i int32) int { return -1 - int(i) }

// dropOne drops w if it still waits, and counts it.
func (l *loop[K, I, O]) dropOne(w *waiter[K, I, O], now time.Time) bool {
	_, ok := l.st.drop(w.key, w.tk, now)
	if ok {
		l.tally.Dropped++
	}
	return ok
}

// flushed is the last seq the Flush in progress counts, or 0.
func (l *loop[K, I, O]) flushed() uint64 {
	if l.round == nil {
		return 0
	}
	return l.round.seq
}

// count counts one thing the Flush in progress waited for as done, if ok.
func (l *loop[K, I, O]) count(ok bool) {
	if ok {
		l.round.left--
	}
}

// flush starts a round for the Flushes waiting: every input waiting is due
// now, and it waits for those, for the direct calls and Submits' done in
// flight, and for every worker to answer what it holds (it is pinged).
func (l *loop[K, I, O]) flush() {
	l.rounds++
	r := &round{id: l.rounds, seq: l.st.seq, claims: l.claims, drops: l.drops, replies: l.flushers}
	l.flushers = nil
	r.left = l.st.queued + len(l.directs) + l.notify + len(l.workers)
	for i := range l.workers {
		wk := &l.workers[i]
		wk.owed = append(wk.owed, owed{r.id, 1})
		wk.jobs <- job[K, I, O]{ack: true}
	}
	l.round = r
	l.st.hurry()
}

// settle ends the round once it has nothing left, and starts the next. Only
// messages count a round down, so it runs once a wake-up has handled them,
// before its turn: the next round may have nothing left (it ends at once) or
// lanes it made due, and a shard may have no worker to ping, whose answer
// would wake the loop again.
func (l *loop[K, I, O]) settle() {
	for l.round != nil && l.round.left == 0 {
		for _, tell := range l.round.replies {
			tell(nil)
		}
		l.round = nil
		if len(l.flushers) > 0 && !l.closing {
			l.flush()
		}
	}
}

// turn starts a batch on every idle worker while a lane is ready, then sets
// the alarm to the earliest deadline left, which is in the future if a worker
// is idle.
func (l *loop[K, I, O]) turn(now time.Time) {
	st := l.st
	l.starved = false
	for st.hasReady(now) {
		id, ok := l.idler()
		if !ok {
			break
		}
		wk := &l.workers[id]
		key, batch, _ := st.take(now, wk.bufs[wk.flip][:0])
		wk.bufs[wk.flip] = batch
		wk.flip ^= 1
		l.flying++
		l.tally.Batches++
		l.tally.Taken += uint64(len(batch))
		j := job[K, I, O]{key: key, batch: batch, ctx: l.s.ctx}
		if r := l.round; r != nil {
			n := 0
			for _, w := range batch {
				if w.tk.seq <= r.seq {
					n++
				}
			}
			if j.ack = n > 0; j.ack {
				wk.owed = append(wk.owed, owed{r.id, n})
			}
		}
		if l.f.cancelAbandoned { // after the round's look at the tickets
			j.ctx, wk.cancel = context.WithCancelCause(l.s.ctx) // the ferry's: no user code
			wk.tag, wk.live = flying(id, l.tally.Batches).seq, len(batch)
			for _, w := range batch {
				w.tk = flying(id, l.tally.Batches)
			}
		}
		l.started = append(l.started, start[K, I, O]{id, j})
	}
	l.keep() // none unused if starved; else no lane is ready, or no worker is free
	l.lend() // before the batches start: their callers may come back to another shard
	for _, s := range l.started {
		l.workers[s.id].jobs <- s.j
	}
	clear(l.started)
	l.started = l.started[:0]
	// With every worker busy, or no slot, nothing can start before a release
	// or a slot, which wake the loop anyway; a due lane must not keep the
	// alarm ringing meanwhile.
	t, ok := st.earliest()
	l.alarm.arm(t, ok && (len(l.idle) > 0 || len(l.workers) < l.most) && !l.starved, now)
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
	l.drained = l.st.drain(l.drained[:0])
	var subs []*waiter[K, I, O]
	for _, i := range reply(l.drained, nil, nil, ErrClosed, nil) {
		subs = append(subs, l.drained[i])
	}
	if len(subs) > 0 { // done is user code: off the loop, which waits for it
		l.notify++
		go l.s.notifyAll(subs, ErrClosed)
	}
	clear(l.drained)
	l.s.cancel(ErrClosed)
	for _, d := range l.directs {
		if d.cancel != nil {
			go d.cancel(ErrClosed)
		}
	}
	if l.round != nil {
		for _, tell := range l.round.replies {
			tell(ErrClosed)
		}
		l.round = nil
	}
	for _, tell := range l.flushers {
		tell(ErrClosed)
	}
	l.flushers = nil
}

// end moves the close along and reports whether the loop is over: a flushed
// room that has emptied closes; a closing ferry with no call in flight stops
// its workers; once they have gone, done is closed.
func (l *loop[K, I, O]) end() bool {
	st := l.st
	if st.flushing && st.idle() {
		l.close()
	}
	if !l.closing || st.busy > 0 || l.notify > 0 {
		return false
	}
	if !l.stopped {
		l.stopped = true
		for _, wk := range l.workers {
			close(wk.jobs)
		}
	}
	if l.exited < len(l.workers) {
		return false
	}
	l.alarm.t.Stop()
	l.s.last = l.stats()
	close(l.s.done)
	// Every message sent before done was closed is in inc now. Do waits for
	// the answer to its admission without watching done, so answer those.
	for n := len(l.s.inc); n > 0; n-- {
		switch m := <-l.s.inc; m.op {
		case opAdmit:
			m.w.c <- result[O]{err: ErrClosed}
		case opAdmitMany, opHold:
			m.w.g.parts[m.worker].err = ErrClosed
			m.w.g.c <- word(m.worker)
		case opUnhold, opDropMany:
			m.w.g.c <- word(m.worker)
		case opFlush:
			m.cancel(ErrClosed)
		}
	}
	return true
}

func (l *loop[K, I, O]) stats() Stats {
	st, t := l.st, l.tally
	t.Queued, t.Weight, t.Busy, t.Lanes = st.queued, st.weight, st.busy, len(st.lanes)
	return t
}
