package ferry

// This file is the Flush rounds: what a Flush waits for, counted down by the
// loop as its messages come. rounds is pure bookkeeping: no channels, no
// clock, no user code; the replies it hands back are the loop's to call.
// The loop's handlers for Flush (flush, startRound, settle) follow it.

// round is a Flush in progress: it is over when left, the inputs admitted
// before it and the calls and answers in flight then, reaches 0. It has no
// methods; rounds owns it.
type round struct {
	id      uint64
	seq     uint64 // inputs with seqs up to this count
	claims  uint64 // direct calls claimed up to this one count
	left    int
	replies []chan error
}

// owed is what a worker's batch owes a Flush round, told by its opIdle: n
// inputs admitted before the round, or 1 for a batch in flight as the round
// started. It has no methods; the loop owns it.
type owed struct {
	round uint64
	n     int
}

// rounds is a loop's Flush rounds: the one in progress, if any, and the
// Flushes that wait for the round after it, as one loop runs one round at a
// time. loop: its methods run on the shard's loop goroutine.
type rounds struct {
	cur    *round       // the round in progress
	queued []chan error // Flushes for the round after it
	n      uint64       // rounds started
}

// wait queues a Flush's reply for the next round, and reports whether a
// round must start now: none is in progress.
func (rs *rounds) wait(reply chan error) bool {
	rs.queued = append(rs.queued, reply)
	return rs.cur == nil
}

// start starts a round for the Flushes queued, which waits for left things
// and counts the inputs with seqs up to seq and the direct calls claimed up
// to claims.
func (rs *rounds) start(seq, claims uint64, left int) {
	rs.n++
	rs.cur = &round{id: rs.n, seq: seq, claims: claims, left: left, replies: rs.queued}
	rs.queued = nil
}

// expect adds n things to those the round in progress waits for.
func (rs *rounds) expect(n int) { rs.cur.left += n }

// owe is what a batch with n things the round in progress waits for owes
// it, told by the batch's opIdle (see paid); nothing without a round.
func (rs *rounds) owe(n int) owed {
	if rs.cur == nil {
		return owed{}
	}
	return owed{rs.cur.id, n}
}

// seq is the last seq the round in progress counts, or 0.
func (rs *rounds) seq() uint64 {
	if rs.cur == nil {
		return 0
	}
	return rs.cur.seq
}

// claimed reports whether the round in progress counts direct call n.
func (rs *rounds) claimed(n uint64) bool { return rs.cur != nil && n <= rs.cur.claims }

// countIf counts one thing the round in progress waits for as done, if ok.
func (rs *rounds) countIf(ok bool) {
	if ok {
		rs.cur.left--
	}
}

// paid counts what a worker's batch owed, if it owed the round in progress.
func (rs *rounds) paid(o owed) {
	if rs.cur != nil && o.round == rs.cur.id {
		rs.cur.left -= o.n
	}
}

// over ends the round in progress if it has nothing left, and returns the
// replies of its Flushes, to be told nil; ok is false, and nothing changes,
// if no round is over. The next round, if Flushes are queued, is the
// loop's to start: its count needs the loop's state.
func (rs *rounds) over() (replies []chan error, ok bool) {
	if rs.cur == nil || rs.cur.left > 0 {
		return nil, false
	}
	replies = rs.cur.replies
	rs.cur = nil
	return replies, true
}

// pending reports whether Flushes wait for a round after the one in progress.
func (rs *rounds) pending() bool { return len(rs.queued) > 0 }

// abort ends every round, for a close, and returns every Flush's reply, the
// round's and those queued, to be told ErrClosed.
func (rs *rounds) abort() []chan error {
	var all []chan error
	if rs.cur != nil {
		all = rs.cur.replies
		rs.cur = nil
	}
	all = append(all, rs.queued...)
	rs.queued = nil
	return all
}

// flush makes a Flush wait for a round, starting one if none is in progress;
// at close it answers ErrClosed.
func (l *loop[K, I, O]) flush(reply chan error) {
	if l.life.closing {
		l.out.flushes = append(l.out.flushes, flushAnswer{reply, ErrClosed})
		return
	}
	if l.rounds.wait(reply) {
		l.startRound()
	}
}

// startRound starts a round for the Flushes waiting: every input waiting is
// due now. The round waits for those inputs, for the parked batches (their
// backoff is not cut short), for the direct calls, in flight or released,
// until their OnBatch report, for Submits' done in flight, and for every
// busy worker's batch. A worker's opIdle comes once it has answered its
// batch, so the round needs no word from an idle worker. No busy worker owes
// an older round anything: a round ends only once all it was owed has come,
// and close, which ends one early, starts no other.
func (l *loop[K, I, O]) startRound() {
	l.rounds.start(l.st.seq, l.directs.claims, l.st.queued+l.directs.inFlight()+l.life.notify)
	l.rounds.expect(l.slots.owe(&l.rounds) + l.pauses.owe(&l.rounds) + l.parks.owe(&l.rounds))
	l.st.flush()
}

// settle ends the round once it has nothing left, and starts the next. Only
// messages count a round down, so it runs once a wake-up has handled them,
// before its dispatch. The next round may have nothing left (it ends at once)
// or lanes it made due, and no message may come to wake the loop again: a
// shard with no busy worker has no opIdle to come.
func (l *loop[K, I, O]) settle() {
	for {
		replies, ok := l.rounds.over()
		if !ok {
			return
		}
		for _, c := range replies {
			l.out.flushes = append(l.out.flushes, flushAnswer{c, nil})
		}
		if l.rounds.pending() && !l.life.closing {
			l.startRound()
		}
	}
}
