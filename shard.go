package ferry

import "context"

// This file is the handle on one loop, which every goroutine but the loop
// uses to talk to it.

// shard is the handle on one loop: its inbound channel, its end, and the
// context of its batched calls. Keys go to shards by a hash (see
// Ferry.shardOf), so every guarantee per key holds as with one loop. callers:
// its methods run on the goroutines that talk to the loop (callers, workers,
// direct calls, watchers), never on the loop.
type shard[K comparable, I, O any] struct {
	f      *Ferry[K, I, O]
	inc    chan msg[K, I, O] // from callers, workers and direct calls -> loop
	done   chan struct{}     // closed by the loop when every goroutine has gone
	last   Stats             // written by the loop before done is closed
	ctx    context.Context   // of batched calls; cancelled with ErrClosed on close
	cancel context.CancelCauseFunc
}

// send delivers m to the loop, or reports false once the shard has ended. A
// message sent as it ends may be read by no one: wait for its reply with done
// in view, as do explains.
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
	select {
	case st := <-c:
		return st
	case <-s.done:
		select {
		case st := <-c:
			return st
		default:
			return s.last
		}
	}
}
