package ferry

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// This file is the shell around the core: one goroutine (loop.run) owns the
// state and serialises every transition; workers run batched calls; callers
// run direct calls. All of them talk to the loop through one channel, f.inc,
// so that its order is the order of events: a worker's release is sent before
// it answers its callers, so it cannot be overtaken by their next Do.

// op is what a message asks of the loop.
type op uint8

const (
	opAdmit    op = iota // from Do: admit m.w
	opDrop               // from Do whose ctx ended: drop m.w if it still waits
	opStart              // from a direct call: it runs, and close cancels it with m.cancel
	opRelease            // from a worker or a direct call: m.key's call is over
	opExit               // from a worker: it has gone
	opStats              // from Stats: reply on m.stats
	opClose              // from Close
	opShutdown           // from Shutdown
)

// direct is the worker of a release from a direct call.
const direct = -1

type msg[K comparable, I, O any] struct {
	op     op
	worker int32 // opRelease: the worker that is free again, or direct
	key    K     // opRelease
	w      *waiter[K, I, O]
	stats  chan Stats
	cancel context.CancelCauseFunc // opStart
}

// waiter is one Do in progress. The caller writes its fields before it sends
// opAdmit; after that only tk is written, by the loop.
type waiter[K comparable, I, O any] struct {
	in     [1]I // an array, so that a direct call passes in[:] without allocating
	key    K
	weight int64
	rank   int64
	at     time.Time // submission time; zero when MaxBatchDelay is 0
	tk     ticket    // loop-owned: the input's ticket once admitted, else zero
	c      chan result[O]
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
	errClaimed = errors.New("ferry: key claimed for a direct call") // the caller makes the call itself
	errDropped = errors.New("ferry: input dropped")                 // to opDrop: it was waiting, and is gone
	errKept    = errors.New("ferry: input not waiting")             // to opDrop: it was not waiting
)

type job[K comparable, I, O any] struct {
	key   K
	batch []*waiter[K, I, O]
}

// worker is the loop's handle on one worker goroutine. The loop fills its
// two batch buffers in turn: the worker may still be answering the callers of
// its previous batch, after its release, while the loop fills the other.
type worker[K comparable, I, O any] struct {
	jobs chan job[K, I, O] // loop -> worker; buffered 1, sent to only while idle
	bufs [2][]*waiter[K, I, O]
	flip int
}

// loop is the state owned by the loop goroutine.
type loop[K comparable, I, O any] struct {
	f       *Ferry[K, I, O]
	st      *state[K, *waiter[K, I, O]]
	workers []worker[K, I, O]
	idle    []int // workers with no batch
	alarm   alarm
	directs map[K]context.CancelCauseFunc // direct calls in flight, by key
	dpeak   int                           // most directs since the map was rebuilt; see shrink

	closing bool // drained, calls cancelled: ending once busy is 0
	stopped bool // worker channels closed
	exited  int  // workers gone

	admitted, rejected, dropped, batches, directCalls uint64

	errFull, errFullWeight error
	drained                []*waiter[K, I, O]
}

func newLoop[K comparable, I, O any](f *Ferry[K, I, O], workers int, origin time.Time) *loop[K, I, O] {
	l := &loop[K, I, O]{
		f:       f,
		st:      newState[K, *waiter[K, I, O]](f.lim, origin),
		workers: make([]worker[K, I, O], workers),
		alarm:   newAlarm(),
		directs: make(map[K]context.CancelCauseFunc),
		errFull: fmt.Errorf("%w: %d inputs waiting (MaxQueued)", ErrRejected, f.lim.queued),
		errFullWeight: fmt.Errorf("%w: the waiting weight would pass MaxQueuedWeight %d",
			ErrRejected, f.lim.queuedWeight),
	}
	if f.lim.queuedWeight == 0 {
		l.errFullWeight = fmt.Errorf("%w: the waiting weight would pass MaxInt64 (MaxQueuedWeight 0)", ErrRejected)
	}
	for i := range l.workers {
		c := make(chan job[K, I, O], 1)
		l.workers[i].jobs = c
		l.idle = append(l.idle, i)
		go f.work(i, c)
	}
	return l
}

// run is the loop: it sleeps until a message arrives or the alarm fires, then
// handles every message already queued, starts what batches it can and sets
// the alarm to the next deadline. Time is read once per wake-up. The timer's
// channel is in the select only while the alarm is set: a timer channel makes
// every select on it take the timer's lock and read the clock.
func (l *loop[K, I, O]) run() {
	inc := l.f.inc
	for !l.end() {
		if !l.alarm.armed() {
			l.receive(<-inc)
			continue
		}
		select {
		case m := <-inc:
			l.receive(m)
		case <-l.alarm.t.C:
			l.alarm.fired()
			l.turn(l.now())
		}
	}
}

// receive handles m and every message queued behind it, at one time, then
// starts what batches it can.
func (l *loop[K, I, O]) receive(m msg[K, I, O]) {
	now := l.now()
	l.handle(m, now)
	for n := len(l.f.inc); n > 0; n-- {
		l.handle(<-l.f.inc, now)
	}
	l.turn(now)
}

// now is the time, read only when deadlines exist: with zero delay the core
// never looks at it.
func (l *loop[K, I, O]) now() time.Time {
	if l.f.lim.delay == 0 {
		return time.Time{}
	}
	return time.Now()
}

func (l *loop[K, I, O]) handle(m msg[K, I, O], now time.Time) {
	st := l.st
	switch m.op {
	case opAdmit:
		w := m.w
		o, tk := st.admit(w.key, w.weight, w.rank, w.at, now, w)
		switch o {
		case admitted:
			w.tk = tk
			l.admitted++
		case claimed:
			l.directCalls++
			w.c <- result[O]{err: errClaimed}
		case rejectedFull:
			l.rejected++
			if st.queued >= l.f.lim.queued {
				w.c <- result[O]{err: l.errFull}
			} else {
				w.c <- result[O]{err: l.errFullWeight}
			}
		case rejectedHeavy:
			l.rejected++
			w.c <- result[O]{err: fmt.Errorf("%w: input weight %d is more than MaxQueuedWeight %d",
				ErrRejected, w.weight, l.f.lim.queuedWeight)}
		case refused:
			w.c <- result[O]{err: ErrClosed}
		}
	case opDrop:
		w := m.w
		if _, ok := st.drop(w.key, w.tk, now); ok { // never for a zero ticket: seqs start at 1
			l.dropped++
			w.c <- result[O]{err: errDropped} // it had no answer: w.c is empty
			return
		}
		select {
		case w.c <- result[O]{err: errKept}:
		default: // w.c holds its answer, which says enough
		}
	case opStart:
		if l.closing {
			go m.cancel(ErrClosed) // see close
		} else {
			l.directs[m.key] = m.cancel
			l.dpeak = max(l.dpeak, len(l.directs))
		}
	case opRelease:
		st.release(m.key, now)
		if m.worker == direct {
			delete(l.directs, m.key)
			l.directs = shrink(l.directs, &l.dpeak)
		} else {
			l.idle = append(l.idle, int(m.worker))
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

// turn starts a batch on every idle worker while a lane is ready, then sets
// the alarm to the earliest deadline left, which is in the future if a worker
// is idle.
func (l *loop[K, I, O]) turn(now time.Time) {
	st := l.st
	for len(l.idle) > 0 && st.hasReady(now) {
		id := l.idle[len(l.idle)-1]
		l.idle = l.idle[:len(l.idle)-1]
		wk := &l.workers[id]
		key, batch, _ := st.take(now, wk.bufs[wk.flip][:0])
		wk.bufs[wk.flip] = batch
		wk.flip ^= 1
		l.batches++
		wk.jobs <- job[K, I, O]{key, batch}
	}
	// With every worker busy nothing can start before a release, and a
	// release wakes the loop anyway; a due lane must not keep the alarm
	// ringing meanwhile.
	t, ok := st.earliest()
	l.alarm.arm(t, ok && len(l.idle) > 0, now)
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
	for _, w := range l.drained {
		w.c <- result[O]{err: ErrClosed}
	}
	clear(l.drained)
	l.f.cancel(ErrClosed)
	for _, cancel := range l.directs {
		go cancel(ErrClosed)
	}
}

// end moves the close along and reports whether the loop is over: a flushed
// room that has emptied closes; a closing ferry with no call in flight stops
// its workers; once they have gone, done is closed.
func (l *loop[K, I, O]) end() bool {
	st := l.st
	if st.flushing && st.idle() {
		l.close()
	}
	if !l.closing || st.busy > 0 {
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
	l.f.last = l.stats()
	close(l.f.done)
	// Every message sent before done was closed is in inc now. Do waits for
	// the answer to its admission without watching done, so answer those.
	for n := len(l.f.inc); n > 0; n-- {
		if m := <-l.f.inc; m.op == opAdmit {
			m.w.c <- result[O]{err: ErrClosed}
		}
	}
	return true
}

func (l *loop[K, I, O]) stats() Stats {
	st := l.st
	return Stats{
		Queued:      st.queued,
		Weight:      st.weight,
		Busy:        st.busy,
		Lanes:       len(st.lanes),
		Admitted:    l.admitted,
		Rejected:    l.rejected,
		Dropped:     l.dropped,
		Batches:     l.batches,
		DirectCalls: l.directCalls,
	}
}
