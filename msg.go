package ferry

import (
	"context"
	"errors"
)

// This file is the protocol between the loop and everyone else: the messages
// to the loop, the replies and words it sends back, the jobs it gives
// workers, and the countdown that answers a DoMany. All of it goes over
// channels; none of these types but countdown has methods.

// op is what a message asks of the loop.
type op uint8

const (
	opAdmit           op = iota // from Do or Submit: admit m.w
	opAdmitMany                 // from DoMany: admit all of part m.part of m.g, or none
	opEarmark                   // from DoMany over several shards: earmark room for part m.part of m.g
	opUnearmark                 // from DoMany over several shards: let go of the room earmarked
	opDrop                      // from a Do whose ctx ended: drop m.w if it still waits
	opDropMany                  // from DoMany whose ctx ended: drop what still waits of part m.part of m.g
	opStart                     // from a direct call: it runs, and close cancels it with m.cancel
	opRelease                   // from a worker or a direct call: m.key's call is over
	opIdle                      // from worker m.worker: it has answered its batch (done and OnBatch returned); it is free
	opNotified                  // from a goroutine that called Submits' done: it has finished (m.fin: a paused key's, see notifyPaused)
	opReported                  // from a direct call whose release carried m.fin: OnBatch has returned
	opChained                   // from chainFin: it has closed an unused claim's fin, and gone
	opDonePanicked              // a Submit's done panicked
	opOnBatchPanicked           // an OnBatch panicked
	opOnPausePanicked           // an OnPause panicked
	opExit                      // from a worker: it has gone
	opStats                     // from Stats: reply on m.stats
	opFlush                     // from Flush: its answer goes on m.flushed
	opClose                     // from Close
	opShutdown                  // from Shutdown
	opPark                      // from worker m.worker: m.fl, m.key's batch, is to be called again after its backoff, or held (m.fail)
	opResume                    // from Resume: m.key is no longer paused, nor parked
	opBorrowWait                // from DoMany over several shards, with WaitForRoom: wait for the room of all of m.g, then grant it (word on part m.part's channel)
	opPaused                    // from Paused: reply on m.paused
	opLeave                     // from a Submit (m.word) or a DoMany (part m.part of m.g) whose ctx ended while it waited for room: see loop.leave
	opGiveBack                  // from a shard or a DoMany short of room: give back all the room kept (see share.borrowRoom)
)

// byCaller is the worker of a release from a direct call: its caller.
const byCaller = -1

// msg is a message to the loop, on its shard's inbound channel. It has no
// methods: its sender writes it and the loop reads it. Each field has one
// meaning, in the ops its comment names.
type msg[K comparable, I, O any] struct {
	op      op
	worker  int32                   // opRelease, opIdle, opPark: the worker, or byCaller
	part    int32                   // opAdmitMany, opEarmark, opUnearmark, opDropMany, opBorrowWait, opLeave: the part of m.g
	key     K                       // opRelease, opResume, opPark
	fail    error                   // opRelease, opPark, with PauseOnError: the call failed for good with it, which pauses m.key
	order   uint64                  // with fail: the failure's place among the ferry's, by its stamp (see counter)
	fin     chan struct{}           // opRelease byCaller, opReported, opNotified: the fin of the completions it tells of
	w       *waiter[K, I, O]        // opAdmit, opDrop, and opStart, opRelease from a direct call: the input
	g       *group[K, I, O]         // the DoMany of a part's message (opAdmitMany, opEarmark, opUnearmark, opDropMany, opBorrowWait, opLeave)
	word    chan result[O]          // opLeave from a Submit: the channel of its admission word, which names it
	stats   chan Stats              // opStats: the reply, capacity 1
	paused  chan []pausedKey[K]     // opPaused: the reply, capacity 1
	cancel  context.CancelCauseFunc // opStart: how close cancels the direct call
	flushed chan error              // opFlush: its answer, capacity 1
	fl      *flight[K, I, O]        // opPark: the batch, with its attempts so far
}

// result is an answer to a waiter, sent on its channel, which is buffered 1.
// A waiter gets one answer, and its caller reads one. If the caller gave up
// and asked for a drop, the loop's word on it (errDropped or errKept) is
// sent only into an empty channel. A call's answer may follow an errKept,
// into the channel the caller has emptied, so no send blocks.
type result[O any] struct {
	out O
	err error
}

// Internal answers to a waiter, never returned by Do.
var (
	errClaimed  = errors.New("ferry: key claimed for a direct call") // the caller makes the call itself
	errDropped  = errors.New("ferry: input dropped")                 // to opDrop: it was waiting, and is gone
	errKept     = errors.New("ferry: input not waiting")             // to opDrop: it was not waiting
	errAdmitted = errors.New("ferry: input admitted")                // to a Submit: it waits
)

// errCancelled is await's word for a wait whose cancel came before the reply,
// which is still to come.
var errCancelled = errors.New("ferry: wait cancelled")

// job is a batch for a worker, sent by the loop of s, which holds the worker
// as id and wants its messages: with several shards, not always the same
// loop. A job with no flight stops the worker.
type job[K comparable, I, O any] struct {
	s  *shard[K, I, O]
	id int32
	fl *flight[K, I, O]
}

// countdown is a latch: the count of a DoMany's inputs not yet answered, in
// a channel of one (left), and fin, sent once by whoever answers the last.
// The count is taken and put back at once, never held across a block, so
// answers from several workers (and the loop, at close) wake the caller only
// once. Whoever takes it puts it back, but for the DoMany's caller. The
// caller takes it back after fin (waiting for the last answerer's put), or
// once it knows nothing can answer any more, so the channel is empty again
// when the group is pooled. Its methods run on the DoMany's caller, and done on
// whatever answers its inputs: workers, and the loop at close.
type countdown struct {
	left chan int      // the count, or empty while someone holds it
	fin  chan struct{} // sent once, by what answers the last input
}

// newCountdown returns an empty countdown.
func newCountdown() countdown {
	return countdown{left: make(chan int, 1), fin: make(chan struct{}, 1)}
}

// start puts in the count, n, on an empty countdown.
func (c countdown) start(n int) { c.left <- n }

// done counts n more inputs as answered, and sends fin if none is left.
func (c countdown) done(n int) {
	left := <-c.left - n
	c.left <- left
	if left == 0 {
		c.fin <- struct{}{}
	}
}

// take takes the count, for the caller, which puts it back with put unless
// nothing can answer any more.
func (c countdown) take() int { return <-c.left }

// put puts back the count the caller took.
func (c countdown) put(n int) { c.left <- n }

// counter is a count in a channel of one, taken and put back at once, never
// held across a block. With PauseOnError it counts the ferry's failures that
// pause a key, stamped where the failure is decided, before its callers hear
// of it. So Paused lists keys in the order their callers saw them fail, over
// every shard. Its one method runs on workers and direct calls' callers.
type counter chan uint64

// next counts one more and returns the count.
func (c counter) next() uint64 {
	n := <-c + 1
	c <- n
	return n
}
