package ferry

import (
	"context"
	"time"
)

// This file is the workers: goroutines that run batched calls for a loop,
// answer their callers and tell OnBatch, and the loop's handle on each. A
// worker's release is sent before it answers its callers, so that their next
// Do comes after it. callDone and onBatch also run on the other goroutines
// that call user code: a Submit's ctx watcher, close's notifier, a direct
// call's caller.

// worker is the loop's handle on one worker goroutine. The loop fills its
// two batch buffers in turn: the worker may still be answering the callers of
// its previous batch, after its release, while the loop fills the other.
// It has no methods: the loop owns it; the worker goroutine only receives
// from jobs.
type worker[K comparable, I, O any] struct {
	jobs chan job[K, I, O] // loop -> worker; a batch only while idle, and a Flush's ping
	bufs [2][]*waiter[K, I, O]
	flip int
	owed []owed // acks to come, in order

	// With CancelAbandoned, while a batch is in flight: its tag (see inFlight),
	// its inputs whose callers have not given up, and how to cancel its call.
	tag    uint64
	live   int
	cancel context.CancelCauseFunc
}

// work runs batches for the loop until its jobs channel is closed. A Call
// that ends the goroutine with runtime.Goexit fails its batch with errGoexit,
// and a new goroutine takes the worker's place.
func work[K comparable, I, O any](s *shard[K, I, O], id int, jobs <-chan job[K, I, O]) {
	f := s.f
	var (
		ins     []I   // reused: a Call must not keep its inputs
		subs    []int // reused: the Submits of a batch
		j       job[K, I, O]
		start   time.Duration // of the Call, by clock, with OnBatch
		running bool          // a Call is running: neither returned nor panicked
	)
	defer func() {
		if running {
			finish(s, id, j, ins, nil, nil, errGoexit, subs[:0], report(f, j, start))
			go work(s, id, jobs)
		}
	}()
	for j = range jobs {
		if len(j.batch) == 0 { // a Flush's ping: every batch before it is answered
			s.inc <- msg[K, I, O]{op: opAnswered, worker: int32(id)}
			continue
		}
		ins = ins[:0]
		for _, w := range j.batch {
			ins = append(ins, w.in[0])
		}
		if f.onBatch != nil {
			start = f.clock()
		}
		running = true
		outs, errs, all := invoke(j.ctx, f, j.key, ins)
		running = false
		subs = finish(s, id, j, ins, outs, errs, all, subs[:0], report(f, j, start))
	}
	s.inc <- msg[K, I, O]{op: opExit}
}

// finish releases j's key, then answers its callers, so that their next Do
// comes after the release: first the Do and DoMany callers, then the Submits'
// done, in batch order; then it gives OnBatch b. It returns subs, the buffer
// it used for the Submits.
func finish[K comparable, I, O any](s *shard[K, I, O], id int, j job[K, I, O], ins []I, outs []O, errs Errors, all error, subs []int, b Batch[K]) []int {
	f := s.f
	s.inc <- msg[K, I, O]{op: opRelease, key: j.key, worker: int32(id)}
	subs = reply(j.batch, outs, errs, all, subs)
	for _, i := range subs {
		callDone(s, j.batch[i], pick(outs, errs, all, i))
	}
	if f.onBatch != nil {
		b.Err = failure(errs, all)
		onBatch(s, b)
	}
	if j.ack {
		s.inc <- msg[K, I, O]{op: opAnswered, worker: int32(id)}
	}
	clear(ins) // after the answers: outs may be ins
	clear(j.batch)
	return subs
}

// reply answers the inputs ws with a call's verdict, except Submits, whose
// indexes it appends to subs and returns: a Do on its channel, a DoMany by
// index in its group, counted once per run of its inputs (see countdown).
// After that count the group may be its caller's: it is not touched again.
func reply[K comparable, I, O any](ws []*waiter[K, I, O], outs []O, errs Errors, all error, subs []int) []int {
	var g *group[K, I, O]
	n := 0
	for i, w := range ws {
		if w.g != g && n > 0 {
			g.count.done(n)
			n = 0
		}
		switch g = w.g; {
		case g != nil:
			r := pick(outs, errs, all, i)
			g.outs[w.i], g.errs[w.i] = r.out, r.err
			n++
		case w.done != nil:
			subs = append(subs, i)
		default:
			w.c <- pick(outs, errs, all, i)
		}
	}
	if n > 0 {
		g.count.done(n)
	}
	return subs
}

// callDone calls a Submit's done with r. A panic in done is recovered and
// counted in Stats.DonePanics. w goes back to the pool first: no one else
// holds it. Its Submit may not have read its admission word yet (the loop
// may take an input in the wake-up that admits it), but that is on a
// channel of the Submit's, not w's.
func callDone[K comparable, I, O any](s *shard[K, I, O], w *waiter[K, I, O], r result[O]) {
	done := w.done
	s.f.pools.putSub(w)
	defer func() {
		if recover() != nil {
			s.inc <- msg[K, I, O]{op: opPanicked}
		}
	}()
	done(r.out, r.err)
}

// callDoneAll calls the done of the Submits ws with err, for the loop, which
// waits for it.
func callDoneAll[K comparable, I, O any](s *shard[K, I, O], ws []*waiter[K, I, O], err error) {
	for _, w := range ws {
		callDone(s, w, result[O]{err: err})
	}
	s.inc <- msg[K, I, O]{op: opNotified}
}

// onBatch gives b to OnBatch, recovering a panic, which Stats counts.
func onBatch[K comparable, I, O any](s *shard[K, I, O], b Batch[K]) {
	f := s.f
	defer func() {
		if recover() != nil {
			s.send(msg[K, I, O]{op: opPanicked, worker: 1})
		}
	}()
	f.onBatch(b)
}
