package main

import (
	"sync"
	"time"
)

// carrier holds, per tenant, the async events that were acknowledged (202)
// but whose call failed, in the order they were accepted. Such a tenant is
// paused: its next call writes them before its own events, in the same
// statement, and until one succeeds the handlers answer 503 for it. A poke,
// scheduled with a backoff that doubles per failure, makes that call when no
// event does. Only a tenant's calls change its events, one at a time (the
// ferry's one call per key); the mutex guards the maps, which handlers,
// timers and the calls of other tenants read. Its methods run on their
// caller's goroutine.
type carrier struct {
	poke func(tenant string) // on a timer's goroutine

	mu      sync.Mutex
	events  map[string][]event
	fails   map[string]int         // calls failed in a row, for the backoff
	timers  map[string]*time.Timer // a tenant's pending poke
	stopped bool                   // by stop: no more pokes
}

func newCarrier(poke func(tenant string)) *carrier {
	return &carrier{poke: poke, events: map[string][]event{}, fails: map[string]int{}, timers: map[string]*time.Timer{}}
}

// peek returns the tenant's carried events, which the caller must not change.
func (c *carrier) peek(tenant string) []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[tenant]
}

func (c *carrier) paused(tenant string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events[tenant]) > 0
}

// count is the number of paused tenants.
func (c *carrier) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

// tenants returns the paused tenants.
func (c *carrier) tenants() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := make([]string, 0, len(c.events))
	for t := range c.events {
		ts = append(ts, t)
	}
	return ts
}

// clear unpauses tenant: its carried events are stored.
func (c *carrier) clear(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.events, tenant)
	delete(c.fails, tenant)
}

// keep sets the tenant's carried events to evs, after a failed call, and
// schedules a poke. An empty evs unpauses it.
func (c *carrier) keep(tenant string, evs []event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(evs) == 0 {
		delete(c.events, tenant)
		delete(c.fails, tenant)
		return
	}
	c.events[tenant] = evs
	c.fails[tenant]++
	c.scheduleLocked(tenant)
}

// schedule pokes tenant again after a backoff, unless a poke is pending.
func (c *carrier) schedule(tenant string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.scheduleLocked(tenant)
}

func (c *carrier) scheduleLocked(tenant string) {
	if c.stopped || c.timers[tenant] != nil {
		return
	}
	d := min(50*time.Millisecond<<min(c.fails[tenant], 6), 2*time.Second)
	c.timers[tenant] = time.AfterFunc(d, func() {
		c.mu.Lock()
		delete(c.timers, tenant)
		c.mu.Unlock()
		c.poke(tenant)
	})
}

// stop ends the pokes and returns every carried event, for the spool. The
// ferry must be closed: no call may change them any more.
func (c *carrier) stop() []event {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for _, t := range c.timers {
		t.Stop()
	}
	var all []event
	for _, evs := range c.events {
		all = append(all, evs...)
	}
	return all
}
