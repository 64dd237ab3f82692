package ferry

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file step the loops of a ferry of several shards, one
// room and one set of slot tokens between them, through handle, receive and
// dispatch, with no worker goroutine: what the shards share (share.go,
// pool.go, slots.go) is stepped as the loops meet on it. One blocking wait
// of the loop, a shard that waits for room back, runs on a goroutine of the
// test inside a synctest bubble, so that its order is exact.

// testShards returns the loops of a ferry of n shards with limits lim and
// workers slots, sharing one room and one set of slot tokens; their slots
// start no goroutine. set changes the ferry first.
func testShards(t *testing.T, n int, lim limits, workers int, set func(f *Ferry[string, in, int])) []*tl {
	t.Helper()
	f := &Ferry[string, in, int]{lim: lim, origin: time.Now()}
	if set != nil {
		set(f)
	}
	f.spare, f.slots = newRoom(budget{lim.queued, sharedWeight(lim)}), newTokens[string, in, int](workers)
	for range n {
		s := &shard[string, in, int]{f: f, inc: make(chan tm, 64), done: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancelCause(context.Background())
		f.shards = append(f.shards, s)
	}
	var ls []*tl
	for i, s := range f.shards {
		l := newLoop(s, lim, workers, shareOf(workers, n, i), i)
		l.slots.start = func() *worker[string, in, int] {
			return &worker[string, in, int]{jobs: make(chan job[string, in, int], 1), fl: new(flight[string, in, int])}
		}
		t.Cleanup(func() { l.alarm.t.Stop() })
		ls = append(ls, l)
	}
	return ls
}

// free is what the ferry's shared room holds free now.
func free(l *tl) budget {
	p := l.share.spare.take()
	defer l.share.spare.put(p)
	return p.free
}

// marked reports whether the ledger marks shard i as one that may keep room.
func marked(l *tl, i int) bool {
	p := l.share.spare.take()
	defer l.share.spare.put(p)
	return i < len(p.marks) && p.marks[i]
}

// inbox is the messages queued to l's loop, taken out.
func inbox(l *tl) []tm {
	var ms []tm
	for len(l.s.inc) > 0 {
		ms = append(ms, <-l.s.inc)
	}
	return ms
}

// A shard borrows the room its admissions lack in one go, ahead by as much
// as it holds in use, keeps it as its allowance, marked, and gives back
// what passes twice its use; another shard borrows from what is left.
// Mutations: borrowRoom borrowing per admission (free moves twice); no
// allowance kept (free back to 8 after a's wake-up); the mark not set.
func TestLoopShardsBorrowAndKeep(t *testing.T) {
	ls := testShards(t, 2, limits{batchSize: 4, queued: 8, delay: time.Hour}, 2, nil)
	a, b := ls[0], ls[1]
	assert.Equal(t, budget{8, sharedWeight(a.lim)}, free(a))
	a.s.inc <- tm{op: opAdmit, w: ltDo("x")}
	a.receive(tm{op: opAdmit, w: ltDo("x")})
	assert.Equal(t, 2, a.st.queued)
	assert.Equal(t, budget{6, sharedWeight(a.lim) - 2}, free(a), "two borrowed, kept: nothing ahead of no use")
	assert.True(t, marked(a, 0), "a keeps an allowance")
	assert.False(t, marked(a, 1))

	a.receive(tm{op: opAdmit, w: ltDo("y")})
	assert.Equal(t, 3, a.st.queued)
	assert.Equal(t, budget{3, sharedWeight(a.lim) - 5}, free(a), "one lacking, and two ahead: as much again as in use")
	assert.Equal(t, budget{2, 2}, a.st.unused(), "its allowance")

	b.receive(tm{op: opAdmit, w: ltDo("z")})
	assert.Equal(t, 1, b.st.queued)
	assert.Equal(t, budget{2, sharedWeight(a.lim) - 6}, free(a))
	assert.True(t, marked(a, 1))
}

// A shard short of room while another keeps some asks for it back
// (opGiveBack) and waits; the other gives all of it back once its next
// wake-up's messages are handled, keeps none while one waits, and the first
// borrows and admits. Mutations: giveBackRoom keeping the allowance when
// pressed (the waiter is never poked: the bubble deadlocks); askBack not
// sent (likewise); borrowRoom not re-borrowing after its poke (b's input
// rejected).
func TestLoopShardsPressure(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ls := testShards(t, 2, limits{batchSize: 4, queued: 4, delay: time.Hour}, 2, nil)
		a, b := ls[0], ls[1]
		a.s.inc <- tm{op: opAdmit, w: ltDo("x")}
		a.receive(tm{op: opAdmit, w: ltDo("x")}) // borrows 2
		a.receive(tm{op: opAdmit, w: ltDo("x")}) // lacks 1, and borrows 2 ahead: the rest
		require.Zero(t, free(a).n)
		require.Equal(t, 1, a.st.unused().n, "kept as its allowance")

		z := ltDo("z")
		done := make(chan struct{})
		go func() { // b's wake-up lacks room that a keeps: it asks, and waits for it
			b.receive(tm{op: opAdmit, w: z})
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("b did not wait for room back")
		default:
		}
		assert.Equal(t, []tm{{op: opGiveBack}}, inbox(a), "a is asked")
		assert.False(t, marked(a, 1), "b keeps nothing while it waits")

		a.receive(tm{op: opGiveBack}) // pressed: gives all back once its messages are handled
		synctest.Wait()
		select {
		case <-done: // b borrowed and went on
		default:
			t.Fatal("b still waits")
		}
		assert.Equal(t, budget{}, a.st.unused(), "a keeps none while pressed")
		assert.Equal(t, 1, b.st.queued, "z admitted")
		noWord(t, z.c, "z waits in its lane")
		assert.Equal(t, 4, a.st.queued+b.st.queued)
	})
}

// The slots over two shards of one slot each: a shard takes a second slot
// from the tokens for a second ready lane and gives it back as that batch
// ends; a shard below its share waits on the tokens (waitOn) and gets that
// slot; a shard at its share, all busy, waits for a poke, which a shard
// that gives a slot back sends. Mutations: releaseSlot keeping a slot
// beyond the share (b never gets one); lent not waking the wants (b's
// poke never comes); waitOn giving the tokens at the share (b takes a
// slot it should wait a poke for).
func TestLoopShardsSlots(t *testing.T) {
	ls := testShards(t, 2, limits{batchSize: 1, queued: 8}, 2, nil)
	a, b := ls[0], ls[1]
	a.s.inc <- tm{op: opAdmit, w: ltDo("y")}
	a.receive(tm{op: opAdmit, w: ltDo("x")})
	require.Len(t, jobOf(a, 0), 1)
	require.Len(t, jobOf(a, 1), 1, "a second slot from the tokens")
	assert.Equal(t, 2, a.slots.has())

	b.receive(tm{op: opAdmit, w: ltDo("z")}) // ready, no slot: below its share, b waits on the tokens
	slot, given := b.slots.waitOn()
	require.NotNil(t, slot)
	assert.Nil(t, given)
	a.receive(tm{op: opRelease, key: "y", worker: 1})
	a.receive(tm{op: opIdle, worker: 1}) // beyond a's share: given back
	assert.Equal(t, 1, a.slots.has())
	b.slots.gotSlot(<-slot)
	b.dispatch(t0)
	require.Len(t, jobOf(b, 0), 1, "z runs on the slot a gave back")
	slot, given = b.slots.waitOn()
	assert.Nil(t, slot)
	assert.Nil(t, given, "not starved")

	b.receive(tm{op: opAdmit, w: ltDo("w")}) // at its share, all busy: b waits for a poke
	slot, given = b.slots.waitOn()
	assert.Nil(t, slot, "at its share it does not wait on the tokens")
	require.NotNil(t, given)
	a.receive(tm{op: opRelease, key: "x", worker: 0})
	a.receive(tm{op: opIdle, worker: 0}) // a's idle worker goes back at the end of its dispatch
	assert.Zero(t, a.slots.has())
	select {
	case <-given:
	default:
		t.Fatal("b is not poked")
	}
	b.slots.poked()
	b.dispatch(t0)
	require.Len(t, jobOf(b, 1), 1, "w runs on the slot a gave back")
}

// With WaitForRoom over two shards an admission that lacks room reserves
// it in the ledger; room another shard frees fills the reservation, whose
// poke wakes its loop, which lets the admission in. Close marks the room:
// a shard hears the end as it takes the ledger and starts it (heedEnd).
// Mutations: roomFor not reserving (z waits for ever); fill not poking;
// heedEnd not called (the late input admitted).
func TestLoopShardsReserveAndEnd(t *testing.T) {
	ls := testShards(t, 2, limits{batchSize: 4, queued: 2, delay: time.Hour}, 2,
		func(f *Ferry[string, in, int]) { f.waitForRoom = true })
	a, b := ls[0], ls[1]
	x1, x2 := ltDo("x"), ltDo("x")
	a.s.inc <- tm{op: opAdmit, w: x2}
	a.receive(tm{op: opAdmit, w: x1})
	require.Equal(t, 2, a.st.queued)
	z := ltDo("z")
	b.receive(tm{op: opAdmit, w: z})
	noWord(t, z.c, "z waits for room")
	assert.Equal(t, 1, b.waits.line.len())
	assert.True(t, b.share.reserved)

	a.receive(tm{op: opDrop, w: x1}) // the room it frees fills b's reservation
	require.Equal(t, errDropped, word(t, x1.c))
	select {
	case <-b.share.poke:
	default:
		t.Fatal("b is not poked")
	}
	b.dispatch(t0)
	assert.Zero(t, b.waits.line.len(), "z let in")
	assert.Equal(t, 1, b.st.queued)

	a.f.spare.end(opClose) // Close marks the room before any shard hears
	late := ltDo("y")
	a.receive(tm{op: opAdmit, w: late})
	assert.Equal(t, ErrClosed, word(t, late.c), "a heard the end as it borrowed, and closed")
	assert.True(t, a.life.closing)
	assert.Equal(t, ErrClosed, word(t, x2.c), "drained")
}

// A DoMany over two shards takes the room of all its inputs from spare in
// one step (borrow), and each part goes into its shard's core with its
// share; one that spare cannot hold earmarks room shard by shard.
// Mutations: a granted part not taking its room in (the core refuses it).
func TestLoopShardsDoMany(t *testing.T) {
	ls := testShards(t, 2, limits{batchSize: 4, queued: 3, delay: time.Hour}, 2, nil)
	a := ls[0]
	g := ltGroup("x", "y")
	g.parts = append(g.parts, part[string, in, int]{c: make(chan struct{}, 1)})
	g.ws[1].part, g.parts[0].n, g.parts[0].total = 1, 1, 1
	g.parts[1].n, g.parts[1].total, g.parts[1].heaviest = 1, 1, 1
	require.True(t, borrow(a.f, g, 2))
	assert.Equal(t, budget{1, sharedWeight(a.lim) - 2}, free(a))
	for i, l := range ls {
		l.receive(tm{op: opAdmitMany, g: g, part: int32(i)})
		<-g.parts[i].c
		require.NoError(t, g.parts[i].err)
		assert.Equal(t, 1, l.st.queued)
	}
}
