package ferry

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Parked backoffs (issue 37, item 1): a batch whose call failed waits out its
// backoff parked in its lane, holding the key and no worker.

// callsOf is the ids and times of key's calls.
func callsOf(calls []called, key string) ([][]int, []time.Duration) {
	var ids [][]int
	var at []time.Duration
	for _, c := range calls {
		if c.key == key {
			ids, at = append(ids, c.ids), append(at, c.at)
		}
	}
	return ids, at
}

// The test: with one worker, a key in an hour-long backoff does not
// delay another key's call; its retry runs at exactly t0+1h, carrying
// exactly its failed inputs (Attempt 2), before the key's inputs that joined
// later. Mutations: the worker sleeping in its backoff (b called at 1h);
// park ignoring d (a retried at t0); take handing out the lane's items
// before the parked batch ([3] before [1]); the retry carrying every input
// ([1 2]).
func TestParkedBackoffHoldsNoWorker(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return x.ID == 1 && seen == 1 })
		var rep reports
		f := newFlakyFerry(t, c, Config[string, in]{
			MaxInFlightBatches: 1,
			Retry:              retryN(3, func(int) time.Duration { return time.Hour }),
			OnBatch:            rep.on,
		})
		defer f.Close()
		ctx := context.Background()
		first := doManyAsync(f, ctx, in{Key: "a", ID: 1}, in{Key: "a", ID: 2})
		synctest.Wait()
		st := f.Stats()
		assert.Equal(t, 1, st.Parked)
		assert.Zero(t, st.Busy, "no call in flight")
		b := do(f, ctx, in{Key: "b", ID: 4})
		later := do(f, ctx, in{Key: "a", ID: 3})
		synctest.Wait()
		assert.Equal(t, answer{40, nil}, got(t, b), "b's call runs at once")
		bids, bat := callsOf(c.got(t), "b")
		assert.Equal(t, [][]int{{4}}, bids)
		assert.Equal(t, []time.Duration{0}, bat)
		advance(time.Hour - 1)
		pending(t, later)
		require.Empty(t, first)
		advance(1)
		aids, aat := callsOf(c.got(t), "a")
		assert.Equal(t, [][]int{{1, 2}, {1}, {3}}, aids)
		assert.Equal(t, []time.Duration{0, time.Hour, time.Hour}, aat)
		assert.Equal(t, manyAnswer{[]int{10, 20}, nil}, <-first)
		assert.Equal(t, answer{30, nil}, got(t, later))
		var attempts, sizes []int
		for _, b := range rep.get(t) {
			if b.Key == "a" {
				attempts, sizes = append(attempts, b.Attempt), append(sizes, b.Size)
			}
		}
		assert.Equal(t, []int{1, 2, 1}, attempts)
		assert.Equal(t, []int{2, 1, 1}, sizes)
		assert.Zero(t, f.Stats().Parked)
	})
}

// Resume ends a park at once, and the backoff saturates: MaxInt64 from now
// is no overflow into the past. Mutations: resume not unparking (the retry
// never comes); an unsaturated deadline (retried at once).
func TestResumeEndsAPark(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return seen == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{
			Retry: retryN(2, func(int) time.Duration { return math.MaxInt64 }),
		})
		defer f.Close()
		time.Sleep(time.Minute) // the clock is past the origin: now+MaxInt64 overflows
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		advance(time.Minute)
		pending(t, a)
		assert.Len(t, c.got(t), 1)
		f.Resume("a")
		synctest.Wait()
		assert.Equal(t, answer{10, nil}, got(t, a))
		_, at := callsOf(c.got(t), "a")
		assert.Equal(t, []time.Duration{time.Minute, 2 * time.Minute}, at)
	})
}

// Close during a park ends it at once: the parked inputs get their last
// error matching ErrClosed, a Submit's done runs off the loop, and Close
// returns only once it has. Mutations: drain leaving parks parked (Close
// returns after the backoff, a day on); the worker not checking the batch's
// context (a second call).
func TestCloseDuringAPark(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(in, int) bool { return true })
		f := newFlakyFerry(t, c, Config[string, in]{
			Retry: retryN(3, func(int) time.Duration { return 24 * time.Hour }),
		})
		start := time.Now()
		var mu sync.Mutex
		var got []error
		done := func(_ int, err error) {
			time.Sleep(time.Second) // Close waits for it
			mu.Lock()
			got = append(got, err)
			mu.Unlock()
		}
		require.NoError(t, f.Submit(context.Background(), in{Key: "a", ID: 1}, done))
		synctest.Wait()
		require.NoError(t, f.Close())
		assert.Equal(t, time.Second, time.Since(start), "Close waited for done")
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 1)
		assert.ErrorIs(t, got[0], ErrClosed)
		assert.ErrorIs(t, got[0], errBoom)
		assert.Len(t, c.got(t), 1)
	})
}

// With CancelAbandoned, a park ends once every caller of its batch has
// given up: the key's next input is called at once, not a day later.
// Mutation: abandonParked not unparking (b waits for the backoff).
func TestParkAbandoned(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return x.ID == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{
			CancelAbandoned: true,
			Retry:           retryN(3, func(int) time.Duration { return 24 * time.Hour }),
		})
		defer f.Close()
		ctx, cancel := context.WithCancel(context.Background())
		a := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := do(f, context.Background(), in{Key: "a", ID: 2})
		synctest.Wait()
		pending(t, b)
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, context.Canceled)
		assert.Equal(t, answer{20, nil}, got(t, b))
		assert.Equal(t, [][]int{{1}, {2}}, ids(c.got(t)))
		assert.Zero(t, f.Stats().Parked)
	})
}

// Without CancelAbandoned a park runs out even if every caller gave up;
// then nothing is called again, and the key goes on. Mutation: takeParked
// not leaving out the gone ([1] called again).
func TestParkOfTheGone(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return x.ID == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{
			Retry: retryN(3, func(int) time.Duration { return time.Hour }),
		})
		defer f.Close()
		ctx, cancel := context.WithCancel(context.Background())
		a := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := do(f, context.Background(), in{Key: "a", ID: 2})
		cancel()
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, context.Canceled)
		advance(time.Hour - 1)
		pending(t, b)
		advance(1)
		assert.Equal(t, answer{20, nil}, got(t, b))
		assert.Equal(t, [][]int{{1}, {2}}, ids(c.got(t)))
	})
}

// A Flush during a park waits for it, as it waited for a backoff; Shutdown
// lets it run out and its retry answer. Mutations: startRound not counting
// parks (Flush returns at once); shutdown making parks due (retried at once).
func TestFlushAndShutdownDuringAPark(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, seen int) bool { return seen == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{
			Retry: retryN(3, func(int) time.Duration { return time.Hour }),
		})
		start := time.Now()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		require.NoError(t, f.Flush(context.Background()))
		assert.Equal(t, time.Hour, time.Since(start))
		synctest.Wait() // a's Do has its answer, but may not have run since
		assert.Equal(t, answer{10, nil}, got(t, a))

		b := do(f, context.Background(), in{Key: "a", ID: 2})
		synctest.Wait()
		require.NoError(t, f.Shutdown(context.Background()))
		assert.Equal(t, 2*time.Hour, time.Since(start))
		synctest.Wait()
		assert.Equal(t, answer{20, nil}, got(t, b))
	})
}
