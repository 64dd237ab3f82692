package ferry

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"time"
)

// This file is the user's call: invoke runs it, whatever it does (returns,
// breaks its contract, panics, runs Goexit, returns an error whose methods
// panic), and verdict, blame and pick read every input's answer from what it
// returned. Workers invoke batched calls (worker.go); a caller that claimed
// its key makes its direct call here, and its key is released whatever the
// call did. inUserCode tells Close, Flush and Shutdown whether they run
// inside user code that a ferry runs, and so must not wait for it.

// invoke calls f.call, with CallTimeout if set, and reads its verdict on ins. A
// panic in the call, or in its error's Unwrap, As or Is methods (which verdict
// and blame call, so inside the recover), fails every input with a *PanicError.
func invoke[K comparable, I, O any](ctx context.Context, f *Ferry[K, I, O], key K, ins []I) (outs []O, errs Errors, all error) {
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

// report describes fl's first call, which started at start, as it ends: all
// but Err. Without OnBatch it is empty and reads no clock.
func report[K comparable, I, O any](f *Ferry[K, I, O], fl *flight[K, I, O], start time.Duration) Batch[K] {
	if f.onBatch == nil {
		return Batch[K]{}
	}
	b := Batch[K]{Key: fl.key, Size: len(fl.batch), Took: f.clock() - start, Attempt: 1}
	oldest := start
	for _, w := range fl.batch {
		b.Weight += w.weight // no wrap: take keeps a batch's weight within MaxInt64
		oldest = min(oldest, w.at)
	}
	b.Wait = start - oldest
	return b
}

// reportOf describes a retry of key's call on the inputs idx of batch, which
// started at start, as it ends: all but Err and Attempt. Its Wait is from
// the oldest of them to the retry's start.
func reportOf[K comparable, I, O any](f *Ferry[K, I, O], key K, batch []*waiter[K, I, O], idx []int, start time.Duration) Batch[K] {
	b := Batch[K]{Key: key, Size: len(idx), Took: f.clock() - start}
	oldest := start
	for _, i := range idx {
		b.Weight += batch[i].weight
		oldest = min(oldest, batch[i].at)
	}
	b.Wait = start - oldest
	return b
}

// direct makes the call for a claimed key on the caller's goroutine. Its
// context carries the caller's values and ends with the caller's context or,
// cancelled by the loop, with the ferry's close. The key is released when the
// call is over, whatever happened in it; then OnBatch is told, and once it
// has returned the loop hears of it (opReported), as a Flush and the
// ferry's end wait for it. The release says that a report is to come by
// carrying w.fin, the call's place among its key's completions, which the
// report carries too.
func direct[K comparable, I, O any](ctx context.Context, s *shard[K, I, O], w *waiter[K, I, O]) (O, error) {
	f := s.f
	cctx, cancel := context.WithCancelCause(ctx)
	s.send(msg[K, I, O]{op: opStart, key: w.key, w: w, cancel: cancel})
	released := false
	defer func() {
		if !released { // the Call ran runtime.Goexit: no OnBatch, no report
			releaseDirect(s, w, cancel, nil, failedForGood(f, cctx, nil, errGoexit))
		}
	}()
	var start time.Duration
	if f.onBatch != nil {
		start = f.clock()
	}
	call := context.Context(cctx)
	if f.keep {
		call = withCaller(cctx, w.ctx, 1)
	}
	outs, errs, all := invoke(call, f, w.key, w.in[:])
	r := pick(outs, errs, all, 0)
	var b Batch[K]
	if f.onBatch != nil {
		b = Batch[K]{Key: w.key, Size: 1, Weight: w.weight, Took: f.clock() - start, Err: failure(errs, all), Direct: true, Attempt: 1}
	}
	var bs []Batch[K] // with retries and OnBatch: every attempt's report
	if f.retry != nil && r.err != nil {
		r, bs = retryDirect(cctx, f, w, r, failure(errs, all), b)
	}
	fail := failedForGood(f, cctx, nil, r.err)
	if f.onBatch == nil {
		releaseDirect(s, w, cancel, nil, fail)
		released = true
		return r.out, r.err
	}
	releaseDirect(s, w, cancel, w.fin, fail)
	released = true
	if w.after != nil { // the key's earlier completions come first
		<-w.after
	}
	if bs == nil {
		bs = []Batch[K]{b} // does not escape: no allocation
	}
	for i, b := range bs {
		b.Retried = i < len(bs)-1
		if onBatch(f, b) {
			s.send(msg[K, I, O]{op: opOnBatchPanicked})
		}
	}
	close(w.fin)
	s.send(msg[K, I, O]{op: opReported, fin: w.fin})
	return r.out, r.err
}

// releaseDirect ends w's direct call: its context, then its claim,
// pausing its key if fail is set (see failedForGood), stamped where it is
// decided. With fin set, an opReported with fin follows once OnBatch has
// returned.
func releaseDirect[K comparable, I, O any](s *shard[K, I, O], w *waiter[K, I, O], cancel context.CancelCauseFunc, fin chan struct{}, fail error) {
	cancel(nil)
	m := msg[K, I, O]{op: opRelease, key: w.key, worker: byCaller, w: w, fin: fin, fail: fail}
	if fail != nil {
		m.order = s.f.pauses.next()
	}
	s.send(m)
}

// pkgPrefix is the prefix of the names of this package's functions, as
// runtime.Frame gives them.
var pkgPrefix = reflect.TypeFor[callKey]().PkgPath() + "."

// Refusals of a Flush or a Shutdown from user code that would wait for itself.
var (
	errFlushInCallback    = errors.New("ferry: Flush from inside a done, OnBatch, OnPause or Retry would wait for it")
	errShutdownInCallback = errors.New("ferry: Shutdown from inside a done, OnBatch, OnPause or Retry would wait for it")
)

// inUserCode reports whether its caller runs inside user code that a ferry
// runs and waits for, before it ends or a Flush round settles. That is a done
// (callDone), an OnBatch (onBatch), an OnPause (onPause) or a Retry
// (askRetry), or, with calls, a Call (invoke). It reads the names of the
// functions on the goroutine's stack, generic ones named as
// "ferry.invoke[...]", inlined or not; it cannot tell one ferry from another.
// It costs a walk of the stack (see docs/performance.md): for Close, Flush
// and Shutdown only.
func inUserCode(calls bool) bool {
	var buf [64]uintptr
	pcs := buf[:]
	for {
		n := runtime.Callers(3, pcs) // from inUserCode's caller's caller
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	frames := runtime.CallersFrames(pcs)
	for {
		fr, more := frames.Next()
		if name, ok := strings.CutPrefix(fr.Function, pkgPrefix); ok {
			switch {
			case strings.HasPrefix(name, "callDone["), strings.HasPrefix(name, "onBatch["), strings.HasPrefix(name, "askRetry["),
				strings.HasPrefix(name, "onPause["):
				return true
			case calls && strings.HasPrefix(name, "invoke["):
				return true
			}
		}
		if !more {
			return false
		}
	}
}

// failedForGood is, with PauseOnError, the failure that pauses the key of a
// call that ended with errs and all (see verdict), after its retries, while
// its context ctx held. It is nil if no input failed, or if ctx ended: Close,
// the direct call's caller or CancelAbandoned ended it, no fault of the key.
func failedForGood[K comparable, I, O any](f *Ferry[K, I, O], ctx context.Context, errs Errors, all error) error {
	if !f.pauseOnError || ctx.Err() != nil {
		return nil
	}
	if all != nil {
		return all
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}
