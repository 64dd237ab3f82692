package ferry

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
)

// This file spreads keys over shards. A shard is one loop with its own core
// state, workers, timer and inbound channel; a key always goes to the same
// shard, by a hash of the key, so every guarantee per key holds as it does
// with one loop. The configured bounds are totals: each shard gets a share
// of MaxQueued, MaxQueuedWeight and MaxInFlightBatches, and the shares sum to
// what was configured. What is not per key becomes per shard: fairness (the
// ready line) and the room a key may fill.

// shard is one loop and what talks to it.
type shard[K comparable, I, O any] struct {
	f      *Ferry[K, I, O]
	inc    chan msg[K, I, O] // from callers, workers and direct calls -> loop
	done   chan struct{}     // closed by the loop when every goroutine has gone
	last   Stats             // written by the loop before done is closed
	ctx    context.Context   // of batched calls; cancelled with ErrClosed on close
	cancel context.CancelCauseFunc
}

// shardOf returns the shard of key k.
func (f *Ferry[K, I, O]) shardOf(k K) *shard[K, I, O] {
	if len(f.shards) == 1 {
		return f.shards[0]
	}
	return f.shards[maphash.Comparable(f.seed, k)%uint64(len(f.shards))]
}

// addWeight is total plus w, for a DoMany: -1 once the sum passes MaxInt64,
// and from then on, as room reads a total < 0.
func addWeight(total, w int64) int64 {
	if total < 0 || w > math.MaxInt64-total {
		return -1
	}
	return total + w
}

// shardCount is how many shards a ferry with these totals gets: n, or 1 by
// default. Shares of the room are static: under a skewed key spread one
// shard fills while another has room, and a room sized for exactly its
// callers rejects some (see the README), so splitting it is the user's
// choice. Every shard must get at least one worker, one input of room and,
// if it is limited, one unit of weight.
func shardCount(n, workers int, lim limits) (int, error) {
	most := min(workers, lim.queued)
	if lim.queuedWeight > 0 {
		most = int(min(int64(most), lim.queuedWeight))
	}
	switch {
	case n == 0:
		return 1, nil
	case n > most:
		return 0, fmt.Errorf("ferry: Config.Shards is %d, more than MaxInFlightBatches, MaxQueued or MaxQueuedWeight (%d) allow: each shard needs a share of them", n, most)
	}
	return n, nil
}

// share is shard i's part of total split n ways: total/n, and one more for
// the first total%n shards. The shares sum to total.
func share[T int | int64](total T, n, i int) T {
	s := total / T(n)
	if T(i) < total%T(n) {
		s++
	}
	return s
}

// send delivers m to the loop, or reports false once the shard has ended. A
// message sent as it ends may be read by no one: wait for its reply with done
// in view, as Do explains.
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

// add adds t to s. Weight saturates at MaxInt64: each shard's is within it,
// their sum may not be.
func (s *Stats) add(t Stats) {
	s.Queued += t.Queued
	if s.Weight > math.MaxInt64-t.Weight {
		s.Weight = math.MaxInt64
	} else {
		s.Weight += t.Weight
	}
	s.Busy += t.Busy
	s.Lanes += t.Lanes
	s.Admitted += t.Admitted
	s.Rejected += t.Rejected
	s.Dropped += t.Dropped
	s.Batches += t.Batches
	s.DirectCalls += t.DirectCalls
	s.DonePanics += t.DonePanics
	s.Taken += t.Taken
	s.RejectedFull += t.RejectedFull
	s.RejectedWeight += t.RejectedWeight
	s.RejectedHeavy += t.RejectedHeavy
	s.OnBatchPanics += t.OnBatchPanics
}
