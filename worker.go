package ferry

import (
	"context"
	"slices"
	"time"
)

// This file is the workers: goroutines that run batched calls for the loops,
// answer their callers and tell OnBatch, and the loops' handle on each. A
// worker sends its release before it answers its callers, and is free again
// (opIdle) only once it has answered them, their done has returned and
// OnBatch has been told. With several shards a worker is a slot, which
// shards pass on (see slots.go): each job says which shard's loop holds it,
// and so whom to tell. callDone and onBatch also run on the other goroutines
// that call user code: close's notifier and a direct call's caller. The loop
// waits for every message these goroutines send it. Each is sent with the
// shard's end in view (shard.send), so that none blocks even after a Close
// from user code (see Ferry.Close).

// keepCap is the most inputs a buffer of a batch (a worker's inputs and
// Submits, the loop's batch for it) keeps between batches. One that grew past
// it for a bigger batch is dropped once that batch is over, so that an idle
// ferry's memory follows what waits (see docs/performance.md, Where the cost
// goes). It is 16 times DefaultMaxBatchSize: a buffer of it is 1,024
// pointers, and a batch past it allocates its buffers anew, a few
// allocations for more than a thousand inputs.
const keepCap = 1024

// worker is a loop's handle on one worker goroutine: with one shard the
// loop's own, with several a slot's, which one loop at a time holds (see
// slots.takeSlot) and gives back only while it is idle. The loop that holds
// it fills fl, the flight it runs next, and sends it on jobs only while the
// worker is idle. The worker runs it and only then tells the loop it is
// idle, so the two never write the same field of fl at once. It has no
// methods: the loop that holds it owns it; the worker goroutine only
// receives from jobs.
type worker[K comparable, I, O any] struct {
	jobs chan job[K, I, O] // loop -> worker: a flight, only while idle; or a stop
	fl   *flight[K, I, O]  // the flight it runs, or its next one's record, reused
	idle bool              // it has no batch: opIdle came since its last
}

// newWorker starts a worker goroutine for f and returns its handle.
func newWorker[K comparable, I, O any](f *Ferry[K, I, O]) *worker[K, I, O] {
	c := make(chan job[K, I, O], 1) // a flight, only while idle; or a stop
	go work(f, c)
	return &worker[K, I, O]{jobs: c, fl: new(flight[K, I, O])}
}

// work runs the flights it gets on jobs, for the loop each names, until it
// gets a stop (a job with no flight), and then tells that loop it has gone.
// A Call that ends the goroutine with runtime.Goexit fails its batch with
// errGoexit, and a new goroutine takes the worker's place.
func work[K comparable, I, O any](f *Ferry[K, I, O], jobs <-chan job[K, I, O]) {
	var (
		ins     []I               // reused: a Call must not keep its inputs
		subs    []int             // reused: the Submits of a batch
		ctxs    []context.Context // with KeepContexts: the callers' contexts of the call in flight
		j       job[K, I, O]
		start   time.Duration // of the first call, by clock, with OnBatch
		running bool          // a Call is running: neither returned nor panicked
	)
	defer func() {
		if !running {
			return
		}
		if fl := j.fl; fl.attempt > 0 { // in a retry: the answers of the others stand
			fl.goexit(f)
			finish(j, ins, fl.outs, fl.errs, nil, subs[:0], Batch[K]{}, fl.bs, failedForGood(f, fl.ctx, nil, errGoexit), nil)
		} else {
			finish(j, ins, nil, nil, errGoexit, subs[:0], report(f, fl, start), nil, failedForGood(f, fl.ctx, nil, errGoexit), nil)
		}
		go work(f, jobs)
	}()
	for {
		if j = <-jobs; j.fl == nil {
			j.s.send(msg[K, I, O]{op: opExit})
			return
		}
		fl := j.fl
		var retry, answered bool
		if fl.attempt > 0 { // a parked flight, due: its next attempt
			ins, ctxs, retry = fl.again(f, ins, ctxs, &running)
		} else {
			ins = slices.Grow(ins[:0], len(fl.batch)) // one allocation, not append's doublings
			for _, w := range fl.batch {
				ins = append(ins, w.in[0])
			}
			if f.onBatch != nil {
				start = f.clock()
			}
			ctx := fl.ctx
			if f.keep {
				ctx, ctxs = withCallers(fl.ctx, fl.batch, nil, 1, ctxs)
			}
			running = true
			outs, errs, all := invoke(ctx, f, fl.key, ins)
			running = false
			if f.retry == nil && !f.hold || errs == nil && all == nil {
				var fail error
				if f.pauseOnError {
					fail = failedForGood(f, fl.ctx, errs, all)
				}
				var b Batch[K]
				if f.onBatch != nil {
					b = report(f, fl, start)
				}
				subs = finish(j, ins, outs, errs, all, subs[:0], b, nil, fail, nil)
				answered = true
			} else {
				retry = fl.first(f, outs, errs, all, report(f, fl, start))
			}
		}
		switch {
		case answered:
		case retry:
			clear(ins)
			j.s.send(msg[K, I, O]{op: opPark, key: fl.key, worker: j.id, fl: fl}) // the worker is idle once it is sent
		case fl.holds(f):
			h := fl.split() // the failed inputs are held, the others answered now
			subs = finish(j, ins, fl.outs, fl.errs, nil, subs[:0], Batch[K]{}, fl.bs, h.last, h)
		default:
			subs = finish(j, ins, fl.outs, fl.errs, nil, subs[:0], Batch[K]{}, fl.bs, failedForGood(f, fl.ctx, nil, fl.last), nil)
		}
		j = job[K, I, O]{} // holds the flight, which the loop may reuse
		if cap(ins) > keepCap {
			ins = nil
		}
		if cap(subs) > keepCap {
			subs = nil
		}
		if f.keep { // the callers' contexts are not kept past their call
			clear(ctxs)
			if cap(ctxs) > keepCap {
				ctxs = nil
			}
		}
	}
}

// finish releases j's key, or with h set holds h, the inputs of j's batch
// that failed for good, in the key's lane (see flight.split). If fail is set
// (its last attempt failed for good, see failedForGood), the release pauses
// the key, with PauseOnError. Then it answers j's callers, so that their next
// Do comes after the release. First come the Do and DoMany callers; then,
// after the key's earlier completions, the Submits' done, in batch order;
// then OnBatch, given b (or, after retries, each of bs, whose Err is set).
// Only then does it tell the loop it is idle. It returns subs, the buffer it
// used for the Submits.
func finish[K comparable, I, O any](j job[K, I, O], ins []I, outs []O, errs Errors, all error, subs []int, b Batch[K], bs []Batch[K], fail error, h *flight[K, I, O]) []int {
	s, fl := j.s, j.fl
	f := s.f
	m := msg[K, I, O]{op: opRelease, key: fl.key, worker: j.id, fail: fail}
	if h != nil {
		m.op, m.fl = opPark, h
	}
	if fail != nil { // stamped where it is decided, before its callers hear of it
		m.order = f.pauses.next()
	}
	s.send(m)
	subs = reply(fl.batch, outs, errs, all, subs)
	if fl.after != nil { // the key's earlier completions come first
		<-fl.after
	}
	for _, i := range subs {
		callDone(s, fl.batch[i], pick(outs, errs, all, i))
	}
	if f.onBatch != nil && bs == nil {
		b.Err = failure(errs, all)
		if onBatch(f, b) {
			s.send(msg[K, I, O]{op: opOnBatchPanicked})
		}
	}
	for i, b := range bs {
		b.Retried = i < len(bs)-1
		if onBatch(f, b) {
			s.send(msg[K, I, O]{op: opOnBatchPanicked})
		}
	}
	if fl.fin != nil {
		close(fl.fin)
	}
	clear(ins) // after the answers: outs may be ins
	clear(fl.batch)
	s.send(msg[K, I, O]{op: opIdle, worker: j.id})
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
			s.send(msg[K, I, O]{op: opDonePanicked})
		}
	}()
	done(r.out, r.err)
}

// callDoneAll calls the done of the Submits ws with err, once the
// completions of every batch in flight (after) are over, then closes fin,
// their keys' place among their completions, for the loop, which waits for
// it.
func callDoneAll[K comparable, I, O any](s *shard[K, I, O], ws []*waiter[K, I, O], err error, after []chan struct{}, fin chan struct{}) {
	for _, c := range after {
		<-c
	}
	for _, w := range ws {
		callDone(s, w, result[O]{err: err})
	}
	close(fin)
	s.send(msg[K, I, O]{op: opNotified})
}

// chainFin closes fin, the place among a key's completions of a direct
// call that ended with none, once the key's earlier completions (after) are
// over, and tells the loop, which waits for it (see loop.endClaim). It runs
// on a goroutine of its own; no user code.
func chainFin[K comparable, I, O any](s *shard[K, I, O], after, fin chan struct{}) {
	<-after
	close(fin)
	s.send(msg[K, I, O]{op: opChained})
}

// onBatch gives b to OnBatch, recovering a panic, and reports whether it
// panicked, for Stats: its caller tells the loop.
func onBatch[K comparable, I, O any](f *Ferry[K, I, O], b Batch[K]) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	f.onBatch(b)
	return false
}

// notifyPaused runs on a goroutine of its own, which the loop waits for.
// Once the key's earlier completions (after, if not nil) are over, it calls
// the done of the Submits ws, which waited in key's lane as it paused, with
// err, in their order; then OnPause with failure, if not nil. Then it closes
// fin, which the key's next completions wait for, and tells the loop.
func notifyPaused[K comparable, I, O any](s *shard[K, I, O], key K, ws []*waiter[K, I, O], err, failure error, after, fin chan struct{}) {
	if after != nil {
		<-after
	}
	for _, w := range ws {
		callDone(s, w, result[O]{err: err})
	}
	if failure != nil && onPause(s.f, key, failure) {
		s.send(msg[K, I, O]{op: opOnPausePanicked})
	}
	close(fin)
	s.send(msg[K, I, O]{op: opNotified, fin: fin})
}

// onPause calls Config.OnPause with key and the failure that paused it,
// recovering a panic, and reports whether it panicked, for Stats.
func onPause[K comparable, I, O any](f *Ferry[K, I, O], key K, failure error) (panicked bool) {
	defer func() {
		if recover() != nil {
			panicked = true
		}
	}()
	f.onPause(key, failure)
	return false
}
