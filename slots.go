package ferry

// This file is the workers a shard holds and the slots the shards share:
// each worker is a slot, good for one batch in flight.

// tokens are the slots for batches that no shard holds, with several shards:
// free, a channel as big as MaxInFlightBatches with one token in it per free
// slot, as a set of work desks. A slot is a worker: its token is the worker,
// idle, or nil for one not started yet, which the shard that takes it starts;
// so the ferry never has more workers than slots, whichever shards run its
// batches. A slot is taken without waiting (tryTake), or by a starved loop in
// its select; put gives one back and never blocks, as the slots taken and not
// given back are never more than the channel holds. ended counts the shards
// whose loops have ended, in a channel of one: the last stops the workers in
// free (see slots.stopWorkers). wants, a channel of one, holds the wake-ups
// of the shards that found free empty while they had their share at least,
// and look again only once poked: a shard that gives slots back pokes them
// (see slots.lent). Zero with one shard. Its methods run on the loops.
type tokens[K comparable, I, O any] struct {
	free  chan *worker[K, I, O]
	ended chan int
	wants chan wakeups
}

// newTokens returns n free slots, whose workers have not started.
func newTokens[K comparable, I, O any](n int) tokens[K, I, O] {
	t := tokens[K, I, O]{free: make(chan *worker[K, I, O], n), ended: make(chan int, 1), wants: make(chan wakeups, 1)}
	for range n {
		t.free <- nil
	}
	t.ended <- 0
	t.wants <- nil
	return t
}

// want adds poke to those that wait for a slot to be given back.
func (t tokens[K, I, O]) want(poke chan struct{}) {
	ws := <-t.wants
	ws.add(poke)
	t.wants <- ws
}

// wake pokes those that wait for a slot to be given back, and forgets them.
func (t tokens[K, I, O]) wake() {
	ws := <-t.wants
	pokes := ws.take()
	t.wants <- ws
	pokes.poke()
}

// tryTake takes a free slot, its worker or nil, and reports false at once if
// there is none.
func (t tokens[K, I, O]) tryTake() (*worker[K, I, O], bool) {
	select {
	case wk := <-t.free:
		return wk, true
	default:
		return nil, false
	}
}

// put gives back a slot, its worker idle, or nil if it has none.
func (t tokens[K, I, O]) put(wk *worker[K, I, O]) { t.free <- wk }

// slots is the workers a shard holds, each on a slot, by id, and with several
// shards its side of the slots they share (tokens). With one shard they are
// all its own: it starts them as batches need them, up to most, and keeps
// them. With several, all of them together are MaxInFlightBatches, so that
// the batched calls in flight, and the workers, across shards never pass it,
// while one shard may run all of them. A shard with no idle worker takes a
// slot from tokens, and starts its worker if it has none; one that finds
// none there is starved, and its loop waits (see waitOn). As a batch ends a
// shard keeps its worker if it has no more than its own share, and else
// gives it back; at the end of each dispatch it gives back the idle workers
// it has (see giveBackIdleSlots). docs/design.md (Shards) tells why. start
// starts a worker goroutine and returns its handle: a test gives one that
// starts none. loop: its methods run on the shard's loop goroutine.
type slots[K comparable, I, O any] struct {
	tokens  tokens[K, I, O]         // the ferry's, with several shards
	shards  int                     // the ferry's shards: the last to end stops the tokens' workers
	starved bool                    // a lane is ready, but no worker is free and no slot: run waits for one
	own     int                     // its share of the slots
	most    int                     // with one shard, the workers it may start: MaxInFlightBatches
	start   func() *worker[K, I, O] // starts a worker: newWorker, but in tests
	workers []*worker[K, I, O]      // the workers it has, each on a slot, by id; nil: an id free
	idle    []int                   // the ids of those with no batch
	free    []int                   // the ids free
	poke    chan struct{}           // with several shards, capacity 1: poked once slots are given back
	waiting bool                    // its poke is in the tokens' wants, not poked yet: it has own at least
	gave    int                     // slots given back, less those taken from tokens, since it last poked the wants
	ops     *sharedOps              // the loop's count of operations on tokens: see sharedOps
}

// newSlots returns the slots of a shard of shards, whose share is own, that
// may start most workers with one shard, with start, over t, the ferry's
// tokens (zero with one shard), counting its operations on them in ops.
func newSlots[K comparable, I, O any](t tokens[K, I, O], shards, own, most int, start func() *worker[K, I, O], ops *sharedOps) slots[K, I, O] {
	sl := slots[K, I, O]{tokens: t, shards: shards, own: own, most: most, start: start, ops: ops}
	if t.free != nil {
		sl.poke = make(chan struct{}, 1)
	}
	return sl
}

// dispatching forgets that the shard was starved, as a dispatch begins:
// takeSlot will look at tokens again, unless the shard waits for a poke
// that has not come.
func (sl *slots[K, I, O]) dispatching() {
	sl.starved = false
	if sl.waiting {
		select {
		case <-sl.poke:
			sl.waiting = false
		default:
		}
	}
}

// waitOn returns what the loop's select waits on while the shard is starved
// (nil when it is not): below its share, tokens' free slots; at its share,
// its poke in the tokens' wants. So a slot given back runs a batch ready here
// without waiting for a worker of its own, which may be in a Submit's done
// for long.
func (sl *slots[K, I, O]) waitOn() (slot <-chan *worker[K, I, O], given <-chan struct{}) {
	switch {
	case !sl.starved:
	case sl.waiting:
		given = sl.poke
	default:
		if countOps {
			sl.ops.add(1) // the select waits on it
		}
		slot = sl.tokens.free
	}
	return slot, given
}

// poked records the poke the loop received from waitOn: the shard looks at
// tokens again.
func (sl *slots[K, I, O]) poked() { sl.waiting = false }

// takeSlot returns the id of an idle worker for a batch, with its slot, and
// false if it has none (and, with several shards, marks the shard starved).
func (sl *slots[K, I, O]) takeSlot() (id int, ok bool) {
	if n := len(sl.idle); n > 0 {
		id, sl.idle = sl.idle[n-1], sl.idle[:n-1]
		return id, true
	}
	var wk *worker[K, I, O]
	if sl.tokens.free == nil {
		if len(sl.workers) == sl.most {
			return 0, false
		}
		return sl.adopt(nil), true
	}
	if sl.waiting { // tokens had none, and none was given back since
		sl.starved = true
		return 0, false
	}
	if countOps {
		sl.ops.add(1)
	}
	if wk, ok = sl.tokens.tryTake(); ok {
		return sl.adopt(wk), true
	}
	sl.starved = true
	if sl.has() < sl.own {
		return 0, false // the loop waits on tokens: see run
	}
	// Its share at least, all busy: wait for a poke, then look once more,
	// for a slot given back before the poke was in wants.
	if countOps {
		sl.ops.add(3)
	}
	sl.drain()
	sl.tokens.want(sl.poke)
	sl.waiting = true
	if wk, ok = sl.tokens.tryTake(); ok {
		sl.starved = false
		return sl.adopt(wk), true
	}
	return 0, false
}

// has is how many slots the shard has.
func (sl *slots[K, I, O]) has() int { return len(sl.workers) - len(sl.free) }

// at is the worker the shard holds on slot id, nil if none: the id may be
// free, or past the workers it holds (none once its loop has ended).
func (sl *slots[K, I, O]) at(id int64) *worker[K, I, O] {
	if id < 0 || id >= int64(len(sl.workers)) {
		return nil
	}
	return sl.workers[id]
}

// gotSlot takes wk, a slot's worker or nil, that the starved loop's select
// received from tokens, as an idle worker the shard holds.
func (sl *slots[K, I, O]) gotSlot(wk *worker[K, I, O]) {
	sl.idle = append(sl.idle, sl.adopt(wk))
}

// adopt adds wk, a slot's worker, to those the shard has, starting it if it
// is nil, and returns its id.
func (sl *slots[K, I, O]) adopt(wk *worker[K, I, O]) int {
	sl.gave = max(0, sl.gave-1) // with several shards, a slot taken from tokens: see lent
	if wk == nil {
		wk = sl.start()
	}
	wk.idle = true
	if n := len(sl.free); n > 0 {
		id := sl.free[n-1]
		sl.free = sl.free[:n-1]
		sl.workers[id] = wk
		return id
	}
	sl.workers = append(sl.workers, wk)
	return len(sl.workers) - 1
}

// releaseSlot takes back worker id, which has answered its batch, as idle, or
// gives it back with its slot if the shard holds more than its share.
func (sl *slots[K, I, O]) releaseSlot(id int) {
	sl.workers[id].idle = true
	if sl.tokens.free != nil && sl.has() > sl.own {
		sl.giveBack(id)
		return
	}
	sl.idle = append(sl.idle, id)
}

// giveBackIdleSlots gives back the idle workers this shard holds, with their
// slots, at the end of each dispatch, for the other shards; then, if it has
// given any back since, it pokes those waiting for one (see lent).
func (sl *slots[K, I, O]) giveBackIdleSlots() {
	if sl.tokens.free == nil {
		return
	}
	for _, id := range sl.idle {
		sl.giveBack(id)
	}
	sl.idle = sl.idle[:0]
	sl.lent()
}

// lent pokes the shards waiting for a slot given back, if this one has given
// back more than it took from tokens since it last did. It runs after the
// slots are in tokens, so that a shard poked finds them, and one that records
// its poke after looks once more (see takeSlot). A shard that gave a slot
// back as its batch beyond its share ended, and took one again for its next
// batch, pokes no one. It left tokens as the waiters last saw it (empty, or
// with slots whose giver pokes them).
func (sl *slots[K, I, O]) lent() {
	if sl.gave > 0 {
		if countOps {
			sl.ops.add(2)
		}
		sl.tokens.wake()
	}
	sl.gave = 0
}

// giveBack gives worker id back to tokens, with its slot.
func (sl *slots[K, I, O]) giveBack(id int) {
	if countOps {
		sl.ops.add(1)
	}
	sl.tokens.put(sl.workers[id])
	sl.workers[id] = nil
	sl.free = append(sl.free, id)
	sl.gave++
	if sl.waiting { // it looks at tokens again, a poke to come or not
		sl.waiting = false
		sl.drain()
	}
}

// drain takes a poke left in the shard's poke channel, if any: one sent
// after it stopped waiting.
func (sl *slots[K, I, O]) drain() {
	select {
	case <-sl.poke:
	default:
	}
}

// mayTake reports whether takeSlot may yet find a worker. With one shard: one
// is idle, or fewer than most have started. With several: the shard is not
// starved (it has not found tokens empty, nor waits for a poke, since its
// dispatch began).
func (sl *slots[K, I, O]) mayTake() bool {
	if sl.tokens.free == nil {
		return len(sl.idle) > 0 || len(sl.workers) < sl.most
	}
	return !sl.starved
}

// owe makes every busy worker's batch owe the round that starts one thing,
// paid by its opIdle, and returns how many: no busy worker owes an older
// round anything (see loop.startRound).
func (sl *slots[K, I, O]) owe(rs *rounds) int {
	n := 0
	for _, wk := range sl.workers {
		if wk != nil && !wk.idle {
			wk.fl.owe = rs.owe(1)
			n++
		}
	}
	return n
}

// busy is how many of the workers the shard holds have a batch.
func (sl *slots[K, I, O]) busy() int {
	return len(sl.workers) - len(sl.free) - len(sl.idle)
}

// stopWorkers stops the workers the shard holds, all idle, as its loop ends.
// With several shards it gives back their slots without them, and the last
// shard to end stops the workers in tokens, which every other shard has
// given back by then. Each stopped worker tells the loop, s's, as it exits;
// stopWorkers returns how many it stopped.
func (sl *slots[K, I, O]) stopWorkers(s *shard[K, I, O]) int {
	n := 0
	for _, wk := range sl.workers {
		if wk == nil {
			continue
		}
		wk.jobs <- job[K, I, O]{s: s} // a stop: no batch
		n++
		if sl.tokens.free != nil {
			if countOps {
				sl.ops.add(1)
			}
			sl.tokens.put(nil)
			sl.gave++
		}
	}
	sl.workers, sl.idle, sl.free = nil, nil, nil
	if sl.tokens.free == nil {
		return n
	}
	sl.lent()
	if countOps {
		sl.ops.add(2)
	}
	ended := <-sl.tokens.ended + 1
	sl.tokens.ended <- ended
	if ended < sl.shards {
		return n
	}
	if countOps {
		sl.ops.add(cap(sl.tokens.free))
	}
	for range cap(sl.tokens.free) {
		if wk := <-sl.tokens.free; wk != nil {
			wk.jobs <- job[K, I, O]{s: s}
			n++
		}
	}
	return n
}
