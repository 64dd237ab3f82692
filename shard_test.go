package ferry

import (
	"context"
	"fmt"
	"math"
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
	for _, tc := range []struct {
		n, workers, queued int
		weight             int64
		want               int
	}{
		{0, 4, 4096, 0, 1}, // the default: one room
		{0, 64, 1 << 20, 1 << 20, 1},
		{3, 3, 3, 0, 3},
		{3, 3, 3, 3, 3},
	} {
		n, err := shardCount(tc.n, tc.workers, limits{queued: tc.queued, queuedWeight: tc.weight})
		require.NoError(t, err)
		assert.Equal(t, tc.want, n, "%+v", tc)
	}
	for _, lim := range []struct {
		workers, queued int
		weight          int64
	}{{2, 3, 0}, {3, 2, 0}, {3, 3, 2}} {
		_, err := shardCount(3, lim.workers, limits{queued: lim.queued, queuedWeight: lim.weight})
		assert.ErrorContains(t, err, "Config.Shards is 3, more than MaxInFlightBatches, MaxQueued or MaxQueuedWeight (2) allow")
	}
	cfg := inCfg
	cfg.Shards = -1
	_, err := New(func(context.Context, string, []in) ([]int, error) { return nil, nil }, cfg)
	assert.ErrorContains(t, err, "Config.Shards is negative")
}

func TestShare(t *testing.T) {
	for _, tc := range []struct{ total, n int }{{10, 3}, {3, 3}, {7, 2}, {math.MaxInt, 7}} {
		sum := 0
		for i := range tc.n {
			s := share(tc.total, tc.n, i)
			assert.GreaterOrEqual(t, s, tc.total/tc.n)
			sum += s
		}
		assert.Equal(t, tc.total, sum, "the shares of %d over %d sum to it", tc.total, tc.n)
	}
	assert.Equal(t, int64(math.MaxInt64), share(int64(math.MaxInt64), 1, 0))
}

func TestStatsAddSaturates(t *testing.T) {
	s := Stats{Queued: 1, Weight: math.MaxInt64 - 1, Admitted: 2, RejectedFull: 3}
	s.add(Stats{Queued: 2, Weight: 5, Admitted: 1, RejectedFull: 1, OnBatchPanics: 1})
	assert.Equal(t, Stats{Queued: 3, Weight: math.MaxInt64, Admitted: 3, RejectedFull: 4, OnBatchPanics: 1}, s)
}

// The room and the workers are split: every shard takes its share and no
// more, and the shares sum to the totals configured.
func TestShardsSplitTheBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 3, MaxQueued: 10, MaxInFlightBatches: 5, MaxBatchDelay: time.Hour}, true)
		defer h.f.Close()
		ctx := context.Background()
		for sh, room := range []int{4, 3, 3} {
			keys := keysIn(h, sh, room+1)
			for _, k := range keys[:room] {
				require.NoError(t, h.f.Submit(ctx, in{Key: k, W: 1}, nil), "shard %d", sh)
			}
			err := h.f.Submit(ctx, in{Key: keys[room], W: 1}, nil)
			assert.ErrorIs(t, err, ErrRejected, "shard %d holds %d", sh, room)
			assert.ErrorContains(t, err, fmt.Sprintf("%d inputs waiting", room))
		}
		s := h.f.Stats()
		assert.Equal(t, Stats{Queued: 10, Weight: 10, Lanes: 10, Admitted: 10, Rejected: 3, RejectedFull: 3}, s)

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
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueuedWeight: 5, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 1)[0], keysIn(h, 1, 1)[0]
		require.NoError(t, h.f.Submit(ctx, in{Key: a, W: 3}, nil))
		err := h.f.Submit(ctx, in{Key: a, W: 1}, nil)
		assert.ErrorIs(t, err, ErrRejected, "shard 0's share of the weight is 3")
		require.NoError(t, h.f.Submit(ctx, in{Key: b, W: 2}, nil))
		err = h.f.Submit(ctx, in{Key: b, W: 3}, nil)
		assert.ErrorContains(t, err, "input weight 3 is more than MaxQueuedWeight 2 (its shard's share of 5)", "what a shard can never hold is heavy")
		assert.Equal(t, int64(5), h.f.Stats().Weight)
	})
}

// Every per-key rule holds with shards, and Close, Shutdown, Flush and Stats
// span them all.
func TestShardsSpanEveryShard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 6, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 2), keysIn(h, 1, 3)
		require.NoError(t, h.f.Submit(ctx, in{Key: b[0], ID: 100}, nil))
		_, err := h.f.DoMany(ctx, []in{{Key: a[0]}, {Key: b[0]}, {Key: b[1]}, {Key: b[2]}})
		assert.ErrorIs(t, err, ErrRejected, "shard 1 has room for 2 of its 3")
		s := h.f.Stats()
		assert.Equal(t, 1, s.Queued, "and shard 0 admitted none either")
		assert.Equal(t, uint64(4), s.RejectedFull, "all four counted")

		many := make(chan []int, 1)
		go func() {
			outs, err := h.f.DoMany(ctx, []in{{Key: a[0], ID: 1}, {Key: b[1], ID: 2}, {Key: a[1], ID: 3}, {Key: a[0], ID: 4}})
			assert.NoError(t, err)
			many <- outs
		}()
		synctest.Wait()
		assert.Equal(t, 5, h.f.Stats().Queued, "shard 0 is full, shard 1 has one left")
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
		assert.Equal(t, Stats{Lanes: 0, Admitted: 7, Dropped: 2, Batches: 4, Taken: 5, Rejected: 4, RejectedFull: 4}, h.f.Stats(),
			"dropped from both shards")

		_, err = h.f.DoMany(ctx, []in{{Key: a[0], W: math.MaxInt64}, {Key: b[0], W: 1}})
		assert.ErrorContains(t, err, "total weight passes MaxInt64", "though each shard's part fits its room")
		assert.Equal(t, 0, h.f.Stats().Queued)
	})
}
