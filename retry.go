package ferry

import (
	"context"
	"time"
)

// This file is the retries of a failed direct call (Config.Retry), on its
// caller's goroutine, which holds the key throughout, and what every retry
// asks: Retry itself, and a backoff's wait. A batch's retries are its
// flight's (flight.go): between attempts it is parked in its lane, holding
// no worker (park.go).

// retryDirect retries a direct call of w's input, whose first attempt failed
// with r (b its report, with OnBatch), while Retry says so. It runs on the
// caller's goroutine, which holds the key throughout. ctx, the call's,
// ending ends a backoff with the last error, matching the cause if the ferry
// ended it. It returns the last answer and, with OnBatch, the reports of
// every attempt.
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
