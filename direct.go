package ferry

import "context"

// This file is the loop's side of direct calls and of the order of
// completions: a claimed key's call in flight, its release and its OnBatch's
// report, and the place each batch or direct call takes among its key's
// completions (Submits' done, OnBatch), so that they never overlap and come
// in order (see loop.completing). The caller's side is call.go's direct.

// directCall is a direct call in flight: its claim's number and, once it
// runs, how to cancel it; with OnBatch, its place among its key's
// completions (see completing). It has no methods; the loop owns it.
type directCall struct {
	n          uint64
	cancel     context.CancelCauseFunc
	after, fin chan struct{}
}

// reported is a direct call released whose OnBatch runs: its claim's number,
// its key and its fin (see completing). It has no methods; the loop owns it.
type reported[K comparable] struct {
	n   uint64
	key K
	fin chan struct{}
}

// directStarted records how to cancel key's direct call, which runs now, or
// cancels it at once if the ferry is closing.
func (l *loop[K, I, O]) directStarted(key K, cancel context.CancelCauseFunc) {
	if l.closing {
		l.out.cancels = append(l.out.cancels, cancel) // see close
		return
	}
	d := l.directs[key]
	d.cancel = cancel
	l.directs[key] = d
}

// endDirect forgets m.key's direct call, released, or keeps it until its
// OnBatch is reported (m.w set).
func (l *loop[K, I, O]) endDirect(m msg[K, I, O]) {
	d := l.directs[m.key]
	delete(l.directs, m.key)
	l.directs = shrink(l.directs, &l.dpeak)
	if m.w != nil { // its OnBatch runs now: a Flush and the end wait for its report
		l.reports[m.w] = reported[K]{d.n, m.key, d.fin}
		l.rpeak = max(l.rpeak, len(l.reports))
		return
	}
	if d.fin != nil { // no OnBatch after all (Goexit, or abandoned): see endClaim
		l.endClaim(m.key, d)
	}
	l.rounds.countIf(l.rounds.claimed(d.n))
}

// endClaim gives back the place among key's completions that direct call d
// took at its claim and will not use, as it ends with no OnBatch: the key's
// next completions wait for its earlier ones, and d.fin, which close's
// notifier may wait on already, is closed once those are over, now if there
// are none, else on a goroutine of its own (chainFin), which the loop
// waits for.
func (l *loop[K, I, O]) endClaim(key K, d directCall) {
	if l.completing[key] == d.fin {
		if d.after != nil {
			l.completing[key] = d.after
		} else {
			delete(l.completing, key)
		}
	}
	if d.after == nil {
		close(d.fin)
		return
	}
	l.chains++
	go chainFin(l.s, d.after, d.fin)
}

// reported forgets the direct call of w, whose OnBatch has returned, and
// counts it for its Flush round.
func (l *loop[K, I, O]) reported(w *waiter[K, I, O], panicked bool) {
	rp := l.reports[w]
	l.done(rp.key, rp.fin)
	delete(l.reports, w)
	l.reports = shrink(l.reports, &l.rpeak)
	l.rounds.countIf(l.rounds.claimed(rp.n))
	if panicked {
		l.tally.OnBatchPanics++
	}
}

// done forgets key's completions, over with fin, unless a later batch's are
// its key's already.
func (l *loop[K, I, O]) done(key K, fin chan struct{}) {
	if fin != nil && l.completing[key] == fin {
		delete(l.completing, key)
	}
}

// claim records w's key, claimed for a direct call by w's Do, and gives its
// caller the word errClaimed: with OnBatch, the call takes its place among
// the key's completions.
func (l *loop[K, I, O]) claim(w *waiter[K, I, O]) {
	l.tally.DirectCalls++
	l.claims++
	d := directCall{n: l.claims}
	if l.f.onBatch != nil { // its OnBatch comes after the key's last completions
		d.after, d.fin = l.place(w.key)
		w.after, w.fin = d.after, d.fin
	}
	l.directs[w.key] = d
	l.dpeak = max(l.dpeak, len(l.directs))
	w.c <- result[O]{err: errClaimed}
}

// place gives key's next completions their place after its last: it
// returns after, the channel closed once the key's last completions are
// over (nil if none are to come), and fin, to close once these are over,
// which the key's next completions wait for.
func (l *loop[K, I, O]) place(key K) (after, fin chan struct{}) {
	after, fin = l.completing[key], make(chan struct{})
	l.completing[key] = fin
	return after, fin
}
