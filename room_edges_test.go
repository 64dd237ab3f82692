package ferry

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The shared room at its edges: a shard never borrows room, even within one
// wake-up, for what one loop would refuse or admit without room. Each test
// stops one shard inside a wake-up that has handled such an admission (an
// opStats whose reply no one reads yet, after it in the same wake-up) and
// asks another shard for the room: one loop would give it.

// stopAfter sends m to h's shard sh, which is stopped (see stop), then an
// opStats whose reply no one reads yet, and resumes the shard: its next
// wake-up handles m and stops at the opStats, before it lends back what it
// borrowed. The returned func lets the shard go on.
func stopAfter(h *harness, sh int, resume func(), send func()) (release func()) {
	send()
	synctest.Wait()
	release = stop(h, sh) // queued behind m: the shard is still stopped
	resume()
	return release
}

// Item 1: an input heavier than the whole room is refused without room; its
// shard borrowed all the spare weight for it, and another shard refused a
// weight-1 input while the room held nothing.
func TestHeavyInputBorrowsNoRoom(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueuedWeight: 100, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 1)[0], keysIn(h, 1, 1)[0]
		var heavy chan answer
		release := stopAfter(h, 0, stop(h, 0), func() { heavy = h.do(ctx, in{Key: a, ID: 1, W: 101}) })
		assert.Equal(t, budget{4096, 100}, spareOf(h), "nothing borrowed for an input no room can hold")
		assert.NoError(t, h.f.Submit(ctx, in{Key: b, ID: 2, W: 1}, nil), "the room holds nothing")
		release()
		assert.ErrorContains(t, got(t, heavy).err, "input weight 101 is more than MaxQueuedWeight 100")
	})
}

// Item 2: a direct call's claim takes no room in one loop, nor may its shard
// borrow any for it: with MaxQueued 1 another shard admits its one input
// while the claim is handled. So with a release of the key and a new claim
// for it in one wake-up. Each key's call waits for its own channel.
func TestClaimBorrowsNoRoom(t *testing.T) {
	bubble(t, func(t *testing.T) {
		holds := map[string]chan struct{}{}
		call := func(_ context.Context, key string, ins []in) ([]int, error) {
			<-holds[key]
			return tens(ins), nil
		}
		cfg := inCfg
		cfg.Shards, cfg.MaxQueued, cfg.DirectCalls = 2, 1, true
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		h := &harness{t: t, f: f}
		ctx := context.Background()
		a, b := keysIn(h, 0, 1)[0], keysIn(h, 1, 1)[0]
		holds[a], holds[b] = make(chan struct{}), make(chan struct{})
		bDo := h.do(ctx, in{Key: b, ID: 1}) // b's direct call: b's inputs wait in its lane
		synctest.Wait()

		var first chan answer
		release := stopAfter(h, 0, stop(h, 0), func() { first = h.do(ctx, in{Key: a, ID: 2}) })
		assert.Equal(t, budget{1, math.MaxInt64}, spareOf(h), "a claim takes no room")
		assert.NoError(t, f.Submit(ctx, in{Key: b, ID: 3}, nil), "the room holds nothing")
		release()

		// a's direct call ends, its release waits in the stopped shard's
		// channel, and a new Do claims a again in the same wake-up.
		resume := stop(h, 0)
		holds[a] <- struct{}{}
		close(holds[b]) // b's calls end: the room is empty again
		synctest.Wait()
		assert.Equal(t, answer{20, nil}, got(t, first))
		assert.Equal(t, answer{10, nil}, got(t, bDo))
		var second chan answer
		release = stopAfter(h, 0, resume, func() { second = h.do(ctx, in{Key: a, ID: 4}) })
		assert.Equal(t, budget{1, math.MaxInt64}, spareOf(h), "a release and a claim of its key take no room")
		assert.NoError(t, f.Submit(ctx, in{Key: b, ID: 5}, nil), "the room holds nothing")
		release()
		close(holds[a])
		synctest.Wait()
		assert.Equal(t, answer{40, nil}, got(t, second))
		s := f.Stats()
		assert.Equal(t, [3]uint64{3, 2, 0}, [3]uint64{s.DirectCalls, s.Admitted, s.Rejected})
	})
}

// A Submit and a Do of one key in one wake-up, with direct calls: the
// Submit's input makes the lane, so the Do joins it and takes room too
// (found by model/room.pml: need took the Do for a claim, borrowed room for
// one input of two, and refused the Do with room to spare).
func TestSubmitThenDoOfOneKeyInOneWakeUp(t *testing.T) {
	bubble(t, func(t *testing.T) {
		hold := make(chan struct{})
		call := func(_ context.Context, key string, ins []in) ([]int, error) { <-hold; return tens(ins), nil }
		cfg := inCfg
		cfg.Shards, cfg.MaxQueued, cfg.DirectCalls = 2, 2, true
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		h := &harness{t: t, f: f}
		ctx := context.Background()
		a := keysIn(h, 0, 1)[0]
		resume := stop(h, 0)
		subErr := make(chan error, 1)
		go func() { subErr <- f.Submit(ctx, in{Key: a, ID: 1}, nil) }()
		synctest.Wait()
		d := h.do(ctx, in{Key: a, ID: 2})
		synctest.Wait()
		resume()
		close(hold)
		synctest.Wait()
		assert.NoError(t, <-subErr)
		assert.Equal(t, answer{20, nil}, got(t, d), "the room of 2 holds one input")
	})
}

// Item 3: a DoMany with more inputs than MaxQueued is refused without room;
// the refusing shard borrowed the whole spare room for it.
func TestDoManyThatNeverFitsBorrowsNoRoom(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 8, MaxQueuedWeight: 10, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 9), keysIn(h, 1, 2)
		require.NoError(t, h.f.Submit(ctx, in{Key: b[0], ID: 1, W: 1}, nil))
		for _, tc := range []struct {
			name string
			ins  []in
			msg  string
		}{
			{"more than MaxQueued", func() []in {
				ins := make([]in, 9)
				for i := range ins {
					ins[i] = in{Key: a[i], ID: 10 + i}
				}
				return ins
			}(), "9 inputs, more than MaxQueued 8"},
			{"heavier than MaxQueuedWeight", []in{{Key: a[0], W: 6}, {Key: a[1], W: 5}}, "would pass MaxQueuedWeight 10"},
			{"one heavier than MaxQueuedWeight", []in{{Key: a[0], W: 1}, {Key: a[1], W: 11}}, "input weight 11 is more than MaxQueuedWeight 10"},
		} {
			errc := make(chan error, 1)
			release := stopAfter(h, 0, stop(h, 0), func() {
				go func() {
					_, err := h.f.DoMany(ctx, tc.ins)
					errc <- err
				}()
			})
			assert.Equal(t, budget{7, 9}, spareOf(h), "%s: nothing borrowed for it", tc.name)
			release()
			err := <-errc
			assert.ErrorIs(t, err, ErrRejected, tc.name)
			assert.ErrorContains(t, err, tc.msg, tc.name)
		}
		release := stopAfter(h, 0, stop(h, 0), func() {})
		assert.NoError(t, h.f.Submit(ctx, in{Key: b[1], ID: 2, W: 1}, nil), "the room holds one input of 8")
		release()
	})
}

// Item 4: two DoManys over two shards in opposite orders, each of which fits
// the empty room alone and not both together, with a Weight func and no
// MaxQueuedWeight (weights for MaxBatchWeight only): one loop admits one of
// them, and so must the shards. Holding room shard by shard, each held half
// of what the other needed and both were refused. The test makes both
// shards handle what the two DoManys ask first before either goes on.
func TestTwoDoManysThatEachFitAloneAdmitOne(t *testing.T) {
	for _, qw := range []int64{0, 1000} {
		bubble(t, func(t *testing.T) {
			h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 8, MaxQueuedWeight: qw, MaxBatchDelay: time.Hour}, false)
			defer h.f.Close()
			ctx := context.Background()
			a, b := keysIn(h, 0, 3), keysIn(h, 1, 3)
			resumeA, resumeB := stop(h, 0), stop(h, 1)
			errs := make(chan error, 2)
			for _, order := range [][]string{append(a[:3:3], b...), append(b[:3:3], a...)} {
				go func() {
					ins := make([]in, len(order))
					for i, k := range order {
						ins[i] = in{Key: k, ID: i, W: 1}
					}
					_, err := h.f.DoMany(ctx, ins)
					errs <- err
				}()
			}
			releaseA := stopAfter(h, 0, resumeA, func() {})
			releaseB := stopAfter(h, 1, resumeB, func() {})
			releaseB()                                      // y asks A for its second part while A still handles x's first
			releaseA = stopAfter(h, 0, releaseA, func() {}) // and x asks B before A's word on y
			releaseA()
			require.Len(t, errs, 1, "MaxQueuedWeight %d: one of the two is answered", qw)
			assert.ErrorIs(t, <-errs, ErrRejected, "MaxQueuedWeight %d: one of the two is refused", qw)
			assert.Equal(t, 6, h.f.Stats().Queued, "MaxQueuedWeight %d: the other waits", qw)
			require.NoError(t, h.f.Flush(ctx))
			assert.NoError(t, <-errs)
		})
	}
}
