package ferry

import "math"

// This file is what the shards of a ferry share. A shard is one loop with its
// own core state, workers, timer and inbound channel; a key always goes to the
// same shard, by a hash of the key, so every guarantee per key holds as it does
// with one loop. The configured bounds are totals, shared by the shards: the
// room (MaxQueued, MaxQueuedWeight, see share) and the batched calls in flight
// (MaxInFlightBatches, see share.takeSlot). What is not per key becomes per
// shard: fairness (the ready line, and the wait for a free slot).

// budget is an amount of room: inputs and their weight. It has no methods:
// whoever holds it, out of a room, changes it.
type budget struct {
	n int
	w int64
}

// room is the room that no shard of a ferry holds: a channel of one budget.
// Whoever takes it (a loop, or a DoMany's caller: see borrow) changes it and
// puts it back at once, blocking on nothing in between, so no one waits on it
// for longer than that, and no put ever blocks. Nil with one shard. Its
// methods run on the loops and on DoMany's callers.
type room chan budget

// newRoom returns a room that holds b.
func newRoom(b budget) room {
	r := make(room, 1)
	r <- b
	return r
}

// take takes the budget, waiting while another holds it for a moment.
func (r room) take() budget { return <-r }

// put puts back the budget taken, changed.
func (r room) put(b budget) { r <- b }

// tokens are the slots for batches that no shard holds: a channel as big as
// MaxInFlightBatches with one token in it per free slot, as a set of work
// desks. A slot is taken without waiting (tryTake), or by a starved loop in
// its select; put gives one back and never blocks, as the slots taken and
// not given back are never more than the channel holds. Nil with one shard.
// Its methods run on the loops.
type tokens chan struct{}

// newTokens returns n free slots.
func newTokens(n int) tokens {
	t := make(tokens, n)
	for range n {
		t <- struct{}{}
	}
	return t
}

// tryTake takes a free slot, and reports false at once if there is none.
func (t tokens) tryTake() bool {
	select {
	case <-t:
		return true
	default:
		return false
	}
}

// put gives back a slot.
func (t tokens) put() { t <- struct{}{} }

// share is a loop's side of what the shards of its ferry share: the room no
// shard holds (spare) and the slots. With one shard both are nil and it
// holds nothing back. loop: its methods run on the shard's loop goroutine.
//
// A shard's core room is what it holds of the room: as a wake-up starts it
// borrows, in one go, what it lacks for the admissions among its messages
// (borrowRoom), and as the wake-up ends, before the batches it took start,
// it gives back all it holds spare (giveBackRoom). So the shards never hold
// more than the configured room between them, and a shard rejects only when
// the room is full: but for room another shard holds within a wake-up in
// progress (borrowed for an admission it then claimed for a direct call or
// refused, or freed by a batch it took or a drop), as one loop would have
// ordered the two; the callers of those batches and drops hear of them only
// after the lend (see replyAfterLend). Borrowing ahead would save channel
// operations and break that: a room sized for exactly its callers would
// reject some. A weight with no limit (MaxQueuedWeight 0) is not shared:
// every shard's core has MaxInt64 of it.
type share[K comparable, I, O any] struct {
	st  *state[K, *waiter[K, I, O]] // the loop's core, whose room grows and shrinks
	lim limits                      // the shard's

	spare room // the ferry's, with several shards

	slots   tokens // the ferry's, with several shards: see takeSlot
	starved bool   // a lane is ready and a worker free, but no slot: run waits for one
	held    int    // slots the shard holds, in use or not
	flying  int    // batches in flight, each on a slot it holds
	own     int    // its share of the slots: see takeSlot

	replies []later[K, I, O] // words on room freed, with several shards: see replyAfterLend
}

// borrowRoom borrows from spare what this shard lacks of room for the
// admissions among ms, one wake-up's messages, or as much as spare has, so
// that the core refuses one only if the shared room cannot hold it. What is
// borrowed and not used (a rejection for another reason, a direct call) goes
// back with giveBackRoom at the end of the wake-up.
func (sh *share[K, I, O]) borrowRoom(ms []msg[K, I, O]) {
	var need budget
	for _, m := range ms {
		switch m.op {
		case opAdmit:
			need.n++
			need.w = addWeight(need.w, m.w.weight)
		case opAdmitMany, opHold:
			switch p := &m.w.g.parts[m.part]; {
			case p.held, p.granted: // its room is held already, or comes with it
			case p.total < 0:
				need.n, need.w = need.n+p.n, -1
			default:
				need.n, need.w = need.n+p.n, addWeight(need.w, p.total)
			}
		}
	}
	fn, fw := sh.st.spare()
	short := budget{n: max(0, min(need.n, sh.lim.queued)-fn)}
	if sh.lim.queuedWeight > 0 { // need.w < 0: past MaxInt64, more than the room
		if need.w < 0 {
			need.w = sh.lim.queuedWeight
		}
		short.w = max(0, min(need.w, sh.lim.queuedWeight)-fw)
	}
	if short == (budget{}) {
		return
	}
	b := sh.spare.take()
	got := budget{min(b.n, short.n), min(b.w, short.w)}
	sh.spare.put(budget{b.n - got.n, b.w - got.w})
	sh.st.grow(got.n, got.w)
}

// giveBackRoom gives back to spare all the room this shard holds spare, for
// the other shards.
func (sh *share[K, I, O]) giveBackRoom() {
	if sh.spare == nil {
		return
	}
	back := budget{}
	back.n, back.w = sh.st.spare()
	if sh.lim.queuedWeight == 0 {
		back.w = 0 // not shared
	}
	if back == (budget{}) {
		return
	}
	sh.st.grow(-back.n, -back.w)
	b := sh.spare.take()
	sh.spare.put(budget{b.n + back.n, b.w + back.w}) // within the room's total: no wrap
}

// addGranted adds n inputs weighing w to the shard's room: room a DoMany's
// caller took from spare for its part here (see borrow). A weight with no
// limit is not shared.
func (sh *share[K, I, O]) addGranted(n int, w int64) {
	if sh.lim.queuedWeight == 0 {
		w = 0
	}
	sh.st.grow(n, w)
}

// replyAfterLend sends x, a word on room that may have been freed, at once
// with one shard; with several, once the wake-up has handled its messages
// and lent what they freed (see giveBackRoom), so that the caller, who may
// ask another shard for room as soon as it has the word, finds it there, as
// it would in one loop. Until then the room stays with this shard, for the admissions among
// the wake-up's messages. The words go before a Flush that waits for them is
// told (see loop.receive).
func (sh *share[K, I, O]) replyAfterLend(x later[K, I, O]) {
	if sh.spare == nil {
		x.send()
		return
	}
	sh.replies = append(sh.replies, x)
}

// sendReplies sends the words replyAfterLend held back, once the wake-up
// has lent what its messages freed.
func (sh *share[K, I, O]) sendReplies() {
	for _, x := range sh.replies {
		x.send()
	}
	clear(sh.replies)
	sh.replies = sh.replies[:0]
}

// takeSlot reports whether this shard may start a batch, taking a slot from
// the ferry's pool if it must: with several shards, a shard holds slots, each
// good for one batch in flight, and all of them together are
// MaxInFlightBatches, so that the batched calls in flight across shards never
// pass it while one shard may run all of them. The pool is a channel holding
// the slots no shard holds. A shard that finds none there is starved: its
// loop then waits for one beside its inbound channel (see loop.run). As a
// batch ends, a shard keeps its slot if it holds no more than its own share (own),
// so that busy shards do not pass slots back and forth, and else gives it
// back, where a starved shard gets it; at the end of each dispatch it gives back
// the slots it holds and does not use (see giveBackIdleSlots).
func (sh *share[K, I, O]) takeSlot() bool {
	if sh.slots == nil || sh.flying < sh.held {
		return true
	}
	if !sh.slots.tryTake() {
		sh.starved = true
		return false
	}
	sh.held++
	return true
}

// releaseSlot gives back the slot of a batch that ended, if the shard holds
// more than its share.
func (sh *share[K, I, O]) releaseSlot() {
	if sh.slots == nil {
		return
	}
	if sh.flying--; sh.held > sh.own {
		sh.held--
		sh.slots.put()
	}
}

// giveBackIdleSlots gives back the slots this shard holds and does not use,
// at the end of each dispatch, for the other shards.
func (sh *share[K, I, O]) giveBackIdleSlots() {
	for sh.slots != nil && sh.held > sh.flying {
		sh.held--
		sh.slots.put()
	}
}

// later is the loop's word on a drop, or on a DoMany's part (which may let
// go of room held or granted): a result on c, or else a word on p.c.
// loop: its one method runs on the loop goroutine.
type later[K comparable, I, O any] struct {
	c chan result[O]
	r result[O]
	p *part[K, I, O]
}

// send sends the word, on the loop goroutine.
func (x later[K, I, O]) send() {
	if x.p != nil {
		x.p.c <- struct{}{}
	} else {
		x.c <- x.r
	}
}

// borrow takes from spare, in one step, the room for all of g's inputs, a
// DoMany over several shards, and marks each part granted: its shard adds
// the part's room to its own as it lets the part in, and refuses it only if
// it is closing. It reports false, and takes nothing, if spare lacks that
// room (the room is full but for room that a shard holds within a wake-up),
// or if a shard might refuse a part for its weight: with no MaxQueuedWeight,
// weight is not shared and each shard keeps its own waiting weight within
// MaxInt64, which only inputs of weight 1 (no Weight func) cannot pass, as
// their weight is at most their count. The parts then hold room shard by
// shard (see group.admit). So two DoManys over the same shards that borrow
// never each hold room the other needs, as they can holding it shard by shard.
func borrow[K comparable, I, O any](f *Ferry[K, I, O], g *group[K, I, O], total int64) bool {
	if f.lim.queuedWeight == 0 {
		if f.weight != nil && total > 0 {
			return false
		}
		total = 0 // not shared
	}
	b := f.spare.take()
	if b.n < len(g.ws) || b.w < total {
		f.spare.put(b)
		return false
	}
	f.spare.put(budget{b.n - len(g.ws), b.w - total})
	for i := range g.parts {
		g.parts[i].granted = true
	}
	return true
}

// addWeight is total plus w, for a DoMany: -1 once the sum passes MaxInt64,
// and from then on, as room reads a total < 0.
func addWeight(total, w int64) int64 {
	if total < 0 || w > math.MaxInt64-total {
		return -1
	}
	return total + w
}
