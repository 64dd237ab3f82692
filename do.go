package ferry

import "context"

// This file is Do: one input, one answer on the waiter's own channel. It runs
// on the caller's goroutine.

// doInput is Ferry.Do.
func doInput[K comparable, I, O any](ctx context.Context, f *Ferry[K, I, O], in I) (O, error) {
	var zero O
	if ctx.Err() != nil {
		return zero, ctxErr(ctx)
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
		if abandon(s, w) {
			return zero, dropErr(ctx)
		}
		return zero, ctxErr(ctx)
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
// never joins a call after that. It reports whether the input reached no
// call: dropped, or its key claimed for a direct call not made. Only a
// dropped w goes back to the pool: in every other case the loop or a worker
// may still send on w.c.
func abandon[K comparable, I, O any](s *shard[K, I, O], w *waiter[K, I, O]) bool {
	select {
	case s.inc <- msg[K, I, O]{op: opDrop, w: w}:
	case <-s.done:
		return false
	}
	select {
	case r := <-w.c:
		switch r.err {
		case errDropped:
			s.f.pools.putDo(w)
			return true
		case errClaimed:
			s.inc <- msg[K, I, O]{op: opRelease, key: w.key, worker: byCaller}
			return true
		}
	case <-s.done:
	}
	return false
}
