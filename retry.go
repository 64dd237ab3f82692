package ferry

import (
	"context"
	"time"
)

// This file is the retries of a failed call (Config.Retry): a batch's, which
// its worker hands back to its loop between attempts (a parked batch, see
// park.go), so that a backoff holds no worker; and a direct call's, on its
// caller's goroutine. The answers are given once, at the end of the last
// attempt, and OnBatch is told of every attempt then.

// retries is a worker's state across the attempts of the batch it runs: the
// first attempt's, or a parked batch's, loaded as its worker takes it up.
// worker: its methods run on the worker goroutine that holds it, and on no
// other.
type retries[K comparable, I, O any] struct {
	outs    []O           // every input's answer so far, by its index in the batch
	errs    Errors        // beside outs
	idx     []int         // the batch's indexes of the inputs of the attempt
	bs      []Batch[K]    // with OnBatch: the reports of the attempts so far
	attempt int           // the attempt last over; 0: not retrying
	last    error         // the error of the attempt last over, if it failed some input
	start   time.Duration // of the attempt in flight, by clock, with OnBatch

	ctxs []context.Context // with KeepContexts: the callers' contexts of the call in flight; the worker's buffer, reused across batches
}

// first starts the retries of j's batch, whose first call failed with outs,
// errs and all (b its report, with OnBatch), and reports whether to park it
// for a retry after d: see settle.
func (r *retries[K, I, O]) first(f *Ferry[K, I, O], j job[K, I, O], outs []O, errs Errors, all error, b Batch[K]) (d time.Duration, retry bool) {
	n := len(j.batch)
	r.outs, r.errs = make([]O, n), make(Errors, n)
	r.idx = r.idx[:0]
	for i := range n {
		r.idx = append(r.idx, i)
	}
	r.bs = r.bs[:0]
	r.attempt = 0
	return r.settle(f, j, outs, errs, all, b)
}

// again takes up pb, j's parked batch, and tries its inputs still to retry
// again, unless j's context ended (Close, or every caller gave up with
// CancelAbandoned: their errors then match the cause) or no caller of them
// is left (the loop left those out as it took pb). running is set while the
// call runs, as work's is. It returns ins, the buffer it used, and whether
// to park the batch again after d: see settle.
func (r *retries[K, I, O]) again(f *Ferry[K, I, O], j job[K, I, O], ins []I, running *bool) (_ []I, d time.Duration, retry bool) {
	pb := j.park
	r.outs, r.errs, r.idx, r.bs, r.attempt, r.last = pb.outs, pb.errs, pb.idx, pb.bs, pb.attempt, pb.last
	if j.ctx.Err() != nil {
		r.blame(context.Cause(j.ctx))
		return ins, 0, false
	}
	if pb.stop != nil { // a hold ended by Shutdown: see loop.stopHeld
		r.blame(pb.stop)
		return ins, 0, false
	}
	if len(r.idx) == 0 { // no caller left: no call, so no new failure for a hold resumed
		if pb.held {
			r.last = nil
		}
		return ins, 0, false
	}
	ins = ins[:0]
	for _, i := range r.idx {
		ins = append(ins, j.batch[i].in[0])
	}
	if f.onBatch != nil {
		r.start = f.clock()
	}
	ctx := j.ctx
	if f.keep {
		ctx, r.ctxs = withCallers(j.ctx, j.batch, r.idx, r.attempt+1, r.ctxs)
	}
	*running = true
	outs, errs, all := invoke(ctx, f, j.key, ins)
	*running = false
	var b Batch[K]
	if f.onBatch != nil {
		b = reportOf(f, j.key, j.batch, r.idx, r.start)
	}
	d, retry = r.settle(f, j, outs, errs, all, b)
	return ins, d, retry
}

// settle records the verdict of the attempt that ended (outs, errs and all
// for the inputs idx; b its report, with OnBatch), and reports whether to
// retry after d: some input still failed, j's context holds, and Retry says so.
func (r *retries[K, I, O]) settle(f *Ferry[K, I, O], j job[K, I, O], outs []O, errs Errors, all error, b Batch[K]) (d time.Duration, retry bool) {
	r.attempt++
	err := failure(errs, all)
	if f.onBatch != nil {
		b.Err, b.Attempt = err, r.attempt
		r.bs = append(r.bs, b)
	}
	failed := r.idx[:0] // in place: never past the index read
	for k, i := range r.idx {
		p := pick(outs, errs, all, k)
		r.outs[i], r.errs[i] = p.out, p.err
		if p.err != nil {
			failed = append(failed, i)
		}
	}
	r.idx = failed
	r.last = nil // an Errors whose every entry is nil is no failure
	if len(failed) > 0 {
		r.last = err
	}
	if len(failed) == 0 || j.ctx.Err() != nil || f.retry == nil {
		return 0, false
	}
	return askRetry(f, j.key, r.attempt, err)
}

// holds reports whether j's batch, its last attempt over with no retry to
// come, is to be held in its lane until Resume (Config.HoldPaused): that
// attempt failed some inputs while j's context held, and no Shutdown ended
// its hold. The inputs left out as their callers gave up do not count.
func (r *retries[K, I, O]) holds(f *Ferry[K, I, O], j job[K, I, O]) bool {
	if !f.hold || j.park != nil && j.park.stop != nil {
		return false
	}
	return len(r.idx) > 0 && j.ctx.Err() == nil
}

// park hands j's batch back to its loop, to retry its failed inputs after
// d (opPark): the worker is idle once it is sent. The batch's state goes
// with it: r keeps none of it.
func (r *retries[K, I, O]) park(j job[K, I, O], d time.Duration) {
	pb := &parkedBatch[K, I, O]{batch: j.batch, ctx: j.ctx, after: j.after, fin: j.fin, d: d,
		outs: r.outs, errs: r.errs, idx: r.idx, bs: r.bs, attempt: r.attempt, last: r.last}
	pb.w = &waiter[K, I, O]{pb: pb}
	r.outs, r.errs, r.idx, r.bs, r.attempt, r.last = nil, nil, nil, nil, 0, nil
	j.s.send(msg[K, I, O]{op: opPark, key: j.key, worker: j.id, park: pb})
}

// held splits j's batch, which failed for good (HoldPaused), into pb, its
// inputs still failing, to hold until Resume, and rest, the others, which
// succeeded, moved to the front of j.batch, with their answers outs and
// errs, which the worker gives at once (see finish). pb's next attempt is
// numbered on from r's; the reports of r's attempts are given now, with
// rest's answers.
func (r *retries[K, I, O]) held(j job[K, I, O]) (pb *parkedBatch[K, I, O], rest []*waiter[K, I, O], outs []O, errs Errors) {
	n := len(r.idx)
	pb = &parkedBatch[K, I, O]{batch: make([]*waiter[K, I, O], n), ctx: j.ctx, outs: make([]O, n),
		errs: make(Errors, n), idx: make([]int, n), attempt: r.attempt, last: r.last, held: true}
	if r.bs != nil {
		pb.bs = []Batch[K]{} // OnBatch: the reports of the attempts to come
	}
	k, h := 0, 0
	for i, w := range j.batch {
		if h < n && r.idx[h] == i { // idx ascends
			pb.batch[h], pb.errs[h], pb.idx[h] = w, r.errs[i], h
			h++
			continue
		}
		j.batch[k], r.outs[k], r.errs[k] = w, r.outs[i], r.errs[i]
		k++
	}
	clear(j.batch[k:]) // pb's now
	pb.w = &waiter[K, I, O]{pb: pb}
	return pb, j.batch[:k], r.outs[:k], r.errs[:k]
}

// blame makes the errors of the inputs still to retry match cause, if the
// ferry ended the backoff (see the function blame).
func (r *retries[K, I, O]) blame(cause error) {
	for _, i := range r.idx {
		_, r.errs[i] = blame(cause, nil, r.errs[i])
	}
}

// goexit fails the inputs of the attempt in flight, whose call ran
// runtime.Goexit, and returns the batch's answers; those of the other inputs
// stand.
func (r *retries[K, I, O]) goexit(f *Ferry[K, I, O], key K, batch []*waiter[K, I, O]) ([]O, Errors) {
	for _, i := range r.idx {
		r.errs[i] = errGoexit
	}
	if f.onBatch != nil {
		b := reportOf(f, key, batch, r.idx, r.start)
		b.Err, b.Attempt = errGoexit, r.attempt+1
		r.bs = append(r.bs, b)
	}
	return r.outs, r.errs
}

// done forgets the batch, once answered.
func (r *retries[K, I, O]) done() {
	clear(r.bs)
	r.outs, r.errs, r.bs, r.attempt, r.last = nil, nil, r.bs[:0], 0, nil
	if cap(r.idx) > keepCap {
		r.idx = nil
	}
}

// retryDirect retries a direct call of w's input, whose first attempt failed
// with r (b its report, with OnBatch), while Retry says so, on the caller's
// goroutine, which holds the key throughout; ctx, the call's, ending ends a
// backoff with the last error, matching the cause if the ferry ended it. It
// returns the last answer and, with OnBatch, the reports of every attempt.
func retryDirect[K comparable, I, O any](ctx context.Context, f *Ferry[K, I, O], w *waiter[K, I, O], r result[O], err error, b Batch[K]) (result[O], []Batch[K]) {
	var bs []Batch[K]
	for attempt := 1; ; attempt++ {
		if f.onBatch != nil {
			b.Err, b.Attempt = err, attempt
			bs = append(bs, b)
		}
		if r.err == nil || ctx.Err() != nil {
			return r, bs
		}
		d, ok := askRetry(f, w.key, attempt, err)
		if !ok {
			return r, bs
		}
		if !backoff(d, ctx.Done()) {
			_, r.err = blame(context.Cause(ctx), nil, r.err)
			return r, bs
		}
		var start time.Duration
		if f.onBatch != nil {
			start = f.clock()
		}
		cctx := ctx
		if f.keep {
			cctx = withCaller(ctx, w.ctx, attempt+1)
		}
		outs, errs, all := invoke(cctx, f, w.key, w.in[:])
		r, err = pick(outs, errs, all, 0), failure(errs, all)
		if f.onBatch != nil {
			b.Took = f.clock() - start
		}
	}
}

// askRetry asks Config.Retry whether to retry key's call after attempt
// failed with err, and how long to wait first. A panic in it is no retry.
func askRetry[K comparable, I, O any](f *Ferry[K, I, O], key K, attempt int, err error) (d time.Duration, ok bool) {
	defer func() {
		if recover() != nil {
			d, ok = 0, false
		}
	}()
	return f.retry(key, attempt, err)
}

// backoff waits d (none if d <= 0) unless done is closed first, and reports
// whether it waited it out.
func backoff(d time.Duration, done <-chan struct{}) bool {
	if d <= 0 {
		select {
		case <-done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-done:
		return false
	}
}
