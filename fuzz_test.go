package ferry

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// bytes hands out fuzz input a byte at a time, zeros once it runs out.
type bytes struct{ b []byte }

func (r *bytes) next() int {
	if len(r.b) == 0 {
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return int(v)
}

func (r *bytes) more() bool { return len(r.b) > 0 }

// extremes are the values where sums wrap, drawn by bytes of 200 and up.
var extremes = []int64{0, 1, 1 << 62, 1<<62 + 1, math.MaxInt64 - 1, math.MaxInt64}

// small is v%n for a byte under 200, else one of the extremes: mostly small
// values, so that limits are hit often, and sometimes the edges.
func small(v, n int) int64 {
	if v >= 200 {
		return extremes[v%len(extremes)]
	}
	return int64(v % n)
}

// fuzzLimits decodes a configuration, small so that limits are hit often,
// with extremes among them.
func fuzzLimits(r *bytes) limits {
	lim := limits{
		batchSize:    1 + r.next()%5,
		batchWeight:  small(r.next(), 9),
		queued:       1 + r.next()%12,
		queuedWeight: small(r.next(), 21),
	}
	d := r.next()
	lim.direct = d%2 == 1
	if d >= 240 { // several calls per key in flight
		lim.calls = 2 + int(d/2%3)
	}
	if lim.batchSize == 5 {
		lim.batchSize = math.MaxInt
	}
	if lim.queued == 12 {
		lim.queued = 40 // room for a hot lane
	}
	switch d := r.next(); {
	case d >= 200:
		lim.delay = time.Duration(extremes[d%len(extremes)])
	case d%4 > 0:
		lim.delay = time.Duration(d%4*3) * time.Millisecond
	}
	return lim
}

// checkState verifies the core's invariants by walking all of it.
func checkState[K comparable, E any](s *state[K, E]) error {
	queued, busy, nready, conts, parked := 0, 0, 0, 0, 0
	var weight int64
	for k, l := range s.lanes.all() {
		if l.key != k {
			return fmt.Errorf("lane %v is filed under %v", l.key, k)
		}
		n := l.items.len()
		var w int64
		var prev *item[E]
		bad := false
		l.items.each(func(it item[E]) {
			if prev != nil && !itemLess(*prev, it) || it.weight < 0 {
				bad = true
			}
			prev = &it
			w += it.weight
		})
		if bad {
			return fmt.Errorf("lane %v: items out of order", k)
		}
		if w != l.weight {
			return fmt.Errorf("lane %v: weight %d, items weigh %d", k, l.weight, w)
		}
		q := &l.items
		if q.tree == nil && q.run.Len() > 0 && (q.run.Front().weight == dead || q.run.Back().weight == dead) {
			return fmt.Errorf("lane %v: a tombstone at an end", k)
		}
		if q.dead > q.run.Len()-q.dead {
			return fmt.Errorf("lane %v: %d tombstones, %d live", k, q.dead, q.run.Len()-q.dead)
		}
		queued += n
		weight += w
		if l.cont {
			conts++
		}
		if l.held && l.phase != phaseParked {
			return fmt.Errorf("lane %v: held but not parked", k)
		}
		busy += l.calls
		if l.calls < 0 || l.calls > s.lim.calls || l.calls > 0 && l.cont {
			return fmt.Errorf("lane %v: %d calls in flight of %d, continuation %v", k, l.calls, s.lim.calls, l.cont)
		}
		if l.calls == s.lim.calls && (l.phase == phaseReady || l.phase == phaseWaiting) {
			return fmt.Errorf("lane %v: in line with no call to spare", k)
		}
		switch l.phase {
		case phaseBusy:
			if l.cont || l.calls == 0 {
				return fmt.Errorf("lane %v: busy with %d calls, continuation %v", k, l.calls, l.cont)
			}
			if n > 0 && l.calls < s.lim.calls && !s.closed {
				return fmt.Errorf("lane %v: busy with %d inputs and a call to spare", k, n)
			}
		case phaseReady:
			nready++
			if n == 0 && !l.cont {
				return fmt.Errorf("lane %v: ready and empty", k)
			}
		case phaseParked:
			parked++
			if !l.cont {
				return fmt.Errorf("lane %v: parked with no continuation", k)
			}
			if l.held { // held: in no tree
				if _, ok := s.sched.parks.Get(waitRef[K, E]{due: l.due, seq: l.ref}); ok {
					return fmt.Errorf("lane %v: held but in the parks tree", k)
				}
				parked--
				break
			}
			if r, ok := s.sched.parks.Get(waitRef[K, E]{due: l.due, seq: l.ref}); !ok || r.l != l {
				return fmt.Errorf("lane %v: parked but not in the parks tree", k)
			}
		case phaseWaiting:
			if l.cont {
				return fmt.Errorf("lane %v: waiting and holding a continuation", k)
			}
			if n == 0 {
				return fmt.Errorf("lane %v: waiting and empty", k)
			}
			if r, ok := s.sched.waiting.Get(waitRef[K, E]{due: l.due, seq: l.ref}); !ok || r.l != l {
				return fmt.Errorf("lane %v: waiting but not in the waiting tree", k)
			}
			if l.due != s.deadline(l) {
				return fmt.Errorf("lane %v: due %d, oldest input gives %d", k, l.due, s.deadline(l))
			}
			if s.full(l) {
				return fmt.Errorf("lane %v: waiting though full", k)
			}
		default:
			return fmt.Errorf("lane %v: empty and idle, yet kept", k)
		}
	}
	sc := &s.sched
	if queued != s.queued || weight != s.weight || busy != s.busy || nready != sc.nready || conts != s.conts {
		return fmt.Errorf("totals queued=%d weight=%d busy=%d ready=%d conts=%d, lanes sum to %d %d %d %d %d",
			s.queued, s.weight, s.busy, sc.nready, s.conts, queued, weight, busy, nready, conts)
	}
	if sc.parks.Len() != parked {
		return fmt.Errorf("parks tree holds %d refs, %d lanes parked", sc.parks.Len(), parked)
	}
	var perr error
	sc.parks.Ascend(func(r waitRef[K, E]) bool {
		if r.l.phase != phaseParked || r.l.ref != r.seq || r.l.due != r.due || s.lanes.get(r.l.key) != r.l {
			perr = fmt.Errorf("parks tree holds a lane that is not parked")
		}
		return perr == nil
	})
	if perr != nil {
		return perr
	}
	if s.closed && parked > 0 {
		return fmt.Errorf("%d lanes parked after drain", parked)
	}
	waitingLanes := 0
	var err error
	sc.waiting.Ascend(func(r waitRef[K, E]) bool {
		waitingLanes++
		if r.l.phase != phaseWaiting || r.l.ref != r.seq || s.lanes.get(r.l.key) != r.l {
			err = fmt.Errorf("waiting tree holds a lane that is not waiting")
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if nwaiting := sc.waiting.Len(); waitingLanes != nwaiting {
		return fmt.Errorf("waiting tree holds %d refs, %d lanes", nwaiting, waitingLanes)
	}
	if stale := sc.ready.Len() - sc.nready; stale > sc.nready+staleSlack {
		return fmt.Errorf("ready line holds %d stale refs for %d ready lanes", stale, sc.nready)
	}
	if p := s.lanes.peak; p < s.lanes.len() || p > shrinkLanes && s.lanes.len() <= p/4 {
		return fmt.Errorf("lanes map of %d lanes has peak %d: not rebuilt", s.lanes.len(), p)
	}
	if len(s.free) > freeLanes {
		return fmt.Errorf("%d free lanes kept", len(s.free))
	}
	if s.weight < 0 || s.weight > s.room.w || s.queued > s.room.n {
		return fmt.Errorf("room over its bounds: %d inputs, weight %d", s.queued, s.weight)
	}
	if e := s.earmarked; e.n < 0 || e.w < 0 || e.n > s.room.n-s.queued || e.w > s.room.w-s.weight {
		return fmt.Errorf("room over its bounds with what it earmarks: %d+%d inputs, weight %d+%d", s.queued, e.n, s.weight, e.w)
	}
	if (s.closed || s.shuttingDown) && waitingLanes > 0 {
		return fmt.Errorf("%d lanes wait after drain or shutdown", waitingLanes)
	}
	if s.closed && queued > 0 {
		return fmt.Errorf("%d inputs wait after drain", queued)
	}
	return nil
}

// runState applies the operations coded in data to a state and to the model,
// and fails at the first difference or broken invariant.
func runState(t *testing.T, data []byte) {
	r := &bytes{data}
	lim := fuzzLimits(r)
	var now time.Duration // since the origin
	s := newState[string, int](lim)
	m := &model{lim: lim}
	keys := []string{"a", "b", "c", "d"}
	var entries []fuzzEntry
	var busy []string         // keys with a call in flight, in the order they became busy
	conts := map[string]int{} // keys holding a continuation: its entry
	nconts := 0
	var buf []int
	var holds []held // DoManys over several rooms, holding room in this one
	step := 0
	for r.more() && step < 400 {
		step++
		op := r.next() % 12
		what := ""
		switch op {
		case 0, 1, 2: // admit
			key := keys[r.next()%len(keys)]
			weight := small(r.next(), 6)
			if weight == 5 {
				weight = 9 // heavier than most batch limits
			}
			rank := int64(r.next() % 3)
			at := now - time.Duration(r.next()%3)*time.Millisecond
			e := len(entries)
			var got, want outcome
			var tk ticket
			if op == 2 { // a Submit's or DoMany's input: it never claims
				got, tk = s.join(key, weight, rank, at, now, e)
				want = m.join(key, weight, rank, at, now, e)
			} else {
				got, tk = s.admit(key, weight, rank, at, now, e)
				want = m.admit(key, weight, rank, at, now, e)
			}
			entries = append(entries, fuzzEntry{key, tk, weight, rank})
			what = fmt.Sprintf("admit(%s w=%d r=%d at=%v) = %d", key, weight, rank, at, got)
			if got != want {
				t.Fatalf("step %d: %s, model says %d", step, what, want)
			}
			if got == claimed {
				busy = append(busy, key)
			}
		case 3, 4: // take
			key, batch, cont, ok := s.take(now, buf[:0])
			buf = batch
			c, held := conts[key]
			if cont && held { // the core reports it; the continuation is the test's
				batch = []int{c}
			}
			mkey, mbatch, mok := m.take(now)
			what = fmt.Sprintf("take = %s %v %v", key, batch, ok)
			if ok != mok || ok && (key != mkey || !slices.Equal(batch, mbatch)) {
				t.Fatalf("step %d: %s, model says %s %v %v", step, what, mkey, mbatch, mok)
			}
			if ok {
				if n := count(busy, key); n >= max(1, lim.calls) {
					t.Fatalf("step %d: took %s with %d calls in flight", step, key, n)
				}
				switch {
				case cont != held:
					t.Fatalf("step %d: %s: cont %v, but %s holds a continuation: %v", step, what, cont, key, held)
				case held && (len(batch) != 1 || batch[0] != c):
					t.Fatalf("step %d: %s, but %s holds continuation %d", step, what, key, c)
				case held:
					delete(conts, key)
				case slices.ContainsFunc(batch, func(e int) bool { return e >= contBase }):
					t.Fatalf("step %d: %s: a continuation that no lane held", step, what)
				default:
					if err := checkBatch(lim, entries, batch); err != nil {
						t.Fatalf("step %d: %s: %v", step, what, err)
					}
				}
				busy = append(busy, key)
			}
		case 5: // release
			if len(busy) == 0 {
				continue
			}
			i := r.next() % len(busy)
			key := busy[i]
			busy = slices.Delete(busy, i, i+1)
			s.release(key, now)
			m.release(key, now)
			what = "release " + key
		case 6: // drop
			if len(entries) == 0 {
				continue
			}
			e := r.next() % len(entries)
			got, ok := s.drop(entries[e].key, entries[e].t, now)
			mok := m.drop(entries[e].key, e, now)
			what = fmt.Sprintf("drop %d = %v", e, ok)
			if ok != mok || ok && got != e {
				t.Fatalf("step %d: %s (entry %d), model says %v", step, what, got, mok)
			}
		case 10: // a failed call parks its key with its continuation, for an extreme backoff too
			if len(busy) == 0 || lim.calls > 1 { // New refuses Retry and PauseOnError with several calls per key
				continue
			}
			i := r.next() % len(busy)
			key := busy[i]
			busy = slices.Delete(busy, i, i+1)
			v := r.next()
			d := backoffOf(v)
			c := contBase + nconts
			nconts++
			conts[key] = c
			if v%5 == 4 { // a failure for good, with HoldPaused: no deadline
				s.hold(key)
				m.parkHeld(key, c)
				what = fmt.Sprintf("hold %s %d", key, c)
				break
			}
			s.park(key, d, now)
			m.park(key, c, d, now)
			what = fmt.Sprintf("park %s %d for %v", key, c, d)
		case 11: // Resume
			key := keys[r.next()%len(keys)]
			got, want := s.unpark(key, now), m.unpark(key, now)
			what = fmt.Sprintf("unpark %s = %v", key, got)
			if got != want {
				t.Fatalf("step %d: %s, model says %v", step, what, want)
			}
		case 7, 8: // time passes
			now += time.Duration(r.next()%8) * time.Millisecond
			what = fmt.Sprintf("now %v", now)
			if got, want := s.sched.hasReady(now), len(m.ready) > 0 || m.anyDue(now); got != want {
				t.Fatalf("step %d: hasReady = %v, model says %v", step, got, want)
			}
		case 9: // close, rarely
			switch r.next() % 8 {
			case 0:
				got := s.drain(nil)
				want := m.drain()
				what = fmt.Sprintf("drain = %v", got)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: %s, model says %v", step, what, want)
				}
			case 1:
				s.shutdown()
				m.shutdown()
				what = "shutdown"
			case 2, 3:
				s.flush()
				m.flush()
				what = "flush"
			case 4, 5: // a DoMany: all of its inputs or none, or room held for them
				var err error
				if what, err = manyStep(r, s, m, &entries, &holds, keys, now); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
			case 6: // a held DoMany enters, or lets its room go
				if len(holds) == 0 {
					continue
				}
				h := holds[0]
				holds = holds[1:]
				s.unearmark(len(h.ins), h.total)
				m.unhold(h.ins)
				what = fmt.Sprintf("unhold %v", h.ins)
				if r.next()%2 == 1 {
					break // let go: checked below
				}
				got, want := s.fits(len(h.ins), h.total, h.heaviest), m.many(h.ins, h.keys, now)
				what = fmt.Sprintf("enter held %v = %d", h.ins, got)
				if got != want || got != admitted && !s.closed && !s.shuttingDown {
					t.Fatalf("step %d: %s, model says %d: held room must let its inputs in", step, what, want)
				}
				if got == admitted {
					for i, it := range h.ins {
						entries[it.entry].t = s.enter(h.keys[i], it.weight, int64(it.rank), it.at, now, it.entry)
					}
				}
			case 7: // a key paused as its failed call is released: its lane cleared, then the release
				if len(busy) == 0 {
					continue
				}
				i := r.next() % len(busy)
				key := busy[i]
				busy = slices.Delete(busy, i, i+1)
				got, want := s.clearLane(key, nil), m.clearLane(key)
				what = fmt.Sprintf("clearLane %s = %v", key, got)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d: %s, model says %v", step, what, want)
				}
				s.release(key, now)
				m.release(key, now)
			default:
				continue
			}
		}
		if err := checkState(s); err != nil {
			t.Fatalf("step %d after %s: %v", step, what, err)
		}
		q, w, b, n := s.queued, s.weight, s.busy, s.lanes.len()
		if q != m.queued || w != m.weight || b != m.busy || n != len(m.lanes) || s.earmarked.n != m.held || s.earmarked.w != m.heldWeight || s.conts != m.conts || s.conts != len(conts) {
			t.Fatalf("step %d after %s: queued %d weight %d busy %d lanes %d, model %d %d %d %d",
				step, what, q, w, b, n, m.queued, m.weight, m.busy, len(m.lanes))
		}
		gt, gok := s.sched.earliest()
		mt, mok := m.earliest()
		if gok != mok || gok && gt != mt {
			t.Fatalf("step %d after %s: earliest %v %v, model %v %v", step, what, gt, gok, mt, mok)
		}
	}
}

// count is how many times k is in ks.
func count(ks []string, k string) int {
	n := 0
	for _, x := range ks {
		if x == k {
			n++
		}
	}
	return n
}

// held is room a DoMany over several rooms holds in this one.
type held struct {
	ins             []mitem
	keys            []string
	total, heaviest int64
}

// manyStep admits 1 to 4 inputs in one step, as DoMany does: room for them
// all, then each joins its lane in slice order; or, for a DoMany over several
// rooms, holds the room for them, to enter later (see runState's case 9).
func manyStep(r *bytes, s *state[string, int], m *model, entries *[]fuzzEntry, holds *[]held, keys []string, now time.Duration) (string, error) {
	hold := r.next()%2 == 1
	n := 1 + r.next()%4
	ins := make([]mitem, n)
	ks := make([]string, n)
	var total, heaviest int64
	for i := range ins {
		ks[i] = keys[r.next()%len(keys)]
		ins[i] = mitem{entry: len(*entries) + i, rank: r.next() % 3, at: now, weight: small(r.next(), 6)}
		heaviest = max(heaviest, ins[i].weight)
		if total >= 0 && ins[i].weight <= math.MaxInt64-total {
			total += ins[i].weight
		} else {
			total = -1 // the sum passes MaxInt64: DoMany's marker
		}
	}
	got := s.fits(n, total, heaviest)
	want := m.many
	if hold {
		want = m.hold
	}
	if w := want(ins, ks, now); w != got {
		return "", fmt.Errorf("many(%v %v, hold %v) = %d, model says %d", ks, ins, hold, got, w)
	}
	if got == admitted && hold {
		s.earmark(n, total)
		*holds = append(*holds, held{ins, ks, total, heaviest})
	}
	for i, it := range ins {
		var tk ticket
		if got == admitted && !hold {
			tk = s.enter(ks[i], it.weight, int64(it.rank), it.at, now, it.entry)
		}
		*entries = append(*entries, fuzzEntry{ks[i], tk, it.weight, int64(it.rank)})
	}
	return fmt.Sprintf("many(%v %v, hold %v) = %d", ks, ins, hold, got), nil
}

type fuzzEntry struct {
	key          string
	t            ticket
	weight, rank int64
}

// checkBatch verifies a batch against the limits and rank order: at least
// one input, at most batchSize, within batchWeight unless it is a lone input,
// ascending rank with ties in arrival (entry) order.
func checkBatch(lim limits, entries []fuzzEntry, batch []int) error {
	if len(batch) == 0 || len(batch) > lim.batchSize {
		return fmt.Errorf("batch of %d, limit %d", len(batch), lim.batchSize)
	}
	var w int64
	for i, e := range batch {
		w += entries[e].weight
		if i > 0 {
			p := batch[i-1]
			// ties in arrival order: the ticket's seq, as a held DoMany enters after later inputs
			if entries[p].rank > entries[e].rank || entries[p].rank == entries[e].rank && entries[p].t.seq > entries[e].t.seq {
				return fmt.Errorf("batch %v out of rank order", batch)
			}
		}
	}
	if len(batch) > 1 && lim.batchWeight > 0 && w > lim.batchWeight {
		return fmt.Errorf("batch %v weighs %d, limit %d", batch, w, lim.batchWeight)
	}
	return nil
}

// contBase is the first continuation's entry in runState: above every input's.
const contBase = 1 << 20

// backoffOf decodes a backoff: mostly a few ms, zero or negative (ready at
// once), sometimes an extreme, where now+d saturates.
func backoffOf(v int) time.Duration {
	if v >= 200 {
		return []time.Duration{math.MinInt64, 0, 1, 1 << 62, math.MaxInt64 - 1, math.MaxInt64}[v%6]
	}
	return time.Duration(v%12-2) * time.Millisecond
}

func (m *model) anyDue(now time.Duration) bool {
	for _, l := range m.lanes {
		if (l.waiting || l.parked && !l.ever) && l.due <= now {
			return true
		}
	}
	return false
}

// FuzzState runs random schedules of every transition against the naive model.
func FuzzState(f *testing.F) {
	for _, seed := range stateSeeds {
		f.Add(seed)
	}
	f.Fuzz(runState)
}

// stateSeeds reach every transition: direct claims, full and partial lanes,
// deadlines, drops of waiting and ready inputs, drain, shutdown and flush.
var stateSeeds = [][]byte{
	// batch 2, weight 0, queued 5, no room weight, direct on, no delay: claims
	{1, 0, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 5, 0, 0, 1, 0, 0, 3, 5, 0},
	// batch 3, weight 8, queued 11, room 20, delay 3ms: partial lanes wait
	{2, 8, 10, 20, 0, 1, 0, 0, 1, 0, 2, 0, 1, 2, 1, 0, 7, 3, 3, 7, 1, 3, 5, 0, 3, 5, 0},
	// heavy inputs, full by weight, drops, releases, then drain
	{2, 4, 6, 12, 0, 2, 0, 1, 5, 0, 0, 1, 1, 0, 1, 2, 4, 2, 0, 6, 1, 3, 6, 0, 5, 0, 3, 9, 0, 5, 0},
	// shutdown with waiting lanes, then release
	{4, 0, 11, 0, 0, 3, 0, 0, 1, 0, 0, 1, 2, 1, 1, 2, 3, 0, 3, 9, 1, 3, 5, 0, 3, 5, 0, 0, 0, 1, 0, 0},
	// room full by count and by weight
	{1, 0, 1, 3, 0, 1, 0, 0, 2, 0, 0, 0, 2, 0, 0, 1, 4, 0, 0, 3, 5, 0, 0, 2, 5, 0, 0},
	// deadline passes while busy
	{2, 0, 8, 0, 0, 1, 0, 0, 1, 0, 0, 7, 5, 3, 0, 0, 1, 0, 7, 7, 5, 0, 3, 5, 0},
	// drop the oldest input of a waiting lane: its deadline moves
	{5, 0, 8, 0, 0, 2, 0, 0, 1, 0, 2, 7, 2, 0, 0, 1, 0, 0, 6, 0, 7, 3, 7, 3, 3},
	admitDropCycles(40),
	// batch 2, no delay: a call parks for 3ms; an input joins behind; the park ends; then its items
	{1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 3, 10, 0, 5, 0, 0, 0, 0, 0, 3, 7, 3, 3, 5, 0, 3, 5, 0},
	// parks of MaxInt64 and 1<<62, an unpark, a drain with a park, then the continuation
	{2, 0, 8, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 3, 3, 10, 0, 209, 10, 0, 207, 0, 0, 1, 0, 0,
		11, 0, 3, 5, 0, 9, 1, 3, 10, 0, 204, 9, 0, 3, 5, 0},
}

// admitDropCycles is a seed of n rounds of admitting an input to a ready lane
// and dropping it, each leaving a stale ref in the ready line.
func admitDropCycles(n int) []byte {
	seed := []byte{0, 0, 0, 0, 0, 0} // batch 1, room 1, no delay
	for e := range n {
		seed = append(seed, 0, 0, 1, 0, 0, 6, byte(e))
	}
	return seed
}
