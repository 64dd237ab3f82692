package ferry

import "context"

// This file is Submit: one input, admitted on the caller's goroutine and
// answered through done, off the loop. Its ctx bounds the admission alone:
// once admitted, the input is the ferry's until done is called.

// Submit admits in and returns at once, without waiting for its output: nil when admitted,
// else the error Do would give at admission (ErrRejected, ErrClosed, ErrPaused, a negative
// weight, or ctx's error and ErrDropped if ctx had ended). With Config.WaitForRoom it blocks while the room is
// full, until room frees or ctx ends (then ctx's error, matching ErrDropped: not admitted, and
// done is never called). ctx bounds the admission alone: once Submit has returned nil
// the input is the ferry's, whatever ctx does, and done (if not nil) is called exactly once,
// never on the loop goroutine: with the output or error after the input's call returns, or
// with ErrClosed if the ferry closes first. So ctx may be a request's context that ends as
// soon as the request is answered (a 202).
//
// Submit never makes a direct call. done runs on the worker that ran the call, after the
// batch's Do and DoMany callers are answered (its key is free by then). For one key the dones run
// one at a time, in the order of their inputs, never overlapping a later batch's: a later batch's
// call runs, and its Do callers are answered, but its dones (and OnBatch) wait. So a slow done
// holds its worker, and with it one of the MaxInFlightBatches, and the key's later completions
// (the worker of each later batch of the key with a done or OnBatch), not the key's calls;
// at close, on a goroutine of the ferry that Close waits for. done may call Submit. A panic in
// done is recovered and counted in Stats.DonePanics; done must not call runtime.Goexit. Close
// from done starts the close and returns at once, as it cannot wait for done (see Close); Flush
// and Shutdown from done return an error at once.
func (f *Ferry[K, I, O]) Submit(ctx context.Context, in I, done func(O, error)) error {
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
		s.send(msg[K, I, O]{op: opLeave, word: c})
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
