package ferry

import "context"

// This file is Do: one input, one answer on the waiter's own channel. It runs
// on the caller's goroutine.

// Do submits in and blocks until its call returns or ctx ends (then an error
// that errors.Is ctx.Err(); the caller of a direct call waits for its call,
// whose context ends with ctx). A full room is ErrRejected at once (with
// Config.WaitForRoom, Do waits for room, in line, until ctx ends), a closed
// ferry ErrClosed, a paused key (Config.PauseOnError) ErrPaused; a negative
// weight or a key unequal to itself is an error.
//
// When ctx ends first, Do returns once its shard's loop has said whether the
// input still waited (one message there and back, not the call's end): if
// it did, it is dropped and the error also matches ErrDropped (no call will
// see it: safe to send again); if a call had taken it, the error is ctx's
// alone, and the call may still succeed; if its answer had come meanwhile (a
// refusal as its key paused or the ferry closed, or its call's answer), that
// answer. So ctx's error alone always means that a call took the input. A
// ctx that had ended before Do admits nothing: ctx's error and ErrDropped.
//
// Close answers a waiting Do with ErrClosed, and one whose call is in flight
// with the call's answer, which, if the call fails once close has ended its
// context, matches ErrClosed as well as the call's error. See Call for contexts.
func (f *Ferry[K, I, O]) Do(ctx context.Context, in I) (O, error) {
	var zero O
	if ctx.Err() != nil {
		return zero, dropErr(ctx) // nothing admitted
	}
	w := f.pools.getDo()
	if err := w.prepare(f, in); err != nil {
		f.pools.putDo(w)
		return zero, err
	}
	if f.stamp {
		w.at = f.clock() // the submission time, as the design says: before the loop sees it
	}
	s := f.shardOf(w.key)
	if !s.send(msg[K, I, O]{op: opAdmit, w: w}) {
		f.pools.putDo(w)
		return zero, ErrClosed
	}
	switch r, err := await(s, w.c, ctx.Done()); err {
	case nil:
		return finishDo(ctx, s, w, r)
	case ErrClosed:
		return zero, ErrClosed // w is not pooled: the loop's last read may yet answer it
	default:
		return abandon(ctx, s, w)
	}
}

// finishDo finishes a Do whose reply is r: a direct call if the key was claimed.
func finishDo[K comparable, I, O any](ctx context.Context, s *shard[K, I, O], w *waiter[K, I, O], r result[O]) (O, error) {
	if r.err == errClaimed {
		out, err := direct(ctx, s, w)
		s.f.pools.putDo(w)
		return out, err
	}
	s.f.pools.putDo(w)
	return r.out, r.err
}

// abandon drops w's input if it still waits, for a caller whose ctx ended,
// and waits for one word on w.c, so that an input whose caller has returned
// never joins a call after that; it returns the Do's answer. Dropped, or its
// key claimed for a direct call not made: ctx's error and ErrDropped. Taken
// by a call (errKept): ctx's error alone. An answer there before the word
// (the loop's refusal as the key paused or the ferry closed, or a call's
// answer): that answer, so that ctx's error alone always means that a call
// took the input. Only a dropped w goes back to the pool: in every other
// case the loop or a worker may still send on w.c.
func abandon[K comparable, I, O any](ctx context.Context, s *shard[K, I, O], w *waiter[K, I, O]) (O, error) {
	var zero O
	s.send(msg[K, I, O]{op: opDrop, w: w}) // a shard that has ended hears none: see below
	var r result[O]
	select {
	case r = <-w.c:
	case <-s.done: // every answer but the final drain's ErrClosed was sent before
		select {
		case r = <-w.c:
		default:
			return zero, ErrClosed
		}
	}
	switch {
	case r.err == errDropped:
		s.f.pools.putDo(w)
		return zero, dropErr(ctx)
	case r.err == errClaimed:
		s.send(msg[K, I, O]{op: opRelease, key: w.key, worker: byCaller})
		return zero, dropErr(ctx)
	case r.err == errKept:
		return zero, ctxErr(ctx)
	}
	return r.out, r.err
}
