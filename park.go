package ferry

import (
	"context"
	"time"
)

// This file is the parked batches (Config.Retry): a batch whose call failed
// and is to be retried after a backoff goes back from its worker to its
// loop (opPark), which parks its key's lane in the core until the backoff is
// over (see state.park), and frees the worker at once. The lane holds the
// batch's entry, pb.w; while it is parked no other call of the key runs,
// and the key's later inputs wait behind it in its lane. Once due, at
// Resume, or at close, the loop hands the batch to a worker as the key's
// next call (takeParked), which tries its failed inputs again (see
// retries.again). The answers are given once, at the end, as before.

// parkedBatch is a batch between two attempts: what its worker knew (the
// answers so far, the inputs still to retry, the reports), and what its
// worker's handle held for the loop (its place among its key's completions,
// its Flush debt, its CancelAbandoned count). It has no methods: its worker
// writes it and sends it, the loop then owns it until it sends it to a
// worker in a job.
type parkedBatch[K comparable, I, O any] struct {
	w     *waiter[K, I, O]   // its entry in its lane: no input, pb set
	batch []*waiter[K, I, O] // the inputs of its first call
	ctx   context.Context    // its calls' context: the shard's, or one of its own with CancelAbandoned
	d     time.Duration      // the backoff Retry asked for

	outs    []O        // every input's answer so far, by its index in batch
	errs    Errors     // beside outs
	idx     []int      // the indexes of the inputs to retry
	bs      []Batch[K] // with OnBatch: the reports of the attempts so far
	attempt int        // the attempts over
	last    error      // the error of the attempt last over

	after, fin chan struct{} // its place among its key's completions, if it has any: see loop.completing
	owe        owed          // what it owes the Flush round in progress

	held bool  // it failed for good, held until Resume (HoldPaused): see loop.hold; only its failed inputs
	stop error // a hold ended by Shutdown: its inputs still to retry are answered with it, uncalled

	// With CancelAbandoned (see inFlight): its tag, its callers left, and how
	// to cancel its calls.
	tag    uint64
	live   int
	cancel context.CancelCauseFunc
}

// park parks m.key's lane with m.park, the batch that worker m.worker ran,
// until its backoff is over (at once if its context ended: Close, or every
// caller gave up), and frees the worker: what its handle held for the batch
// goes with it. The key's completions stay where they were: the batch's are
// still to come. A batch that failed for good with HoldPaused (m.fail) is
// held instead (see hold): its worker answers the batch's other inputs
// first, and is free at its opIdle.
func (l *loop[K, I, O]) park(m msg[K, I, O]) {
	pb, wk := m.park, l.slots.workers[m.worker]
	pb.owe, wk.owe = wk.owe, owed{}
	if l.parks == nil {
		l.parks = make(map[K]*parkedBatch[K, I, O])
	}
	l.parks[m.key] = pb
	l.ppeak = max(l.ppeak, len(l.parks))
	if m.fail != nil {
		if wk.cancel != nil { // CancelAbandoned: the callers left of its inputs held, under a tag of its own
			l.tags++
			pb.cancel, pb.tag = wk.cancel, inFlight(int(m.worker), l.tags).seq
			for _, w := range pb.batch {
				w.tk = inFlight(int(m.worker), l.tags)
				if !w.gone {
					pb.live++
				}
			}
			if pb.live == 0 {
				pb.cancel(ErrAbandoned) // only the ferry's contexts: no user code
			}
			wk.tag, wk.live, wk.cancel = 0, 0, nil
		}
		l.hold(m.key, pb, m.fail, m.order, wk.fin)
		return
	}
	pb.tag, pb.live, pb.cancel = wk.tag, wk.live, wk.cancel
	wk.tag, wk.live, wk.cancel = 0, 0, nil
	wk.buf = nil // pb.batch
	var zero K
	wk.fin, wk.key = nil, zero
	d := pb.d
	if pb.ctx.Err() != nil { // the ferry's context, or its child: no user code
		d = 0
	}
	l.st.park(m.key, pb.w, d, l.f.clock())
	l.slots.releaseSlot(int(m.worker))
}

// takeParked gives worker id (wk) pb, key's parked batch, now due, as its
// next job: its inputs whose callers gave up since the call took them are
// left out (not retried), and the worker takes over what the batch's first
// worker held for the loop. A retry is not a new batch in Stats.
func (l *loop[K, I, O]) takeParked(id int, wk *worker[K, I, O], key K, pb *parkedBatch[K, I, O]) {
	delete(l.parks, key)
	l.parks = shrink(l.parks, &l.ppeak)
	n := 0
	for _, i := range pb.idx {
		if !pb.batch[i].gone {
			pb.idx[n] = i
			n++
		}
	}
	pb.idx = pb.idx[:n]
	wk.buf, wk.idle, wk.owe = pb.batch, false, pb.owe
	if pb.fin != nil {
		wk.fin, wk.key = pb.fin, key
	}
	if pb.cancel != nil { // CancelAbandoned: gaveUp finds the batch with this worker now
		wk.tag, wk.live, wk.cancel = pb.tag, pb.live, pb.cancel
		for _, w := range pb.batch {
			w.tk.rank = int64(id)
		}
	}
	l.out.starts = append(l.out.starts, job[K, I, O]{s: l.s, id: int32(id), key: key, batch: pb.batch,
		ctx: pb.ctx, after: pb.after, fin: pb.fin, park: pb})
}

// abandonParked counts out of key's parked batch an input of the batch
// tagged tag whose caller gave up, with CancelAbandoned: once none is left
// its context is cancelled and it is due at once, to be answered as a
// backoff ended by its context was. It reports whether key's parked batch is
// that batch.
func (l *loop[K, I, O]) abandonParked(key K, tag uint64, now time.Duration) bool {
	pb := l.parks[key]
	if pb == nil || pb.tag != tag {
		return false
	}
	if pb.live--; pb.live == 0 {
		pb.cancel(ErrAbandoned) // only the ferry's contexts: no user code
		if !pb.held {           // a hold holds the key's lane until Resume, even so
			l.st.unpark(key, l.timeNow(now))
		}
	}
	return true
}

// resume ends key's pause, with PauseOnError, and its park: its parked
// batch, if any, is due at once.
func (l *loop[K, I, O]) resume(key K, now time.Duration) {
	l.paused.resume(key)
	if l.parks[key] != nil {
		l.st.unpark(key, l.timeNow(now))
	}
}

// oweParked makes every parked batch owe the round that starts one thing,
// paid by the opIdle of the worker that answers it: a Flush waits for them.
func (l *loop[K, I, O]) oweParked() {
	for _, pb := range l.parks {
		pb.owe = l.rounds.owe(1)
	}
}

// timeNow is now, the wake-up's time, or the clock if now is not one: with
// no delay, the loop reads no clock unless a lane is parked (see loop.now).
func (l *loop[K, I, O]) timeNow(now time.Duration) time.Duration {
	if l.lim.delay == 0 && now == 0 {
		return l.f.clock()
	}
	return now
}
