package ferry

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
)

// This file runs user calls, off the loop: workers run batched calls, and a
// caller that claimed its key runs its direct call. Whatever the call does
// (returns, breaks its contract, panics, runs Goexit, returns an error whose
// methods panic), its key is released and every input gets one answer.

// errGoexit fails the inputs of a batched call that ran runtime.Goexit.
var errGoexit = errors.New("ferry: call ran runtime.Goexit")

// work runs batches for the loop until its jobs channel is closed. A Call
// that ends the goroutine with runtime.Goexit fails its batch with errGoexit,
// and a new goroutine takes the worker's place.
func (s *shard[K, I, O]) work(id int, jobs <-chan job[K, I, O]) {
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
			s.finish(id, j, ins, nil, nil, errGoexit, subs[:0], f.report(j, start))
			go s.work(id, jobs)
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
		outs, errs, all := f.run(j.ctx, j.key, ins)
		running = false
		subs = s.finish(id, j, ins, outs, errs, all, subs[:0], f.report(j, start))
	}
	s.inc <- msg[K, I, O]{op: opExit}
}

// finish releases j's key, then answers its callers, so that their next Do
// comes after the release: first the Do and DoMany callers, then the Submits'
// done, in batch order; then it gives OnBatch b. It returns subs, the buffer
// it used for the Submits.
func (s *shard[K, I, O]) finish(id int, j job[K, I, O], ins []I, outs []O, errs Errors, all error, subs []int, b Batch[K]) []int {
	f := s.f
	s.inc <- msg[K, I, O]{op: opRelease, key: j.key, worker: int32(id)}
	subs = reply(j.batch, outs, errs, all, subs)
	for _, i := range subs {
		s.notify(j.batch[i], pick(outs, errs, all, i))
	}
	if f.onBatch != nil {
		b.Err = failure(errs, all)
		s.tell(b)
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
// index in its group, counted once per run of its inputs (see answered).
// After that count the group may be its caller's: it is not touched again.
func reply[K comparable, I, O any](ws []*waiter[K, I, O], outs []O, errs Errors, all error, subs []int) []int {
	var g *group[K, I, O]
	n := 0
	for i, w := range ws {
		if w.g != g && n > 0 {
			g.answered(n)
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
		g.answered(n)
	}
	return subs
}

// notify calls a Submit's done with r. A panic in done is recovered and
// counted in Stats.DonePanics. w goes back to the pool unless its ctx's
// watcher has started, which still holds it. Its Submit may not have read
// its admission word yet (the loop may take an input in the wake-up that
// admits it), but that is on a channel of the Submit's, not w's.
func (s *shard[K, I, O]) notify(w *waiter[K, I, O], r result[O]) {
	f := s.f
	mine := w.stop == nil || w.stop()
	done := w.done
	if mine {
		f.putSub(w)
	}
	defer func() {
		if recover() != nil {
			s.inc <- msg[K, I, O]{op: opPanicked}
		}
	}()
	done(r.out, r.err)
}

// report describes j's call, which started at start, as it ends: all but Err.
// Without OnBatch it is empty and reads no clock.
func (f *Ferry[K, I, O]) report(j job[K, I, O], start time.Duration) Batch[K] {
	if f.onBatch == nil {
		return Batch[K]{}
	}
	b := Batch[K]{Key: j.key, Size: len(j.batch), Took: f.clock() - start}
	oldest := start
	for _, w := range j.batch {
		b.Weight += w.weight // no wrap: take keeps a batch's weight within MaxInt64
		oldest = min(oldest, w.at)
	}
	b.Wait = start - oldest
	return b
}

// tell gives b to OnBatch, recovering a panic, which Stats counts.
func (s *shard[K, I, O]) tell(b Batch[K]) {
	f := s.f
	defer func() {
		if recover() != nil {
			s.send(msg[K, I, O]{op: opPanicked, worker: 1})
		}
	}()
	f.onBatch(b)
}

// failure is a call's error, as Batch.Err, from verdict's errs and all.
func failure(errs Errors, all error) error {
	switch {
	case all != nil:
		return all
	case errs != nil:
		return errs
	}
	return nil
}

// notifyAll calls the done of the Submits ws with err, for the loop, which
// waits for it.
func (s *shard[K, I, O]) notifyAll(ws []*waiter[K, I, O], err error) {
	for _, w := range ws {
		s.notify(w, result[O]{err: err})
	}
	s.inc <- msg[K, I, O]{op: opNotified}
}

// direct makes the call for a claimed key on the caller's goroutine. Its
// context carries the caller's values and ends with the caller's context or,
// cancelled by the loop, with the ferry's close. The key is released when the
// call is over, whatever happened in it, and then OnBatch is told.
func (s *shard[K, I, O]) direct(ctx context.Context, w *waiter[K, I, O]) (O, error) {
	f := s.f
	cctx, cancel := context.WithCancelCause(ctx)
	s.inc <- msg[K, I, O]{op: opStart, key: w.key, cancel: cancel}
	released := false
	defer func() {
		if !released { // the Call ran runtime.Goexit
			s.release(w.key, cancel)
		}
	}()
	var start, took time.Duration
	if f.onBatch != nil {
		start = f.clock()
	}
	outs, errs, all := f.run(cctx, w.key, w.in[:])
	if f.onBatch != nil {
		took = f.clock() - start
	}
	s.release(w.key, cancel)
	released = true
	if f.onBatch != nil {
		s.tell(Batch[K]{Key: w.key, Size: 1, Weight: w.weight, Took: took, Err: failure(errs, all), Direct: true})
	}
	r := pick(outs, errs, all, 0)
	return r.out, r.err
}

// release ends a direct call on key: its context, then its claim.
func (s *shard[K, I, O]) release(key K, cancel context.CancelCauseFunc) {
	cancel(nil)
	s.inc <- msg[K, I, O]{op: opRelease, key: key, worker: direct}
}

// run calls f.call, with CallTimeout if set, and reads its verdict on ins. A
// panic in the call, or in its error's Unwrap, As or Is methods (which verdict
// and blame call, so inside the recover), fails every input with a *PanicError.
func (f *Ferry[K, I, O]) run(ctx context.Context, key K, ins []I) (outs []O, errs Errors, all error) {
	defer func() {
		if v := recover(); v != nil {
			buf := make([]byte, 64<<10)
			buf = buf[:runtime.Stack(buf, false)]
			outs, errs, all = nil, nil, &PanicError{Value: v, Stack: buf}
		}
	}()
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, f.timeout, ErrCallTimeout)
		defer cancel()
	}
	outs, err := f.call(ctx, key, ins)
	errs, all = verdict(outs, err, len(ins))
	if err != nil && ctx.Err() != nil {
		errs, all = blame(context.Cause(ctx), errs, all)
	}
	return outs, errs, all
}

// blame makes the errors of a call that failed after its context ended match
// the cause, if the ferry ended it: ErrClosed, ErrCallTimeout or ErrAbandoned,
// wrapped around each error. errs is copied: it is the Call's.
func blame(cause error, errs Errors, all error) (Errors, error) {
	switch cause {
	case ErrClosed, ErrCallTimeout, ErrAbandoned:
	default:
		return errs, all
	}
	wrap := func(err error) error {
		if err == nil || errors.Is(err, cause) {
			return err
		}
		return fmt.Errorf("%w: %w", cause, err)
	}
	if errs != nil {
		e := make(Errors, len(errs))
		for i, err := range errs {
			e[i] = wrap(err)
		}
		errs = e
	}
	return errs, wrap(all)
}

// verdict reads a call's return for n inputs: errs, if not nil, holds each
// input's error; all, if not nil, is the error of every input errs does not
// fail. A Call that breaks its contract fails every input it broke it for.
// A nil Errors as the error is no error.
func verdict[O any](outs []O, err error, n int) (errs Errors, all error) {
	if e, ok := err.(Errors); ok && e == nil {
		err = nil
	}
	if err != nil {
		var e Errors // declared here, as it escapes: no allocation for a nil err
		if !errors.As(err, &e) {
			return nil, err
		}
		if len(e) != n {
			return nil, fmt.Errorf("ferry: call returned %d errors for %d inputs", len(e), n)
		}
		errs = e
	}
	if len(outs) != n {
		all = fmt.Errorf("ferry: call returned %d outputs for %d inputs", len(outs), n)
	}
	return errs, all
}

// pick is input i's result, from outs and verdict's errs and all.
func pick[O any](outs []O, errs Errors, all error, i int) result[O] {
	switch {
	case errs != nil && errs[i] != nil:
		return result[O]{err: errs[i]}
	case all != nil:
		return result[O]{err: all}
	}
	return result[O]{out: outs[i]}
}
