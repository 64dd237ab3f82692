package ferry

import "context"

// This file is Submit: one input, admitted on the caller's goroutine and
// answered through done, off the loop. Its ctx bounds the admission alone:
// once admitted, the input is the ferry's until done is called.

// submitInput is Ferry.Submit.
func submitInput[K comparable, I, O any](ctx context.Context, f *Ferry[K, I, O], in I, done func(O, error)) error {
	if ctx.Err() != nil {
		return dropErr(ctx) // nothing admitted
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
	if f.keep {
		w.ctx = ctx // for its values: it may end before the call
	}
	s := f.shardOf(w.key)
	// The admission word comes on a channel that w holds only until it is
	// read: a waiting input keeps no channel. Once admitted, w is its
	// worker's, which may pool it before the word is read, so c is kept here.
	c := f.pools.getWord()
	w.c = c
	if !s.send(msg[K, I, O]{op: opAdmit, w: w}) {
		f.pools.putWord(c)
		f.pools.putSub(w)
		return ErrClosed
	}
	var cancel <-chan struct{} // with WaitForRoom, ctx bounds the wait for room
	if f.waitForRoom {
		cancel = ctx.Done()
	}
	r, err := await(s, c, cancel)
	left := err == errCancelled
	if left { // out of the line, unless let in or refused already
		s.send(msg[K, I, O]{op: opLeave, w: &waiter[K, I, O]{c: c}})
		r, err = await(s, c, nil)
	}
	if err != nil { // neither w nor c is pooled: the loop's last read may yet answer
		return ErrClosed
	}
	if !left || r.err == errDropped { // the word was the loop's only send on c, or its answer to the leave
		f.pools.putWord(c)
	} // else the leave, which names c, is yet to be read: c is not pooled, or it might name another Submit
	switch r.err {
	case errAdmitted:
		return nil
	case errDropped:
		r.err = dropErr(ctx)
	}
	f.pools.putSub(w)
	return r.err
}

// ignore is the done of a Submit that passed none.
func ignore[O any](O, error) {}
