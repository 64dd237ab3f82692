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

// share.need, without goroutines: the room a wake-up's admissions take, in
// their order, if the core lets them all in. What one loop lets in without
// room takes none: an input heavier than the room, a part no room could
// hold, a part whose room is held or granted, a Do that claims its key, an
// input of a paused key. Mutations: need counting a paused key's inputs
// (the first case), or ignoring a Resume (the third).
func TestShareNeed(t *testing.T) {
	type (
		w = waiter[string, in, int]
		m = msg[string, in, int]
	)
	do := func(key string, weight int64) m { return m{op: opAdmit, w: &w{key: key, weight: weight}} }
	submit := func(key string, weight int64) m {
		return m{op: opAdmit, w: &w{key: key, weight: weight, done: func(int, error) {}}}
	}
	release := func(key string) m { return m{op: opRelease, key: key} }
	// part returns a message for a DoMany's only part, whose inputs have keys
	// and weights, each weight 1 unless given.
	part := func(o op, keys []string, weights ...int64) m {
		g := &group[string, in, int]{ws: make([]w, len(keys)), parts: make([]part[string, in, int], 1)}
		p := &g.parts[0]
		for i, k := range keys {
			wt := int64(1)
			if i < len(weights) {
				wt = weights[i]
			}
			g.ws[i] = w{key: k, weight: wt, g: g}
			p.n++
			p.total = addWeight(p.total, wt)
			p.heaviest = max(p.heaviest, wt)
		}
		return m{op: o, g: g}
	}
	granted := part(opAdmitMany, []string{"x", "y"})
	granted.g.parts[0].granted = true

	for _, tc := range []struct {
		name   string
		direct bool
		setup  func(st *state[string, *w]) // the core as the wake-up starts
		paused []string                    // keys paused as the wake-up starts
		ms     []m
		want   budget
	}{
		{name: "inputs", ms: []m{do("a", 2), submit("b", 3), do("a", 4)}, want: budget{3, 9}},
		{name: "heavier than the room", ms: []m{do("a", 101), do("b", 100)}, want: budget{1, 100}},
		{name: "a claim", direct: true, ms: []m{do("a", 5)}, want: budget{}},
		{name: "a claim, then a Do that joins", direct: true, ms: []m{do("a", 5), do("a", 6)}, want: budget{1, 6}},
		{name: "a Submit never claims", direct: true, ms: []m{submit("a", 5)}, want: budget{1, 5}},
		{name: "a Submit makes a lane that a Do joins", direct: true, ms: []m{submit("a", 5), do("a", 6)}, want: budget{2, 11}},
		{name: "a busy lane", direct: true, setup: func(st *state[string, *w]) { st.claim("a") },
			ms: []m{do("a", 5)}, want: budget{1, 5}},
		{name: "a release of an empty lane, then a claim", direct: true, setup: func(st *state[string, *w]) { st.claim("a") },
			ms: []m{release("a"), do("a", 5), do("a", 6)}, want: budget{1, 6}},
		{name: "a release of a lane with inputs", direct: true, setup: func(st *state[string, *w]) {
			st.claim("a")
			st.join("a", 1, 0, 0, 0, nil)
		}, ms: []m{release("a"), do("a", 5)}, want: budget{1, 5}},
		{name: "a DoMany's inputs, then a Do of their key", direct: true,
			ms: []m{part(opAdmitMany, []string{"a", "b"}), do("b", 5), do("c", 7)}, want: budget{3, 7}},
		{name: "an earmark lets nothing in", direct: true,
			ms: []m{part(opEarmark, []string{"a", "b"}, 2, 3), do("b", 5)}, want: budget{2, 5}},
		{name: "more inputs than MaxQueued", ms: []m{part(opAdmitMany, make([]string, 9))}, want: budget{}},
		{name: "heavier than the room together", ms: []m{part(opEarmark, []string{"a", "b"}, 60, 41)}, want: budget{}},
		{name: "past MaxInt64", ms: []m{part(opAdmitMany, []string{"a", "b"}, math.MaxInt64, 1)}, want: budget{}},
		{name: "granted", ms: []m{granted, do("z", 1)}, want: budget{1, 1}},
		{name: "past MaxInt64 in all", ms: []m{do("a", 100), do("b", 100), part(opAdmitMany, []string{"c"}, 100)}, want: budget{3, 300}},
		{name: "a paused key's inputs", paused: []string{"p"},
			ms: []m{do("p", 5), submit("p", 6), part(opAdmitMany, []string{"a", "p"}, 2, 7), do("a", 1)}, want: budget{2, 3}},
		{name: "an earmark keeps room for a paused key's input too", paused: []string{"p"},
			ms: []m{part(opEarmark, []string{"a", "p"}, 2, 7)}, want: budget{2, 9}},
		{name: "a paused key resumed in the wake-up", paused: []string{"p"},
			ms: []m{do("p", 5), {op: opResume, key: "p"}, do("p", 6), part(opAdmitMany, []string{"p"}, 7)}, want: budget{2, 13}},
	} {
		lim := limits{batchSize: 4, queued: 8, queuedWeight: 100, direct: tc.direct}
		st := newState[string, *w](lim)
		if tc.setup != nil {
			tc.setup(st)
		}
		var ps pauses[string]
		for _, k := range tc.paused {
			ps.pause(k, errBoom, 0, false)
		}
		sh := newShare[string, in, int](lim, nil, false, nil, 0, nil)
		assert.Equal(t, tc.want, sh.need(tc.ms, st, &ps), tc.name)
		assert.Empty(t, sh.lanes, "%s: the guesses are forgotten", tc.name)
		assert.Empty(t, sh.resumed, "%s: the Resumes are forgotten", tc.name)
	}
	// borrowRoom takes what need lacks from spare, and nothing once the
	// core refuses every admission.
	lim := limits{batchSize: 4, queued: 8, queuedWeight: 100}
	for _, shut := range []bool{false, true} {
		st := newState[string, *w](lim)
		st.grow(-8, -100) // a shard that holds no room
		if shut {
			st.shutdown()
		}
		l := &loop[string, in, int]{f: &Ferry[string, in, int]{}, st: st, share: share[string, in, int]{lim: lim, spare: newRoom(budget{8, 100})}}
		l.borrowRoom([]m{do("a", 2), do("b", 3)})
		want := budget{6, 95}
		if shut {
			want = budget{8, 100}
		}
		assert.Equal(t, want, l.share.spare.take().free, "shut down: %v", shut)
	}
	// Without a MaxQueuedWeight the room's weight is MaxInt64, shared.
	lim = limits{batchSize: 4, queued: 8}
	sh := share[string, in, int]{lim: lim}
	assert.Equal(t, budget{2, -1}, sh.need([]m{do("a", math.MaxInt64), do("b", 1)}, newState[string, *w](lim), nil), "a sum past MaxInt64 is -1")
	assert.Equal(t, int64(math.MaxInt64), sharedWeight(lim))
	assert.Equal(t, int64(7), sharedWeight(limits{queuedWeight: 7}))
}

// freeOf is what spare holds free now, the shards' allowances left out.
func freeOf(h *harness) budget {
	p := <-h.f.spare
	free := p.free
	h.f.spare <- p
	return free
}

// A shard keeps the room its callers used as its allowance, and gives it
// back when another shard lacks room: the other shard asks it (opGiveBack),
// waits, and admits, as one loop would with a room that holds both. Here
// shard 0, idle, keeps the room of two inputs, all the room there is, and
// shard 1 then admits two. Mutations: no allowance (spare gets the room
// back at once); a shard short of room rejecting without asking (b's are
// rejected); opGiveBack ignored (shard 1 waits for ever: the bubble
// deadlocks).
func TestAllowanceGoesBackWhenAsked(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 2, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 2), keysIn(h, 1, 2)
		x, y := h.do(ctx, in{Key: a[0], ID: 1}), h.do(ctx, in{Key: a[1], ID: 2})
		synctest.Wait()
		require.NoError(t, h.f.Flush(ctx))
		synctest.Wait()
		assert.Equal(t, 10, got(t, x).out)
		assert.Equal(t, 20, got(t, y).out)
		assert.Equal(t, 0, freeOf(h).n, "shard 0 keeps the room its callers used")

		u, v := h.do(ctx, in{Key: b[0], ID: 3}), h.do(ctx, in{Key: b[1], ID: 4})
		synctest.Wait()
		pending(t, u)
		pending(t, v)
		s := h.f.Stats()
		assert.Equal(t, 2, s.Queued, "shard 1 has the room shard 0 kept")
		assert.Zero(t, s.Rejected)
		require.NoError(t, h.f.Flush(ctx))
		synctest.Wait()
		assert.Equal(t, 30, got(t, u).out)
		assert.Equal(t, 40, got(t, v).out)
		assert.Equal(t, budget{2, math.MaxInt64}, spareOf(h), "all the room back once asked")
	})
}

// A DoMany over both shards takes the room of all its inputs from spare in
// one step (borrow), so that two of them never each hold room the other
// needs; while shard 0 keeps as its allowance room the DoMany needs, its
// borrow asks for it and waits, then takes it all, before either shard has
// let a part in (shard 1 is stopped). Mutation: borrow refusing without
// asking (the DoMany goes shard by shard: spare keeps 2 while shard 1 is
// stopped).
func TestDoManyAsksForTheAllowance(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{Shards: 2, MaxQueued: 4, MaxBatchDelay: time.Hour}, false)
		defer h.f.Close()
		ctx := context.Background()
		a, b := keysIn(h, 0, 2), keysIn(h, 1, 2)
		first := []chan answer{h.do(ctx, in{Key: a[0], ID: 1})}
		synctest.Wait()
		first = append(first, h.do(ctx, in{Key: a[1], ID: 2}))
		synctest.Wait()
		require.NoError(t, h.f.Flush(ctx))
		synctest.Wait()
		for _, c := range first {
			require.NoError(t, got(t, c).err)
		}
		require.Equal(t, 1, freeOf(h).n, "shard 0 keeps 3: 1, then 1 and 1 ahead")

		resume := stop(h, 1)
		x := make(chan error, 1)
		go func() {
			_, err := h.f.DoMany(ctx, []in{{Key: a[0]}, {Key: a[1]}, {Key: b[0]}, {Key: b[1]}})
			x <- err
		}()
		synctest.Wait()
		assert.Zero(t, freeOf(h).n, "x took the room of its 4 inputs in one step")
		resume()
		assert.Equal(t, 4, h.f.Stats().Queued)
		require.NoError(t, h.f.Flush(ctx))
		synctest.Wait()
		assert.NoError(t, <-x)
		assert.Equal(t, budget{4, math.MaxInt64}, spareOf(h))
	})
}

// borrowRoom, keeping an allowance, borrows ahead as much again as the core
// holds in use, as far as the room and spare go, and never less than it
// lacks, its sums safe at MaxInt64; without one (WaitForRoom) it borrows
// what it lacks. Mutations:
// borrowing ahead without keeps (the last case takes 6), or asking only
// for what it lacks (the first takes 2).
func TestBorrowAhead(t *testing.T) {
	whole := int64(math.MaxInt64)
	for _, tc := range []struct {
		name            string
		keeps           bool
		free            budget // spare's, as the wake-up starts
		need, has, used budget
		want, wantSpare budget
	}{
		{"lacks 2, 3 in use: 5", true, budget{10, 100}, budget{2, 20}, budget{}, budget{3, 30}, budget{5, 50}, budget{5, 50}},
		{"spare has less: all of it", true, budget{3, 100}, budget{2, 20}, budget{}, budget{3, 30}, budget{3, 50}, budget{0, 50}},
		{"in use near MaxInt64: no wrap", true, budget{10, 10}, budget{1, 10}, budget{}, budget{1, whole - 10}, budget{2, 10}, budget{8, 0}},
		{"nothing lacking: nothing", true, budget{10, 100}, budget{2, 20}, budget{2, 20}, budget{3, 30}, budget{2, 20}, budget{10, 100}},
		{"no MaxQueuedWeight", true, budget{10, whole}, budget{1, whole - 5}, budget{}, budget{1, 5}, budget{2, whole}, budget{8, 0}},
		{"no allowance (WaitForRoom)", false, budget{10, 100}, budget{2, 20}, budget{}, budget{3, 30}, budget{2, 20}, budget{8, 80}},
	} {
		lim := limits{batchSize: 4, queued: 12, queuedWeight: 120}
		if tc.free.w == whole || tc.used.w > 120 { // no MaxQueuedWeight
			lim.queuedWeight = 0
		}
		sh := share[string, in, int]{lim: lim, spare: newRoom(tc.free), keeps: tc.keeps}
		assert.Equal(t, tc.want, sh.borrowRoom(tc.need, tc.has, tc.used), tc.name)
		assert.Equal(t, tc.wantSpare, sh.spare.take().free, tc.name)
	}
}

// allowance keeps all the room spare up to twice the most in use lately,
// and past that the most in use; the window moves every 64 give-backs.
// Mutation: keeping all of it (the second case keeps 9).
func TestAllowance(t *testing.T) {
	var sh share[string, in, int]
	assert.Equal(t, budget{4, 4}, sh.allowance(budget{4, 4}, budget{2, 2}), "twice the most in use")
	assert.Equal(t, budget{2, 2}, sh.allowance(budget{9, 9}, budget{0, 0}), "past twice: the most, 2")
	for range 62 {
		sh.allowance(budget{}, budget{1, 1})
	}
	assert.Equal(t, budget{2, 2}, sh.allowance(budget{5, 5}, budget{1, 1}), "the last window's most")
	for range 64 {
		sh.allowance(budget{}, budget{1, 1})
	}
	assert.Equal(t, budget{1, 1}, sh.allowance(budget{5, 5}, budget{1, 1}), "the most in these two windows")
}
