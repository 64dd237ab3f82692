package ferry

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests in this file step one loop through handle and receive, with no
// worker goroutine and no other goroutine: the loop's slots start fake
// workers (a jobs channel no one reads), and what the loop sends is read
// from its channels and its outbox.

type (
	tw = waiter[string, in, int]
	tm = msg[string, in, int]
	tl = loop[string, in, int]
)

// testLoop returns a loop of one shard with limits lim and at most two
// workers, which start no goroutine; set changes the ferry first.
func testLoop(t *testing.T, lim limits, set func(f *Ferry[string, in, int])) *tl {
	t.Helper()
	f := &Ferry[string, in, int]{lim: lim, origin: time.Now()}
	if set != nil {
		set(f)
	}
	s := &shard[string, in, int]{f: f, inc: make(chan tm, 64), done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	f.shards = []*shard[string, in, int]{s}
	l := newLoop(s, lim, 2, 0, 0)
	l.slots.start = func() *worker[string, in, int] {
		return &worker[string, in, int]{jobs: make(chan job[string, in, int], 1), fl: new(flight[string, in, int])}
	}
	t.Cleanup(func() { l.alarm.t.Stop() })
	return l
}

// do returns a Do's input of key weighing 1, with its reply channel.
func ltDo(key string) *tw { return &tw{key: key, weight: 1, c: make(chan result[int], 1)} }

// sub returns a Submit's input of key, with its word's channel.
func ltSub(key string) *tw {
	return &tw{key: key, weight: 1, c: make(chan result[int], 1), done: func(int, error) {}}
}

// word is the one word in c, or a failure if there is none.
func word(t *testing.T, c chan result[int]) error {
	t.Helper()
	select {
	case r := <-c:
		return r.err
	default:
		t.Fatal("no word")
		return nil
	}
}

// noWord fails if c holds a word.
func noWord(t *testing.T, c chan result[int], msg string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s: a word %v", msg, r.err)
	default:
	}
}

// jobOf is the batch sent to worker id, or nil if none was.
func jobOf(l *tl, id int) []*tw {
	if id >= len(l.slots.workers) || l.slots.workers[id] == nil {
		return nil
	}
	select {
	case j := <-l.slots.workers[id].jobs:
		return j.fl.batch
	default:
		return nil
	}
}

// ltGroup returns a DoMany of one part over keys, each weighing 1, ready
// for its admission.
func ltGroup(keys ...string) *group[string, in, int] {
	g := &group[string, in, int]{ws: make([]tw, len(keys)), errs: make([]error, len(keys)), count: newCountdown()}
	g.parts = []part[string, in, int]{{c: make(chan struct{}, 1)}}
	p := &g.parts[0]
	for i, k := range keys {
		g.ws[i] = tw{key: k, weight: 1, g: g, i: i}
		p.n++
		p.total++
		p.heaviest = 1
	}
	g.outs = make([]int, len(keys))
	g.count.start(len(keys))
	return g
}

func partMsg(o op, g *group[string, in, int]) tm { return tm{op: o, g: g} }

// Admission: a Do claims an idle key and joins a busy one; a Submit never
// claims; a full room, a heavy input and a shut room refuse.
func TestLoopAdmission(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 2, queuedWeight: 3, direct: true}, nil)
	a1, a2, s1 := ltDo("a"), ltDo("a"), ltSub("b")
	l.handle(tm{op: opAdmit, w: a1}, t0)
	assert.Equal(t, errClaimed, word(t, a1.c), "an idle key is claimed")
	l.handle(tm{op: opAdmit, w: a2}, t0)
	noWord(t, a2.c, "a busy key's Do joins its lane")
	l.handle(tm{op: opAdmit, w: s1}, t0)
	assert.Equal(t, errAdmitted, word(t, s1.c), "a Submit never claims")
	full, heavy := ltDo("b"), ltDo("d")
	heavy.weight = 4
	l.handle(tm{op: opAdmit, w: full}, t0)
	assert.ErrorIs(t, word(t, full.c), ErrRejected)
	l.handle(tm{op: opAdmit, w: heavy}, t0)
	err := word(t, heavy.c)
	assert.ErrorIs(t, err, ErrRejected)
	assert.Contains(t, err.Error(), "more than MaxQueuedWeight")
	st := l.stats()
	assert.Equal(t, 2, st.Queued)
	assert.Equal(t, uint64(2), st.Admitted)
	assert.Equal(t, uint64(1), st.DirectCalls)
	assert.Equal(t, uint64(2), st.Rejected)
	assert.Equal(t, uint64(1), st.RejectedHeavy)
	assert.Equal(t, uint64(1), st.RejectedFull)

	l.handle(tm{op: opShutdown}, t0)
	late := ltDo("e")
	l.handle(tm{op: opAdmit, w: late}, t0)
	assert.Equal(t, ErrClosed, word(t, late.c), "a shut room refuses")
	assert.Equal(t, uint64(2), l.stats().Rejected, "not counted as rejected")
}

// A wake-up admits its messages, then starts a batch on a worker, whose
// opIdle frees it; a room weighs by weight too.
func TestLoopReceiveDispatches(t *testing.T) {
	l := testLoop(t, limits{batchSize: 2, queued: 8}, nil)
	a, b, c := ltDo("a"), ltDo("a"), ltDo("a")
	l.s.inc <- tm{op: opAdmit, w: b}
	l.s.inc <- tm{op: opAdmit, w: c}
	l.receive(tm{op: opAdmit, w: a})
	assert.Equal(t, []*tw{a, b}, jobOf(l, 0), "a full batch, in order")
	assert.Equal(t, 1, l.stats().Queued)
	assert.Equal(t, 1, l.slots.busy())
	l.receive(tm{op: opRelease, key: "a", worker: 0})
	assert.Nil(t, jobOf(l, 0), "a busy worker gets no batch")
	assert.Equal(t, []*tw{c}, jobOf(l, 1), "a second worker takes the rest")
	l.receive(tm{op: opIdle, worker: 0})
	assert.Equal(t, 1, l.slots.busy())
	assert.Equal(t, uint64(2), l.stats().Batches)
}

// A drop of an input still waiting answers errDropped and frees its room;
// one taken by a call answers errKept, and with CancelAbandoned cancels the
// call once no caller is left.
func TestLoopDrop(t *testing.T) {
	l := testLoop(t, limits{batchSize: 1, queued: 4}, func(f *Ferry[string, in, int]) { f.cancelAbandoned = true })
	a, b := ltDo("a"), ltDo("b")
	l.s.inc <- tm{op: opAdmit, w: b}
	l.receive(tm{op: opAdmit, w: a})
	ja := <-l.slots.workers[0].jobs
	require.Equal(t, []*tw{a}, ja.fl.batch)
	require.Equal(t, []*tw{b}, jobOf(l, 1))
	require.NoError(t, ja.fl.ctx.Err(), "its call has a context of its own")

	l.receive(tm{op: opDrop, w: a})
	assert.Equal(t, errKept, word(t, a.c), "taken: kept")
	assert.True(t, a.gone)
	assert.ErrorIs(t, context.Cause(ja.fl.ctx), ErrAbandoned, "cancelled once its one caller gave up")
	l.receive(tm{op: opRelease, key: "a", worker: 0})
	assert.Nil(t, l.slots.workers[0].fl.cancel, "freed at its release")

	l2 := testLoop(t, limits{batchSize: 4, queued: 4, delay: time.Hour}, nil)
	w := ltDo("a")
	l2.receive(tm{op: opAdmit, w: w})
	assert.Nil(t, jobOf(l2, 0), "it waits for its delay")
	l2.receive(tm{op: opDrop, w: w})
	assert.Equal(t, errDropped, word(t, w.c), "waiting: dropped")
	assert.Equal(t, uint64(1), l2.stats().Dropped)
	assert.Zero(t, l2.stats().Queued)
	answered := ltDo("b")
	answered.c <- result[int]{out: 1}
	l2.receive(tm{op: opDrop, w: answered})
	assert.Equal(t, result[int]{out: 1}, <-answered.c, "an answer there stands: no errKept over it")
}

// A release whose call failed for good pauses its key: the inputs waiting
// in its lane are answered with the key's error, later ones refused at
// admission, until Resume.
func TestLoopReleaseToPause(t *testing.T) {
	l := testLoop(t, limits{batchSize: 1, queued: 4}, func(f *Ferry[string, in, int]) { f.pauseOnError = true })
	a1, a2 := ltDo("a"), ltDo("a")
	g := ltGroup("a", "b")
	l.s.inc <- tm{op: opAdmit, w: a2}
	l.s.inc <- partMsg(opAdmitMany, g)
	l.receive(tm{op: opAdmit, w: a1})
	require.Equal(t, []*tw{a1}, jobOf(l, 0))
	<-g.parts[0].c
	assert.Equal(t, []*tw{&g.ws[1]}, jobOf(l, 1), "b's batch on the other worker")
	assert.Equal(t, 2, l.stats().Queued)

	l.receive(tm{op: opRelease, key: "a", worker: 0, fail: errBoom})
	err := word(t, a2.c)
	assert.ErrorIs(t, err, ErrPaused)
	assert.ErrorIs(t, err, errBoom)
	assert.ErrorIs(t, g.errs[0], ErrPaused, "the DoMany's input of the key too")
	assert.True(t, g.ws[0].refused)
	st := l.stats()
	assert.Equal(t, 1, st.Paused)
	assert.Equal(t, uint64(2), st.PausedOut)

	later, sub := ltDo("a"), ltSub("a")
	l.receive(tm{op: opAdmit, w: later})
	assert.ErrorIs(t, word(t, later.c), ErrPaused)
	l.receive(tm{op: opAdmit, w: sub})
	assert.ErrorIs(t, word(t, sub.c), ErrPaused)
	g2 := ltGroup("a", "c")
	l.receive(partMsg(opAdmitMany, g2))
	<-g2.parts[0].c
	assert.NoError(t, g2.parts[0].err, "the part goes in but for the paused key's input")
	assert.ErrorIs(t, g2.errs[0], ErrPaused)
	assert.Nil(t, g2.errs[1])

	l.receive(tm{op: opIdle, worker: 0})
	l.receive(tm{op: opResume, key: "a"})
	again := ltDo("a")
	l.receive(tm{op: opAdmit, w: again})
	noWord(t, again.c, "admitted again after Resume")
	assert.Zero(t, l.stats().Paused)
}

// With WaitForRoom the admissions the room cannot hold wait in one line,
// first come first in, and a new one waits behind them even if it fits; a
// Submit that leaves is answered errDropped, a Do that drops too.
func TestLoopWaitLine(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 2, delay: time.Hour}, func(f *Ferry[string, in, int]) { f.waitForRoom = true })
	a, b := ltDo("a"), ltDo("b")
	l.receive(tm{op: opAdmit, w: a})
	l.receive(tm{op: opAdmit, w: b})
	g := ltGroup("c", "d")
	c, d, e := ltSub("c"), ltDo("d"), ltSub("e")
	l.receive(tm{op: opAdmit, w: c})
	l.receive(partMsg(opAdmitMany, g))
	l.receive(tm{op: opAdmit, w: d})
	l.receive(tm{op: opAdmit, w: e})
	noWord(t, c.c, "c waits")
	assert.Equal(t, 5, l.stats().WaitingForRoom)
	assert.Equal(t, 5, l.stats().Waiting, "the deprecated name, filled in")
	assert.Equal(t, 4, l.waits.line.len())

	l.receive(tm{op: opLeave, word: e.c})
	assert.Equal(t, errDropped, word(t, e.c), "e left the line")
	l.receive(tm{op: opDrop, w: d})
	assert.Equal(t, errDropped, word(t, d.c), "d dropped from the line")
	assert.Equal(t, 3, l.stats().WaitingForRoom)

	l.receive(tm{op: opDrop, w: a})
	assert.Equal(t, errDropped, word(t, a.c))
	assert.Equal(t, errAdmitted, word(t, c.c), "c first, into the room a freed")
	assert.Equal(t, 2, l.stats().Queued)
	select {
	case <-g.parts[0].c:
		t.Fatal("the DoMany needs room for two")
	default:
	}
	l.receive(tm{op: opDrop, w: b})
	l.receive(tm{op: opDrop, w: c})
	<-g.parts[0].c
	assert.NoError(t, g.parts[0].err, "the DoMany in once the room holds it")
	assert.Zero(t, l.stats().WaitingForRoom)
	assert.Equal(t, 2, l.stats().Queued)

	// A DoMany's part leaves the line.
	g2 := ltGroup("x")
	l.receive(partMsg(opAdmitMany, g2))
	l.receive(partMsg(opLeave, g2))
	<-g2.parts[0].c
	assert.Equal(t, errDropped, g2.parts[0].err)
	// What waits at a shutdown is answered ErrClosed.
	w := ltDo("y")
	l.receive(tm{op: opAdmit, w: w})
	l.receive(tm{op: opShutdown})
	assert.Equal(t, ErrClosed, word(t, w.c))
}

// A DoMany over several shards that spare cannot grant waits for the room
// of all its inputs (a borrow) in line, gets it in its turn, and lets its
// part here in with it.
func TestLoopWaitBorrow(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 2, delay: time.Hour}, func(f *Ferry[string, in, int]) { f.waitForRoom = true })
	a := ltDo("a")
	l.receive(tm{op: opAdmit, w: a})
	g := ltGroup("b", "c")
	g.parts = append(g.parts, part[string, in, int]{c: make(chan struct{}, 1), n: 1, total: 1, heaviest: 1})
	g.parts[0].n, g.parts[0].total = 1, 1
	g.ws[1].part = 1
	l.receive(partMsg(opBorrowWait, g))
	select {
	case <-g.parts[0].c:
		t.Fatal("two inputs do not fit beside a")
	default:
	}
	assert.Equal(t, 2, l.stats().WaitingForRoom)
	l.receive(tm{op: opDrop, w: a})
	<-g.parts[0].c
	assert.NoError(t, g.parts[0].err)
	assert.True(t, g.parts[1].granted, "the other part's room is granted")
	assert.Equal(t, 1, l.stats().Queued, "part 0 in")
}

// Flush: a round makes every input due and waits for it, for the batches in
// flight and their opIdle; a Flush that comes meanwhile waits for the next
// round; a close answers them all ErrClosed.
func TestLoopFlushRounds(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 8, delay: time.Hour}, nil)
	a := ltDo("a")
	l.receive(tm{op: opAdmit, w: a})
	assert.Nil(t, jobOf(l, 0))
	f1, f2 := make(chan error, 1), make(chan error, 1)
	l.receive(tm{op: opFlush, flushed: f1})
	assert.Equal(t, []*tw{a}, jobOf(l, 0), "due at once")
	assert.Empty(t, f1)
	l.receive(tm{op: opFlush, flushed: f2})
	l.receive(tm{op: opRelease, key: "a", worker: 0})
	assert.Empty(t, f1, "the batch is answered only at its opIdle")
	l.receive(tm{op: opIdle, worker: 0})
	assert.NoError(t, <-f1)
	assert.NoError(t, <-f2, "the next round had nothing to wait for")

	b := ltDo("b")
	l.receive(tm{op: opAdmit, w: b})
	f3, f4 := make(chan error, 1), make(chan error, 1)
	l.receive(tm{op: opFlush, flushed: f3})
	l.receive(tm{op: opFlush, flushed: f4})
	l.receive(tm{op: opClose})
	assert.Equal(t, ErrClosed, <-f3)
	assert.Equal(t, ErrClosed, <-f4)
	f5 := make(chan error, 1)
	l.receive(tm{op: opFlush, flushed: f5})
	assert.Equal(t, ErrClosed, <-f5, "a closing loop answers at once")
}

// The close drains the room (ErrClosed to every waiting caller and part),
// then, once no call is in flight, stops its workers; once they have gone
// it closes done and answers what is left in its inbound channel.
func TestLoopCloseDrain(t *testing.T) {
	l := testLoop(t, limits{batchSize: 1, queued: 8, delay: time.Hour}, nil)
	a, b := ltDo("a"), ltDo("b")
	g := ltGroup("c")
	l.s.inc <- tm{op: opAdmit, w: b}
	l.s.inc <- partMsg(opAdmitMany, g)
	l.receive(tm{op: opAdmit, w: a})
	<-g.parts[0].c
	l.receive(tm{op: opFlush, flushed: make(chan error, 1)}) // a, b and c due: two workers take a and b
	require.Equal(t, []*tw{a}, jobOf(l, 0))
	require.Equal(t, []*tw{b}, jobOf(l, 1))
	l.receive(tm{op: opClose})
	assert.Equal(t, ErrClosed, g.errs[0], "the DoMany's waiting input")
	assert.True(t, g.ws[0].refused)
	assert.ErrorIs(t, l.s.ctx.Err(), context.Canceled, "the batches' context is cancelled")
	assert.False(t, l.end(), "two calls in flight")

	for id, key := range []string{"a", "b"} {
		l.receive(tm{op: opRelease, key: key, worker: int32(id)})
		l.receive(tm{op: opIdle, worker: int32(id)})
	}
	assert.False(t, l.end(), "its workers stop")
	assert.Equal(t, 2, l.life.stops)
	l.receive(tm{op: opExit})
	assert.False(t, l.end(), "one worker left")
	late, stats := ltDo("z"), make(chan Stats, 1)
	lg, lf := ltGroup("y"), make(chan error, 1)
	l.receive(tm{op: opExit})
	l.s.inc <- tm{op: opAdmit, w: late}
	l.s.inc <- tm{op: opStats, stats: stats}
	l.s.inc <- partMsg(opAdmitMany, lg)
	l.s.inc <- tm{op: opFlush, flushed: lf}
	require.True(t, l.end(), "over")
	select {
	case <-l.s.done:
	default:
		t.Fatal("done is closed")
	}
	assert.Equal(t, ErrClosed, word(t, late.c), "the final drain answers what came")
	assert.Equal(t, uint64(2), (<-stats).Batches)
	<-lg.parts[0].c
	assert.Equal(t, ErrClosed, lg.parts[0].err)
	assert.Equal(t, ErrClosed, <-lf)
}

// A DoMany's part: all of its inputs in, or none; room earmarked and let go
// over several shards; a drop of what still waits.
func TestLoopParts(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 3, delay: time.Hour}, nil)
	g := ltGroup("a", "b")
	l.receive(partMsg(opEarmark, g))
	<-g.parts[0].c
	assert.True(t, g.parts[0].earmarked)
	big := ltGroup("c", "d")
	l.receive(partMsg(opAdmitMany, big))
	<-big.parts[0].c
	assert.ErrorIs(t, big.parts[0].err, ErrRejected, "the earmarked room is not free")
	l.receive(partMsg(opUnearmark, g))
	<-g.parts[0].c
	assert.False(t, g.parts[0].earmarked)
	l.receive(partMsg(opAdmitMany, g))
	<-g.parts[0].c
	assert.NoError(t, g.parts[0].err)
	assert.Equal(t, 2, l.stats().Queued)
	tooMany := ltGroup("e", "f", "g", "h")
	l.receive(partMsg(opAdmitMany, tooMany))
	<-tooMany.parts[0].c
	assert.ErrorContains(t, tooMany.parts[0].err, "more than MaxQueued")

	l.receive(partMsg(opDropMany, g))
	<-g.parts[0].c
	assert.Equal(t, 2, g.parts[0].dropped)
	assert.True(t, g.ws[0].dropped)
	assert.Zero(t, l.stats().Queued)
}

// Direct calls: a claim, its start, its release with OnBatch to come and
// the report; the order of completions per key; a close cancels the direct
// calls in flight (through the outbox).
func TestLoopDirect(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 4, direct: true}, func(f *Ferry[string, in, int]) { f.onBatch = func(Batch[string]) {} })
	a := ltDo("a")
	l.receive(tm{op: opAdmit, w: a})
	require.Equal(t, errClaimed, word(t, a.c))
	require.NotNil(t, a.fin, "with OnBatch its completions take a place")
	assert.Nil(t, a.after, "first of its key")
	cancelled := 0
	l.receive(tm{op: opStart, key: "a", w: a, cancel: func(error) { cancelled++ }})
	f1 := make(chan error, 1)
	l.receive(tm{op: opFlush, flushed: f1})
	l.receive(tm{op: opRelease, key: "a", worker: byCaller, w: a, fin: a.fin})
	assert.Empty(t, f1, "its OnBatch is to come")
	assert.Equal(t, 1, l.directs.reports.len())
	close(a.fin)
	l.s.inc <- tm{op: opReported, fin: a.fin}
	l.receive(tm{op: opOnBatchPanicked})
	assert.NoError(t, <-f1)
	assert.Zero(t, l.directs.reports.len())
	assert.Zero(t, l.order.last.len(), "the key's completions are over")
	assert.Equal(t, uint64(1), l.stats().OnBatchPanics)

	b, b2 := ltDo("b"), ltDo("b")
	l.receive(tm{op: opAdmit, w: b})
	require.Equal(t, errClaimed, word(t, b.c))
	l.receive(tm{op: opStart, key: "b", w: b, cancel: func(error) { cancelled++ }})
	l.receive(tm{op: opAdmit, w: b2})
	noWord(t, b2.c, "joins the busy key's lane")
	l.handle(tm{op: opClose}, t0)
	assert.Len(t, l.out.cancels, 1, "the direct call in flight, cancelled from the outbox")
	l.out.cancels = l.out.cancels[:0] // not sent: it would run on a goroutine
	assert.Equal(t, ErrClosed, word(t, b2.c))
	l.handle(tm{op: opStart, key: "c", w: ltDo("c"), cancel: func(error) { cancelled++ }}, t0)
	assert.Len(t, l.out.cancels, 1, "a direct call that starts as the ferry closes")
	l.out.cancels = l.out.cancels[:0]
	assert.Zero(t, cancelled)
}

// share.need is the room the core takes for the same messages, with room
// for all of them: a Do that claims, an input of a paused key (but for a
// Resume read first) and a heavy one take none. Random wake-ups after
// random histories: two loops live the same history, then one handles the
// wake-up and the other's share reads need for it.
func TestLoopNeedIsWhatTheCoreTakes(t *testing.T) {
	keys := []string{"a", "b", "c", "d"}
	claimed := map[*tl]map[string]*tw{} // by loop, the Do that claimed each key busy
	history := func(l *tl, r *rand.Rand) {
		claimed[l] = map[string]*tw{}
		for range r.IntN(12) {
			k := keys[r.IntN(len(keys))]
			switch r.IntN(3) {
			case 0:
				w := ltDo(k)
				l.handle(tm{op: opAdmit, w: w}, t0)
				if len(w.c) > 0 && (<-w.c).err == errClaimed {
					claimed[l][k] = w
				}
			case 1:
				l.handle(tm{op: opAdmit, w: ltSub(k)}, t0)
			default:
				ln := l.st.lanes.get(k)
				if ln == nil || ln.phase != phaseBusy {
					continue
				}
				var fail error
				if r.IntN(2) == 0 && ln.items.len() == 0 { // pauses k, answering no Submit
					fail = errBoom
				}
				l.handle(tm{op: opRelease, key: k, worker: byCaller, w: claimed[l][k], fail: fail}, t0)
			}
		}
	}
	for seed := range uint64(500) {
		lim := limits{batchSize: 4, queued: 1 << 20, queuedWeight: 1 << 40, direct: seed%3 != 0}
		if seed%3 == 2 {
			lim.direct, lim.delay = false, time.Hour
		}
		pause := func(f *Ferry[string, in, int]) { f.pauseOnError = true }
		l, twin := testLoop(t, lim, pause), testLoop(t, lim, pause)
		r := rand.New(rand.NewPCG(seed, 7))
		history(l, r)
		history(twin, rand.New(rand.NewPCG(seed, 7)))
		n, w := l.st.queued+l.st.earmarked.n, l.st.weight+l.st.earmarked.w
		var ms []tm
		for range 1 + r.IntN(10) {
			k := keys[r.IntN(len(keys))]
			var m tm
			switch r.IntN(5) {
			case 0:
				m = tm{op: opAdmit, w: ltDo(k)}
				m.w.weight = int64(r.IntN(3))
			case 1:
				m = tm{op: opAdmit, w: ltSub(k)}
			case 2:
				m = partMsg(opAdmitMany, ltGroup(k, keys[r.IntN(len(keys))]))
			case 3:
				m = tm{op: opResume, key: k}
			default:
				ln := l.st.lanes.get(k)
				if ln == nil || ln.phase != phaseBusy {
					continue
				}
				m = tm{op: opRelease, key: k, worker: byCaller, w: claimed[l][k]}
			}
			ms = append(ms, m)
			l.handle(m, t0)
		}
		took := budget{l.st.queued + l.st.earmarked.n - n, l.st.weight + l.st.earmarked.w - w}
		require.Equal(t, took, twin.share.need(ms, twin.st, &twin.pauses.keys), "seed %d", seed)
	}
}

// withRetry gives the ferry a Retry, as a loop parks only with one: the
// loop then reads the clock and sets its alarm for parks.
func withRetry(f *Ferry[string, in, int]) {
	f.retry = func(string, int, error) (time.Duration, bool) { return 0, false }
}

// ltPark is the opPark worker id sends for job j, whose one attempt failed,
// to retry its inputs idx after d.
func ltPark(j job[string, in, int], id int, d time.Duration, idx ...int) tm {
	fl := j.fl
	n := len(fl.batch)
	fl.outs, fl.errs, fl.idx, fl.attempt, fl.backoff = make([]int, n), make(Errors, n), idx, fl.attempt+1, d
	return tm{op: opPark, key: fl.key, worker: int32(id), fl: fl}
}

// A park frees its worker at once and holds its key: the key's later input
// waits behind it, other keys run, a Flush waits for it. Resume makes it
// due: a worker takes the parked batch, less the inputs whose callers gave
// up, before the key's later input. Mutations: park not releasing the slot
// (b waits); resume not unparking (no job); takeParked keeping the gone
// input; startRound not counting parks (the Flush answered early).
func TestLoopPark(t *testing.T) {
	l := testLoop(t, limits{batchSize: 2, queued: 8}, withRetry)
	a1, a2 := ltDo("a"), ltDo("a")
	l.s.inc <- tm{op: opAdmit, w: a2}
	l.receive(tm{op: opAdmit, w: a1})
	j := <-l.slots.workers[0].jobs
	require.Equal(t, []*tw{a1, a2}, j.fl.batch)
	l.receive(ltPark(j, 0, time.Hour, 0, 1))
	assert.Zero(t, l.slots.busy(), "the worker is free")
	st := l.stats()
	assert.Equal(t, 1, st.Parked)
	assert.Zero(t, st.Busy)
	assert.True(t, l.alarm.set, "for the park's deadline")
	assert.InDelta(t, float64(l.f.clock()+time.Hour), float64(l.alarm.at), float64(time.Minute))

	a3, b := ltDo("a"), ltDo("b")
	l.receive(tm{op: opAdmit, w: a3})
	l.receive(tm{op: opAdmit, w: b})
	assert.Equal(t, []*tw{b}, jobOf(l, 0), "another key runs on the freed worker")
	assert.Nil(t, jobOf(l, 1), "a3 waits behind the park")
	assert.Equal(t, 1, l.stats().Queued)
	f1 := make(chan error, 1)
	l.receive(tm{op: opFlush, flushed: f1})
	l.receive(tm{op: opDrop, w: a1})
	assert.Equal(t, errKept, word(t, a1.c))

	l.receive(tm{op: opResume, key: "a"})
	j2 := <-l.slots.workers[1].jobs
	require.NotZero(t, j2.fl.attempt, "the parked batch, as a3 waits")
	assert.Equal(t, []*tw{a1, a2}, j2.fl.batch)
	assert.Equal(t, []int{1}, j2.fl.idx, "a1's caller gave up")
	assert.Zero(t, l.stats().Parked)
	assert.Equal(t, uint64(2), l.stats().Batches, "a retry is no new batch")

	for _, k := range []string{"b", "a"} {
		id := int32(0)
		if k == "a" {
			id = 1
		}
		l.receive(tm{op: opRelease, key: k, worker: id})
		l.receive(tm{op: opIdle, worker: id})
	}
	assert.Empty(t, f1, "a3 was admitted before the Flush")
	assert.Equal(t, []*tw{a3}, jobOf(l, 0), "then the key's later input")
	l.receive(tm{op: opRelease, key: "a", worker: 0})
	l.receive(tm{op: opIdle, worker: 0})
	assert.NoError(t, <-f1)
}

// A Flush that starts during a park waits for it; a close makes a parked
// batch due at once, with its context ended, and the loop ends only once it
// has been answered. Mutations: drain leaving parks parked (no job);
// startRound not counting parks; end not counting a parked batch.
func TestLoopParkFlushAndClose(t *testing.T) {
	l := testLoop(t, limits{batchSize: 1, queued: 8}, withRetry)
	a := ltDo("a")
	l.receive(tm{op: opAdmit, w: a})
	j := <-l.slots.workers[0].jobs
	f1 := make(chan error, 1)
	l.receive(ltPark(j, 0, time.Duration(math.MaxInt64), 0))
	l.receive(tm{op: opFlush, flushed: f1})
	assert.Empty(t, f1, "the park is owed")
	l.receive(tm{op: opResume, key: "a"})
	j2 := <-l.slots.workers[0].jobs
	require.NotZero(t, j2.fl.attempt)
	l.receive(ltPark(j2, 0, time.Duration(math.MaxInt64), 0)) // parked again: still owed
	assert.Empty(t, f1)
	l.receive(tm{op: opClose})
	assert.Equal(t, ErrClosed, <-f1)
	j3 := <-l.slots.workers[0].jobs
	require.NotZero(t, j3.fl.attempt, "due at once")
	assert.ErrorIs(t, j3.fl.ctx.Err(), context.Canceled)
	assert.False(t, l.end(), "the parked batch is answered first")
	l.receive(tm{op: opRelease, key: "a", worker: 0})
	l.receive(tm{op: opIdle, worker: 0})
	assert.False(t, l.end(), "its worker stops")
	l.receive(tm{op: opExit})
	assert.True(t, l.end())
}

// A failure decided before Close and handled after it (its worker's
// release, or its hold, queued behind the close) pauses its key: OnPause
// then comes after the Submits' done that the close drained, never
// beside them, as every completion of a key comes in order (found by
// model/fail.pml). Mutation: close's notifier taking no place among the
// keys' completions (OnPause runs while the drained done blocks).
func TestLoopOnPauseAfterTheCloseDrained(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(map[bool]string{false: "release", true: "hold"}[hold], func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				ev := newEvents()
				l := testLoop(t, limits{batchSize: 1, queued: 4}, func(f *Ferry[string, in, int]) {
					f.pauseOnError, f.hold = true, hold
					f.onPause = func(key string, err error) { ev.add("OnPause %s", key) }
					f.onBatch = func(Batch[string]) {}
				})
				a := ltDo("a")
				l.receive(tm{op: opAdmit, w: a})
				j := <-l.slots.workers[0].jobs // its completions take the key's place
				release := make(chan struct{})
				s := ltSub("a")
				s.done = func(int, error) {
					ev.add("done start")
					<-release
					ev.add("done end")
				}
				l.receive(tm{op: opAdmit, w: s}) // joins the busy lane
				require.Equal(t, errAdmitted, word(t, s.c))
				l.receive(tm{op: opClose}) // drains s: its done waits for the batch's completions
				m := tm{op: opRelease, key: "a", worker: 0, fail: errBoom, order: 1}
				if hold {
					h := &flight[string, in, int]{key: "a", batch: []*tw{a}, ctx: j.fl.ctx, outs: make([]int, 1),
						errs: Errors{errBoom}, idx: []int{0}, attempt: 1, last: errBoom, held: true}
					m = tm{op: opPark, key: "a", worker: 0, fl: h, fail: errBoom, order: 1}
				}
				l.receive(m)
				close(j.fl.fin) // the batch's completions are over
				synctest.Wait()
				assert.Equal(t, []string{"0s done start"}, ev.list(t), "OnPause waits for the drained done")
				close(release)
				synctest.Wait()
				assert.Equal(t, []string{"0s done start", "0s done end", "0s OnPause a"}, ev.list(t))
			})
		})
	}
}

// HoldPaused's handlers, stepped: a direct call's failure holds its key's
// lane with no input (holdDirect), a later Do waits in it, Resume hands the
// empty held batch out first; a batch's held inputs (opPark with its
// failure) hold the lane while its worker answers the rest; Shutdown ends
// the holds (stopHolds), answering the lane's inputs ErrClosed and handing
// the held batch out with stop set. Mutations: release not holding a
// direct call's failure (the Do answered ErrPaused); hold freeing the
// worker (busy 0); stopHeld not setting stop.
func TestLoopHold(t *testing.T) {
	l := testLoop(t, limits{batchSize: 4, queued: 8, direct: true}, func(f *Ferry[string, in, int]) {
		f.pauseOnError, f.hold = true, true
	})
	a := ltDo("a")
	l.receive(tm{op: opAdmit, w: a})
	require.Equal(t, errClaimed, word(t, a.c))
	l.receive(tm{op: opRelease, key: "a", worker: byCaller, w: a, fail: errBoom, order: 1})
	assert.Equal(t, 1, l.stats().Paused)
	assert.Equal(t, 1, l.stats().Parked)
	a2 := ltDo("a")
	l.receive(tm{op: opAdmit, w: a2})
	noWord(t, a2.c, "held, not refused")
	l.receive(tm{op: opResume, key: "a"})
	j, id := nextJob(t, l)
	require.True(t, j.fl.held, "the held batch first")
	assert.Empty(t, j.fl.batch)
	assert.Zero(t, l.stats().Paused)
	l.receive(tm{op: opRelease, key: "a", worker: int32(id)})
	l.receive(tm{op: opIdle, worker: int32(id)})
	j, id = nextJob(t, l)
	assert.Equal(t, []*tw{a2}, j.fl.batch, "then the lane")
	l.receive(tm{op: opRelease, key: "a", worker: int32(id)})
	l.receive(tm{op: opIdle, worker: int32(id)})

	// A batch's held inputs: its worker stays busy while it answers the rest.
	b, b2 := ltDo("b"), ltDo("b")
	l.receive(tm{op: opAdmit, w: b}) // claims b
	require.Equal(t, errClaimed, word(t, b.c))
	l.receive(tm{op: opAdmit, w: b2})
	l.receive(tm{op: opRelease, key: "b", worker: byCaller, w: b})
	jb, id := nextJob(t, l)
	require.Equal(t, []*tw{b2}, jb.fl.batch)
	h := &flight[string, in, int]{key: "b", batch: []*tw{b2}, ctx: jb.fl.ctx, outs: make([]int, 1),
		errs: Errors{errBoom}, idx: []int{0}, attempt: 1, last: errBoom, held: true}
	l.receive(tm{op: opPark, key: "b", worker: int32(id), fl: h, fail: errBoom, order: 2})
	assert.Equal(t, 1, l.slots.busy(), "its worker answers the rest first")
	b3 := ltSub("b")
	l.receive(tm{op: opAdmit, w: b3})
	require.Equal(t, errAdmitted, word(t, b3.c))

	l.receive(tm{op: opShutdown})
	assert.True(t, h.stop != nil, "the hold ended by Shutdown")
	assert.Equal(t, 1, l.pauses.notes.len(), "b3's done, refused ErrClosed, on a notifier")
	l.receive(tm{op: opIdle, worker: int32(id)})
	jh, _ := nextJob(t, l)
	assert.Same(t, h, jh.fl, "the held batch, to be answered uncalled")
}

// nextJob is the job some worker of l was sent, and that worker's id.
func nextJob(t *testing.T, l *tl) (job[string, in, int], int) {
	t.Helper()
	for id, wk := range l.slots.workers {
		if wk == nil {
			continue
		}
		select {
		case j := <-wk.jobs:
			return j, id
		default:
		}
	}
	t.Fatal("no job sent")
	return job[string, in, int]{}, 0
}
