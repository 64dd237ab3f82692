package ferry

import (
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is the origin: the core's times are Durations since it.
const t0 time.Duration = 0

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// core is a state under test with string keys and int entries, which
// keeps the continuations that the core only marks (see state.park).
type core struct {
	t *testing.T
	*state[string, int]
	next  int
	conts map[string]int // by key, its continuation's entry
}

func newCore(t *testing.T, lim limits) *core {
	if lim.batchSize == 0 {
		lim.batchSize = 4
	}
	if lim.queued == 0 {
		lim.queued = 100
	}
	return &core{t: t, state: newState[string, int](lim), conts: map[string]int{}}
}

// park parks key's busy lane for d at now, with continuation cont.
func (c *core) park(key string, cont int, d, now time.Duration) {
	c.state.park(key, d, now)
	c.conts[key] = cont
}

// parkHeld holds key's busy lane (see state.hold), with continuation cont.
func (c *core) parkHeld(key string, cont int) {
	c.state.hold(key)
	c.conts[key] = cont
}

// take is state.take with a continuation handed out as a batch of its entry.
func (c *core) take(now time.Duration, buf []int) (string, []int, bool) {
	key, batch, cont, ok := c.state.take(now, buf)
	if cont {
		batch = append(batch, c.conts[key])
		delete(c.conts, key)
	}
	return key, batch, ok
}

// in admits the next entry (numbered from 0) and returns its number.
func (c *core) in(key string, weight, rank int64, at time.Duration) (int, outcome, ticket) {
	e := c.next
	c.next++
	o, tk := c.admit(key, weight, rank, at, at, e)
	require.NoError(c.t, checkState(c.state))
	return e, o, tk
}

// add admits an input of weight 1 and rank 0 and requires that it waits.
func (c *core) add(key string, at time.Duration) int {
	e, o, _ := c.in(key, 1, 0, at)
	require.Equal(c.t, admitted, o)
	return e
}

// takes takes a batch at now and requires it to be key's with these entries.
func (c *core) takes(now time.Duration, key string, entries ...int) {
	c.t.Helper()
	k, batch, ok := c.take(now, nil)
	require.True(c.t, ok, "nothing ready at %v", now)
	require.Equal(c.t, key, k)
	require.Equal(c.t, entries, batch)
	require.NoError(c.t, checkState(c.state))
}

func (c *core) none(now time.Duration) {
	c.t.Helper()
	require.False(c.t, c.sched.hasReady(now))
	k, batch, ok := c.take(now, nil)
	require.False(c.t, ok, "took %s %v at %v", k, batch, now)
}

// heldWith holds key a's lane (see parkHeld) with inputs of these weights
// waiting in it.
func (c *core) heldWith(weights ...int64) {
	c.join("a", 1, 0, t0, t0, -1)
	c.takes(t0, "a", -1)
	c.parkHeld("a", -2)
	for _, w := range weights {
		_, o, _ := c.in("a", w, 0, t0)
		require.Equal(c.t, admitted, o)
	}
}

func (c *core) due(want time.Duration) {
	c.t.Helper()
	got, ok := c.sched.earliest()
	require.True(c.t, ok, "no deadline")
	require.Equal(c.t, want, got)
}

func (c *core) rel(key string, now time.Duration) {
	c.release(key, now)
	require.NoError(c.t, checkState(c.state))
}

func TestAdmitOutcomes(t *testing.T) {
	tests := []struct {
		name  string
		lim   limits
		setup func(c *core)
		w     int64
		want  outcome
	}{
		{"admitted", limits{}, nil, 1, admitted},
		{"closed by drain", limits{}, func(c *core) { c.drain(nil) }, 1, refused},
		{"closed by shutdown", limits{}, func(c *core) { c.shutdown() }, 1, refused},
		{"heavier than the room", limits{queuedWeight: 5}, nil, 6, rejectedHeavy},
		{"heavy even when it could be direct", limits{queuedWeight: 5, direct: true}, nil, 6, rejectedHeavy},
		{"as heavy as the room", limits{queuedWeight: 5}, nil, 5, admitted},
		{"full by count", limits{queued: 2}, func(c *core) { c.add("a", t0); c.add("b", t0) }, 1, rejectedFull},
		{"full by weight", limits{queuedWeight: 5}, func(c *core) { c.in("b", 4, 0, t0) }, 2, rejectedFull},
		{"claimed", limits{direct: true}, nil, 1, claimed},
		{"direct but a delay", limits{direct: true, delay: time.Millisecond}, nil, 1, admitted},
		{"direct ignores a full room", limits{direct: true, queued: 1}, func(c *core) { c.in("b", 1, 0, t0); c.add("b", t0) }, 1, claimed},
		{"direct key has a lane", limits{direct: true}, func(c *core) { c.admit("a", 1, 0, 0, t0, 9) }, 1, admitted},
		// A held lane keeps an eighth of the room: 16/8 inputs, 40/8 weight,
		// one input at least, whatever its weight.
		{"held, within its share", limits{queued: 16}, func(c *core) { c.heldWith(1) }, 1, admitted},
		{"held, its share of inputs", limits{queued: 16}, func(c *core) { c.heldWith(1, 1) }, 1, overHeld},
		{"held, its share of weight", limits{queuedWeight: 40}, func(c *core) { c.heldWith(3) }, 3, overHeld},
		{"held, at its share of weight", limits{queuedWeight: 40}, func(c *core) { c.heldWith(3) }, 2, admitted},
		{"held, one input whatever its weight", limits{queuedWeight: 40}, func(c *core) { c.heldWith() }, 40, admitted},
		{"held, share of a small room", limits{queued: 4}, func(c *core) { c.heldWith(1) }, 1, overHeld},
		{"held, shutting down", limits{queued: 16}, func(c *core) { c.heldWith(1, 1); c.shutdown() }, 1, refused},
		{"held, heavier than the room", limits{queuedWeight: 40}, func(c *core) { c.heldWith(1) }, 41, rejectedHeavy},
		{"held no more", limits{queued: 16}, func(c *core) { c.heldWith(1, 1); c.unpark("a", t0) }, 1, admitted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCore(t, tt.lim)
			if tt.setup != nil {
				tt.setup(c)
			}
			_, got, _ := c.in("a", tt.w, 0, t0)
			assert.Equal(t, tt.want, got)
		})
	}
}

// Every arrow of the lane state diagram in the design document.
func TestLaneArrows(t *testing.T) {
	t.Run("none to busy: claim", func(t *testing.T) {
		c := newCore(t, limits{direct: true})
		_, o, _ := c.in("a", 1, 0, t0)
		require.Equal(t, claimed, o)
		assert.Equal(t, 1, c.busy)
		assert.Len(t, c.lanes.m, 1)
		c.none(t0)
		c.rel("a", t0)
		assert.Empty(t, c.lanes.m)
		assert.Zero(t, c.busy)
	})
	t.Run("none to waiting: partial", func(t *testing.T) {
		c := newCore(t, limits{delay: 10 * time.Millisecond})
		e := c.add("a", ms(1))
		c.due(ms(11))
		c.none(ms(10))
		c.takes(ms(11), "a", e)
	})
	t.Run("none to ready: full", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 1, delay: time.Hour})
		e := c.add("a", t0)
		_, ok := c.sched.earliest()
		assert.False(t, ok)
		c.takes(t0, "a", e)
	})
	t.Run("waiting to ready: full", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 2, delay: time.Hour})
		e0 := c.add("a", t0)
		c.none(t0)
		e1 := c.add("a", ms(1))
		_, ok := c.sched.earliest()
		assert.False(t, ok, "a full lane has no deadline")
		c.takes(ms(1), "a", e0, e1)
	})
	t.Run("waiting to ready: deadline", func(t *testing.T) {
		c := newCore(t, limits{delay: 5 * time.Millisecond})
		e0 := c.add("a", ms(0))
		e1 := c.add("a", ms(3))
		c.due(ms(5)) // the oldest input sets it
		c.none(ms(4))
		c.takes(ms(5), "a", e0, e1)
	})
	t.Run("ready to busy: take", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 2})
		e0, e1, e2 := c.add("a", t0), c.add("a", t0), c.add("a", t0)
		c.takes(t0, "a", e0, e1)
		assert.Equal(t, 1, c.busy)
		assert.Equal(t, 1, c.queued)
		c.none(t0) // busy: e2 waits, whatever the batch rule says
		c.rel("a", t0)
		c.takes(t0, "a", e2)
	})
	t.Run("busy to busy: admit", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 1})
		c.takes(t0, "a", c.add("a", t0))
		e1 := c.add("a", t0)
		e2 := c.add("a", t0)
		c.none(t0)
		assert.Equal(t, 2, c.queued)
		c.rel("a", t0)
		c.takes(t0, "a", e1)
		c.rel("a", t0)
		c.takes(t0, "a", e2)
	})
	t.Run("busy to waiting: release, partial left", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 2, delay: 10 * time.Millisecond})
		e0, e1 := c.add("a", ms(0)), c.add("a", ms(0))
		c.takes(ms(0), "a", e0, e1)
		e2 := c.add("a", ms(4))
		c.rel("a", ms(6))
		c.due(ms(14))
		c.none(ms(13))
		c.takes(ms(14), "a", e2)
	})
	t.Run("busy to ready: release, full left", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 1, delay: time.Hour})
		c.takes(t0, "a", c.add("a", t0))
		e1 := c.add("a", t0)
		c.rel("a", t0)
		c.takes(t0, "a", e1)
	})
	t.Run("busy to none: release, nothing left", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 1})
		c.takes(t0, "a", c.add("a", t0))
		c.rel("a", t0)
		assert.Empty(t, c.lanes.m)
	})
}

func TestBatchRule(t *testing.T) {
	tests := []struct {
		name    string
		lim     limits
		weights []int64
		ranks   []int64
		batches [][]int
	}{
		{"by count", limits{batchSize: 2}, []int64{1, 1, 1}, nil, [][]int{{0, 1}, {2}}},
		{"by weight", limits{batchWeight: 5}, []int64{2, 3, 1}, nil, [][]int{{0, 1}, {2}}},
		{"next would push past", limits{batchWeight: 5}, []int64{2, 4}, nil, [][]int{{0}, {1}}},
		{"heavier than a batch: alone", limits{batchWeight: 5}, []int64{1, 9, 1}, nil, [][]int{{0}, {1}, {2}}},
		{"zero weights fit", limits{batchWeight: 2}, []int64{2, 0, 0, 1}, nil, [][]int{{0, 1, 2}, {3}}},
		{"ascending rank", limits{}, []int64{1, 1, 1}, []int64{2, 0, 1}, [][]int{{1, 2, 0}}},
		{"equal ranks keep arrival order", limits{batchSize: 2}, []int64{1, 1, 1}, []int64{1, 1, 0}, [][]int{{2, 0}, {1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCore(t, tt.lim)
			for i, w := range tt.weights {
				var rank int64
				if tt.ranks != nil {
					rank = tt.ranks[i]
				}
				_, o, _ := c.in("a", w, rank, t0)
				require.Equal(t, admitted, o)
			}
			for _, b := range tt.batches {
				c.takes(t0, "a", b...)
				c.rel("a", t0)
			}
			assert.Empty(t, c.lanes.m)
		})
	}
}

func TestFull(t *testing.T) {
	tests := []struct {
		name    string
		lim     limits
		weights []int64
		full    bool
	}{
		{"fewer than a batch", limits{batchSize: 3}, []int64{1, 1}, false},
		{"a batch by count", limits{batchSize: 2}, []int64{1, 1}, true},
		{"under the weight", limits{batchWeight: 5}, []int64{2, 2}, false},
		{"at the weight", limits{batchWeight: 5}, []int64{2, 3}, true},
		{"the next would push past", limits{batchWeight: 5}, []int64{4, 2}, true},
		{"one heavier than a batch", limits{batchWeight: 5}, []int64{7}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCore(t, tt.lim)
			c.lim.delay = time.Hour
			for _, w := range tt.weights {
				c.in("a", w, 0, t0)
			}
			assert.Equal(t, tt.full, c.sched.hasReady(t0))
		})
	}
}

func TestZeroDelayIsDueAtOnce(t *testing.T) {
	c := newCore(t, limits{batchSize: 10})
	e := c.add("a", t0)
	_, ok := c.sched.earliest()
	assert.False(t, ok)
	c.takes(t0, "a", e)
}

func TestDeadlineIsOldestInputWhateverItsRank(t *testing.T) {
	c := newCore(t, limits{batchSize: 3, delay: 10 * time.Millisecond})
	old, _, _ := c.in("a", 1, 9, ms(0)) // oldest, last in rank order
	young, _, _ := c.in("a", 1, 0, ms(3))
	c.due(ms(10))
	c.none(ms(9))
	c.takes(ms(10), "a", young, old)
	c.rel("a", ms(10))
	assert.Empty(t, c.lanes.m)
}

func TestLateArrivalMovesDeadlineEarlier(t *testing.T) {
	c := newCore(t, limits{batchSize: 3, delay: 10 * time.Millisecond})
	e0 := c.add("a", ms(5))
	c.due(ms(15))
	e1 := c.add("a", ms(2)) // read the clock before e0, reached the loop after
	c.due(ms(12))
	c.none(ms(11))
	c.takes(ms(12), "a", e0, e1)
}

func TestReleaseAfterDeadlinePassedWhileBusy(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, delay: 10 * time.Millisecond})
	c.takes(t0, "a", c.add("a", t0))
	c.lim.batchSize = 2 // e1 alone is a partial batch
	e1 := c.add("a", ms(1))
	c.none(ms(20)) // due since 11ms, but busy
	c.rel("a", ms(20))
	_, ok := c.sched.earliest()
	assert.False(t, ok, "due at once: no deadline")
	c.takes(ms(20), "a", e1)
}

func TestPromotionOrder(t *testing.T) {
	c := newCore(t, limits{delay: 10 * time.Millisecond})
	b := c.add("b", ms(1))
	a := c.add("a", ms(0))
	x := c.add("x", ms(1)) // same deadline as b, started waiting after it
	c.takes(ms(30), "a", a)
	c.takes(ms(30), "b", b)
	c.takes(ms(30), "x", x)
}

func TestReleasedLaneGoesToTheBack(t *testing.T) {
	c := newCore(t, limits{batchSize: 1})
	a0, a1 := c.add("a", t0), c.add("a", t0)
	c.takes(t0, "a", a0)
	b0 := c.add("b", t0)
	c.rel("a", t0) // a still has a1: it queues behind b
	c.takes(t0, "b", b0)
	c.takes(t0, "a", a1)
}

func TestReleasePromotesDueLanesFirst(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, delay: 10 * time.Millisecond})
	a0 := c.add("a", t0)
	c.takes(ms(10), "a", a0)
	b0 := c.add("b", ms(1))
	a1, a2 := c.add("a", ms(2)), c.add("a", ms(2))
	c.rel("a", ms(20)) // b has been due since 11ms: it goes first
	c.takes(ms(20), "b", b0)
	c.takes(ms(20), "a", a1)
	c.rel("a", ms(20))
	c.takes(ms(20), "a", a2)
}

func TestDrop(t *testing.T) {
	t.Run("oldest of a waiting lane: the deadline moves", func(t *testing.T) {
		c := newCore(t, limits{delay: 10 * time.Millisecond})
		e0, _, t0k := c.in("a", 2, 0, ms(0))
		e1 := c.add("a", ms(4))
		got, ok := c.drop("a", t0k, t0)
		require.True(t, ok)
		assert.Equal(t, e0, got)
		assert.Equal(t, 1, c.queued)
		assert.Equal(t, int64(1), c.weight)
		c.due(ms(14))
		c.none(ms(13))
		c.takes(ms(14), "a", e1)
	})
	t.Run("a ready lane keeps its place", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 2})
		a0 := c.add("a", t0)
		_, _, tk := c.in("a", 1, 0, t0)
		b0 := c.add("b", t0)
		_, ok := c.drop("a", tk, t0)
		require.True(t, ok)
		c.takes(t0, "a", a0)
		c.takes(t0, "b", b0)
	})
	t.Run("the last input of a ready lane removes it", func(t *testing.T) {
		c := newCore(t, limits{})
		_, _, tk := c.in("a", 1, 0, t0)
		b0 := c.add("b", t0)
		_, ok := c.drop("a", tk, t0)
		require.True(t, ok)
		assert.Len(t, c.lanes.m, 1)
		c.takes(t0, "b", b0)
		a1 := c.add("a", t0) // a fresh lane, at the back: the stale ref is skipped
		c.takes(t0, "a", a1)
	})
	t.Run("the last input of a waiting lane removes it", func(t *testing.T) {
		c := newCore(t, limits{delay: time.Second})
		_, _, tk := c.in("a", 1, 0, t0)
		_, ok := c.drop("a", tk, t0)
		require.True(t, ok)
		assert.Empty(t, c.lanes.m)
		_, ok = c.sched.earliest()
		assert.False(t, ok)
	})
	t.Run("from a busy lane it stays busy", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 1})
		c.takes(t0, "a", c.add("a", t0))
		_, _, tk := c.in("a", 1, 0, t0)
		_, ok := c.drop("a", tk, t0)
		require.True(t, ok)
		assert.Len(t, c.lanes.m, 1)
		c.rel("a", t0)
		assert.Empty(t, c.lanes.m)
	})
	t.Run("taken, twice, or unknown", func(t *testing.T) {
		c := newCore(t, limits{})
		_, _, tk := c.in("a", 1, 0, t0)
		_, _, tk1 := c.in("a", 1, 0, t0)
		c.takes(t0, "a", 0, 1)
		_, ok := c.drop("a", tk, t0)
		assert.False(t, ok, "taken")
		c.rel("a", t0)
		_, ok = c.drop("a", tk1, t0)
		assert.False(t, ok, "no lane")
		_, _, tk2 := c.in("a", 1, 0, t0)
		_, ok = c.drop("a", tk2, t0)
		assert.True(t, ok)
		_, ok = c.drop("a", tk2, t0)
		assert.False(t, ok, "twice")
	})
}

func TestDrainWithBusyLane(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, delay: time.Millisecond})
	a0 := c.add("a", t0)
	c.takes(t0, "a", a0)
	a1, b0, b1 := c.add("a", t0), c.add("b", t0), c.add("b", ms(1))
	got := c.drain(nil)
	require.NoError(t, checkState(c.state))
	assert.Equal(t, []int{a1, b0, b1}, got, "arrival order")
	assert.Zero(t, c.queued)
	assert.Zero(t, c.weight)
	assert.Len(t, c.lanes.m, 1, "the busy lane stays")
	_, o, _ := c.in("a", 1, 0, t0)
	assert.Equal(t, refused, o)
	c.none(ms(5))
	c.rel("a", ms(5))
	assert.Empty(t, c.lanes.m)
	assert.True(t, c.idle())
}

// A key paused after its call failed: every input in its lane goes at once,
// in lane order, and the lane, busy, is removed by its release; the other
// lanes keep their places.
func TestClearLane(t *testing.T) {
	c := newCore(t, limits{batchSize: 2, delay: time.Millisecond})
	a0 := c.add("a", t0)
	b0 := c.add("b", t0)
	c.takes(ms(1), "a", a0)
	a1, a2, a3 := c.add("a", ms(1)), c.add("a", ms(1)), c.add("a", ms(1))
	a4, _, tk := c.in("a", 5, -1, ms(1)) // ranked first
	got := c.clearLane("a", nil)
	require.NoError(t, checkState(c.state))
	assert.Equal(t, []int{a4, a1, a2, a3}, got, "lane order: rank, then arrival")
	assert.Equal(t, 1, c.queued)
	assert.Equal(t, int64(1), c.weight)
	_, ok := c.drop("a", tk, ms(1))
	assert.False(t, ok, "gone")
	c.rel("a", ms(1))
	assert.NotContains(t, c.lanes.m, "a", "the busy lane, empty, is removed by its release")
	c.takes(ms(1), "b", b0)
	assert.Empty(t, c.clearLane("none", nil))
	b1 := c.add("b", ms(2))
	c.rel("b", ms(2))
	assert.Equal(t, []int{b1}, c.clearLane("b", nil))
	require.NoError(t, checkState(c.state))
	assert.Empty(t, c.lanes.m, "a lane not busy is removed with its inputs")
	assert.True(t, c.idle())
}

func TestShutdown(t *testing.T) {
	c := newCore(t, limits{batchSize: 2, delay: time.Hour})
	b0 := c.add("b", ms(2))
	a0 := c.add("a", ms(1))
	c0, c1 := c.add("c", t0), c.add("c", t0)
	c.takes(t0, "c", c0, c1)
	c2, c3, c4 := c.add("c", t0), c.add("c", t0), c.add("c", t0)
	c.shutdown()
	require.NoError(t, checkState(c.state))
	_, o, _ := c.in("a", 1, 0, t0)
	assert.Equal(t, refused, o)
	_, ok := c.sched.earliest()
	assert.False(t, ok)
	c.takes(t0, "a", a0) // in deadline order
	c.takes(t0, "b", b0)
	c.none(t0)
	c.rel("c", t0)
	c.takes(t0, "c", c2, c3) // the batch limit still holds
	c.rel("c", t0)
	c.takes(t0, "c", c4) // a partial lane is due at once
	for _, k := range []string{"a", "b", "c"} {
		c.rel(k, t0)
	}
	assert.True(t, c.idle())
	assert.Empty(t, c.lanes.m)
	assert.Empty(t, c.drain(nil))
}

func TestFlush(t *testing.T) {
	c := newCore(t, limits{batchSize: 3, delay: time.Hour})
	b0 := c.add("b", ms(2))
	a0 := c.add("a", ms(1))
	c0 := c.add("c", -time.Hour)
	c.takes(t0, "c", c0) // c busy before the flush: its later input waits behind it
	c1 := c.add("c", t0)
	c.flush()
	require.NoError(t, checkState(c.state))
	a1 := c.add("a", ms(3)) // admitted after: the lane is ready already
	d0 := c.add("d", ms(3)) // a new lane keeps its own deadline
	at, ok := c.sched.earliest()
	require.True(t, ok)
	assert.Equal(t, ms(3)+time.Hour, at)
	c.takes(ms(3), "a", a0, a1) // in deadline order
	c.takes(ms(3), "b", b0)
	c.none(ms(3))
	c.rel("c", ms(3))
	c.takes(ms(3), "c", c1) // placed again after the flush: still due
	c.none(ms(4))
	c.takes(ms(3)+time.Hour, "d", d0)

	// A ready lane flushed and then left partial by a drop stays ready.
	c = newCore(t, limits{batchSize: 2, delay: time.Hour})
	e0 := c.add("e", t0)
	_, _, tk := c.in("e", 1, 0, t0)
	c.flush()
	_, ok = c.drop("e", tk, t0)
	require.True(t, ok)
	require.NoError(t, checkState(c.state))
	c.takes(t0, "e", e0)
}

func TestRoom(t *testing.T) {
	c := newCore(t, limits{queued: 3, queuedWeight: 10, direct: true})
	assert.Equal(t, admitted, c.fits(3, 10, 4))
	assert.Equal(t, rejectedFull, c.fits(4, 4, 1), "more inputs than the room")
	assert.Equal(t, rejectedFull, c.fits(2, 11, 6), "heavier together than the room")
	assert.Equal(t, rejectedHeavy, c.fits(2, 11, 11), "one input heavier than the room")
	assert.Equal(t, rejectedHeavy, c.fits(2, -1, 1), "a total past MaxInt64")
	o, _ := c.join("k", 6, 0, 0, t0, 0) // join never claims, even an idle key with direct calls on
	require.Equal(t, admitted, o)
	assert.Equal(t, rejectedFull, c.fits(1, 5, 5))
	assert.Equal(t, admitted, c.fits(2, 4, 2))
	c.shutdown()
	assert.Equal(t, refused, c.fits(1, 1, 1))
}

func TestReleaseNotBusyPanics(t *testing.T) {
	c := newCore(t, limits{delay: time.Second})
	assert.PanicsWithValue(t, `ferry: release of a key of type string that has no call in flight`, func() { c.release("a", t0) })
	c.add("a", t0)
	assert.Panics(t, func() { c.release("a", t0) })
}

func TestMemoryFollowsWhatWaits(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, queued: 10 * shrinkLanes})
	for i := range 2 * shrinkLanes {
		c.add(fmt.Sprint(i), t0)
	}
	assert.Len(t, c.lanes.m, 2*shrinkLanes)
	for c.sched.hasReady(t0) {
		k, _, _ := c.take(t0, nil)
		c.release(k, t0)
	}
	assert.Empty(t, c.lanes.m)
	assert.LessOrEqual(t, c.lanes.peak, shrinkLanes, "the map was rebuilt")
	assert.Len(t, c.free, freeLanes, "a bounded number of lanes kept for reuse")
	require.NoError(t, checkState(c.state))
}

// Issue 10, item 15: the lanes map is rebuilt once it holds a quarter of its
// peak, not only when it empties, so one lane alive does not keep 20k's map.
func TestLanesMapShrinksWhileLanesLive(t *testing.T) {
	c := newCore(t, limits{batchSize: 1, queued: 20_000})
	for i := range 20_000 {
		c.admit(fmt.Sprint(i), 1, 0, 0, t0, i) // not c.add: checkState per input is quadratic
	}
	before := reflect.ValueOf(c.lanes.m).UnsafePointer()
	for c.lanes.len() > 1 {
		k, _, _ := c.take(t0, nil)
		c.release(k, t0)
	}
	assert.NotEqual(t, before, reflect.ValueOf(c.lanes.m).UnsafePointer(), "a new map")
	assert.LessOrEqual(t, c.lanes.peak, shrinkLanes)
	require.NoError(t, checkState(c.state))
}

// A peakMap is rebuilt only once it is down to a quarter of its peak, so a
// rebuild of n entries follows 3n deletions. Mutations: rebuilt at every
// deletion (p changes at once); never rebuilt; the peak not reset.
func TestPeakMap(t *testing.T) {
	ptr := func(m map[int]int) unsafe.Pointer { return reflect.ValueOf(m).UnsafePointer() }
	var m peakMap[int, int]
	for i := range 4 * shrinkLanes {
		m.put(i, i)
	}
	p := ptr(m.m)
	for i := range 3*shrinkLanes - 1 {
		m.del(i)
	}
	assert.Equal(t, p, ptr(m.m), "above a quarter of its peak: kept")
	m.del(3*shrinkLanes - 1)
	assert.NotEqual(t, p, ptr(m.m), "at a quarter: rebuilt")
	assert.Equal(t, shrinkLanes, m.peak)
	assert.Equal(t, shrinkLanes, m.len())
	assert.Equal(t, 4*shrinkLanes-1, m.get(4*shrinkLanes-1))
	p = ptr(m.m)
	for i := 3 * shrinkLanes; i < 4*shrinkLanes-1; i++ {
		m.del(i)
	}
	assert.Equal(t, p, ptr(m.m), "a peak of shrinkLanes or less is never rebuilt")
	var z peakMap[string, bool]
	_, ok := z.lookup("a")
	assert.False(t, ok, "the zero value is empty")
	z.del("a")
	assert.Zero(t, z.len())
}

// Issue 10, items 1 to 3: no total of weights wraps. The room refuses an
// input that would take its total past MaxQueuedWeight, or MaxInt64 with no
// limit, so no lane's or batch's total can wrap either.
func TestWeightSumsNeverWrap(t *testing.T) {
	const big = 1 << 62
	t.Run("room limit MaxInt64", func(t *testing.T) {
		c := newCore(t, limits{queuedWeight: math.MaxInt64, delay: time.Hour})
		_, o, _ := c.in("a", math.MaxInt64, 0, t0)
		require.Equal(t, admitted, o)
		_, o, _ = c.in("b", 1, 0, t0)
		assert.Equal(t, rejectedFull, o)
		_, o, _ = c.in("b", 0, 0, t0)
		assert.Equal(t, admitted, o, "weight 0 still fits")
		assert.Equal(t, int64(math.MaxInt64), c.weight)
	})
	t.Run("no room limit is int64's", func(t *testing.T) {
		c := newCore(t, limits{delay: time.Hour})
		_, o, _ := c.in("a", math.MaxInt64, 0, t0)
		require.Equal(t, admitted, o)
		_, o, _ = c.in("a", 1, 0, t0)
		assert.Equal(t, rejectedFull, o)
		assert.Equal(t, int64(math.MaxInt64), c.weight)
	})
	t.Run("batch limit just over a heavy input", func(t *testing.T) {
		c := newCore(t, limits{batchWeight: big + 1, delay: time.Hour})
		a0, o, _ := c.in("a", big, 0, t0)
		require.Equal(t, admitted, o)
		for range 3 {
			_, o, _ = c.in("a", big, 0, t0)
			assert.Equal(t, rejectedFull, o, "four of 1<<62 do not fit an int64")
		}
		a1, o, _ := c.in("a", 1, 0, t0)
		require.Equal(t, admitted, o)
		c.takes(t0, "a", a0, a1) // full at 1<<62 + 1: at once
	})
	t.Run("a lane at the batch limit goes at once", func(t *testing.T) {
		c := newCore(t, limits{batchWeight: big, delay: time.Hour})
		c.claim("a") // busy, so that its inputs wait together
		a1, o, _ := c.in("a", big, 0, t0)
		require.Equal(t, admitted, o)
		_, o, _ = c.in("a", big, 0, t0)
		assert.Equal(t, rejectedFull, o, "2 * 1<<62 does not fit an int64")
		c.rel("a", t0)
		c.takes(t0, "a", a1)
	})
}

// Issue 10, item 4: a delay of MaxInt64 means full batches only (or Shutdown):
// the deadline saturates instead of wrapping into the past.
func TestDelayMaxInt64Saturates(t *testing.T) {
	c := newCore(t, limits{batchSize: 2, delay: math.MaxInt64})
	a0 := c.add("a", ms(5))
	c.due(math.MaxInt64)
	c.none(100 * 365 * 24 * time.Hour)
	a1 := c.add("a", ms(6))
	c.takes(ms(6), "a", a0, a1)
	b0 := c.add("b", ms(7))
	c.due(math.MaxInt64)
	_, o, tk := c.in("b", 1, 0, ms(8))
	require.Equal(t, admitted, o)
	_, ok := c.drop("b", tk, ms(9))
	require.True(t, ok)
	c.due(math.MaxInt64)
	c.takes(math.MaxInt64, "b", b0)
}

// Issue 10, item 10: a lane's place in the ready line is the time it became
// ready. a falls due at 10ms while every call is busy; b fills at 15ms; a goes
// first.
func TestReadyLineIsInTheOrderLanesBecameReady(t *testing.T) {
	c := newCore(t, limits{batchSize: 2, delay: 10 * time.Millisecond})
	a0 := c.add("a", ms(0))
	c.in("b", 1, 0, ms(12))
	e, o, _ := c.in("b", 1, 0, ms(15))
	require.Equal(t, admitted, o)
	c.takes(ms(15), "a", a0)
	c.takes(ms(15), "b", e-1, e)
}

// Issue 10, item 11: a full lane that loses an input is partial again, and
// goes back to waiting for its oldest input's deadline (Ready -> Waiting).
func TestReadyLaneLeftPartialWaitsAgain(t *testing.T) {
	c := newCore(t, limits{batchSize: 2, delay: time.Hour})
	a0 := c.add("a", t0)
	_, _, tk := c.in("a", 1, 0, ms(1))
	require.True(t, c.sched.hasReady(ms(1)), "full")
	_, ok := c.drop("a", tk, ms(60_000))
	require.True(t, ok)
	require.NoError(t, checkState(c.state))
	c.due(time.Hour)
	c.none(time.Hour - 1)
	c.takes(time.Hour, "a", a0)
	t.Run("due already: it keeps its place", func(t *testing.T) {
		c := newCore(t, limits{batchSize: 2, delay: 10 * time.Millisecond})
		c.claim("x") // busy, so a's promotion waits for a take
		a0 := c.add("a", t0)
		_, _, tk := c.in("a", 1, 0, ms(1))
		b0 := c.add("b", ms(2))
		_, ok := c.drop("a", tk, ms(20))
		require.True(t, ok)
		c.takes(ms(20), "a", a0)
		c.takes(ms(20), "b", b0)
	})
}

// Issue 10, item 13: stale refs in the ready line are bounded by the lanes
// that are ready, however many inputs are admitted and dropped.
func TestStaleReadyRefsAreBounded(t *testing.T) {
	c := newCore(t, limits{queued: 1})
	for i := range 100_000 {
		o, tk := c.admit("a", 1, 0, 0, t0, i)
		if _, ok := c.drop("a", tk, t0); o != admitted || !ok {
			t.Fatalf("round %d: %v, dropped %v", i, o, ok)
		}
	}
	assert.LessOrEqual(t, c.sched.ready.Len(), staleSlack+1)
	assert.Empty(t, c.lanes.m)
}

// parks parks key's busy lane with continuation c for d at now.
func (c *core) parks(key string, cont int, d, now time.Duration) {
	c.t.Helper()
	c.park(key, cont, d, now)
	require.NoError(c.t, checkState(c.state))
}

func TestParkHoldsTheKeyUntilItsDeadline(t *testing.T) {
	for _, delay := range []time.Duration{0, ms(5)} {
		t.Run(fmt.Sprint(delay), func(t *testing.T) {
			c := newCore(t, limits{batchSize: 1, delay: delay})
			a := c.add("a", t0)
			c.takes(t0, "a", a)
			c.parks("a", 100, ms(10), t0)
			assert.Equal(t, 0, c.busy, "a parked lane holds no call")
			assert.True(t, c.parked())
			later := c.add("a", t0) // full: a batch of 1, and yet it waits
			b := c.add("b", t0)
			c.takes(t0+delay, "b", b) // another key runs at once
			c.rel("b", t0+delay)
			c.due(ms(10))
			c.none(ms(10) - 1)
			assert.False(t, c.idle())
			c.takes(ms(10), "a", 100) // the continuation alone, first
			assert.False(t, c.parked())
			c.none(ms(10)) // one call per key
			c.rel("a", ms(10))
			c.takes(ms(10)+delay, "a", later)
		})
	}
}

func TestParkAtOrBelowZeroIsReadyAtOnce(t *testing.T) {
	for _, d := range []time.Duration{0, -1, math.MinInt64} {
		c := newCore(t, limits{})
		c.add("b", t0)
		c.takes(t0, "b", 0)
		c.rel("b", t0)
		c.add("a", t0)
		c.takes(t0, "a", 1)
		c.add("b", t0)
		c.parks("a", 100, d, t0)
		c.takes(t0, "b", 2) // it goes to the back of the line
		c.takes(t0, "a", 100)
	}
}

func TestParkDeadlineSaturates(t *testing.T) {
	now := ms(5)
	for _, tc := range []struct {
		d, due time.Duration
	}{
		{math.MaxInt64, math.MaxInt64},
		{math.MaxInt64 - now, math.MaxInt64},
		{math.MaxInt64 - now - 1, math.MaxInt64 - 1},
		{1 << 62, now + 1<<62},
	} {
		c := newCore(t, limits{})
		c.add("a", now)
		c.takes(now, "a", 0)
		c.parks("a", 100, tc.d, now)
		c.due(tc.due)
		c.none(tc.due - 1)
		c.takes(tc.due, "a", 100)
	}
}

func TestUnpark(t *testing.T) {
	c := newCore(t, limits{delay: ms(5)})
	assert.False(t, c.unpark("a", t0), "no lane")
	c.add("a", t0)
	c.add("b", t0)
	c.takes(ms(5), "a", 0)
	assert.False(t, c.unpark("a", ms(5)), "busy")
	c.parks("a", 100, time.Hour, ms(5))
	c.add("a", ms(5))
	assert.True(t, c.unpark("a", ms(6)))
	assert.False(t, c.unpark("a", ms(6)), "ready already")
	c.takes(ms(6), "b", 1) // b was due before a's park ended
	c.takes(ms(6), "a", 100)
	c.rel("a", ms(6))
	c.takes(ms(10), "a", 2)
}

func TestParksAndWaitingLanesShareOneDeadlineOrder(t *testing.T) {
	c := newCore(t, limits{delay: ms(10)})
	c.add("a", t0)
	c.takes(ms(10), "a", 0)
	c.add("b", ms(2)) // due at 12ms, waiting first
	c.parks("a", 100, ms(2), ms(10))
	c.add("c", ms(1)) // due at 11ms
	c.due(ms(11))
	c.none(ms(11) - 1)
	c.takes(ms(12), "c", 2)
	c.takes(ms(12), "b", 1) // ties go in the order they began to wait
	c.takes(ms(12), "a", 100)
}

func TestParkNotBusyPanics(t *testing.T) {
	c := newCore(t, limits{})
	assert.Panics(t, func() { c.park("a", 100, 0, t0) })
	c.add("a", t0)
	assert.Panics(t, func() { c.park("a", 100, 0, t0) }, "ready, not busy")
}

// A parked lane's continuation is in flight: it counts in no room, and the
// inputs behind it count as waiting inputs do, within the room.
func TestParkedLaneRoom(t *testing.T) {
	c := newCore(t, limits{queued: 2, queuedWeight: 10})
	c.in("a", 6, 0, t0)
	c.takes(t0, "a", 0)
	c.parks("a", 100, time.Hour, t0)
	assert.Equal(t, 0, c.queued)
	assert.Equal(t, int64(0), c.weight)
	_, o, _ := c.in("a", 10, 0, t0)
	assert.Equal(t, admitted, o, "the whole room is free")
	_, o, _ = c.in("b", 1, 0, t0)
	assert.Equal(t, rejectedFull, o)
	_, o, _ = c.in("a", 0, 0, t0)
	assert.Equal(t, admitted, o)
	_, o, _ = c.in("a", 0, 0, t0)
	assert.Equal(t, rejectedFull, o, "two inputs wait")
	assert.Equal(t, 2, c.queued)
	assert.Equal(t, int64(10), c.weight)
}

func TestDropAndClearOfAParkedLane(t *testing.T) {
	c := newCore(t, limits{delay: ms(5)})
	c.add("a", t0)
	c.takes(ms(5), "a", 0)
	c.parks("a", 100, ms(10), ms(5))
	_, _, tk := c.in("a", 1, 0, ms(5))
	_, ok := c.drop("a", tk, ms(6))
	require.True(t, ok)
	require.NoError(t, checkState(c.state))
	assert.Len(t, c.lanes.m, 1, "the parked lane stays, empty")
	c.add("a", ms(6))
	assert.Equal(t, []int{2}, c.clearLane("a", nil))
	require.NoError(t, checkState(c.state))
	assert.Len(t, c.lanes.m, 1, "cleared, it stays parked")
	c.none(ms(15) - 1)
	c.takes(ms(15), "a", 100)
	c.rel("a", ms(15))
	assert.Empty(t, c.lanes.m)
	assert.True(t, c.idle())

	// a ready lane with its continuation and one input that is dropped
	c.add("b", ms(15))
	c.takes(ms(20), "b", 3)
	c.parks("b", 101, 0, ms(20))
	_, _, tk = c.in("b", 1, 0, ms(20))
	_, ok = c.drop("b", tk, ms(21))
	require.True(t, ok)
	require.NoError(t, checkState(c.state))
	c.takes(ms(21), "b", 101)
}

func TestDrainWithParks(t *testing.T) {
	c := newCore(t, limits{})
	for _, k := range []string{"a", "b", "c"} {
		e := c.add(k, t0)
		c.takes(t0, k, e)
	}
	c.parks("a", 100, time.Hour, t0)
	c.parks("b", 101, 0, t0) // ready
	c.parks("c", 102, ms(1), t0)
	c.add("a", t0)
	c.add("d", t0)
	assert.Equal(t, []int{3, 4}, c.drain(nil))
	require.NoError(t, checkState(c.state))
	assert.False(t, c.parked())
	c.takes(t0, "b", 101) // ready already, then by deadline
	c.takes(t0, "c", 102)
	c.takes(t0, "a", 100)
	c.none(t0)
	for _, k := range []string{"a", "b", "c"} {
		c.rel(k, t0)
	}
	assert.Empty(t, c.lanes.m)
	assert.True(t, c.idle())

	// a park after the drain is ready at once
	c = newCore(t, limits{})
	c.add("a", t0)
	c.takes(t0, "a", 0)
	c.drain(nil)
	c.parks("a", 100, time.Hour, t0)
	c.takes(t0, "a", 100)
}

func TestShutdownAndFlushLeaveParks(t *testing.T) {
	c := newCore(t, limits{delay: ms(5)})
	c.add("a", t0)
	c.takes(ms(5), "a", 0)
	c.parks("a", 100, ms(10), ms(5))
	c.add("a", ms(5))
	c.flush()
	c.shutdown()
	require.NoError(t, checkState(c.state))
	c.none(ms(15) - 1)
	assert.False(t, c.idle())
	c.takes(ms(15), "a", 100)
	c.rel("a", ms(15))
	c.takes(ms(15), "a", 1) // shutting down: due at once
	c.rel("a", ms(15))
	assert.True(t, c.idle())
}
