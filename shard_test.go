package ferry

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keysIn returns n keys of shard sh, in the order they are found.
func keysIn(h *harness, sh, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		if k := fmt.Sprint("k", i); h.f.shardOf(k) == h.f.shards[sh] {
			keys = append(keys, k)
		}
	}
	return keys
}

func TestShardCount(t *testing.T) {
	for _, tc := range []struct{ n, workers, procs, want int }{
		{0, 4, 1, 1}, // the default: one loop per processor, at most one per worker
		{0, 4, 2, 2},
		{0, 4, 32, 4},
		{0, 1, 8, 1},
		{3, 3, 1, 3},
		{1, 1, 8, 1},
	} {
		n, err := shardCount(tc.n, tc.workers, tc.procs)
		require.NoError(t, err)
		assert.Equal(t, tc.want, n, "%+v", tc)
	}
	_, err := shardCount(3, 2, 8)
	assert.ErrorContains(t, err, "Config.Shards is 3, more than MaxInFlightBatches (2): one worker per shard at least")
	cfg := inCfg
	cfg.Shards = -1
	_, err = New(func(context.Context, string, []in) ([]int, error) { return nil, nil }, cfg)
	assert.ErrorContains(t, err, "Config.Shards is negative")
	cfg.Shards, cfg.MaxQueued = 3, 1
	f, err := New(func(context.Context, string, []in) ([]int, error) { return nil, nil }, cfg)
	require.NoError(t, err, "the room is shared: one input of it is enough for three shards")
	f.Close()
}

func TestShare(t *testing.T) {
	for _, tc := range []struct{ total, n int }{{10, 3}, {3, 3}, {7, 2}, {math.MaxInt, 7}} {
		sum := 0
		for i := range tc.n {
			s := shareOf(tc.total, tc.n, i)
			assert.GreaterOrEqual(t, s, tc.total/tc.n)
			sum += s
		}
		assert.Equal(t, tc.total, sum, "the shares of %d over %d sum to it", tc.total, tc.n)
	}
}

func TestStatsAddSaturates(t *testing.T) {
	s := Stats{Queued: 1, Weight: math.MaxInt64 - 1, Admitted: 2, RejectedFull: 3}
	s.add(Stats{Queued: 2, Weight: 5, Admitted: 1, RejectedFull: 1, OnBatchPanics: 1})
	assert.Equal(t, Stats{Queued: 3, Weight: math.MaxInt64, Admitted: 3, RejectedFull: 4, OnBatchPanics: 1}, s)
}

// The workers are split, each shard taking its share, and the room is
// shared: the bounds configured are totals across the shards.
func TestShardsSplitTheBounds(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 3, MaxQueued: 10, MaxInFlightBatches: 5, MaxBatchDelay: time.Hour}, true)
		defer h.f.Close()
		ctx := context.Background()
		for sh, n := range []int{4, 3, 3} {
			for _, k := range keysIn(h, sh, n) {
				require.NoError(t, h.f.Submit(ctx, in{Key: k, W: 1}, nil), "shard %d", sh)
			}
		}
		for sh := range 3 {
			err := h.f.Submit(ctx, in{Key: keysIn(h, sh, 5)[4], W: 1}, nil)
			assert.ErrorIs(t, err, ErrRejected, "shard %d: the room holds 10 in all", sh)
			assert.ErrorContains(t, err, "the room is full (MaxQueued 10)")
		}
		assert.Equal(t, Stats{Queued: 10, Weight: 10, Lanes: 10, Admitted: 10, Rejected: 3, RejectedFull: 3}, h.f.Stats())

		shut := make(chan error, 1)
		go func() { shut <- h.f.Shutdown(ctx) }()
		for range 10 {
			synctest.Wait()
			h.mu.Lock()
			assert.LessOrEqual(t, h.running, 5, "no more calls at once than MaxInFlightBatches in all")
			h.mu.Unlock()
			h.hold <- struct{}{}
		}
		require.NoError(t, <-shut)
		assert.Equal(t, 5, h.peak, "and as many: 2 + 2 + 1 workers")
		assert.Len(t, h.seen(), 10)
	})
	// Keys skewed onto one shard may fill the room, and once its inputs have
	// gone, another shard may: a shard lends back all it holds spare.
	for _, room := range []int{10, 384} {
		bubble(t, func(t *testing.T) {
			h := newHarness(t, Config[string, in]{Shards: 3, MaxQueued: room, MaxBatchDelay: time.Hour}, false)
			defer h.f.Close()
			ctx := context.Background()
			k0, k1 := keysIn(h, 0, room+1), keysIn(h, 1, room+1)
			for _, k := range k0[:room] {
				require.NoError(t, h.f.Submit(ctx, in{Key: k, W: 1}, nil))
			}
			assert.ErrorIs(t, h.f.Submit(ctx, in{Key: k0[room], W: 1}, nil), ErrRejected)
			assert.ErrorIs(t, h.f.Submit(ctx, in{Key: k1[0], W: 1}, nil), ErrRejected, "and leave none to shard 1")
			require.NoError(t, h.f.Flush(ctx))
			for _, k := range k1[:room] {
				require.NoError(t, h.f.Submit(ctx, in{Key: k, W: 1}, nil), "shard 0 lent it all back")
			}
			assert.ErrorIs(t, h.f.Submit(ctx, in{Key: k1[room], W: 1}, nil), ErrRejected)
			assert.ErrorIs(t, h.f.Submit(ctx, in{Key: k0[0], W: 1}, nil), ErrRejected)
			assert.Equal(t, room, h.f.Stats().Queued)
		})
	}
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueuedWeight: 5, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 1)[0], keysIn(h, 1, 1)[0]
		require.NoError(t, h.f.Submit(ctx, in{Key: a, W: 3}, nil))
		require.NoError(t, h.f.Submit(ctx, in{Key: a, W: 2}, nil), "the weight is shared too")
		err := h.f.Submit(ctx, in{Key: b, W: 1}, nil)
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "the waiting weight would pass MaxQueuedWeight 5")
		err = h.f.Submit(ctx, in{Key: b, W: 6}, nil)
		assert.ErrorContains(t, err, "input weight 6 is more than MaxQueuedWeight 5", "heavy for the whole room")
		s := h.f.Stats()
		assert.Equal(t, int64(5), s.Weight)
		assert.Equal(t, [3]uint64{0, 1, 1}, [3]uint64{s.RejectedFull, s.RejectedWeight, s.RejectedHeavy})
	})
}

// The shards share MaxInFlightBatches: keys skewed onto one shard may use
// every slot, and a shard that waits for one gets the next that is freed,
// before the shard that freed it starts another.
func TestShardsShareTheWorkers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 3, MaxInFlightBatches: 5}, true)
		ctx := context.Background()
		var as []chan answer
		for i, k := range keysIn(h, 0, 8) {
			as = append(as, h.do(ctx, in{Key: k, ID: i}))
		}
		synctest.Wait()
		assert.Equal(t, 5, h.f.Stats().Busy, "one shard runs all five")
		for range 8 {
			h.mu.Lock()
			assert.LessOrEqual(t, h.running, 5)
			h.mu.Unlock()
			h.hold <- struct{}{}
			synctest.Wait()
		}
		for i, a := range as {
			assert.Equal(t, answer{10 * i, nil}, got(t, a))
		}
		assert.Equal(t, 5, h.peak)
		require.NoError(t, h.f.Close())
	})
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxInFlightBatches: 2}, true)
		ctx := context.Background()
		a, b := keysIn(h, 0, 3), keysIn(h, 1, 1)
		var as []chan answer
		for i, k := range []string{a[0], a[1], a[2], b[0]} {
			as = append(as, h.do(ctx, in{Key: k, ID: i}))
			synctest.Wait()
		}
		assert.Len(t, h.seen(), 2, "two slots, both shard 0's")
		h.hold <- struct{}{}
		synctest.Wait()
		calls := h.seen()
		require.Len(t, calls, 3)
		assert.Equal(t, b[0], calls[2].key, "shard 1 waited for a slot, and gets the one shard 0 freed")
		for range 3 {
			h.hold <- struct{}{}
			synctest.Wait()
		}
		assert.Equal(t, a[2], h.seen()[3].key)
		for i, x := range as {
			assert.Equal(t, answer{10 * i, nil}, got(t, x))
		}
		assert.Equal(t, 2, h.peak)
		require.NoError(t, h.f.Close())
	})
}

// A shard that holds its share of the slots, all busy, and has a batch
// ready, is woken by a slot another shard gives back: it does not wait for
// its own worker, here held by a Submit's done that blocks. Mutation: run
// leaving the slots' poke out of its select (the batch waits for the done).
func TestShardWokenByASlotGivenBack(t *testing.T) {
	bubble(t, func(t *testing.T) {
		gate, free := make(chan struct{}), make(chan struct{})
		var mu sync.Mutex
		var calls []int
		cfg := inCfg
		cfg.Shards, cfg.MaxInFlightBatches = 2, 2
		f, err := New(func(_ context.Context, key string, ins []in) ([]int, error) {
			mu.Lock()
			for _, x := range ins {
				calls = append(calls, x.ID)
			}
			mu.Unlock()
			if ins[0].ID == 1 {
				<-free
			}
			return tens(ins), nil
		}, cfg)
		require.NoError(t, err)
		h := &harness{f: f}
		a, b := keysIn(h, 0, 1)[0], keysIn(h, 1, 1)[0]
		ctx := context.Background()
		dones := make(chan int, 3)
		require.NoError(t, f.Submit(ctx, in{Key: b, ID: 1}, func(int, error) { dones <- 1 }))
		synctest.Wait()
		require.NoError(t, f.Submit(ctx, in{Key: a, ID: 2}, func(int, error) { <-gate; dones <- 2 }))
		synctest.Wait()
		require.NoError(t, f.Submit(ctx, in{Key: a, ID: 3}, func(int, error) { dones <- 3 }))
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []int{1, 2}, calls, "both slots busy: shard 0's in a done, shard 1's in a call")
		mu.Unlock()
		close(free)
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []int{1, 2, 3}, calls, "the slot shard 1 gave back runs shard 0's batch")
		mu.Unlock()
		close(gate)
		require.NoError(t, f.Close())
		assert.ElementsMatch(t, []int{1, 2, 3}, []int{<-dones, <-dones, <-dones})
	})
}

// Every per-key rule holds with shards, and Close, Shutdown, Flush and Stats
// span them all.
func TestShardsSpanEveryShard(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 4, MaxBatchSize: 2, MaxBatchDelay: time.Hour}, false)
		ctx := context.Background()
		var as []chan answer
		for i := range 40 {
			as = append(as, h.do(ctx, in{Key: fmt.Sprint("k", i%10), ID: i}))
		}
		synctest.Wait()
		assert.Equal(t, uint64(40), h.f.Stats().Admitted, "every input admitted")
		require.NoError(t, h.f.Flush(ctx), "Flush runs what waits in every shard")
		synctest.Wait()
		for i, a := range as {
			assert.Equal(t, answer{10 * i, nil}, got(t, a))
		}
		assert.Len(t, h.seen(), 20, "batches of 2: no key had two calls at once")
		for i := range 8 {
			as[i] = h.do(ctx, in{Key: fmt.Sprint("k", i), ID: i})
		}
		synctest.Wait()
		require.NoError(t, h.f.Shutdown(ctx))
		synctest.Wait()
		for i := range 8 {
			assert.Equal(t, answer{10 * i, nil}, got(t, as[i]), "Shutdown ran what waited in every shard")
		}
		_, err := h.f.Do(ctx, in{Key: "k1"})
		assert.ErrorIs(t, err, ErrClosed)
		assert.Equal(t, uint64(48), h.f.Stats().Taken, "the final snapshot sums the shards")
	})
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 4, MaxBatchDelay: time.Hour}, false)
		var as []chan answer
		for i := range 8 {
			as = append(as, h.do(context.Background(), in{Key: fmt.Sprint("k", i), ID: i}))
		}
		synctest.Wait()
		require.NoError(t, h.f.Close())
		synctest.Wait()
		for _, a := range as {
			assert.ErrorIs(t, got(t, a).err, ErrClosed, "Close answers every shard's callers")
		}
	})
}

// A DoMany over several shards enters all of them or none.
func TestDoManyOverShards(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 6, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 2), keysIn(h, 1, 3)
		require.NoError(t, h.f.Submit(ctx, in{Key: b[0], ID: 100}, nil))
		_, err := h.f.DoMany(ctx, []in{{Key: a[0]}, {Key: a[1]}, {Key: a[0]}, {Key: b[0]}, {Key: b[1]}, {Key: b[2]}})
		assert.ErrorIs(t, err, ErrRejected, "the room has 5 of its 6 left")
		assert.ErrorContains(t, err, "6 inputs, more than the room has free (MaxQueued 6)")
		s := h.f.Stats()
		assert.Equal(t, 1, s.Queued, "and no shard admitted any")
		assert.Equal(t, uint64(6), s.RejectedFull, "all six counted")

		many := make(chan []int, 1)
		go func() {
			outs, err := h.f.DoMany(ctx, []in{{Key: a[0], ID: 1}, {Key: b[1], ID: 2}, {Key: a[1], ID: 3}, {Key: a[0], ID: 4}})
			assert.NoError(t, err)
			many <- outs
		}()
		synctest.Wait()
		assert.Equal(t, 5, h.f.Stats().Queued, "three in shard 0, two in shard 1")
		require.NoError(t, h.f.Flush(ctx))
		assert.Equal(t, []int{10, 20, 30, 40}, <-many, "in order")
		assert.Contains(t, ids(h.seen()), []int{1, 4}, "a key's inputs in slice order")

		ctx2, cancel := context.WithCancel(ctx)
		go func() {
			_, err := h.f.DoMany(ctx2, []in{{Key: a[0], ID: 5}, {Key: b[0], ID: 6}})
			many <- nil
			assert.ErrorIs(t, err, context.Canceled)
		}()
		synctest.Wait()
		cancel()
		<-many
		synctest.Wait()
		assert.Equal(t, Stats{Lanes: 0, Admitted: 7, Dropped: 2, Batches: 4, Taken: 5, Rejected: 6, RejectedFull: 6}, h.f.Stats(),
			"dropped from both shards")

		_, err = h.f.DoMany(ctx, []in{{Key: a[0], W: math.MaxInt64}, {Key: b[0], W: 1}})
		assert.ErrorContains(t, err, "total weight passes MaxInt64", "though each shard's part fits its room")
		assert.Equal(t, 0, h.f.Stats().Queued)
	})
}

// A drop frees room, and its caller, once told, may ask another shard for
// that room at once, as it could ask one loop: so with several shards the
// word on a drop goes out only once the wake-up has lent the room. The test
// stops the loop inside the wake-up that handles the drop (an opStats whose
// reply no one reads yet) and looks: the caller may not have its word while
// the room is not back in spare.
func TestDropIsToldOnceItsRoomIsLent(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 1, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		s := h.f.shardOf("a")
		ctx, cancel := context.WithCancel(context.Background())
		a := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait() // a waits, and its shard holds the whole room
		assert.Equal(t, budget{0, math.MaxInt64}, spareOf(h))

		first, second := make(chan Stats), make(chan Stats)
		s.inc <- msg[string, in, int]{op: opStats, stats: first}
		synctest.Wait() // the loop waits to give its first reply
		cancel()
		synctest.Wait() // a's Do has asked for its drop
		s.inc <- msg[string, in, int]{op: opStats, stats: second}
		<-first // the next wake-up reads the drop and the second opStats together
		synctest.Wait()
		assert.Empty(t, a, "told of its drop before the wake-up has lent its room")
		assert.Equal(t, budget{0, math.MaxInt64}, spareOf(h))
		<-second
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, context.Canceled)
		assert.Equal(t, budget{1, math.MaxInt64}, spareOf(h), "the room a left is back for every shard")
		b := h.do(context.Background(), in{Key: keysIn(h, 1-shardIndex(h, s), 1)[0], ID: 2})
		synctest.Wait()
		assert.Equal(t, 1, h.f.Stats().Queued, "the other shard admits b")
		pending(t, b)
	})
}

// spareOf is the room that no admission holds, read as a loop reads it:
// spare's, once every shard has given back its allowance (asked as a shard
// short of room asks, see askBack), in a bubble. A shard stopped in a
// wake-up (see stop) gives its allowance back only as it goes on.
func spareOf(h *harness) budget {
	for _, s := range h.f.shards {
		askBack(s)
	}
	synctest.Wait()
	p := <-h.f.spare
	free := p.free
	h.f.spare <- p
	return free
}

// shardIndex is the index of s among h's shards.
func shardIndex(h *harness, s *shard[string, in, int]) int {
	for i, x := range h.f.shards {
		if x == s {
			return i
		}
	}
	panic("no such shard")
}

// stop makes h's shard sh wait inside a wake-up until the returned func is
// called: an opStats whose reply no one reads yet.
func stop(h *harness, sh int) (resume func()) {
	c := make(chan Stats)
	h.f.shards[sh].inc <- msg[string, in, int]{op: opStats, stats: c}
	synctest.Wait()
	return func() { <-c; synctest.Wait() }
}

// A DoMany over several shards takes the room for all its inputs from the
// shared budget in one step, so that two of them over the same shards, in
// opposite orders, never each hold room the other needs: with room for one,
// one is admitted and the other rejected, as in one loop. The test stops
// both loops: the room is taken before either has read a word.
func TestDoManyOverShardsTakesItsRoomInOneStep(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 8, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 3), keysIn(h, 1, 3)
		resumeA, resumeB := stop(h, 0), stop(h, 1)
		x, y := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := h.f.DoMany(ctx, []in{{Key: a[0]}, {Key: a[1]}, {Key: a[2]}, {Key: b[0]}, {Key: b[1]}, {Key: b[2]}})
			x <- err
		}()
		synctest.Wait()
		assert.Equal(t, budget{2, math.MaxInt64}, spareOf(h), "x took the room of its six inputs before either shard let them in")
		go func() {
			_, err := h.f.DoMany(ctx, []in{{Key: b[0]}, {Key: b[1]}, {Key: b[2]}, {Key: a[0]}, {Key: a[1]}, {Key: a[2]}})
			y <- err
		}()
		synctest.Wait()
		resumeA()
		resumeB()
		err := <-y
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "6 inputs, more than the room has free (MaxQueued 8)")
		s := h.f.Stats()
		assert.Equal(t, 6, s.Queued, "x waits for its deadline")
		assert.Equal(t, uint64(6), s.RejectedFull)
		assert.Equal(t, budget{2, math.MaxInt64}, spareOf(h), "y holds nothing")
		require.NoError(t, h.f.Flush(ctx))
		assert.NoError(t, <-x)
		assert.Equal(t, budget{8, math.MaxInt64}, spareOf(h))
	})
}

// A DoMany over several shards that no room could ever hold is refused by
// one shard, as one loop refuses it, without holding room in another first.
func TestDoManyThatNeverFitsHoldsNothing(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 4, MaxQueuedWeight: 10, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 3), keysIn(h, 1, 3)
		for _, tc := range []struct {
			name   string
			ins    []in
			reason func(Stats) uint64
			msg    string
		}{
			{"more than MaxQueued", []in{{Key: a[0]}, {Key: a[1]}, {Key: a[2]}, {Key: b[0]}, {Key: b[1]}},
				func(s Stats) uint64 { return s.RejectedFull }, "5 inputs, more than MaxQueued 4"},
			{"heavier together than MaxQueuedWeight", []in{{Key: a[0], W: 6}, {Key: b[0], W: 6}},
				func(s Stats) uint64 { return s.RejectedWeight }, "would pass MaxQueuedWeight 10 (2 inputs)"},
			{"one heavier than MaxQueuedWeight", []in{{Key: a[0], W: 1}, {Key: b[0], W: 11}},
				func(s Stats) uint64 { return s.RejectedHeavy }, "input weight 11 is more than MaxQueuedWeight 10"},
		} {
			before := h.f.Stats()
			resume := stop(h, 1) // the second part's shard: no hold may wait for it
			_, err := h.f.DoMany(ctx, tc.ins)
			assert.ErrorIs(t, err, ErrRejected, tc.name)
			assert.ErrorContains(t, err, tc.msg, tc.name)
			assert.Equal(t, budget{4, 10}, spareOf(h), "%s: no room held", tc.name)
			resume()
			s := h.f.Stats()
			assert.Equal(t, before.Rejected+uint64(len(tc.ins)), s.Rejected, tc.name)
			assert.Equal(t, tc.reason(before)+uint64(len(tc.ins)), tc.reason(s), "%s: every input, for its reason", tc.name)
		}
	})
}

// With no MaxQueuedWeight the shards share a weight of MaxInt64, the whole
// weight of one loop's room: an input that would pass it in all is refused
// as one loop refuses it, whichever shard it goes to, and a DoMany whose
// weights would pass it is refused whole, each input counted once.
func TestDoManyOverShardsWithNoMaxQueuedWeight(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 2), keysIn(h, 1, 2)
		h.do(ctx, in{Key: a[0], ID: 1, W: math.MaxInt64 - 5})
		synctest.Wait()
		_, err := h.f.DoMany(ctx, []in{{Key: b[1], ID: 2, W: 1}, {Key: a[1], ID: 3, W: 10}})
		assert.ErrorIs(t, err, ErrRejected, "the room's weight would pass MaxInt64")
		s := h.f.Stats()
		assert.Equal(t, 1, s.Queued, "b1 was not let in")
		assert.Equal(t, uint64(2), s.Rejected, "each input counted once")

		_, err = h.f.Do(ctx, in{Key: b[0], ID: 4, W: 6})
		assert.ErrorContains(t, err, "the waiting weight would pass MaxInt64 (MaxQueuedWeight 0)", "in the other shard too")
		_, err = h.f.DoMany(ctx, []in{{Key: a[1], ID: 5, W: 3}, {Key: b[1], ID: 6, W: 3}})
		assert.ErrorIs(t, err, ErrRejected, "not ErrClosed: no shard is closing")
		s = h.f.Stats()
		assert.Equal(t, uint64(5), s.Rejected)
		assert.Equal(t, uint64(5), s.RejectedWeight)
		require.NoError(t, h.f.Submit(ctx, in{Key: b[0], ID: 7, W: 5}, nil), "what is left of MaxInt64, in either shard")
	})
}

// A Flush waits for the inputs admitted before it, a dropped one among them:
// with several shards the word on a drop goes out after the wake-up's lend,
// and the Flush is told only after that word. The test sends the loop its
// own opFlush, whose reply looks at the dropped input's channel.
func TestFlushIsToldAfterTheDropsItWaitedFor(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxInFlightBatches: 2, MaxBatchDelay: time.Hour}, true)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 1), keysIn(h, 1, 2)
		held := []chan answer{h.do(ctx, in{Key: b[0], ID: 1}), h.do(ctx, in{Key: b[1], ID: 2})}
		advance(time.Hour) // b's shard runs both, on every slot: a's shard has none
		w := &waiter[string, in, int]{c: make(chan result[int], 1)}
		require.NoError(t, w.prepare(h.f, in{Key: a[0], ID: 3}))
		s := h.f.shardOf(a[0])
		s.inc <- msg[string, in, int]{op: opAdmit, w: w}
		synctest.Wait()
		assert.Equal(t, 1, h.f.Stats().Queued, "w waits for a slot")
		flushed := make(chan error) // unbuffered: the loop's answer waits for the test
		s.inc <- msg[string, in, int]{op: opFlush, flushed: flushed}
		synctest.Wait()
		select {
		case <-flushed:
			t.Fatal("the round waits for w")
		default:
		}
		s.inc <- msg[string, in, int]{op: opDrop, w: w}
		synctest.Wait()
		select {
		case err := <-flushed:
			assert.NoError(t, err)
			assert.Len(t, w.c, 1, "w's caller had its word when the Flush was told")
		default:
			t.Fatal("the Flush is told once w is dropped")
		}
		assert.Equal(t, result[int]{err: errDropped}, <-w.c)
		h.hold <- struct{}{}
		h.hold <- struct{}{}
		synctest.Wait()
		for _, c := range held {
			got(t, c)
		}
	})
}
