package ferry

import "context"

// This file is Do: one input, one answer on the waiter's own channel. It runs
// on the caller's goroutine.

// doInput is Ferry.Do.
func doInput[K comparable, I, O any](ctx context.Context, f *Ferry[K, I, O], in I) (O, error) {
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
	if f.keep {
		w.ctx = ctx
	}
	s := f.shardOf(w.key)
	m := msg[K, I, O]{op: opAdmit, w: w}
	select {
	case s.inc <- m: // the fast path locks one channel
	default:
		select {
		case s.inc <- m:
		case <-s.done:
			f.pools.putDo(w)
			return zero, ErrClosed
		}
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
	select {
	case s.inc <- msg[K, I, O]{op: opDrop, w: w}:
	case <-s.done:
	}
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
		s.inc <- msg[K, I, O]{op: opRelease, key: w.key, worker: byCaller}
		return zero, dropErr(ctx)
	case r.err == errKept:
		return zero, ctxErr(ctx)
	}
	return r.out, r.err
}
