package ferry

import "context"

// This file is the loop's outbox: what its handlers want sent that must
// wait for the room to be lent back or for other sends, as data. The
// handlers append to it; the end of a wake-up (dispatch, and end after a
// close) sends it with sendOut, in the one order stated there.

// outbox is what a wake-up's handlers want sent, in the order sendOut sends
// it: the words on room freed, the cancels of direct calls, the Flushes'
// answers, then the batches to start. Its zero value is empty; it is
// reused, so it allocates only as it grows. loop: the loop owns it.
type outbox[K comparable, I, O any] struct {
	words   []later[K, I, O]          // words on room freed, with several shards: see replyAfterLend
	cancels []context.CancelCauseFunc // direct calls to cancel with ErrClosed, each on a goroutine of its own
	flushes []flushAnswer             // Flushes to answer
	starts  []job[K, I, O]            // batches to start, each on its worker (job.id)
}

// flushAnswer is a Flush's answer: nil once its round is over, ErrClosed at
// close. It has no methods.
type flushAnswer struct {
	c   chan error
	err error
}

// later is the loop's word on a drop, or on a DoMany's part (which may let
// go of room held or granted): a result on c, or else a word on p.c.
// loop: its one method runs on the loop goroutine.
type later[K comparable, I, O any] struct {
	c chan result[O]
	r result[O]
	p *part[K, I, O]
}

// send sends the word, on the loop goroutine.
func (x later[K, I, O]) send() {
	if x.p != nil {
		x.p.c <- struct{}{}
	} else {
		x.c <- x.r
	}
}

// replyAfterLend sends x, a word on room that may have been freed: at once
// with one shard. With several, it waits until the wake-up has handled its
// messages and lent what they freed (see giveBackRoom). A caller may ask
// another shard for room as soon as it has the word, and finds it there, as
// in one loop. Until then the room stays with this shard, for the
// admissions among the wake-up's messages.
func (l *loop[K, I, O]) replyAfterLend(x later[K, I, O]) {
	if !l.shared {
		x.send()
		return
	}
	l.out.words = append(l.out.words, x)
}

// sendOut sends what the outbox holds and empties it. It runs once the
// wake-up's room is lent back (giveBackRoom), and the order is:
//  1. the words on room freed, after the lend: see replyAfterLend;
//  2. the cancels of direct calls, each on a goroutine of its own, as a
//     direct call's context is a child of its caller's (user code);
//  3. the Flushes' answers, after the words, which a Flush waits for;
//  4. the batches, last: their callers may come back to another shard, and
//     find the room lent there.
func (l *loop[K, I, O]) sendOut() {
	o := &l.out
	for _, x := range o.words {
		x.send()
	}
	for _, c := range o.cancels {
		go c(ErrClosed)
	}
	for _, a := range o.flushes {
		a.c <- a.err
	}
	for _, j := range o.starts {
		l.slots.workers[j.id].jobs <- j
	}
	clear(o.words)
	clear(o.cancels)
	clear(o.flushes)
	clear(o.starts)
	o.words, o.cancels, o.flushes, o.starts = o.words[:0], o.cancels[:0], o.flushes[:0], o.starts[:0]
}
