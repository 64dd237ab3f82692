package ferry

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A paused key (issue 24, rule 2): PauseOnError, Resume, ErrPaused.

// The pure bookkeeping: a key paused keeps its first error and time, and
// its error matches ErrPaused and the failure; resume forgets it, once; list
// gives the keys in the order they paused, a key paused again counting from
// its last pause; the map is rebuilt once it holds a quarter of its peak.
// Mutations: pause overwriting the error (the second failure shows) or
// reporting a pause twice; resume reporting true twice; list sorted by key
// (2 before 3, which paused earlier).
func TestPauses(t *testing.T) {
	var p pauses[int]
	_, ok := p.of(1)
	assert.False(t, ok, "the zero value pauses nothing")
	assert.Nil(t, p.list())
	first, second := errors.New("first"), errors.New("second")
	err, fresh := p.pause(1, first, 5, false)
	assert.True(t, fresh)
	assert.ErrorIs(t, err, ErrPaused)
	assert.ErrorIs(t, err, first)
	again, fresh := p.pause(1, second, 6, false)
	assert.Same(t, err, again, "a key paused keeps its first error")
	assert.False(t, fresh, "once per pause")
	got, ok := p.of(1)
	assert.True(t, ok)
	assert.NotErrorIs(t, got, second)
	_, ok = p.of(2)
	assert.False(t, ok)
	assert.Equal(t, 1, p.count())
	p.pause(3, first, 7, false)
	p.pause(2, first, 8, false)
	assert.Equal(t, []int{1, 3, 2}, listed(p.list()))
	assert.True(t, p.resume(1))
	assert.False(t, p.resume(1), "resume is a no-op on a key not paused")
	p.pause(1, second, 9, false)
	ks := p.list()
	assert.Equal(t, []int{3, 2, 1}, listed(ks), "a key paused again counts from its last pause")
	assert.Equal(t, uint64(9), ks[2].order)
	assert.Equal(t, 3, p.count())
	for k := range 3 {
		p.resume(k + 1)
	}

	for k := range 4 * shrinkLanes {
		p.pause(k, first, 0, false)
	}
	for k := range 4*shrinkLanes - 1 {
		p.resume(k)
	}
	assert.Equal(t, 1, p.count())
	assert.Less(t, p.keys.peak, 4*shrinkLanes, "rebuilt once a quarter of its peak")
}

// listed is the keys of ks, in order.
func listed[K comparable](ks []pausedKey[K]) []K {
	var out []K
	for _, pk := range ks {
		out = append(out, pk.key)
	}
	return out
}

// gate is a Call that fails the inputs fail picks and returns only once
// released: one call at a time, each waiting on open.
type gate struct {
	open  chan struct{}
	fail  func(x in) bool
	mu    sync.Mutex
	calls [][]int
}

func newGate(fail func(x in) bool) *gate { return &gate{open: make(chan struct{}), fail: fail} }

func (g *gate) call(ctx context.Context, _ string, ins []in) ([]int, error) {
	g.mu.Lock()
	var ids []int
	for _, x := range ins {
		ids = append(ids, x.ID)
	}
	g.calls = append(g.calls, ids)
	g.mu.Unlock()
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for _, x := range ins {
		if g.fail(x) {
			return nil, errBoom
		}
	}
	return tens(ins), nil
}

func (g *gate) got() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]int(nil), g.calls...)
}

func paused(t *testing.T, err error) {
	t.Helper()
	assert.ErrorIs(t, err, ErrPaused)
	assert.ErrorIs(t, err, errBoom, "the failure that paused the key")
}

// A call that fails for good, after its retries, pauses its key: the input
// that waited in the lane through the retry, and every later Do, Submit and
// DoMany input of the key, get ErrPaused with the failure at once, and no
// call sees them; other keys go on, a DoMany's other inputs too; Stats
// counts the key. Resume lets the key in again. Mutations: no pause (3 is
// called after the retry); the lane not cleared (3 waits on); admit not
// looking at the paused keys (5 is called); admitPart not looking (the
// DoMany's 7 is called); resume a no-op (8 gets ErrPaused).
func TestPauseOnError(t *testing.T) {
	bubble(t, func(t *testing.T) {
		c := newFlaky(func(x in, _ int) bool { return x.ID == 1 })
		f := newFlakyFerry(t, c, Config[string, in]{
			PauseOnError: true, MaxInFlightBatches: 2,
			Retry: retryN(2, func(int) time.Duration { return time.Second }),
		})
		defer f.Close()
		ctx := context.Background()
		start := time.Now()
		first := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		later := do(f, ctx, in{Key: "a", ID: 3})
		synctest.Wait()
		pending(t, later)
		advance(time.Second)
		err := got(t, first).err
		assert.ErrorIs(t, err, errBoom)
		assert.NotErrorIs(t, err, ErrPaused, "the failed call's own inputs get its error")
		paused(t, got(t, later).err)
		assert.Equal(t, time.Second, time.Since(start))
		st := f.Stats()
		assert.Equal(t, 1, st.Paused)
		assert.Equal(t, uint64(1), st.PausedOut)
		assert.Zero(t, st.Queued)
		assert.Zero(t, st.Lanes, "a paused key holds no lane")

		_, err = f.Do(ctx, in{Key: "a", ID: 5})
		paused(t, err)
		err = f.Submit(ctx, in{Key: "a", ID: 6}, func(int, error) { t.Error("done of a refused Submit") })
		paused(t, err)
		outs, err := f.DoMany(ctx, []in{{Key: "b", ID: 4}, {Key: "a", ID: 7}})
		var errs Errors
		require.ErrorAs(t, err, &errs)
		assert.NoError(t, errs[0])
		paused(t, errs[1])
		assert.Equal(t, 40, outs[0], "other keys go on")
		assert.Equal(t, [][]int{{1}, {1}, {4}}, ids(c.got(t)))

		f.Resume("a")
		f.Resume("a") // a no-op
		out, err := f.Do(ctx, in{Key: "a", ID: 8})
		assert.NoError(t, err)
		assert.Equal(t, 80, out)
		assert.Zero(t, f.Stats().Paused)
	})
}

// A paused key's waiting Submits are told in their done after the failed
// batch's own done, in order, and a Flush waits for them. Mutations:
// notifyPaused not waiting for the key's completions (2's done runs before
// 1's returns); the notifier not counted in the Flush round (Flush returns
// while 3's done runs).
func TestPausedSubmitsInOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		g := newGate(func(x in) bool { return x.ID == 1 })
		f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true})
		require.NoError(t, err)
		defer f.Close()
		var mu sync.Mutex
		var order []string
		slow := make(chan struct{})
		rec := func(name string, hold chan struct{}) func(int, error) {
			return func(_ int, err error) {
				if hold != nil {
					<-hold
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case errors.Is(err, ErrPaused) && errors.Is(err, errBoom):
					order = append(order, name+" paused")
				case errors.Is(err, errBoom):
					order = append(order, name+" failed")
				default:
					order = append(order, name+" ?")
				}
			}
		}
		ctx := context.Background()
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 1}, rec("1", slow)))
		synctest.Wait()
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 2}, rec("2", nil)))
		hold3 := make(chan struct{})
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 3}, rec("3", hold3)))
		g.open <- struct{}{} // 1's call fails: 2 and 3 wait in the paused lane
		synctest.Wait()
		mu.Lock()
		assert.Empty(t, order, "2's done waits for 1's")
		mu.Unlock()
		flushed := make(chan error, 1)
		go func() { flushed <- f.Flush(ctx) }()
		close(slow)
		synctest.Wait()
		assert.Empty(t, flushed, "Flush waits for 3's done")
		close(hold3)
		synctest.Wait()
		require.Len(t, flushed, 1)
		assert.NoError(t, <-flushed)
		assert.Equal(t, []string{"1 failed", "2 paused", "3 paused"}, order)
		assert.Equal(t, [][]int{{1}}, g.got())
	})
}

// A direct call that fails pauses its key too, and the input that joined
// its lane meanwhile gets ErrPaused. Mutation: releaseDirect without the
// failure (2 is called).
func TestPauseDirect(t *testing.T) {
	bubble(t, func(t *testing.T) {
		g := newGate(func(x in) bool { return x.ID == 1 })
		f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true, DirectCalls: true})
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		a := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := do(f, ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		g.open <- struct{}{}
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, errBoom)
		paused(t, got(t, b).err)
		assert.Equal(t, [][]int{{1}}, g.got())
		assert.Equal(t, 1, f.Stats().Paused)
	})
}

// What ends a call's context is no fault of its key: a direct call whose
// caller gave up, and a batch whose callers all gave up (CancelAbandoned),
// pause nothing. Mutation: failedForGood not looking at ctx (the next Do of
// each key gets ErrPaused).
func TestPauseNotForTheCallersEnd(t *testing.T) {
	for _, direct := range []bool{true, false} {
		t.Run(map[bool]string{true: "direct", false: "abandoned"}[direct], func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				g := newGate(func(in) bool { return false })
				f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true,
					DirectCalls: direct, CancelAbandoned: !direct})
				require.NoError(t, err)
				defer f.Close()
				ctx, cancel := context.WithCancel(context.Background())
				a := do(f, ctx, in{Key: "a", ID: 1})
				synctest.Wait()
				cancel()
				synctest.Wait()
				assert.ErrorIs(t, got(t, a).err, context.Canceled)
				b := do(f, context.Background(), in{Key: "a", ID: 2})
				synctest.Wait()
				g.open <- struct{}{}
				synctest.Wait()
				assert.Equal(t, answer{20, nil}, got(t, b))
				assert.Zero(t, f.Stats().Paused)
			})
		})
	}
}

// Shutdown answers a paused key's waiting inputs with ErrPaused rather than
// running them, and ends. Mutation: the lane not cleared (2 is called as
// the room drains).
func TestPauseInShutdown(t *testing.T) {
	bubble(t, func(t *testing.T) {
		g := newGate(func(x in) bool { return x.ID == 1 })
		f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true})
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		a := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		b := do(f, ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		done := make(chan error, 1)
		go func() { done <- f.Shutdown(ctx) }()
		synctest.Wait()
		g.open <- struct{}{}
		synctest.Wait()
		assert.ErrorIs(t, got(t, a).err, errBoom)
		paused(t, got(t, b).err)
		require.Len(t, done, 1)
		assert.NoError(t, <-done)
		assert.Equal(t, [][]int{{1}}, g.got())
	})
}

// Resume after Close is a no-op, and Resume of a key never paused too.
func TestResumeNoOp(t *testing.T) {
	f, err := New(newGate(func(in) bool { return false }).call, Config[string, in]{Key: inCfg.Key, PauseOnError: true})
	require.NoError(t, err)
	f.Resume("never")
	require.NoError(t, f.Close())
	f.Resume("a")
}

// A paused key's input takes no room in one loop (it is refused as
// ErrPaused), so its shard borrows none for it, even within a wake-up:
// with MaxQueued 1 another shard admits its one input while the refusal is
// handled. Resume, from a done, lets the key in again. Mutation: share.need
// counting a paused key's inputs (the Submit is rejected).
func TestPausedInputBorrowsNoRoom(t *testing.T) {
	bubble(t, func(t *testing.T) {
		call := func(_ context.Context, key string, ins []in) ([]int, error) {
			if ins[0].ID == 1 {
				return nil, errBoom
			}
			return tens(ins), nil
		}
		cfg := inCfg
		cfg.Shards, cfg.MaxQueued, cfg.PauseOnError, cfg.MaxBatchDelay = 2, 1, true, time.Hour
		f, err := New(call, cfg)
		require.NoError(t, err)
		defer f.Close()
		h := &harness{t: t, f: f}
		ctx := context.Background()
		a, b := keysIn(h, 0, 1)[0], keysIn(h, 1, 1)[0]
		first := do(f, ctx, in{Key: a, ID: 1})
		synctest.Wait()
		require.NoError(t, f.Flush(ctx))
		synctest.Wait()
		assert.ErrorIs(t, got(t, first).err, errBoom)
		spareOf(h) // shard 0 gives back its allowance, first's room, before it stops

		var refused chan answer
		release := stopAfter(h, 0, stop(h, 0), func() { refused = do(f, ctx, in{Key: a, ID: 2}) })
		assert.Equal(t, budget{1, math.MaxInt64}, spareOf(h), "nothing borrowed for a paused key's input")
		resumed := make(chan struct{})
		require.NoError(t, f.Submit(ctx, in{Key: b, ID: 3}, func(int, error) { f.Resume(a); close(resumed) }),
			"the room holds nothing")
		release()
		synctest.Wait()
		paused(t, got(t, refused).err)
		require.NoError(t, f.Flush(ctx))
		<-resumed
		out, err := f.Do(ctx, in{Key: a, ID: 4})
		assert.NoError(t, err)
		assert.Equal(t, 40, out)
	})
}

// A DoMany that no room could hold (more inputs than MaxQueued) is refused
// whole though one of its keys is paused, whose input would take no room:
// its caller judged it whole, and over several shards merged its inputs
// into one shard's part, which must never let them in (found by FuzzFerry:
// that shard let in an input of another shard's key, whose call then ran
// beside the key's own). Mutation: letInPart judging never-fits on the
// inputs of keys not paused (the two fit: refused for want of room here,
// and let in where the shard held room).
func TestPausedKeyInDoManyThatNeverFits(t *testing.T) {
	bubble(t, func(t *testing.T) {
		g := newGate(func(x in) bool { return x.ID == 1 })
		close(g.open)
		f, err := New(g.call, Config[string, in]{Key: inCfg.Key, Shards: 2, MaxQueued: 2, PauseOnError: true})
		require.NoError(t, err)
		defer f.Close()
		h := &harness{t: t, f: f}
		a, b := keysIn(h, 0, 2), keysIn(h, 1, 1)
		ctx := context.Background()
		_, err = f.Do(ctx, in{Key: a[1], ID: 1})
		assert.ErrorIs(t, err, errBoom) // a[1] is paused
		_, err = f.DoMany(ctx, []in{{Key: a[0], ID: 2}, {Key: b[0], ID: 3}, {Key: a[1], ID: 4}})
		assert.ErrorIs(t, err, ErrRejected)
		assert.ErrorContains(t, err, "3 inputs, more than MaxQueued 2")
		assert.Equal(t, [][]int{{1}}, g.got())
		assert.Zero(t, f.Stats().Queued)
	})
}
