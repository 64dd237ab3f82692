package ferry

import (
	"context"
	"fmt"
)

// This file is DoMany's group (Ferry.DoMany, with its doc, is in ferry.go):
// inputs admitted all or none, one part per shard, answered by index and
// counted down (see countdown). It runs on the caller's goroutine.

// group is one DoMany in progress: its inputs, and where their answers go.
// Answers are written by index, then counted down in count; the caller reads
// them once count.fin says none is left. Its inputs are in one part per
// shard. callers: its methods run on the DoMany's caller's goroutine.
type group[K comparable, I, O any] struct {
	ws    []waiter[K, I, O]
	outs  []O
	errs  []error
	count countdown // of the inputs not yet answered
	parts []part[K, I, O]
	lost  bool // a shard may yet send a word on a part's c that no one waits for, or read a leave: never pooled
}

// part is a group's inputs in one shard, which that shard's loop admits,
// earmarks room for and drops; it writes err and dropped before its word on c.
// Its loop-owned fields are written on that shard's loop; its one method,
// neverFits, reads what the caller set before it sent any message for the
// part, on that loop.
type part[K comparable, I, O any] struct {
	s               *shard[K, I, O]
	n               int   // inputs
	total, heaviest int64 // their weights; total < 0: the sum passes MaxInt64
	earmarked       bool  // loop-owned: its shard's room keeps n and total for it
	granted         bool  // the caller took the part's room from spare: the loop adds it to its own
	err             error
	dropped         int
	gone            bool   // caller-owned: not admitted, and answered already
	unsent          bool   // caller-owned: its shard had ended, so sendParts could not send it
	wait            uint64 // loop-owned: its number in the shard's wait line (see waitLine), 0 if not there

	c chan struct{} // the loop's word on each message for the part; cap 1, kept when the group is pooled
}

// neverFits reports whether no room within lim could ever hold p, all its
// inputs, a paused key's too: more inputs than MaxQueued, or heavier than
// the room (its heaviest is within its total). The DoMany's caller judges it
// so before it splits the inputs by shard (see group.neverFits). Such a part is refused whole, though the inputs of paused keys would not
// take room: a part merged from several shards' holds inputs of keys that
// are not its shard's.
func (p *part[K, I, O]) neverFits(lim limits) bool {
	return p.n > lim.queued || p.total < 0 || p.total > sharedWeight(lim)
}

// answers returns g's outputs and errors once every input has been
// answered, or dropped for its caller (ctx's error and ErrDropped), and
// pools g unless a shard may yet send into it.
func (g *group[K, I, O]) answers(ctx context.Context, f *Ferry[K, I, O]) ([]O, error) {
	outs := g.outs
	var errs Errors
	for i, err := range g.errs {
		if g.ws[i].dropped {
			err = dropErr(ctx)
		}
		if err != nil {
			if errs == nil {
				errs = make(Errors, len(g.ws))
			}
			errs[i] = err
		}
	}
	f.pools.putGroup(g)
	if errs != nil {
		return outs, errs
	}
	return outs, nil
}

// join puts w, whose key is in shard s, in g's part for that shard.
func (g *group[K, I, O]) join(w *waiter[K, I, O], s *shard[K, I, O]) {
	i := 0
	for i < len(g.parts) && g.parts[i].s != s {
		i++
	}
	if i == len(g.parts) {
		var c chan struct{}
		if i < cap(g.parts) {
			c = g.parts[:i+1][i].c // a pooled part's, empty
		}
		if c == nil {
			c = make(chan struct{}, 1)
		}
		g.parts = append(g.parts, part[K, I, O]{s: s, c: c})
	}
	p := &g.parts[i]
	w.part = int32(i)
	p.n++
	p.heaviest = max(p.heaviest, w.weight)
	p.total = addWeight(p.total, w.weight)
}

// admit admits all of g's inputs, weighing total, or none. With one part it
// is one message. With several, their room is taken from the shards' shared
// budget in one step (borrow). If that lacks it, each shard first earmarks
// room for its part; with WaitForRoom, part 0's shard instead waits for the
// room of all of them, grants it and lets part 0 in. Then each shard lets its
// part in (with WaitForRoom, in its turn in that shard's line). The inputs
// of a part whose shard closed in between are answered ErrClosed here, and
// admit returns how many, for g.count.done. With WaitForRoom, a ctx that
// ends while g waits for room is errDropped: nothing admitted, nothing kept.
func (g *group[K, I, O]) admit(ctx context.Context, f *Ferry[K, I, O], total int64) (int, error) {
	if len(g.parts) == 1 {
		if f.waitForRoom {
			return 0, g.requestWaiting(ctx, 0, opAdmitMany)
		}
		return 0, g.request(0, opAdmitMany)
	}
	got, in, first := 0, 0, 0
	switch {
	case borrow(f, g, total):
	case f.waitForRoom: // the shard of part 0 grants the room of all, and lets part 0 in
		if err := g.requestWaiting(ctx, 0, opBorrowWait); err != nil {
			for i := 1; i < len(g.parts); i++ { // granted, then part 0 refused: the room goes back
				if p := &g.parts[i]; p.granted {
					giveBack(f, budget{p.n, p.total})
					p.granted = false
				}
			}
			return 0, err
		}
		in, first = 1, 1
	default:
		for i := range g.parts {
			if err := g.request(i, opEarmark); err != nil {
				for j := range i {
					_ = g.request(j, opUnearmark) // a shard that ended keeps nothing
				}
				return 0, err
			}
		}
	}
	if f.waitForRoom { // every part is sent before any is waited for: see sendParts
		g.sendParts(first)
	}
	left := false
	for i := first; i < len(g.parts); i++ {
		var err error
		if f.waitForRoom {
			err = g.awaitPart(ctx, i)
		} else {
			err = g.request(i, opAdmitMany)
		}
		if err == nil {
			in++
			continue
		}
		g.parts[i].gone = true
		dropped := err == errDropped
		if dropped {
			left = true
			err = dropErr(ctx)
		}
		for k := range g.ws {
			if w := &g.ws[k]; w.part == int32(i) {
				g.errs[w.i] = err
				w.dropped, w.refused = dropped, !dropped // caller-owned here: the loop never let it in
				got++
			}
		}
	}
	switch {
	case in == 0 && left: // nothing let in: see Ferry.DoMany
		return 0, errDropped
	case in == 0:
		return 0, ErrClosed
	}
	return got, nil
}

// sendParts sends opAdmitMany for each of g's parts from first on, with
// WaitForRoom, before any is waited for (see awaitPart). A granted part that
// waits its turn in its shard's line lends its room there, so the caller
// holds no part's room while another part waits. A part whose shard has
// ended is marked unsent, and awaitPart answers ErrClosed for it.
func (g *group[K, I, O]) sendParts(first int) {
	for i := first; i < len(g.parts); i++ {
		p := &g.parts[i]
		if !p.s.send(msg[K, I, O]{op: opAdmitMany, g: g, part: int32(i)}) {
			p.err, p.unsent = ErrClosed, true
		}
	}
}

// awaitPart waits for the word on part i of g, sent by sendParts, as
// requestWaiting does: if ctx ends first, it asks the loop to take the part
// out of its line and returns errDropped if it did. If the part's word came
// before the loop read the leave, the loop reads g when it does, later: g is
// then never pooled (lost).
func (g *group[K, I, O]) awaitPart(ctx context.Context, i int) error {
	p := &g.parts[i]
	if p.unsent {
		return ErrClosed
	}
	_, err := await(p.s, p.c, ctx.Done())
	if err == errCancelled {
		p.s.send(msg[K, I, O]{op: opLeave, g: g, part: int32(i)})
		if _, err = await(p.s, p.c, nil); err == nil && p.err != errDropped {
			g.lost = true // the leave is yet to be read
		}
	}
	if err != nil {
		g.lost = true // the loop's last read may yet answer it
		return ErrClosed
	}
	return p.err
}

// request sends o for part i of g to its shard's loop and waits for the loop's
// word on the part's channel, as Do waits for its admission's. It returns the
// part's error, or ErrClosed if the shard may have ended unheard.
func (g *group[K, I, O]) request(i int, o op) error {
	p := &g.parts[i]
	if !p.s.send(msg[K, I, O]{op: o, g: g, part: int32(i)}) {
		return ErrClosed
	}
	if _, err := await(p.s, p.c, nil); err != nil {
		g.lost = true // the loop's last read may yet answer it
		return ErrClosed
	}
	return p.err
}

// requestWaiting is request for a message that may wait for room
// (WaitForRoom). If ctx ends first, it asks the loop to take the part out of
// the line (opLeave) and returns errDropped if it did; else the part's word
// came first, and it is its answer.
func (g *group[K, I, O]) requestWaiting(ctx context.Context, i int, o op) error {
	if !g.parts[i].s.send(msg[K, I, O]{op: o, g: g, part: int32(i)}) {
		return ErrClosed
	}
	return g.awaitPart(ctx, i)
}

// giveBack gives b, room a DoMany's caller took from spare and will not
// use, back to spare.
func giveBack[K comparable, I, O any](f *Ferry[K, I, O], b budget) {
	p := f.spare.take()
	p.give(b)
	f.spare.put(p)
}

// dropErrs is the error of a DoMany of n inputs none of which was
// admitted as ctx ended: each input's is ctx's error and ErrDropped.
func dropErrs(ctx context.Context, n int) error {
	return errsOf(nil, n, dropErr(ctx))
}

// abandon drops the inputs of g that still wait, for a DoMany whose ctx
// ended, and returns its answer. If every input not dropped has been
// answered by then, those answers stand, as at the DoMany's end (see
// answers). Else, with answers still to come, g is never pooled, and the
// answer is an Errors, unless every input's error is ctx's alone. An input a
// call took gets ctx's error alone, as the call may yet succeed. One the loop
// answered before any call did (refused: its key paused, the ferry closed, or
// its part never let in) gets that answer; one dropped gets ctx's error and
// ErrDropped. So ctx's error alone always means that a call took the input.
func (g *group[K, I, O]) abandon(ctx context.Context, f *Ferry[K, I, O]) ([]O, error) {
	dropped := 0
	for i := range g.parts {
		if g.parts[i].gone {
			continue // never admitted, and answered already
		}
		if g.request(i, opDropMany) != nil {
			continue // its shard ended, once every input of the part was answered
		}
		dropped += g.parts[i].dropped
	}
	left := g.count.take()
	if left == dropped { // the others are all answered: no answer is to come
		if left == 0 { // the last answer sends fin, if it has not yet
			<-g.count.fin
		}
		return g.answers(ctx, f)
	}
	g.count.put(left) // answers to come, into a group never pooled
	err := ctxErr(ctx)
	var errs Errors
	for i := range g.ws {
		switch w := &g.ws[i]; {
		case w.dropped:
			errs = errsOf(errs, len(g.ws), err)
			errs[i] = fmt.Errorf("%w: %w", err, ErrDropped)
		case w.refused:
			errs = errsOf(errs, len(g.ws), err)
			errs[i] = g.errs[i]
		}
	}
	if errs == nil {
		return nil, err
	}
	return nil, errs
}

// errsOf returns errs, or if it is nil a new Errors of n entries, each err.
func errsOf(errs Errors, n int, err error) Errors {
	if errs != nil {
		return errs
	}
	errs = make(Errors, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// neverFits reports whether no room within lim could ever hold all of g's
// inputs, however empty: more of them than MaxQueued, one heavier than
// MaxQueuedWeight, or a total weight past it or past MaxInt64 (total < 0).
// Such a DoMany over several shards is refused by one shard, as one loop
// refuses it.
func (g *group[K, I, O]) neverFits(lim limits, total int64) bool {
	if len(g.ws) > lim.queued || total < 0 {
		return true
	}
	if lim.queuedWeight == 0 {
		return false
	}
	heaviest := int64(0)
	for _, p := range g.parts {
		heaviest = max(heaviest, p.heaviest)
	}
	return heaviest > lim.queuedWeight || total > lim.queuedWeight
}

// merge makes g's inputs one part, in the first part's shard: for a DoMany
// that never fits (see neverFits), which that shard refuses whole. It never lets
// them in, as their keys are in other shards too.
func (g *group[K, I, O]) merge(total int64) {
	p := part[K, I, O]{s: g.parts[0].s, c: g.parts[0].c, total: total}
	for i := range g.ws {
		w := &g.ws[i]
		w.part = 0
		p.n++
		p.heaviest = max(p.heaviest, w.weight)
	}
	clear(g.parts)
	g.parts = append(g.parts[:0], p)
}
