package ferry

import "context"

// This file is the handle on one loop, which every goroutine but the loop
// uses to talk to it.

// shard is the handle on one loop: its inbound channel, its end, and the
// context of its batched calls. Keys go to shards by a hash (see
// Ferry.shardOf), so every guarantee per key holds as with one loop. callers:
// its methods run on the goroutines that talk to the loop (callers, workers,
// direct calls), never on the loop.
type shard[K comparable, I, O any] struct {
	f      *Ferry[K, I, O]
	inc    chan msg[K, I, O] // from callers, workers and direct calls -> loop
	done   chan struct{}     // closed by the loop when every goroutine has gone
	last   Stats             // written by the loop before done is closed
	ops    sharedOps         // the loop's count, written with last: see sharedOps
	ctx    context.Context   // of batched calls; cancelled with ErrClosed on close
	cancel context.CancelCauseFunc

	// The keys paused as the loop ended, written before done is closed.
	lastPaused []pausedKey[K]
}

// send delivers m to the loop, or reports false once the shard has ended. A
// message sent as it ends may be read by no one: wait for its reply with
// await.
func (s *shard[K, I, O]) send(m msg[K, I, O]) bool {
	select {
	case s.inc <- m:
		return true
	default:
	}
	select {
	case s.inc <- m:
		return true
	case <-s.done:
		return false
	}
}

// stats is the shard's snapshot, taken by its loop, or its last one.
func (s *shard[K, I, O]) stats() Stats {
	c := make(chan Stats, 1)
	if !s.send(msg[K, I, O]{op: opStats, stats: c}) {
		return s.last
	}
	st, err := await(s, c, nil)
	if err != nil {
		return s.last
	}
	return st
}

// await waits for the loop's reply on c to a message already delivered to
// s's loop, or for cancel (nil: never). It returns the reply; or ErrClosed if
// s has ended with no reply on c; or errCancelled if cancel came first.
//
// The loop answers every message it reads, and once done is closed it reads,
// at most once more, the messages sent before (end's final drain). So if done
// is not closed after the send, the reply will come, and the wait needs no
// case for done. If it is closed, a reply already there is taken; else
// ErrClosed, and c must not be reused: the final drain may yet answer on it.
// await is only for messages that the final drain answers too.
func await[K comparable, I, O, T any](s *shard[K, I, O], c <-chan T, cancel <-chan struct{}) (T, error) {
	var zero T
	select {
	case <-s.done:
		select {
		case r := <-c: // take the reply already there
			return r, nil
		default:
			return zero, ErrClosed
		}
	default:
	}
	if cancel == nil { // no select
		return <-c, nil
	}
	select {
	case r := <-c:
		return r, nil
	case <-cancel:
		return zero, errCancelled
	}
}

// pausedKeys is the keys paused in the shard, in the order they paused,
// as its loop lists them, or as it ended.
func (s *shard[K, I, O]) pausedKeys() []pausedKey[K] {
	c := make(chan []pausedKey[K], 1)
	if !s.send(msg[K, I, O]{op: opPaused, paused: c}) {
		return s.lastPaused
	}
	ks, err := await(s, c, nil)
	if err != nil {
		return s.lastPaused
	}
	return ks
}
