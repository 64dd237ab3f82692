package main

import (
	"context"
	"sync"
	"time"
)

// pauses is the service's side of the ferry's paused tenants (PauseOnError).
// The ferry pauses a tenant once a call of its fails for good, after its
// retries: the call's events get its error, the tenant's waiting events and
// every new one ErrPaused, until Resume. The async events among them were
// acknowledged (202): pauses keeps them, in the order their done calls come,
// which is the order they were admitted in. After a backoff, and once every
// admitted async event of the tenant has had its done (so that all its kept
// events are there), a resume writes the kept events itself, while the ferry
// still holds the tenant paused, and only then calls Resume. As the ferry
// refuses the tenant's events until then (503), no event accepted after the
// pause can be stored before the kept ones, and no handler waits for a
// resume. If the write fails, the tenant stays paused and its resume comes
// again after a longer backoff. stop ends the resumes and returns the events
// still kept, for the spool.
//
// Retry tells pauses of a pause as it gives up on a call (failed), a done
// that keeps an event tells it too, and so does a handler that gets
// ErrPaused, for a pause no Retry told of (the callers of its call had all
// given up by its last try). A resume so scheduled for a tenant that is not
// paused, or no longer, calls a Resume that does nothing; see run for why it
// cannot undo a pause whose kept events are not yet written.
//
// Its methods run on their callers' goroutines, under mu: the handlers
// (admit, done, failed), the ferry's workers (done, from a Submit's done;
// failed, from Retry), timers (due) and Shutdown (stop). Each resume runs on
// a goroutine of its own (run).
type pauses struct {
	write  func(ctx context.Context, tenant string, evs []event) (int, error) // stores evs in order, and says how many it did
	resume func(tenant string)                                                // the ferry's Resume

	ctx    context.Context // the resumes', ended by stop
	cancel context.CancelFunc
	sem    chan struct{}  // a slot per resume that writes: the pool's two connections beyond the ferry's workers
	wg     sync.WaitGroup // the resumes running

	mu      sync.Mutex
	tenants map[string]*tenantPause // a tenant that has async events in the ferry, or is paused
	stopped bool
}

// tenantPause is a tenant's state in pauses, deleted once it holds nothing.
// It has no methods: pauses reads and writes it under its mu.
type tenantPause struct {
	pending int         // async events admitted whose done has not run
	kept    []event     // acknowledged async events whose call failed, in order
	paused  bool        // paused by the ferry, as far as the service knows: its resume is on its way
	due     bool        // its backoff is over: it resumes once pending is 0
	fails   int         // its resumes that failed in a row, for the backoff
	timer   *time.Timer // its backoff, while it runs
}

func newPauses(write func(context.Context, string, []event) (int, error), resume func(string)) *pauses {
	ctx, cancel := context.WithCancel(context.Background())
	return &pauses{write: write, resume: resume, ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, 2), tenants: map[string]*tenantPause{}}
}

// get returns tenant's state, made if need be. mu is held.
func (p *pauses) get(tenant string) *tenantPause {
	t := p.tenants[tenant]
	if t == nil {
		t = &tenantPause{}
		p.tenants[tenant] = t
	}
	return t
}

// admit counts an async event of tenant that is about to be submitted. done
// must follow, once, when its done runs or its Submit refuses it.
func (p *pauses) admit(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.get(tenant).pending++
}

// done ends an async event of tenant that admit counted, and keeps it if
// keep (its call failed for good, or the tenant was paused while it waited).
func (p *pauses) done(tenant string, e event, keep bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.get(tenant)
	if keep {
		t.kept = append(t.kept, e)
		p.pause(tenant, t) // Retry has, as a rule
	}
	t.pending--
	p.next(tenant, t)
}

// failed tells that the ferry paused tenant, or is about to (Retry gave up on
// its call), and schedules the tenant's resume unless one is on its way.
func (p *pauses) failed(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pause(tenant, p.get(tenant))
}

// pause schedules t's resume after a backoff that doubles with each resume
// that failed, from 100 ms to 3.2 s, unless one is on its way. mu is held.
func (p *pauses) pause(tenant string, t *tenantPause) {
	if t.paused || p.stopped {
		return
	}
	t.paused, t.due = true, false
	t.timer = time.AfterFunc(100*time.Millisecond<<min(t.fails, 5), func() { p.due(tenant) })
}

// due ends tenant's backoff.
func (p *pauses) due(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.get(tenant)
	t.timer, t.due = nil, true
	p.next(tenant, t)
}

// next starts t's resume if its backoff is over and every done of its async
// events has come, or forgets t if it holds nothing. mu is held.
func (p *pauses) next(tenant string, t *tenantPause) {
	switch {
	case t.paused && t.due && t.pending == 0 && !p.stopped:
		t.due = false
		p.wg.Add(1)
		go p.run(tenant, t.kept) // no done of tenant comes before Resume: t.kept stays
	case !t.paused && t.pending == 0 && len(t.kept) == 0:
		delete(p.tenants, tenant)
	}
}

// run is tenant's resume: it writes kept, the tenant's kept events, then
// resumes the tenant, unless the write failed (then it keeps those not
// written and schedules the resume again) or an async event of the tenant
// came in meanwhile (then it resumes once its done has come, and what it
// kept is written). It calls Resume under mu, with no async event of the
// tenant admitted and not done, and none kept: no Submit of the tenant can
// come between the check and Resume, and a pause whose kept events are not
// written is never undone.
func (p *pauses) run(tenant string, kept []event) {
	defer p.wg.Done()
	n, err := 0, error(nil)
	if len(kept) > 0 {
		select {
		case p.sem <- struct{}{}:
			n, err = p.write(p.ctx, tenant, kept)
			<-p.sem
		case <-p.ctx.Done():
			err = p.ctx.Err()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tenants[tenant]
	t.kept = t.kept[n:]
	switch {
	case err != nil:
		t.fails++
		t.paused = false
		p.pause(tenant, t)
	case t.pending > 0 || len(t.kept) > 0:
		t.due = true
	default:
		t.paused, t.fails = false, 0
		p.resume(tenant)
	}
	p.next(tenant, t)
}

// stop ends the resumes: none starts after it, and those running are
// cancelled and waited for. It returns the events still kept, for the spool.
// The ferry must be closed: no done comes after it.
func (p *pauses) stop() []event {
	p.mu.Lock()
	p.stopped = true
	for _, t := range p.tenants {
		if t.timer != nil {
			t.timer.Stop()
		}
	}
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	var kept []event
	for _, t := range p.tenants {
		kept = append(kept, t.kept...)
	}
	return kept
}
