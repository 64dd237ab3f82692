package ferry

import (
	"context"
	"time"
)

// flight is a batch from its take to its last answer: its inputs, its calls'
// context, its attempts so far, and what the loop owes for it. It is one
// record from worker to park to worker, handed on by pointer, never copied: a
// worker's handle holds the flight it runs, and a parked lane's batch is its
// loop's (see parked). The loop writes its fields before it sends it in a
// job. While it runs, the loop writes its own part (its place among the key's
// completions, its Flush debt, CancelAbandoned's count), and the worker
// writes its attempts, in the methods below, until it parks it (opPark) or
// answers it (opIdle). worker: its methods run on the worker goroutine that
// runs it.
type flight[K comparable, I, O any] struct {
	key   K
	batch []*waiter[K, I, O]
	ctx   context.Context // its calls': the shard's, or its own with CancelAbandoned

	// Its attempts, with Retry or HoldPaused, once the first failed.
	outs    []O           // every input's answer so far, by its index in batch
	errs    Errors        // beside outs
	idx     []int         // the indexes of the inputs of the next attempt
	bs      []Batch[K]    // with OnBatch: the reports of the attempts not yet told
	attempt int           // the attempts over; 0: none yet
	last    error         // the last attempt's error, if it failed some input
	backoff time.Duration // what Retry asked for, as it parks
	held    bool          // it failed for good and holds its key until Resume (HoldPaused): its failed inputs only
	stop    error         // a hold ended by Shutdown: its inputs are answered with it, uncalled (see loop.stopHeld)
	start   time.Duration // the start of its attempt in flight, by clock, with OnBatch

	// The loop's.
	after, fin chan struct{}           // its place among its key's completions, if it has any: see completions
	owe        owed                    // to the Flush round in progress, paid by its last opIdle
	tag        uint64                  // with CancelAbandoned: its tag (see inFlight),
	live       int                     // its callers who have not given up,
	cancel     context.CancelCauseFunc // and how to cancel its calls
}

// first starts fl's attempts after its first call failed with outs, errs
// and all (b its report, with OnBatch), and reports whether to park it for
// another after fl.backoff: see settle.
func (fl *flight[K, I, O]) first(f *Ferry[K, I, O], outs []O, errs Errors, all error, b Batch[K]) bool {
	n := len(fl.batch)
	fl.outs, fl.errs, fl.idx = make([]O, n), make(Errors, n), make([]int, n)
	for i := range n {
		fl.idx[i] = i
	}
	return fl.settle(f, outs, errs, all, b)
}

// again makes fl's next attempt, a parked flight's, on its inputs still to
// call. It makes none if its context ended: Close, or every caller gave up
// with CancelAbandoned (their errors then match the cause). Nor does it if
// Shutdown ended its hold, or if no caller of them is left (the loop left
// those out as it took fl). ins and ctxs are the worker's buffers, returned as it used them;
// running is set while the call runs, as work's is. It reports whether to
// park fl again: see settle.
func (fl *flight[K, I, O]) again(f *Ferry[K, I, O], ins []I, ctxs []context.Context, running *bool) (_ []I, _ []context.Context, retry bool) {
	if fl.ctx.Err() != nil {
		fl.blame(context.Cause(fl.ctx))
		return ins, ctxs, false
	}
	if fl.stop != nil {
		fl.blame(fl.stop)
		return ins, ctxs, false
	}
	if len(fl.idx) == 0 { // no caller left: no call, and no new failure for a hold resumed
		if fl.held {
			fl.last = nil
		}
		return ins, ctxs, false
	}
	ins = ins[:0]
	for _, i := range fl.idx {
		ins = append(ins, fl.batch[i].in[0])
	}
	if f.onBatch != nil {
		fl.start = f.clock()
	}
	ctx := fl.ctx
	if f.keep {
		ctx, ctxs = withCallers(fl.ctx, fl.batch, fl.idx, fl.attempt+1, ctxs)
	}
	*running = true
	outs, errs, all := invoke(ctx, f, fl.key, ins)
	*running = false
	var b Batch[K]
	if f.onBatch != nil {
		b = reportOf(f, fl.key, fl.batch, fl.idx, fl.start)
	}
	return ins, ctxs, fl.settle(f, outs, errs, all, b)
}

// settle records the verdict of the attempt that ended: outs, errs and all
// for the inputs idx, and b its report, with OnBatch. It reports whether to
// call again after fl.backoff: some input still failed, fl's context holds,
// and Retry says so.
func (fl *flight[K, I, O]) settle(f *Ferry[K, I, O], outs []O, errs Errors, all error, b Batch[K]) bool {
	fl.attempt++
	err := failure(errs, all)
	if f.onBatch != nil {
		b.Err, b.Attempt = err, fl.attempt
		fl.bs = append(fl.bs, b)
	}
	failed := fl.idx[:0] // in place: never past the index read
	for k, i := range fl.idx {
		p := pick(outs, errs, all, k)
		fl.outs[i], fl.errs[i] = p.out, p.err
		if p.err != nil {
			failed = append(failed, i)
		}
	}
	fl.idx = failed
	fl.last = nil // an Errors whose every entry is nil is no failure
	if len(failed) > 0 {
		fl.last = err
	}
	if len(failed) == 0 || fl.ctx.Err() != nil || f.retry == nil {
		return false
	}
	var retry bool
	fl.backoff, retry = askRetry(f, fl.key, fl.attempt, err)
	return retry
}

// holds reports whether fl, its last attempt over with no retry to come, is
// to hold its key until Resume (Config.HoldPaused): that attempt failed some
// inputs while fl's context held, and no Shutdown ended its hold. The
// inputs left out as their callers gave up do not count.
func (fl *flight[K, I, O]) holds(f *Ferry[K, I, O]) bool {
	return f.hold && fl.stop == nil && len(fl.idx) > 0 && fl.ctx.Err() == nil
}

// split splits fl, which failed for good with HoldPaused, in two. A new
// flight, to hold until Resume, takes its inputs still failing. The others,
// which succeeded or whose callers gave up, stay in fl, moved to the front
// of fl.batch, with their answers in fl.outs and fl.errs, for the worker to
// give at once. The held flight's next attempt is numbered on from fl's; the
// reports of fl's attempts are told with fl's answers.
func (fl *flight[K, I, O]) split() *flight[K, I, O] {
	n := len(fl.idx)
	h := &flight[K, I, O]{key: fl.key, batch: make([]*waiter[K, I, O], n), ctx: fl.ctx, outs: make([]O, n),
		errs: make(Errors, n), idx: make([]int, n), attempt: fl.attempt, last: fl.last, held: true}
	if fl.bs != nil {
		h.bs = []Batch[K]{} // OnBatch: the reports of the attempts to come
	}
	k, j := 0, 0
	for i, w := range fl.batch {
		if j < n && fl.idx[j] == i { // idx ascends
			h.batch[j], h.errs[j], h.idx[j] = w, fl.errs[i], j
			j++
			continue
		}
		fl.batch[k], fl.outs[k], fl.errs[k] = w, fl.outs[i], fl.errs[i]
		k++
	}
	clear(fl.batch[k:]) // h's now
	fl.batch, fl.outs, fl.errs, fl.idx = fl.batch[:k], fl.outs[:k], fl.errs[:k], nil
	return h
}

// blame makes the errors of the inputs still to call match cause, if the
// ferry ended the backoff (see the function blame).
func (fl *flight[K, I, O]) blame(cause error) {
	for _, i := range fl.idx {
		_, fl.errs[i] = blame(cause, nil, fl.errs[i])
	}
}

// goexit fails the inputs of the attempt in flight, whose call ran
// runtime.Goexit; the answers of the other inputs stand.
func (fl *flight[K, I, O]) goexit(f *Ferry[K, I, O]) {
	for _, i := range fl.idx {
		fl.errs[i] = errGoexit
	}
	if f.onBatch != nil {
		b := reportOf(f, fl.key, fl.batch, fl.idx, fl.start)
		b.Err, b.Attempt = errGoexit, fl.attempt+1
		fl.bs = append(fl.bs, b)
	}
}
