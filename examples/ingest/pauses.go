package main

import (
	"sync"
	"time"
)

// resumes is the service's side of the ferry's paused tenants. A tenant
// whose call fails for good, after its retries, is paused and held by the
// ferry (PauseOnError, HoldPaused): the events of that call and those
// waiting stay in the tenant's lane, in order, new async ones are admitted
// behind them, and none is answered until Resume, which calls the failed
// ones first. OnPause tells resumes of each pause; resumes calls Resume after
// a backoff that doubles with each pause in a row of the tenant, from 100 ms
// to 3.2 s, and a call of the tenant that commits starts the count again. A
// failed resume is one more pause. While a tenant is paused its Do requests
// get 503 at once instead of waiting for the resume. At Shutdown the ferry
// answers the events it holds ErrClosed, and their done spools them.
//
// Its methods run on their callers' goroutines, under mu: the ferry's
// (paused, from OnPause; committed, from the Call), the resumes' timers
// (due), the handlers (held) and Shutdown (stop).
type resumes struct {
	resume func(tenant string) // the ferry's Resume

	mu      sync.Mutex
	fails   map[string]int         // a tenant's pauses in a row
	paused  map[string]*time.Timer // the paused tenants, each with its resume's timer
	stopped bool
}

func newResumes(resume func(string)) *resumes {
	return &resumes{resume: resume, fails: map[string]int{}, paused: map[string]*time.Timer{}}
}

// pause schedules the resume of tenant, which the ferry has just paused.
func (r *resumes) pause(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	n := r.fails[tenant]
	r.fails[tenant] = n + 1
	r.paused[tenant] = time.AfterFunc(100*time.Millisecond<<min(n, 5), func() { r.due(tenant) })
}

// due resumes tenant, its backoff over.
func (r *resumes) due(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.paused[tenant]; ok && !r.stopped {
		delete(r.paused, tenant)
		r.resume(tenant) // blocks only to hand the word to the ferry
	}
}

// committed tells that a call of tenant committed. A nil r (a Service
// without a ferry's pauses, in tests) does nothing.
func (r *resumes) committed(tenant string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fails) > 0 {
		delete(r.fails, tenant)
	}
}

// held reports whether tenant is paused; never for a nil r.
func (r *resumes) held(tenant string) bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.paused[tenant]
	return ok
}

// stop ends the resumes: none starts after it.
func (r *resumes) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	for _, t := range r.paused {
		t.Stop()
	}
}
