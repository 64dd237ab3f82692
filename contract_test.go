package ferry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The contract at its edges: where Close, Flush and Shutdown may be called
// from, what ctx's error alone means, and WaitForRoom over several shards
// with callers that give up and a Shutdown. Each test forces its schedule:
// a loop stopped inside a wake-up (stopLoop) holds the messages behind it
// in their order.

// stopLoop makes s's loop wait inside a wake-up, on an opStats whose reply
// no one reads yet, until the returned func is called.
func stopLoop[K comparable, I, O any](s *shard[K, I, O]) (resume func()) {
	c := make(chan Stats)
	s.inc <- msg[K, I, O]{op: opStats, stats: c}
	synctest.Wait()
	return func() { <-c; synctest.Wait() }
}

// takenOrNot requires the rule every answer keeps: an error that matches
// ctx's error matches ErrDropped too (no call saw the input), unless a call
// took it; here none did.
func takenOrNot(t *testing.T, err error) {
	t.Helper()
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		assert.ErrorIs(t, err, ErrDropped, "ctx's error alone says a call saw the input; none did")
	}
}

// Retry runs on the goroutine that made the call, batched or direct, so
// Close from it starts the close and returns at once, and Flush and
// Shutdown return an error at once, as from a call, a done or an OnBatch.
// Mutation: inUserCode not naming askRetry (Close waits for the call that
// runs it: the bubble deadlocks; Flush and Shutdown likewise).
func TestRetryMayCloseFlushOrShutdown(t *testing.T) {
	for _, direct := range []bool{false, true} {
		for _, what := range []string{"Close", "Flush", "Shutdown"} {
			t.Run(fmt.Sprintf("%s/direct=%v", what, direct), func(t *testing.T) {
				bubble(t, func(t *testing.T) {
					ctx := context.Background()
					var f *Ferry[string, in, int]
					said := make(chan error, 1)
					cfg := inCfg
					cfg.Shards, cfg.DirectCalls = 1, direct
					cfg.Retry = func(_ string, attempt int, _ error) (time.Duration, bool) {
						if attempt > 1 {
							return 0, false
						}
						var err error
						switch what {
						case "Close":
							err = f.Close()
						case "Flush":
							err = f.Flush(ctx)
						case "Shutdown":
							err = f.Shutdown(ctx)
						}
						said <- err
						return time.Hour, true
					}
					var err error
					f, err = New(func(context.Context, string, []in) ([]int, error) { return nil, errBoom }, cfg)
					require.NoError(t, err)
					start := time.Now()
					_, err = f.Do(ctx, in{Key: "a", ID: 1})
					assert.ErrorIs(t, err, errBoom)
					if what == "Close" {
						assert.NoError(t, <-said)
						assert.ErrorIs(t, err, ErrClosed, "the close ended the backoff")
					} else {
						assert.ErrorContains(t, <-said, "Retry")
					}
					require.NoError(t, f.Close())
					if what == "Close" {
						assert.Zero(t, time.Since(start), "nothing waited for the hour's backoff")
					}
				})
			})
		}
	}
}

// A Do whose ctx ends as its key is paused, its input waiting in the lane,
// gets ErrPaused: the loop answered it before it read the drop, and no call
// saw it. Mutation: abandon reading only errDropped and errClaimed (ctx's
// error alone).
func TestDoCtxEndsAsItsKeyPauses(t *testing.T) {
	bubble(t, func(t *testing.T) {
		g := newGate(func(x in) bool { return x.ID == 1 })
		f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true})
		require.NoError(t, err)
		defer f.Close()
		first := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		second := do(f, ctx, in{Key: "a", ID: 2}) // waits: a's call is in flight
		synctest.Wait()
		resume := stopLoop(f.shards[0])
		close(g.open) // the failed call's release, which pauses a, waits behind the stop
		synctest.Wait()
		cancel() // and the drop behind the release
		synctest.Wait()
		resume()
		assert.ErrorIs(t, got(t, first).err, errBoom)
		err = got(t, second).err
		paused(t, err)
		takenOrNot(t, err)
		assert.Equal(t, [][]int{{1}}, g.got())
	})
}

// A DoMany whose ctx ends as its key is paused gets each input's ErrPaused,
// not ctx's error alone. Mutation: group.abandon giving ctx's error to every
// input not dropped.
func TestDoManyCtxEndsAsItsKeyPauses(t *testing.T) {
	bubble(t, func(t *testing.T) {
		g := newGate(func(x in) bool { return x.ID == 1 })
		f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true})
		require.NoError(t, err)
		defer f.Close()
		first := do(f, context.Background(), in{Key: "a", ID: 1})
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		many := doManyAsync(f, ctx, in{Key: "a", ID: 2}, in{Key: "a", ID: 3})
		synctest.Wait()
		resume := stopLoop(f.shards[0])
		close(g.open)
		synctest.Wait()
		cancel()
		synctest.Wait()
		resume()
		assert.ErrorIs(t, got(t, first).err, errBoom)
		a := <-many
		var errs Errors
		require.ErrorAs(t, a.err, &errs)
		require.Len(t, errs, 2)
		for _, err := range errs {
			paused(t, err)
			takenOrNot(t, err)
		}
		assert.Equal(t, [][]int{{1}}, g.got())
	})
}

// A Do whose ctx ends as Close drains its waiting input gets ErrClosed: the
// close answered it before the loop read the drop. Mutation: abandon reading
// only errDropped and errClaimed.
func TestDoCtxEndsAsCloseAnswers(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{MaxBatchDelay: time.Hour}, false)
		ctx, cancel := context.WithCancel(context.Background())
		x := h.do(ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		resume := stopLoop(h.f.shards[0])
		closed := make(chan error, 1)
		go func() { closed <- h.f.Close() }()
		synctest.Wait()
		cancel()
		synctest.Wait()
		resume()
		err := got(t, x).err
		assert.ErrorIs(t, err, ErrClosed)
		takenOrNot(t, err)
		assert.NoError(t, <-closed)
		assert.Empty(t, h.seen())
	})
}

// Do, DoMany and Submit given a ctx that had already ended admit nothing:
// ctx's error, matching ErrDropped (safe to send again). Mutation: ctxErr
// alone at their first check.
func TestEndedCtxIsDropped(t *testing.T) {
	h := newHarness(t, Config[string, in]{}, false)
	defer h.f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := h.f.Do(ctx, in{Key: "a"})
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrDropped)
	_, err = h.f.DoMany(ctx, []in{{Key: "a"}, {Key: "b"}})
	var errs Errors
	require.ErrorAs(t, err, &errs)
	require.Len(t, errs, 2)
	for _, err := range errs {
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, ErrDropped)
	}
	err = h.f.Submit(ctx, in{Key: "a"}, func(int, error) { t.Error("done of a Submit not admitted") })
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, err, ErrDropped)
	assert.Empty(t, h.seen())
	assert.Zero(t, h.f.Stats().Admitted)
}

// Over several shards, admissions waiting for room are let in in the order
// they began to wait, whichever shard holds each: a1 (shard 0), b1 (shard
// 1), then a2 (shard 0), a minute apart, each due an hour after its
// submission; the room holds one. At 1h x goes and a1 goes in; at 1h1m a1
// goes, and its room must go to b1, due at 1h2m, before a2. Mutation: the
// pool's reservations in the order they were made (a shard's keeps its
// place for its next waiter: a2 goes in first, and b1's call starts at
// 1h3m).
func TestWaitForRoomOrderAcrossShards(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 1, MaxBatchDelay: time.Hour, WaitForRoom: true}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 3), keysIn(h, 1, 1)
		x := h.do(ctx, in{Key: a[0], ID: 1})
		synctest.Wait()
		advance(time.Minute)
		a1 := h.do(ctx, in{Key: a[1], ID: 2})
		advance(time.Minute)
		b1 := h.do(ctx, in{Key: b[0], ID: 3})
		advance(time.Minute)
		a2 := h.do(ctx, in{Key: a[2], ID: 4})
		synctest.Wait()
		assert.Equal(t, 3, h.f.Stats().Waiting)
		advance(time.Hour - 3*time.Minute)
		got(t, x)
		pending(t, a1)
		advance(time.Minute)
		got(t, a1)
		pending(t, b1)
		advance(time.Minute)
		got(t, b1)
		pending(t, a2)
		advance(time.Minute)
		got(t, a2)
		at := map[int]time.Duration{}
		for _, c := range h.seen() {
			at[c.ids[0]] = c.at
		}
		hour, m := time.Hour, time.Minute
		assert.Equal(t, map[int]time.Duration{1: hour, 2: hour + m, 3: hour + 2*m, 4: hour + 3*m}, at)
	})
}

// A DoMany that gives up while it waits for room, whose admission the loop
// answers before it reads the leave, is never pooled while the loop may
// read it: the loop reads the part's place in the line as it handles the
// leave. Here the DoMany never fits (its word is ErrRejected), and its
// leave is read after the word. Mutation: awaitPart pooling the group
// whatever the leave's outcome (-race reports the loop's read of a pooled
// group; without -race a reused group with fewer parts panics the loop).
func TestDoManyLeaveAfterItsWord(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprint("shards=", shards), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				h := newHarness(t, Config[string, in]{Shards: shards, MaxQueued: 2, MaxBatchDelay: time.Hour, WaitForRoom: true}, false)
				defer h.f.Close()
				ks := keysIn(h, 0, 3)
				resume := stopLoop(h.f.shards[0])
				ctx, cancel := context.WithCancel(context.Background())
				many := doManyAsync(h.f, ctx, in{Key: ks[0]}, in{Key: ks[1]}, in{Key: ks[2]})
				synctest.Wait()
				cancel() // its leave goes behind its admission
				synctest.Wait()
				resume()
				a := <-many
				assert.ErrorIs(t, a.err, ErrRejected)
				// The loop has read the leave once it answers this.
				_ = h.f.Stats()
				for range 4 { // a group from the pool each, in the way of the loop's read
					_, err := h.f.DoMany(context.Background(), []in{{Key: ks[0]}})
					require.NoError(t, h.f.Flush(context.Background()))
					assert.NoError(t, err)
				}
			})
		})
	}
}

// Shutdown over several shards stops every shard's admissions before any
// room it frees lets a waiter in: here shard 0 drains x as it shuts down,
// and shard 1, which has not read its own shutdown yet (stopped), must not
// let y in with that room. Mutation: Shutdown not marking the shared room as
// ending (y is let in and called).
func TestShutdownOverShardsLetsNoWaiterIn(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 1, MaxBatchDelay: time.Hour, WaitForRoom: true}, false)
		a, b := keysIn(h, 0, 1), keysIn(h, 1, 1)
		ctx := context.Background()
		x := h.do(ctx, in{Key: a[0], ID: 1})
		synctest.Wait()
		y := h.do(ctx, in{Key: b[0], ID: 2})
		synctest.Wait()
		assert.Equal(t, 1, h.f.Stats().Waiting)
		resume := stopLoop(h.f.shards[1])
		done := make(chan error, 1)
		go func() { done <- h.f.Shutdown(ctx) }()
		synctest.Wait()
		resume()
		assert.NoError(t, <-done)
		assert.Equal(t, answer{10, nil}, got(t, x))
		assert.ErrorIs(t, got(t, y).err, ErrClosed)
		assert.Equal(t, [][]int{{1}}, ids(h.seen()))
	})
}
