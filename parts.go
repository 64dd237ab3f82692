package ferry

import "time"

// This file is the loop's side of a DoMany: it admits a part (all of its
// inputs in this shard, or none), earmarks room for it over several
// shards, or drops what still waits of it. The caller's side is many.go.

// admitPart handles part i of a DoMany: admits all its inputs, in order, or
// none; or, over several shards, earmarks room for them first, or lets it
// go. The room earmarked is let go before the part is admitted or refused.
// With WaitForRoom a part waits for room, as a Do's input does, if others
// wait already or the room cannot hold it now (and could). One whose room
// came with it (granted) waits its turn too: its room goes into the shard's,
// lent as the wake-up ends, and it waits for room in its turn.
func (l *loop[K, I, O]) admitPart(g *group[K, I, O], i int32, o op, now time.Duration) {
	if o == opAdmitMany && l.f.waitForRoom && l.waits.line.len() > 0 && l.admits() && !g.parts[i].neverFits(l.lim) {
		l.takeRoomOf(&g.parts[i]) // lent as the wake-up ends: see admitPart's doc
		l.waits.line.pushPart(g, i, false, l.nextWait())
		return
	}
	if !l.letInPart(g, i, o, now) {
		l.waits.line.pushPart(g, i, false, l.nextWait())
	}
}

// letInPart does what admitPart does once the part's turn has come. It
// reports false, and does nothing but take in the room earmarked for the
// part or granted to it, if the part is to wait for room (WaitForRoom, opAdmitMany, a
// room full for it).
func (l *loop[K, I, O]) letInPart(g *group[K, I, O], i int32, o op, now time.Duration) bool {
	p := &g.parts[i]
	l.takeRoomOf(p)
	n, total, heaviest, paused := p.n, p.total, p.heaviest, 0
	never := o == opAdmitMany && p.neverFits(l.lim)
	if o == opAdmitMany && !never {
		n, total, heaviest, paused = l.partNeed(g, i)
	}
	switch r := l.st.fits(n, total, heaviest); {
	case o == opUnearmark:
	case r == rejectedFull && o == opAdmitMany && l.f.waitForRoom && !never:
		return false
	case r != admitted && (n > 0 || never):
		p.err = l.reject(r, n, heaviest, total, len(g.ws))
	case o == opEarmark:
		l.st.earmark(p.n, p.total)
		p.earmarked = true
	default:
		refused := 0 // answered at once: its key paused, or held with its share of the room
		for j := range g.ws {
			w := &g.ws[j]
			if w.part != i {
				continue
			}
			if err, ok := l.pauses.keys.of(w.key); ok && paused > 0 {
				g.errs[w.i], w.refused = err, true
				refused++
				continue
			}
			if l.f.hold && l.st.overHeld(w.key, w.weight) {
				g.errs[w.i], w.refused = l.pauses.keys.err(w.key), true
				refused++
				continue
			}
			if l.stamps.on {
				l.stamp(w)
			}
			w.tk = l.st.enter(w.key, w.weight, w.rank, w.at, now, w)
		}
		l.tally.Admitted += uint64(p.n - refused)
		if refused > 0 { // answered: the caller reads them once the part's word has come
			g.count.done(refused)
		}
	}
	l.replyAfterLend(later[K, I, O]{p: p}) // room earmarked or granted may have been let go
	return true
}

// takeRoomOf adds to the shard's room the room earmarked for p or granted
// to it (see borrow), which is the part's to enter with.
func (l *loop[K, I, O]) takeRoomOf(p *part[K, I, O]) {
	if p.earmarked {
		l.st.unearmark(p.n, p.total)
		p.earmarked = false
	}
	if p.granted {
		l.st.grow(p.n, p.total) // see borrow
		p.granted = false
	}
}

// partNeed returns the count, the total weight and the heaviest of the inputs
// of part i of g that the room is to hold, and how many are paused, answered
// at once. The room holds them all unless some keys are paused. A total past
// MaxInt64 for the whole group stands (see Ferry.DoMany).
func (l *loop[K, I, O]) partNeed(g *group[K, I, O], i int32) (n int, total, heaviest int64, paused int) {
	p := &g.parts[i]
	if l.pauses.keys.count() == 0 || !l.admits() {
		return p.n, p.total, p.heaviest, 0
	}
	for j := range g.ws {
		w := &g.ws[j]
		switch _, ok := l.pauses.keys.of(w.key); {
		case w.part != i:
		case ok:
			paused++
		default:
			n++
			total = addWeight(total, w.weight)
			heaviest = max(heaviest, w.weight)
		}
	}
	if p.total < 0 {
		total = p.total
	}
	return n, total, heaviest, paused
}

// dropPart drops what still waits of part i of g, whose DoMany's caller gave
// up, marks those inputs dropped and counts them in the part; it counts the
// caller out of the batches that hold the others.
func (l *loop[K, I, O]) dropPart(g *group[K, I, O], i int32, now time.Duration) {
	p := &g.parts[i]
	p.dropped = 0
	for j := range g.ws {
		switch w := &g.ws[j]; {
		case w.part != i:
		case l.dropOne(w, now):
			p.dropped++
			w.dropped = true
			l.rounds.countIf(w.tk.seq <= l.rounds.seq())
		default:
			l.gaveUp(w, now)
		}
	}
	l.replyAfterLend(later[K, I, O]{p: p})
}

// dropOne drops w if it still waits, and counts it.
func (l *loop[K, I, O]) dropOne(w *waiter[K, I, O], now time.Duration) bool {
	_, ok := l.st.drop(w.key, w.tk, now)
	if ok {
		l.tally.Dropped++
	}
	return ok
}
