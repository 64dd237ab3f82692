package ferry

import (
	"context"
	"time"
)

// This file is the retries of a failed call (Config.Retry): a worker's, on
// its key, which it holds until the last attempt is over, and a direct
// call's, on its caller's goroutine. Between attempts the worker asks its
// loop which inputs still have a caller (opRetry); the answers are given
// once, at the end, and OnBatch is told of every attempt then.

// retries is a worker's state across the attempts of one batch. worker: its
// methods run on the worker goroutine that holds it, and on no other.
type retries[K comparable, I, O any] struct {
	outs    []O           // every input's answer so far, by its index in the batch
	errs    Errors        // beside outs
	idx     []int         // the batch's indexes of the inputs of the attempt
	ask     *ask          // to ask the loop which of idx still have a caller; made once
	bs      []Batch[K]    // with OnBatch: the reports of the attempts so far
	attempt int           // the attempt last over; 0: not retrying
	start   time.Duration // of the attempt in flight, by clock, with OnBatch

	ctxs []context.Context // with KeepContexts: the callers' contexts of the call in flight; the worker's buffer, reused across batches
}

// run retries j's batch, whose first call failed with outs, errs and all (b
// its report, with OnBatch), while Retry says so and some input still failed
// and still has a caller. running is set while a call runs, as work's is.
// It returns ins, the buffer it used, and the batch's answers, as outs
// beside an Errors.
func (r *retries[K, I, O]) run(f *Ferry[K, I, O], j job[K, I, O], ins []I, outs []O, errs Errors, all error, b Batch[K], running *bool) ([]I, []O, Errors) {
	n := len(j.batch)
	r.outs, r.errs = make([]O, n), make(Errors, n)
	r.idx = r.idx[:0]
	for i := range n {
		r.idx = append(r.idx, i)
	}
	r.bs = r.bs[:0]
	for r.attempt = 1; ; r.attempt++ {
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
		if len(failed) == 0 || j.ctx.Err() != nil {
			break
		}
		d, ok := askRetry(f, j.key, r.attempt, err)
		if !ok {
			break
		}
		if !backoff(d, j.ctx.Done()) { // closed, or abandoned
			r.blame(context.Cause(j.ctx))
			break
		}
		if r.ask == nil {
			r.ask = &ask{c: make(chan struct{}, 1)}
		}
		r.ask.idx = r.idx
		if j.s.send(msg[K, I, O]{op: opRetry, worker: j.id, ask: r.ask}) {
			<-r.ask.c // the loop waits for this worker: it ends only after
		}
		if r.idx, r.ask.idx = r.ask.idx, nil; len(r.idx) == 0 {
			break
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
		outs, errs, all = invoke(ctx, f, j.key, ins)
		*running = false
		if f.onBatch != nil {
			b = reportOf(f, j.key, j.batch, r.idx, r.start)
		}
	}
	return ins, r.outs, r.errs
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
	r.outs, r.errs, r.bs, r.attempt = nil, nil, r.bs[:0], 0
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
