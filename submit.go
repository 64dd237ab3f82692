package ferry

import "context"

// This file is Submit: one input, admitted on the caller's goroutine and
// answered through done, off the loop; and the watcher of its ctx, which runs
// on ctx's context.AfterFunc goroutine.

// submitInput is Ferry.Submit.
func submitInput[K comparable, I, O any](ctx context.Context, f *Ferry[K, I, O], in I, done func(O, error)) error {
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	w := f.pools.getSub()
	if err := w.prepare(f, in); err != nil {
		f.pools.putSub(w)
		return err
	}
	if w.done = done; done == nil {
		w.done = ignore[O]
	}
	if f.stamp {
		w.at = f.clock()
	}
	s := f.shardOf(w.key)
	if ctx.Done() != nil { // before the admission, so that the loop and workers see stop
		w.stop = context.AfterFunc(ctx, func() { submitCtxDone(ctx, s, w) })
	}
	// The admission word comes on a channel that w holds only until it is
	// read: a waiting input keeps no channel. Once admitted, w is its
	// worker's, which may pool it before the word is read, so c and stop are
	// kept here.
	c := f.pools.getWord()
	w.c = c
	stop := w.stop
	if !s.send(msg[K, I, O]{op: opAdmit, w: w}) {
		f.pools.putWord(c)
		unsubmit(f, w)
		return ErrClosed
	}
	r, err := await(s, c, nil)
	if err != nil { // neither w nor c is pooled: the loop's last read may yet answer
		if stop != nil {
			stop()
		}
		return ErrClosed
	}
	f.pools.putWord(c) // the word was the loop's only send on it
	switch r.err {
	case errAdmitted:
		return nil
	case errWithdrawn: // ctx ended as it was submitted; its watcher still holds w
		return ctxErr(ctx)
	}
	unsubmit(f, w)
	return r.err
}

// ignore is the done of a Submit that passed none.
func ignore[O any](O, error) {}

// unsubmit stops watching a Submit's ctx whose input was not admitted, and
// pools w unless the watcher has started, which still holds it.
func unsubmit[K comparable, I, O any](f *Ferry[K, I, O], w *waiter[K, I, O]) {
	if w.stop == nil || w.stop() {
		f.pools.putSub(w)
	}
}

// submitCtxDone runs when a Submit's ctx ends: it drops the input if it still
// waits, and then calls done with ctx's error and tells the loop, which waits
// for that. If the input was taken, or the ferry closed first, done is called
// by what holds it.
func submitCtxDone[K comparable, I, O any](ctx context.Context, s *shard[K, I, O], w *waiter[K, I, O]) {
	w.drop = make(chan result[O], 1)
	if !s.send(msg[K, I, O]{op: opDrop, w: w}) {
		return
	}
	select {
	case r := <-w.drop:
		if r.err != errDropped {
			return
		}
	case <-s.done:
		return
	}
	callDone(s, w, result[O]{err: ctxErr(ctx)})
	s.inc <- msg[K, I, O]{op: opNotified, w: w}
}
