package ferry

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"
	"time"
)

// model is a deliberately naive waiting room, written from the design's rules
// with plain slices and linear scans, to check state against. Entries are ints.
type model struct {
	lim          limits
	lanes        []*mlane // in creation order
	ready        []string // keys, first come first served
	queued       int
	weight       int64
	busy         int
	conts        int // lanes holding a continuation
	wseq         int // order in which lanes started waiting or were parked
	aseq         int // arrival order
	closed       bool
	shuttingDown bool
	flushed      int // inputs that arrived before this are due: see flush

	held       int   // room held for inputs not yet entered
	heldWeight int64 // and their weight
}

type mitem struct {
	entry, rank, arrival int
	at                   time.Duration
	weight               int64
}

type mlane struct {
	key      string
	items    []mitem // ascending rank, ties in arrival order
	calls    int     // calls in flight, batched and direct: at most calls() of them
	waiting  bool
	parked   bool // until due, holding cont
	ever     bool // parked with no deadline (hold): until unpark or drain
	held     bool // holds cont: parked, or ready to hand it out first
	cont     int
	due      time.Duration
	waitedAt int
}

func (m *model) lane(key string) *mlane {
	for _, l := range m.lanes {
		if l.key == key {
			return l
		}
	}
	return nil
}

func (m *model) remove(l *mlane) {
	m.lanes = slices.DeleteFunc(m.lanes, func(x *mlane) bool { return x == l })
	m.ready = slices.DeleteFunc(m.ready, func(k string) bool { return k == l.key })
}

// Sums of weights are exact (math/big), against limits where 0 means no
// limit but int64's own: what cannot be represented is never admitted.
func bigSum(ws ...int64) *big.Int {
	s := new(big.Int)
	for _, w := range ws {
		s.Add(s, big.NewInt(w))
	}
	return s
}

func orMax(lim int64) int64 {
	if lim == 0 {
		return math.MaxInt64
	}
	return lim
}

// prefix is the batch rule, literally: the longest prefix that fits both
// limits, at least one input.
func (m *model) prefix(l *mlane) int {
	n := 0
	var ws []int64
	for _, it := range l.items {
		if n == m.lim.batchSize || n > 0 && bigSum(append(ws, it.weight)...).Cmp(big.NewInt(orMax(m.lim.batchWeight))) > 0 {
			break
		}
		n++
		ws = append(ws, it.weight)
	}
	return n
}

// full: the next batch could not grow.
func (m *model) full(l *mlane) bool {
	n := m.prefix(l)
	var ws []int64
	for _, it := range l.items[:n] {
		ws = append(ws, it.weight)
	}
	return n == m.lim.batchSize || bigSum(ws...).Cmp(big.NewInt(orMax(m.lim.batchWeight))) >= 0 || n < len(l.items)
}

// deadline is the oldest input's time plus the delay, saturated at the
// latest time the core can name: MaxInt64 ns after its origin.
func (m *model) deadline(l *mlane) time.Duration {
	oldest := l.items[0].at
	for _, it := range l.items {
		if it.arrival < m.flushed {
			return math.MinInt64 // due since a flush: before any now
		}
		if it.at < oldest {
			oldest = it.at
		}
	}
	if bigSum(int64(oldest), int64(m.lim.delay)).Cmp(big.NewInt(math.MaxInt64)) < 0 {
		return oldest + m.lim.delay
	}
	return math.MaxInt64
}

func (m *model) isReady(l *mlane) bool { return slices.Contains(m.ready, l.key) }

func (m *model) toReady(l *mlane) {
	l.waiting, l.parked = false, false
	m.ready = append(m.ready, l.key)
}

// place: a lane's place in the ready line is when it became ready, so the
// lanes due by now go first.
func (m *model) place(l *mlane, now time.Duration) {
	if m.lim.delay == 0 || m.shuttingDown || m.full(l) || m.deadline(l) <= now {
		m.promote(now)
		m.toReady(l)
		return
	}
	m.wait(l)
}

func (m *model) wait(l *mlane) {
	l.waiting, l.due, l.waitedAt = true, m.deadline(l), m.wseq
	m.wseq++
}

func (m *model) admit(key string, weight, rank int64, at, now time.Duration, e int) outcome {
	if m.closed || m.shuttingDown {
		return refused
	}
	if weight > orMax(m.lim.queuedWeight) {
		return rejectedHeavy
	}
	if l := m.lane(key); m.lim.direct && m.lim.delay == 0 && (l == nil || len(l.items) == 0 && l.calls < m.calls() && !l.held) {
		if l == nil { // a key with no input waiting and a call to spare is claimed
			l = &mlane{key: key}
			m.lanes = append(m.lanes, l)
		}
		l.calls++
		m.busy++
		return claimed
	}
	return m.join(key, weight, rank, at, now, e)
}

// join is admit without a claim.
func (m *model) join(key string, weight, rank int64, at, now time.Duration, e int) outcome {
	if m.closed || m.shuttingDown {
		return refused
	}
	if weight > orMax(m.lim.queuedWeight) {
		return rejectedHeavy
	}
	if l := m.lane(key); l != nil && l.parked && l.ever {
		var ws []int64
		for _, it := range l.items {
			ws = append(ws, it.weight)
		}
		capN, capW := max(1, m.lim.queued/heldShare), max(1, orMax(m.lim.queuedWeight)/heldShare)
		if len(l.items) >= capN || len(l.items) > 0 && bigSum(append(ws, weight)...).Cmp(big.NewInt(capW)) > 0 {
			return overHeld // a held lane keeps its share of the room at most
		}
	}
	if m.queued+m.held >= m.lim.queued || bigSum(m.weight, m.heldWeight, weight).Cmp(big.NewInt(orMax(m.lim.queuedWeight))) > 0 {
		return rejectedFull
	}
	m.enter(key, weight, rank, at, now, e)
	return admitted
}

// many admits all of ins or none: refused, rejectedHeavy if one input or
// their exact sum is heavier than the room, rejectedFull if they do not fit.
func (m *model) many(ins []mitem, keys []string, now time.Duration) outcome {
	return m.room(ins, keys, now, false)
}

// hold is many that keeps the room for ins instead of entering them.
func (m *model) hold(ins []mitem, keys []string, now time.Duration) outcome {
	return m.room(ins, keys, now, true)
}

// unhold lets go of the room hold kept for ins.
func (m *model) unhold(ins []mitem) {
	m.held -= len(ins)
	for _, it := range ins {
		m.heldWeight -= it.weight
	}
}

func (m *model) room(ins []mitem, keys []string, now time.Duration, hold bool) outcome {
	ws := make([]int64, len(ins))
	for i, it := range ins {
		ws[i] = it.weight
	}
	switch room := big.NewInt(orMax(m.lim.queuedWeight)); {
	case m.closed || m.shuttingDown:
		return refused
	case slices.Max(ws) > room.Int64() || bigSum(ws...).Cmp(big.NewInt(math.MaxInt64)) > 0:
		return rejectedHeavy
	case m.queued+m.held+len(ins) > m.lim.queued || bigSum(append(ws, m.weight, m.heldWeight)...).Cmp(room) > 0:
		return rejectedFull
	}
	if hold {
		m.held += len(ins)
		m.heldWeight += bigSum(ws...).Int64()
		return admitted
	}
	for i, it := range ins {
		m.enter(keys[i], it.weight, int64(it.rank), it.at, now, it.entry)
	}
	return admitted
}

func (m *model) enter(key string, weight, rank int64, at, now time.Duration, e int) {
	l := m.lane(key)
	it := mitem{entry: e, rank: int(rank), arrival: m.aseq, at: at, weight: weight}
	m.aseq++
	m.queued++
	m.weight += weight
	fresh := l == nil
	if fresh {
		l = &mlane{key: key}
		m.lanes = append(m.lanes, l)
	}
	i := 0
	for i < len(l.items) && l.items[i].rank <= it.rank {
		i++
	}
	l.items = slices.Insert(l.items, i, it)
	switch {
	case fresh:
		m.place(l, now)
	case !l.waiting && !m.isReady(l) && !l.parked && !l.held && l.calls < m.calls():
		m.place(l, now) // a call to spare: it goes again
	case l.waiting && m.full(l):
		m.promote(now)
		if l.waiting {
			m.toReady(l)
		}
	case l.waiting:
		l.due = m.deadline(l)
	}
}

// promote: parked lanes too, in one deadline order with the waiting ones.
func (m *model) promote(now time.Duration) { m.promoteAll(now, true) }

func (m *model) promoteAll(now time.Duration, parked bool) {
	for {
		var first *mlane
		for _, l := range m.lanes {
			if (l.waiting || parked && l.parked && !l.ever) && l.due <= now &&
				(first == nil || l.due < first.due || l.due == first.due && l.waitedAt < first.waitedAt) {
				first = l
			}
		}
		if first == nil {
			return
		}
		m.toReady(first)
	}
}

func (m *model) take(now time.Duration) (string, []int, bool) {
	m.promote(now)
	if len(m.ready) == 0 {
		return "", nil, false
	}
	l := m.lane(m.ready[0])
	m.ready = m.ready[1:]
	l.calls++
	m.busy++
	if l.held { // the continuation alone, first
		l.held = false
		m.conts--
		return l.key, []int{l.cont}, true
	}
	n := m.prefix(l)
	var batch []int
	for _, it := range l.items[:n] {
		batch = append(batch, it.entry)
		m.queued--
		m.weight -= it.weight
	}
	l.items = slices.Delete(l.items, 0, n)
	if len(l.items) > 0 && l.calls < m.calls() {
		m.place(l, now) // a call to spare: the rest go again
	}
	return l.key, batch, true
}

// calls is the most calls of a key in flight at once.
func (m *model) calls() int { return max(1, m.lim.calls) }

func (m *model) release(key string, now time.Duration) {
	l := m.lane(key)
	if l == nil || l.calls == 0 {
		panic(fmt.Sprintf("model: release of %q, not busy", key))
	}
	l.calls--
	m.busy--
	m.promote(now)
	switch {
	case len(l.items) == 0 && l.calls == 0:
		m.remove(l)
	case len(l.items) > 0 && !l.waiting && !m.isReady(l):
		m.place(l, now)
	}
}

func (m *model) drop(key string, e int, now time.Duration) bool {
	l := m.lane(key)
	if l == nil {
		return false
	}
	i := slices.IndexFunc(l.items, func(it mitem) bool { return it.entry == e })
	if i < 0 {
		return false
	}
	m.queued--
	m.weight -= l.items[i].weight
	l.items = slices.Delete(l.items, i, i+1)
	switch {
	case len(l.items) == 0 && l.calls == 0 && !l.held:
		m.remove(l)
	case len(l.items) == 0 && !l.held: // calls in flight: out of line
		l.waiting = false
		m.ready = slices.DeleteFunc(m.ready, func(k string) bool { return k == l.key })
	case l.waiting:
		l.due = m.deadline(l)
	case m.isReady(l) && !l.held && m.lim.delay > 0 && !m.shuttingDown && !m.full(l) && m.deadline(l) > now:
		m.ready = slices.DeleteFunc(m.ready, func(k string) bool { return k == l.key })
		m.wait(l) // ready only because it was full: back to waiting
	}
	return true
}

// clearLane: every input of key's lane, in lane order, gone at once.
func (m *model) clearLane(key string) []int {
	l := m.lane(key)
	if l == nil {
		return nil
	}
	var out []int
	for _, it := range l.items {
		out = append(out, it.entry)
		m.queued--
		m.weight -= it.weight
	}
	l.items = nil
	switch {
	case l.calls == 0 && !l.held:
		m.remove(l)
	case !l.held: // calls in flight: out of line
		l.waiting = false
		m.ready = slices.DeleteFunc(m.ready, func(k string) bool { return k == l.key })
	}
	return out
}

func (m *model) drain() []int {
	m.closed = true
	var ready []string // lanes with a continuation: the ready ones in line, then the parked by deadline
	for _, k := range m.ready {
		if m.lane(k).held {
			ready = append(ready, k)
		}
	}
	var parked, ever []*mlane
	for _, l := range m.lanes {
		switch {
		case l.parked && l.ever:
			ever = append(ever, l)
		case l.parked:
			parked = append(parked, l)
		}
	}
	slices.SortFunc(parked, func(a, b *mlane) int {
		if a.due != b.due {
			return cmp.Compare(a.due, b.due)
		}
		return a.waitedAt - b.waitedAt
	})
	slices.SortFunc(ever, func(a, b *mlane) int { return a.waitedAt - b.waitedAt })
	for _, l := range append(parked, ever...) {
		l.parked, l.ever = false, false
		ready = append(ready, l.key)
	}
	var all []mitem
	for _, l := range m.lanes {
		all = append(all, l.items...)
		l.items = nil
		l.waiting = false
	}
	slices.SortFunc(all, func(a, b mitem) int { return a.arrival - b.arrival })
	var out []int
	for _, it := range all {
		out = append(out, it.entry)
	}
	m.lanes = slices.DeleteFunc(m.lanes, func(l *mlane) bool { return l.calls == 0 && !l.held })
	m.ready = ready
	m.queued, m.weight = 0, 0
	return out
}

// park: key's call failed and is to be retried after d; its continuation c
// waits in its lane until now+d, exactly (saturated), or at once.
func (m *model) park(key string, c int, d, now time.Duration) {
	l := m.lane(key)
	if l == nil || l.calls == 0 {
		panic(fmt.Sprintf("model: park of %q, not busy", key))
	}
	l.calls, l.held, l.cont = l.calls-1, true, c
	m.busy--
	m.conts++
	m.promote(now)
	if d <= 0 || m.closed {
		m.toReady(l)
		return
	}
	l.due = math.MaxInt64
	if bigSum(int64(now), int64(d)).Cmp(big.NewInt(math.MaxInt64)) < 0 {
		l.due = now + d
	}
	l.parked, l.waitedAt = true, m.wseq
	m.wseq++
}

// parkHeld: key's call failed for good (HoldPaused); its continuation c waits
// in its lane until unpark or drain, however late.
func (m *model) parkHeld(key string, c int) {
	l := m.lane(key)
	if l == nil || l.calls == 0 {
		panic(fmt.Sprintf("model: parkHeld of %q, not busy", key))
	}
	l.calls, l.held, l.cont = l.calls-1, true, c
	m.busy--
	m.conts++
	if m.closed {
		m.toReady(l)
		return
	}
	l.parked, l.ever, l.waitedAt = true, true, m.wseq
	m.wseq++
}

// unpark: a parked (or held) lane is ready now, after those due.
func (m *model) unpark(key string, now time.Duration) bool {
	l := m.lane(key)
	if l == nil || !l.parked {
		return false
	}
	l.parked, l.ever = false, false
	m.promote(now)
	m.toReady(l)
	return true
}

func (m *model) shutdown() {
	m.shuttingDown = true
	m.promoteAll(math.MaxInt64, false) // every waiting lane, in deadline order; parks stay
}

// flush: every input waiting now is due now, and stays due when its lane
// is placed again. Parks stay.
func (m *model) flush() {
	m.flushed = m.aseq
	m.promoteAll(math.MaxInt64, false)
}

func (m *model) earliest() (time.Duration, bool) {
	var first *mlane
	for _, l := range m.lanes {
		if (l.waiting || l.parked && !l.ever) && (first == nil || l.due < first.due || l.due == first.due && l.waitedAt < first.waitedAt) {
			first = l
		}
	}
	if first == nil {
		return 0, false
	}
	return first.due, true
}
