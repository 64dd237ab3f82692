package ferry

import "context"

// This file is the loop's side of direct calls and of the order of
// completions. A claimed key's call is in flight until its release and its
// OnBatch's report. Each batch or direct call takes a place among its key's
// completions (Submits' done, OnBatch, OnPause), which never overlap and
// come in order. The caller's side is call.go's direct.

// directs are a loop's direct calls: those in flight, by key; those
// released whose OnBatch runs, by their fin; the count of claims; and the
// goroutines closing an unused claim's fin (see endClaim). loop: its methods
// run on the shard's loop goroutine.
type directs[K comparable, I, O any] struct {
	calls   peakMap[*waiter[K, I, O], directCall[K]] // by the call's input: a key may have several
	reports peakMap[chan struct{}, reported[K]]
	claims  uint64 // direct calls claimed
	chains  int    // goroutines closing an unused claim's fin, which the loop waits for
}

// directCall is a direct call in flight: its claim's number and, once it
// runs, how to cancel it; with OnBatch, its place among its key's
// completions (see completions). It has no methods; the loop owns it.
type directCall[K comparable] struct {
	n          uint64
	key        K
	cancel     context.CancelCauseFunc
	after, fin chan struct{}
}

// reported is a direct call released whose OnBatch runs: its claim's number
// and its key. It has no methods; the loop owns it.
type reported[K comparable] struct {
	n   uint64
	key K
}

// claim records a claim of w's key, with its place among the key's
// completions (after, fin).
func (d *directs[K, I, O]) claim(w *waiter[K, I, O], after, fin chan struct{}) {
	d.claims++
	d.calls.put(w, directCall[K]{n: d.claims, key: w.key, after: after, fin: fin})
}

// started records how to cancel w's direct call.
func (d *directs[K, I, O]) started(w *waiter[K, I, O], cancel context.CancelCauseFunc) {
	c := d.calls.get(w)
	c.cancel = cancel
	d.calls.put(w, c)
}

// end forgets w's direct call, released, and returns it; with fin set, its
// OnBatch runs, and it is kept until its report.
func (d *directs[K, I, O]) end(w *waiter[K, I, O], fin chan struct{}) directCall[K] {
	c := d.calls.get(w)
	d.calls.del(w)
	if fin != nil {
		d.reports.put(fin, reported[K]{c.n, c.key})
	}
	return c
}

// report forgets the direct call whose OnBatch has returned, named by its
// fin, and returns it.
func (d *directs[K, I, O]) report(fin chan struct{}) reported[K] {
	r := d.reports.get(fin)
	d.reports.del(fin)
	return r
}

// inFlight is how many a Flush round waits for: the calls in flight and
// those whose OnBatch runs.
func (d *directs[K, I, O]) inFlight() int { return d.calls.len() + d.reports.len() }

// pending reports whether the loop's end waits for them: an OnBatch that
// runs, or an unused claim's fin still to close.
func (d *directs[K, I, O]) pending() bool { return d.reports.len() > 0 || d.chains > 0 }

// cancels appends the cancels of the calls that run to buf.
func (d *directs[K, I, O]) cancels(buf []context.CancelCauseFunc) []context.CancelCauseFunc {
	for _, c := range d.calls.all() {
		if c.cancel != nil {
			buf = append(buf, c.cancel)
		}
	}
	return buf
}

// completions holds a channel for each key whose last batch (or direct
// call, or paused key's notifier) has completions still to run, closed once
// they are over. The key's next completions wait for it before their own.
// loop: its methods run on the shard's loop goroutine.
type completions[K comparable] struct {
	last peakMap[K, chan struct{}]
}

// place gives key's next completions their place after its last. It returns
// after, the channel closed once the key's last completions are over (nil if
// none are to come), and fin, to close once these are over, which the key's
// next completions wait for.
func (c *completions[K]) place(key K) (after, fin chan struct{}) {
	after, fin = c.last.get(key), make(chan struct{})
	c.last.put(key, fin)
	return after, fin
}

// done forgets key's completions, over with fin, unless a later batch's are
// its key's already.
func (c *completions[K]) done(key K, fin chan struct{}) {
	if fin != nil && c.last.get(key) == fin {
		c.last.del(key)
	}
}

// unplace gives back the place fin took after after, unused: the key's next
// completions wait for after instead, if fin is its last.
func (c *completions[K]) unplace(key K, after, fin chan struct{}) {
	if c.last.get(key) != fin {
		return
	}
	if after != nil {
		c.last.put(key, after)
	} else {
		c.last.del(key)
	}
}

// all is the channels of every key's last completions, for close's
// notifier to wait for.
func (c *completions[K]) all() []chan struct{} {
	var cs []chan struct{}
	for _, ch := range c.last.all() {
		cs = append(cs, ch)
	}
	return cs
}

// directStarted records how to cancel w's direct call, which runs now, or
// cancels it at once if the ferry is closing.
func (l *loop[K, I, O]) directStarted(w *waiter[K, I, O], cancel context.CancelCauseFunc) {
	if l.life.closing {
		l.out.cancels = append(l.out.cancels, cancel) // see close
		return
	}
	l.directs.started(w, cancel)
}

// endDirect forgets m.key's direct call, released, or keeps it until its
// OnBatch is reported (m.fin set).
func (l *loop[K, I, O]) endDirect(m msg[K, I, O]) {
	d := l.directs.end(m.w, m.fin)
	if m.fin != nil { // its OnBatch runs now: a Flush and the end wait for its report
		return
	}
	if d.fin != nil { // no OnBatch after all (Goexit, or abandoned): see endClaim
		l.endClaim(m.key, d)
	}
	l.rounds.countIf(l.rounds.claimed(d.n))
}

// endClaim gives back the place among key's completions that direct call d
// took at its claim and will not use, as it ends with no OnBatch. The key's
// next completions wait for its earlier ones. Close's notifier may wait on
// d.fin already: it is closed once those are over, now if there are none,
// else on a goroutine of its own (chainFin), which the loop waits for.
func (l *loop[K, I, O]) endClaim(key K, d directCall[K]) {
	l.order.unplace(key, d.after, d.fin)
	if d.after == nil {
		close(d.fin)
		return
	}
	l.directs.chains++
	go chainFin(l.s, d.after, d.fin)
}

// reported forgets the direct call whose OnBatch has returned, named by
// its fin, and counts it for its Flush round.
func (l *loop[K, I, O]) reported(fin chan struct{}) {
	rp := l.directs.report(fin)
	l.order.done(rp.key, fin)
	l.rounds.countIf(l.rounds.claimed(rp.n))
}

// claim records w's key, claimed for a direct call by w's Do, and gives its
// caller the word errClaimed: with OnBatch, the call takes its place among
// the key's completions.
func (l *loop[K, I, O]) claim(w *waiter[K, I, O]) {
	l.tally.DirectCalls++
	var after, fin chan struct{}
	switch {
	case l.f.onBatch == nil:
	case l.lim.calls == 1: // its OnBatch comes after the key's last completions
		after, fin = l.order.place(w.key)
	default: // no order: fin only names the call's report
		fin = make(chan struct{})
	}
	w.after, w.fin = after, fin
	l.directs.claim(w, after, fin)
	w.c <- result[O]{err: errClaimed}
}
