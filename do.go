package ferry

import "context"

// This file is the rest of Do (Ferry.Do, with its doc, is in ferry.go): a
// direct call once the key is claimed, and abandon for a caller whose ctx
// ended. It runs on the caller's goroutine.

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
		s.send(msg[K, I, O]{op: opRelease, key: w.key, worker: byCaller, w: w})
		return zero, dropErr(ctx)
	case r.err == errKept:
		return zero, ctxErr(ctx)
	}
	return r.out, r.err
}
