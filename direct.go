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
type directs[K comparable] struct {
	calls   peakMap[K, directCall]
	reports peakMap[chan struct{}, reported[K]]
	claims  uint64 // direct calls claimed
	chains  int    // goroutines closing an unused claim's fin, which the loop waits for
}

// directCall is a direct call in flight: its claim's number and, once it
// runs, how to cancel it; with OnBatch, its place among its key's
// completions (see completions). It has no methods; the loop owns it.
type directCall struct {
	n          uint64
	cancel     context.CancelCauseFunc
	after, fin chan struct{}
}

// reported is a direct call released whose OnBatch runs: its claim's number
// and its key. It has no methods; the loop owns it.
type reported[K comparable] struct {
	n   uint64
	key K
}

// claim records a claim of key, with its place among the key's completions
// (after, fin), and returns it.
func (d *directs[K]) claim(key K, after, fin chan struct{}) directCall {
	d.claims++
	c := directCall{n: d.claims, after: after, fin: fin}
	d.calls.put(key, c)
	return c
}

// started records how to cancel key's direct call.
func (d *directs[K]) started(key K, cancel context.CancelCauseFunc) {
	c := d.calls.get(key)
	c.cancel = cancel
	d.calls.put(key, c)
}

// end forgets key's direct call, released, and returns it; with fin set,
// its OnBatch runs, and it is kept until its report.
func (d *directs[K]) end(key K, fin chan struct{}) directCall {
	c := d.calls.get(key)
	d.calls.del(key)
	if fin != nil {
		d.reports.put(fin, reported[K]{c.n, key})
	}
	return c
}

// report forgets the direct call whose OnBatch has returned, named by its
// fin, and returns it.
func (d *directs[K]) report(fin chan struct{}) reported[K] {
	r := d.reports.get(fin)
	d.reports.del(fin)
	return r
}

// inFlight is how many a Flush round waits for: the calls in flight and
// those whose OnBatch runs.
func (d *directs[K]) inFlight() int { return d.calls.len() + d.reports.len() }

// pending reports whether the loop's end waits for them: an OnBatch that
// runs, or an unused claim's fin still to close.
func (d *directs[K]) pending() bool { return d.reports.len() > 0 || d.chains > 0 }

// cancels appends the cancels of the calls that run to buf.
func (d *directs[K]) cancels(buf []context.CancelCauseFunc) []context.CancelCauseFunc {
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

// directStarted records how to cancel key's direct call, which runs now, or
// cancels it at once if the ferry is closing.
func (l *loop[K, I, O]) directStarted(key K, cancel context.CancelCauseFunc) {
	if l.life.closing {
		l.out.cancels = append(l.out.cancels, cancel) // see close
		return
	}
	l.directs.started(key, cancel)
}

// endDirect forgets m.key's direct call, released, or keeps it until its
// OnBatch is reported (m.fin set).
func (l *loop[K, I, O]) endDirect(m msg[K, I, O]) {
	d := l.directs.end(m.key, m.fin)
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
func (l *loop[K, I, O]) endClaim(key K, d directCall) {
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
	if l.f.onBatch != nil { // its OnBatch comes after the key's last completions
		after, fin = l.order.place(w.key)
		w.after, w.fin = after, fin
	}
	l.directs.claim(w.key, after, fin)
	w.c <- result[O]{err: errClaimed}
}
