package ferry

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var (
	errFuzzCall   = errors.New("fuzz: call failed")
	errCallerGone = errors.New("fuzz: the caller's goroutine ended in Do") // by a direct call's Goexit
)

// ferryRun is one random schedule through a whole ferry, in a synctest bubble.
type ferryRun struct {
	t   *testing.T
	cfg Config[any, in]

	mu      sync.Mutex
	modes   map[int]int    // by input id, how the call of a batch led by it behaves: see call
	exited  map[int]bool   // inputs that led a call that ran runtime.Goexit
	busy    map[string]int // by key, its calls in flight
	gaveUp  map[int]bool   // inputs whose caller returned with its context's error
	ok      map[int]bool   // inputs that a call answered with their output
	closed  bool           // Close was called and has been taken in by the loop
	calls   int
	inCalls int
	bad     []string

	owner     map[int]int  // by input id, the id of the caller whose context it has
	cancelled map[int]bool // by owner, contexts cancelled
	made      map[made]int // calls made and not yet reported to OnBatch
	silent    int          // direct calls that ran Goexit: OnBatch never hears of them
	flying    int          // batched calls running, across every shard

	f        *Ferry[any, in, int]
	closeArm int          // 1: the next done or OnBatch to run calls Close; 2: one has
	closeErr chan error   // what that Close returned
	returned map[int]bool // Submits whose done, which blocks, has returned
	// With Retry: its policy, and what it was told.
	retryN     int              // attempts a policy allows
	backoff    time.Duration    // between them
	retryPanic bool             // Retry panics on its second question
	retryEnd   int              // 1: Retry's first question calls Flush, 2: Shutdown (each must fail at once)
	failN      int              // calls of a batch leader that fail as its mode says; then they answer
	tries      map[int]int      // by input id, calls led by it
	failed     map[string][]int // by key, the failed inputs of its last call
	retrying   map[string][]int // by key, the inputs a Retry said to call again
	retried    int              // calls that were retries
	// With PauseOnError: OnPause's calls, and whether it resumes the key.
	onPauses      int
	resumeOnPause bool
	resumed       map[any]bool   // keys resumed in this step: see checkPaused
	callsOf       map[string]int // by key, calls made

	called map[int]bool             // inputs that reached a call
	many   map[int]bool             // inputs of a DoMany
	last   map[string]map[int64]int // by key and rank, the last input called (not by a retry)
	back   map[int]bool             // Submits that have returned: admitted (true) or not
}

// userClose calls Close from user code the ferry runs (a done, an OnBatch),
// if a step asked for it: it must return at once, as it cannot wait for the
// code it runs in (see Ferry.Close).
func (r *ferryRun) userClose() {
	r.mu.Lock()
	fire := r.closeArm == 1
	if fire {
		r.closeArm = 2
	}
	r.mu.Unlock()
	if fire {
		r.closeErr <- r.f.Close()
	}

}

// made is what OnBatch should report of a call.
type made struct {
	key    string
	size   int
	weight int64
	direct bool
}

// onBatch checks that a report is of a call made, and is told off the loop.
func (r *ferryRun) onBatch(b Batch[any]) {
	r.userClose()
	r.mu.Lock()
	defer r.mu.Unlock()
	if fn := onLoop(); fn != "" {
		r.fail("OnBatch ran on the loop, in %s", fn)
	}
	key, _ := b.Key.(string)
	m := made{key, b.Size, b.Weight, b.Direct}
	if r.made[m]--; r.made[m] < 0 {
		r.fail("OnBatch told of a call never made: %+v", b)
	}
	if b.Wait < 0 || b.Took < 0 || b.Direct && b.Wait != 0 {
		r.fail("OnBatch: %+v", b)
	}
}

func (r *ferryRun) fail(format string, args ...any) {
	r.bad = append(r.bad, fmt.Sprintf(format, args...))
}

// call checks the rules every call must keep, then behaves as the mode of the
// input that leads its batch says: it waits mode/4 ms (or for its context),
// then runs runtime.Goexit from mode 16 on, else by mode%4 answers, fails,
// panics, or fails the odd ids with Errors.
func (r *ferryRun) call(ctx context.Context, k any, ins []in) ([]int, error) {
	key, ok := k.(string)
	if !ok {
		r.mu.Lock()
		r.fail("a call for key %T %v, which Do should have refused", k, k)
		r.mu.Unlock()
		return nil, errFuzzCall
	}
	r.mu.Lock()
	r.calls++
	r.inCalls += len(ins)
	if r.closed {
		r.fail("a call for %s started after Close", key)
	}
	if r.busy[key] >= max(1, r.cfg.MaxCallsPerKey) {
		r.fail("%d calls in flight for %s, MaxCallsPerKey %d", r.busy[key]+1, key, r.cfg.MaxCallsPerKey)
	}
	r.busy[key]++
	var w int64
	for i, x := range ins {
		w += x.W
		if r.gaveUp[x.ID] {
			r.fail("input %d joined a call after its caller gave up", x.ID)
		}
		late := r.cfg.WaitForRoom && len(r.f.shards) > 1 && r.many[x.ID] // see checkOrder
		if i > 0 && (ins[i-1].R > x.R || ins[i-1].R == x.R && ins[i-1].ID > x.ID && !late) {
			r.fail("batch %v out of rank order", ins)
		}
	}
	if n := r.cfg.MaxBatchSize; len(ins) > n {
		r.fail("batch of %d, limit %d", len(ins), n)
	}
	if lim := r.cfg.MaxBatchWeight; lim > 0 && len(ins) > 1 && (w > lim || w < 0) {
		r.fail("batch %v weighs %d, limit %d", ins, w, lim)
	}
	direct := ctx.Value(callKey{}) == nil // a batched call's context holds its ferry
	r.made[made{key, len(ins), w, direct}]++
	r.callsOf[key]++
	r.checkCallers(ctx, ins, direct)
	if !direct {
		if r.flying++; r.flying > r.cfg.MaxInFlightBatches {
			r.fail("%d batched calls at once, limit %d", r.flying, r.cfg.MaxInFlightBatches)
		}
	}
	mode := r.modes[ins[0].ID]
	retry := (r.cfg.Retry != nil || r.cfg.HoldPaused) && r.checkRetry(key, ins)
	if !retry && r.cfg.MaxCallsPerKey < 2 { // several calls of a key start in any order
		r.checkOrder(key, ins)
	}
	for _, x := range ins {
		r.called[x.ID] = true
	}
	if r.cfg.Retry != nil {
		if r.tries[ins[0].ID]++; r.tries[ins[0].ID] > r.failN {
			mode &^= 3 // it answers now
		}
	}
	if r.cfg.Retry != nil || r.cfg.HoldPaused {
		r.failed[key] = nil
		for _, x := range ins {
			if mode%4 == 1 || mode%4 == 2 || mode%4 == 3 && x.ID%2 == 1 {
				r.failed[key] = append(r.failed[key], x.ID)
			}
		}
	}
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.busy[key]--
		if !direct {
			r.flying--
		}
		r.mu.Unlock()
	}()
	select {
	case <-time.After(time.Duration(mode/4) * time.Millisecond):
	case <-ctx.Done():
		cause := context.Cause(ctx)
		r.mu.Lock()
		if r.cfg.Retry != nil || r.cfg.HoldPaused { // every input failed
			r.failed[key] = nil
			for _, x := range ins {
				r.failed[key] = append(r.failed[key], x.ID)
			}
		}
		if cause == ErrCallTimeout {
			r.held(key, direct)
		}
		switch {
		case cause == ErrCallTimeout && r.cfg.CallTimeout == 0:
			r.fail("a call timed out with no CallTimeout")
		case cause == ErrAbandoned && (!r.cfg.CancelAbandoned || direct):
			r.fail("a call abandoned without CancelAbandoned, or a direct one")
		case cause == ErrAbandoned:
			for _, x := range ins {
				if !r.cancelled[r.owner[x.ID]] {
					r.fail("a call abandoned while input %d's caller waits", x.ID)
				}
			}
		}
		r.mu.Unlock()
		return nil, cause
	}
	if mode >= 16 {
		r.mu.Lock()
		r.exited[ins[0].ID] = true
		if direct {
			r.silent++
		}
		r.mu.Unlock()
		runtime.Goexit()
	}
	outs := make([]int, len(ins))
	for i, x := range ins {
		outs[i] = 10 * x.ID
	}
	if mode%4 == 0 || mode%4 == 3 {
		r.mu.Lock()
		for _, x := range ins {
			r.ok[x.ID] = mode%4 == 0 || x.ID%2 == 0
		}
		r.mu.Unlock()
	}
	if mode%4 != 0 {
		r.mu.Lock()
		r.held(key, direct)
		r.mu.Unlock()
	}
	switch mode % 4 {
	case 1:
		if ins[0].ID%3 == 0 {
			return nil, (*pointerErr)(nil) // its Unwrap panics
		}
		return nil, errFuzzCall
	case 2:
		panic("fuzz panic")
	case 3:
		errs := make(Errors, len(ins))
		for i, x := range ins {
			if x.ID%2 == 1 {
				errs[i] = errFuzzCall
			}
		}
		return outs, errs
	}
	return outs, nil
}

// retry is the Retry of a run: it allows retryN attempts after backoff,
// and panics on its second question if retryPanic. What it allows is checked
// by the next call for the key (see checkRetry).
func (r *ferryRun) retry(k any, attempt int, err error) (time.Duration, bool) {
	r.userClose() // Retry is user code, where a Close returns at once
	r.mu.Lock()
	end := r.retryEnd
	r.retryEnd = 0
	r.mu.Unlock()
	switch end { // each would wait for the call that asks: it must fail at once
	case 1:
		if err := r.f.Flush(context.Background()); err == nil {
			r.mu.Lock()
			r.fail("Flush from Retry returned nil")
			r.mu.Unlock()
		}
	case 2:
		if err := r.f.Shutdown(context.Background()); err == nil {
			r.mu.Lock()
			r.fail("Shutdown from Retry returned nil")
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key, _ := k.(string)
	if err == nil || attempt < 1 {
		r.fail("Retry for %s told attempt %d, error %v", key, attempt, err)
	}
	if fn := onLoop(); fn != "" {
		r.fail("Retry ran on the loop, in %s", fn)
	}
	if r.retryPanic && attempt == 2 {
		panic("fuzz Retry")
	}
	if attempt >= r.retryN {
		return r.backoff, false
	}
	r.retrying[key] = r.failed[key]
	return r.backoff, true
}

// held expects, with HoldPaused, the next call of key, whose batched call
// fails now, to call its failed inputs again (unless Retry does first),
// once Resume ends the hold; a direct call's failure holds only the inputs
// behind it. r.mu is held.
func (r *ferryRun) held(key string, direct bool) {
	if r.cfg.HoldPaused && !direct && len(r.failed[key]) > 0 {
		r.retrying[key] = r.failed[key]
	}
}

// onPause checks that OnPause is told of a failure, off the loop, and
// resumes the key if the run says so, as a probe would: a few times, as a
// call that fails at once would otherwise fail and resume for ever.
func (r *ferryRun) onPause(k any, err error) {
	r.userClose()
	r.mu.Lock()
	r.onPauses++
	if fn := onLoop(); fn != "" {
		r.fail("OnPause ran on the loop, in %s", fn)
	}
	if err == nil || errors.Is(err, ErrPaused) {
		r.fail("OnPause for %v told %v", k, err)
	}
	resume := r.resumeOnPause && r.onPauses <= 4
	if resume {
		r.resumed[k] = true
	}
	r.mu.Unlock()
	if resume {
		r.f.Resume(k)
	}
}

// checkRetry checks a call for key after a Retry said to call again: its
// inputs are among those failed, in their order, unless the retry did not
// happen: every caller of those gave up, or the ferry closed. It reports
// whether the call is a retry. r.mu is held.
func (r *ferryRun) checkRetry(key string, ins []in) bool {
	want, ok := r.retrying[key]
	if !ok {
		return false
	}
	delete(r.retrying, key)
	if subsequence(ins, want) { // ids are unique: only a retry calls them again
		r.retried++
		return true
	}
	for _, id := range want {
		if !r.cancelled[r.owner[id]] && !r.closed && !r.cfg.CancelAbandoned {
			r.fail("call %v for %s after a Retry of %v: another call came between the attempts", ins, key, want)
			break
		}
	}
	return false
}

// checkOrder checks that a key's inputs of one rank reach calls in the
// order they came, which is the order of their ids: each step's admission
// is over before the next step (the steps wait for the bubble), a DoMany's
// inputs are in slice order, and those waiting for room go in in the order
// they came to their shard. So but for one case: a DoMany over several
// shards that waits for room waits in its first part's shard, and its other
// parts come to their shards once it has the room, after inputs that came
// there meanwhile (from other callers, which a caller blocked in the DoMany
// cannot order itself against). A retry (not checked here) calls a failed
// call's inputs again, before any later call of the key. r.mu is held.
func (r *ferryRun) checkOrder(key string, ins []in) {
	if r.last[key] == nil {
		r.last[key] = map[int64]int{}
	}
	late := r.cfg.WaitForRoom && len(r.f.shards) > 1
	for _, x := range ins {
		if last, ok := r.last[key][x.R]; ok && x.ID < last && !(late && r.many[x.ID]) {
			r.fail("input %d of %s (rank %d) called after input %d, which came later", x.ID, key, x.R, last)
		}
		r.last[key][x.R] = max(r.last[key][x.R], x.ID)
	}
}

// subsequence reports whether the ids of ins are in want, in its order.
func subsequence(ins []in, want []int) bool {
	j := 0
	for _, x := range ins {
		for j < len(want) && want[j] != x.ID {
			j++
		}
		if j == len(want) {
			return false
		}
		j++
	}
	return true
}

// fuzzKey is the lane of an input: its Key, except for the keys that no lane
// can hold: "n" is a NaN, "u" a slice (incomparable), "z" an array holding a NaN.
func fuzzKey(x in) any {
	switch x.Key {
	case "n":
		return math.NaN()
	case "u":
		return []int{x.ID}
	case "z":
		return [1]any{math.NaN()}
	}
	return x.Key
}

// ownerKey is the key of the ID of the input whose caller's context it is
// (for a DoMany, its first input's: see ferryRun.owner).
type ownerKey struct{}

// checkCallers checks, with KeepContexts, that a call's Callers are its
// inputs' callers' contexts, in order, and that CallInfo tells a direct
// call; without it, that it sees neither. r.mu is held.
func (r *ferryRun) checkCallers(ctx context.Context, ins []in, direct bool) {
	cs := Callers(ctx)
	attempt, d := CallInfo(ctx)
	if !r.cfg.KeepContexts {
		if cs != nil || attempt != 0 || d {
			r.fail("Callers %v, CallInfo %d %v without KeepContexts", cs, attempt, d)
		}
		return
	}
	if len(cs) != len(ins) || attempt < 1 || d != direct {
		r.fail("%d Callers for %d inputs, CallInfo %d %v, direct %v", len(cs), len(ins), attempt, d, direct)
		return
	}
	for i, x := range ins {
		if id, _ := cs[i].Value(ownerKey{}).(int); id != r.owner[x.ID] {
			r.fail("input %d's Callers context is %d's, not %d's", x.ID, id, r.owner[x.ID])
		}
	}
}

// callerCtx is a caller's own context type. Its methods are user code, so
// each checks that it is not running on the loop goroutine.
type callerCtx struct {
	context.Context
	r *ferryRun
}

func (c callerCtx) check(method string) {
	if fn := onLoop(); fn != "" {
		c.r.mu.Lock()
		c.r.fail("the caller's context's %s ran on the loop, in %s", method, fn)
		c.r.mu.Unlock()
	}
}

// onLoop is the function of the loop's on its caller's stack, if any.
func onLoop() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		if strings.Contains(fr.Function, "ferry.(*loop[") {
			return fr.Function
		}
		if !more {
			return ""
		}
	}
}

func (c callerCtx) Value(key any) any     { c.check("Value"); return c.Context.Value(key) }
func (c callerCtx) Done() <-chan struct{} { c.check("Done"); return c.Context.Done() }
func (c callerCtx) Err() error            { c.check("Err"); return c.Context.Err() }

type fuzzCaller struct {
	x      in
	cancel context.CancelFunc
	c      chan answer
	done   bool // its answer was received
	a      answer
	how    int           // doOne, submitOne or doMany
	gate   chan struct{} // a Submit whose done blocks until it is closed
	never  bool          // no room could ever hold it (or its DoMany): ErrRejected even with WaitForRoom
	waited int           // a Submit: 1 + the step it began to wait for room in (it had not returned as the step ended); 0: it never waited
	let    bool          // a Submit that waited, admitted: its order checked
}

const (
	doOne = iota
	submitOne
	doMany
)

// submit runs a Submit for c, whose done sends its answer on c.c once, and
// then, if c has a gate, blocks until the gate is closed.
func (r *ferryRun) submit(f *Ferry[any, in, int], ctx context.Context, c *fuzzCaller) {
	calls := 0
	err := f.Submit(ctx, c.x, func(out int, err error) {
		r.mu.Lock()
		calls++
		if calls > 1 {
			r.fail("Submit %d: done called %d times", c.x.ID, calls)
		}
		if fn := onLoop(); fn != "" {
			r.fail("Submit %d: done ran on the loop, in %s", c.x.ID, fn)
		}
		if errors.Is(err, context.Canceled) {
			r.fail("Submit %d: done got its ctx's error %v: an accepted input is kept", c.x.ID, err)
		}
		r.mu.Unlock()
		c.c <- answer{out, err}
		r.userClose()
		if c.gate != nil {
			<-c.gate
			r.mu.Lock()
			r.returned[c.x.ID] = true
			r.mu.Unlock()
		}
	})
	r.mu.Lock()
	r.back[c.x.ID] = err == nil
	r.mu.Unlock()
	if err != nil { // not admitted: done is never called
		r.mu.Lock()
		r.returned[c.x.ID] = true
		r.mu.Unlock()
		c.c <- answer{err: err}
	}
}

// many runs a DoMany for cs and gives each its input's answer.
func many(f *Ferry[any, in, int], ctx context.Context, cs []*fuzzCaller) {
	ins := make([]in, len(cs))
	for i, c := range cs {
		ins[i] = c.x
	}
	outs, err := f.DoMany(ctx, ins)
	var errs Errors
	isErrs := errors.As(err, &errs)
	for i, c := range cs {
		switch {
		case isErrs && len(errs) != len(cs):
			c.c <- answer{err: fmt.Errorf("DoMany of %d gave %d errors", len(cs), len(errs))}
		case isErrs && errs[i] != nil:
			c.c <- answer{err: errs[i]}
		case err != nil && !isErrs:
			c.c <- answer{err: err}
		case len(outs) != len(cs):
			c.c <- answer{err: fmt.Errorf("DoMany of %d gave %d outputs", len(cs), len(outs))}
		default:
			c.c <- answer{out: outs[i]}
		}
	}
}

// flushing is a Flush in flight: once it returns nil, every caller before
// the first `before` must have its answer; with WaitForRoom, only if none
// waited for room as it was called (those a Flush does not wait for).
type flushing struct {
	before int
	c      chan error
}

func runFerry(t *testing.T, data []byte) {
	b := &bytes{data}
	cfg := Config[any, in]{Key: fuzzKey, Weight: inCfg.Weight, Rank: inCfg.Rank}
	cfg.MaxBatchSize = 1 + b.next()%4
	cfg.MaxBatchWeight = small(b.next(), 7)
	cfg.MaxBatchDelay = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, math.MaxInt64}[b.next()%4]
	v := b.next()
	cfg.MaxInFlightBatches = 1 + v%3
	if v >= 240 { // several calls per key in flight
		cfg.MaxCallsPerKey = 2 + v/3%3
	}
	cfg.MaxQueued = 1 + b.next()%8
	cfg.MaxQueuedWeight = small(b.next(), 13)
	cfg.DirectCalls = b.next()%2 == 1
	opts := b.next()
	cfg.CancelAbandoned = opts&1 == 1
	cfg.CallTimeout = []time.Duration{0, 2 * time.Millisecond, 1, math.MaxInt64}[opts>>1&3]
	cfg.Shards = min(opts>>4&3, cfg.MaxInFlightBatches) // 0: the default
	if opts&64 != 0 {
		cfg.MaxQueued += 192 // so that shards borrow and keep chunks of the room: see share
	}
	more := b.next()
	cfg.PauseOnError = more&1 == 1
	cfg.WaitForRoom = more&2 == 2
	cfg.KeepContexts = more&4 == 4
	if more&6 == 6 { // WaitForRoom over 2 to 8 shards (with KeepContexts: the saved inputs decode so)
		cfg.Shards = 2 + int(more>>3)%7
		cfg.MaxInFlightBatches = max(cfg.MaxInFlightBatches, cfg.Shards)
	}
	r := &ferryRun{t: t, cfg: cfg, modes: map[int]int{}, exited: map[int]bool{}, busy: map[string]int{}, gaveUp: map[int]bool{}, ok: map[int]bool{},
		owner: map[int]int{}, cancelled: map[int]bool{}, made: map[made]int{}, closeErr: make(chan error, 1), returned: map[int]bool{},
		tries: map[int]int{}, failed: map[string][]int{}, retrying: map[string][]int{},
		called: map[int]bool{}, last: map[string]map[int64]int{}, many: map[int]bool{}, back: map[int]bool{},
		resumed: map[any]bool{}, callsOf: map[string]int{}}
	if opts&128 != 0 { // a Retry policy: attempts, backoff (0, 1ms, huge or MaxInt64: parked till Resume or Close), a panic, calls that fail
		p := b.next()
		r.retryN, r.failN = 1+p%4, p/4%4
		r.backoff = []time.Duration{0, time.Millisecond, math.MaxInt64 / 2, math.MaxInt64}[p/16%4]
		r.retryPanic = p/64%4 == 0
		r.retryEnd = []int{0, 1, 2, 0}[p/64%4]
		cfg.Retry, r.cfg.Retry = r.retry, r.retry
	}
	if opts&8 == 0 {
		cfg.OnBatch = r.onBatch
	}
	if cfg.PauseOnError { // a pause that holds, OnPause, and a probe that resumes from it
		cfg.HoldPaused, r.cfg.HoldPaused = more&64 != 0, more&64 != 0
		if more&128 != 0 {
			cfg.OnPause = r.onPause
			r.resumeOnPause = more&32 != 0
		}
	}
	if cfg.MaxCallsPerKey > 1 { // New refuses what keeps a key's order through failures
		cfg.Retry, cfg.PauseOnError, cfg.HoldPaused, cfg.OnPause = nil, false, false, nil
		r.cfg = cfg
	}
	f, err := New(r.call, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.f = f
	var callers []*fuzzCaller
	var flushes []flushing
	closeDone := make(chan error, 1)
	stopping := false            // a step called Close or Shutdown, which tells closeDone
	userClosed := false          // a done or OnBatch called Close
	var gates []chan struct{}    // of the Submits whose done blocks, not yet released
	pausedSince := map[any]int{} // by key paused, the step it was first listed in: see checkPaused
	// input draws one input, its call's mode and its caller's context.
	input := func(how int, bad bool) (*fuzzCaller, context.Context) {
		id := len(callers)
		key := string(rune('a' + b.next()%3))
		if k := b.next(); k >= 250 && bad {
			key = []string{"n", "u", "z"}[k%3]
		}
		x := in{Key: key, ID: id, W: small(b.next(), 5), R: int64(b.next() % 3)}
		r.mu.Lock()
		r.modes[id] = b.next() % 20 // see call
		r.owner[id] = id
		r.many[id] = how == doMany
		r.mu.Unlock()
		parent, cancel := context.WithCancel(context.Background())
		var ctx context.Context = context.WithValue(parent, ownerKey{}, id)
		if id%2 == 1 {
			ctx = callerCtx{ctx, r}
		}
		c := &fuzzCaller{x: x, cancel: cancel, c: make(chan answer, 1), how: how,
			never: cfg.MaxQueuedWeight > 0 && x.W > cfg.MaxQueuedWeight}
		callers = append(callers, c)
		return c, ctx
	}
	for step := 0; b.more() && step < 200; step++ {
		switch op := b.next() % 13; op {
		case 0, 1, 2: // Do
			c, ctx := input(doOne, true)
			go func() {
				a := answer{err: errCallerGone} // unless Do returns
				defer func() { c.c <- a }()
				out, err := f.Do(ctx, c.x)
				a = answer{out, err}
			}()
		case 8: // Submit: on a goroutine, as with WaitForRoom it may wait
			c, ctx := input(submitOne, true)
			go r.submit(f, ctx, c)
		case 9: // DoMany of 1 to 3 inputs, with good keys, on one context
			c, ctx := input(doMany, false)
			cs := []*fuzzCaller{c}
			for range b.next() % 3 {
				x, _ := input(doMany, false)
				x.cancel = c.cancel
				r.mu.Lock()
				r.owner[x.x.ID] = c.x.ID
				r.mu.Unlock()
				cs = append(cs, x)
			}
			var w int64 // saturated at MaxInt64
			for _, x := range cs {
				w = min(w, math.MaxInt64-x.x.W) + x.x.W
			}
			if len(cs) > cfg.MaxQueued || cfg.MaxQueuedWeight > 0 && w > cfg.MaxQueuedWeight || w == math.MaxInt64 {
				for _, x := range cs {
					x.never = true
				}
			}
			go many(f, ctx, cs)
		case 10: // Flush, sometimes with a deadline
			ctx, cancel := context.Background(), context.CancelFunc(func() {})
			if d := b.next() % 4; d > 0 {
				ctx, cancel = context.WithTimeout(ctx, time.Duration(d)*time.Millisecond)
			}
			fl := flushing{before: len(callers), c: make(chan error, 1)}
			if cfg.WaitForRoom && f.Stats().Waiting > 0 {
				fl.before = 0
			}
			flushes = append(flushes, fl)
			go func() {
				defer cancel()
				fl.c <- f.Flush(ctx)
			}()
		case 3: // a caller gives up; or time passes and it gives up at that instant, as a call ends
			if len(callers) > 0 {
				x := b.next()
				c := callers[x%len(callers)]
				if x&128 != 0 { // no wait between: its ctx ends as the loop answers what the time made happen
					time.Sleep(time.Duration(x>>5&3) * time.Millisecond)
				}
				r.mu.Lock()
				r.cancelled[r.owner[c.x.ID]] = true
				r.mu.Unlock()
				c.cancel()
			}
		case 4, 5: // time passes
			time.Sleep(time.Duration(b.next()%4) * time.Millisecond)
		case 6: // Close or Shutdown, rarely
			if stopping || b.next()%4 != 0 {
				continue
			}
			stopping = true
			if b.next()%2 == 0 {
				go func() { closeDone <- f.Close() }()
				if y := b.next(); y%2 == 1 && len(callers) > 0 { // a ctx ends as the close answers
					c := callers[y/2%len(callers)]
					r.mu.Lock()
					r.cancelled[r.owner[c.x.ID]] = true
					r.mu.Unlock()
					c.cancel()
				}
				synctest.Wait()
				r.mu.Lock()
				r.closed = true
				r.mu.Unlock()
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(b.next()%8)*time.Millisecond)
				go func() {
					defer cancel()
					if err := f.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
						closeDone <- err
						return
					}
					if _, err := f.Do(context.Background(), in{Key: "a", ID: -1}); !errors.Is(err, ErrClosed) {
						closeDone <- fmt.Errorf("Do after Shutdown returned: %v, not ErrClosed", err)
						return
					}
					closeDone <- f.Close()
				}()
			}
		case 11: // a Submit whose done blocks until a later step releases it
			c, ctx := input(submitOne, true)
			c.gate = make(chan struct{})
			gates = append(gates, c.gate)
			go r.submit(f, ctx, c)
		case 12: // a blocked done returns; or, rarely, the next done or OnBatch calls Close
			switch x := b.next(); {
			case x%2 == 0 && len(gates) > 0:
				close(gates[0])
				gates = gates[1:]
			case x%8 == 1:
				r.mu.Lock()
				if r.closeArm == 0 {
					r.closeArm = 1
				}
				r.mu.Unlock()
			case x%8 == 3: // Resume a key, paused or not
				k := string(rune('a' + b.next()%3))
				r.mu.Lock()
				r.resumed[k] = true
				r.mu.Unlock()
				f.Resume(k)
			case x%8 == 5 && cfg.PauseOnError: // every caller of a key's failed batch gives up, then Resume
				resumeGone(t, r, callers, string(rune('a'+b.next()%3)), stopping)
			}
		case 7: // Stats goes through the loop too
			s := f.Stats()
			if s.Queued > cfg.MaxQueued || s.Weight < 0 || cfg.MaxQueuedWeight > 0 && s.Weight > cfg.MaxQueuedWeight {
				t.Fatalf("room over its limits: %+v", s)
			}
			if s.Waiting < 0 || !cfg.WaitForRoom && s.Waiting > 0 || s.Paused < 0 || !cfg.PauseOnError && s.Paused > 0 ||
				s.Parked < 0 || cfg.Retry == nil && !cfg.HoldPaused && s.Parked > 0 || s.Parked > s.Lanes {
				t.Fatalf("stats: %+v", s)
			}
		}
		synctest.Wait()
		r.mu.Lock()
		if r.closeArm == 2 && !userClosed {
			userClosed, r.closed = true, true // taken in by the loops by now
			select {
			case err := <-r.closeErr:
				if err != nil {
					t.Fatalf("Close from a done or OnBatch: %v", err)
				}
			default:
				t.Fatalf("Close from a done or OnBatch has not returned")
			}
		}
		for _, c := range callers {
			if !c.done {
				select {
				case c.a = <-c.c:
					c.done = true
					// A DoMany's taken inputs may still reach their call.
					if errors.Is(c.a.err, context.Canceled) && c.how != doMany {
						r.gaveUp[c.x.ID] = true
					}
				default:
				}
			}
		}
		if cfg.WaitForRoom {
			checkLetIn(t, r, callers, step)
		}
		closed := r.closed
		r.mu.Unlock()
		flushes = checkFlushes(t, r, flushes, callers)
		if cfg.PauseOnError && !closed && !stopping { // once it ends, a Resume may come too late to resume
			checkPaused(t, r, pausedSince, step)
		}
	}
	for _, g := range gates { // Close waits for every done
		close(g)
	}
	if !stopping {
		go func() { closeDone <- f.Close() }() // after a Close from user code, too: this one waits
	}
	if err := <-closeDone; err != nil {
		t.Fatalf("Close: %v", err)
	}
	synctest.Wait() // the callers' goroutines hand on what they got
	for _, c := range callers {
		if !c.done && c.how == submitOne {
			select {
			case c.a = <-c.c: // done has returned before Close does
				c.done = true
			default:
				t.Fatalf("Submit %d: done not called by the time Close returned", c.x.ID)
			}
		}
		if !c.done {
			c.a = <-c.c // every caller has its answer once Close returns
		}
		c.cancel()
		if r.ok[c.x.ID] && errors.Is(c.a.err, ErrClosed) {
			t.Fatalf("input %d: its call answered it, yet its caller was told %v", c.x.ID, c.a.err)
		}
		checkAnswer(t, c, r.exited, cfg)
		if errors.Is(c.a.err, ErrPaused) && r.called[c.x.ID] {
			t.Fatalf("input %d: answered %v, yet it reached a call", c.x.ID, c.a.err)
		}
		switch dropped := errors.Is(c.a.err, ErrDropped); {
		case dropped && r.called[c.x.ID]:
			t.Fatalf("input %d: answered %v, yet it reached a call", c.x.ID, c.a.err)
		case errors.Is(c.a.err, context.Canceled) && !dropped && !r.called[c.x.ID]:
			t.Fatalf("input %d: ctx's error alone, %v, which says a call took it, yet none did", c.x.ID, c.a.err)
		}
	}
	left := 0
	for _, n := range r.made {
		left += n
	}
	if cfg.OnBatch != nil && left != r.silent {
		t.Fatalf("OnBatch not told of %d calls, %d of them direct calls that ran Goexit: %v", left, r.silent, r.made)
	}
	synctest.Wait()
	for _, fl := range flushes {
		if err := <-fl.c; err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Flush: %v", err)
		}
	}
	s := f.Stats()
	if s.Queued != 0 || s.Weight != 0 || s.Busy != 0 || s.Lanes != 0 || s.Waiting != 0 || s.Parked != 0 {
		t.Fatalf("after Close: %+v", s)
	}
	if s.Batches+s.DirectCalls+uint64(r.retried) < uint64(r.calls) || s.Batches > uint64(r.calls) {
		t.Fatalf("%d calls made, stats say %+v", r.calls, s)
	}
	if s.Admitted < s.Dropped+s.Batches {
		t.Fatalf("stats: %+v", s)
	}
	if len(r.bad) > 0 {
		t.Fatal(r.bad)
	}
}

// resumeGone cancels every caller of the inputs of key's last failed call,
// then resumes key: with HoldPaused, a held batch whose callers all gave up
// (issue 45). A key that was paused must not be paused again by it, unless a
// call of the key was made since (a new failure may hold again).
func resumeGone(t *testing.T, r *ferryRun, callers []*fuzzCaller, key string, stopping bool) {
	r.mu.Lock()
	for _, id := range r.failed[key] {
		r.cancelled[r.owner[id]] = true
		callers[id].cancel()
	}
	r.mu.Unlock()
	synctest.Wait()
	was := slices.Contains(r.f.Paused(), any(key))
	r.mu.Lock()
	calls, closed := r.callsOf[key], r.closed
	r.resumed[key] = true
	r.mu.Unlock()
	r.f.Resume(key)
	synctest.Wait()
	again := slices.Contains(r.f.Paused(), any(key))
	r.mu.Lock()
	defer r.mu.Unlock()
	if was && again && r.callsOf[key] == calls && !closed && !r.closed && !stopping {
		t.Fatalf("key %s paused again at Resume with no call made since", key)
	}
}

// checkPaused checks, as step ends, that Paused lists keys in the order
// they paused: one first listed in an earlier step (its failure answered
// by then) before one first listed in a later step. A key resumed in the
// step (by a step, or OnPause's probe) counts anew. pausedSince holds, by
// key, the step it was first listed in.
func checkPaused(t *testing.T, r *ferryRun, pausedSince map[any]int, step int) {
	ps := r.f.Paused()
	r.mu.Lock()
	for k := range r.resumed {
		delete(pausedSince, k)
	}
	clear(r.resumed)
	r.mu.Unlock()
	listed := map[any]bool{}
	last := -1
	for _, k := range ps {
		if listed[k] {
			t.Fatalf("Paused lists %v twice: %v", k, ps)
		}
		listed[k] = true
		at, ok := pausedSince[k]
		if !ok {
			at = step
			pausedSince[k] = at
		}
		if at < last {
			t.Fatalf("Paused %v: %v, paused in step %d, after a key paused in step %d", ps, k, at, last)
		}
		last = at
	}
	for k := range pausedSince {
		if !listed[k] {
			delete(pausedSince, k)
		}
	}
}

// checkLetIn checks, as step ends, that the Submits waiting for room are let
// in in the order they began to wait, over every shard: one that began in
// an earlier step than one admitted has returned too (admitted, dropped,
// refused). Only Submits tell when they are let in: they return then. The
// bubble is still, so no room moves between shards. r.mu is held.
func checkLetIn(t *testing.T, r *ferryRun, callers []*fuzzCaller, step int) {
	for _, c := range callers {
		if _, back := r.back[c.x.ID]; c.how == submitOne && c.waited == 0 && !back {
			c.waited = step + 1
		}
	}
	for _, c := range callers {
		if admitted := r.back[c.x.ID]; c.waited == 0 || c.let || !admitted {
			continue
		}
		c.let = true
		for _, a := range callers {
			if _, back := r.back[a.x.ID]; a.waited > 0 && a.waited < c.waited && !back {
				t.Fatalf("Submit %d, waiting for room since step %d, let in before Submit %d, waiting since step %d",
					c.x.ID, c.waited-1, a.x.ID, a.waited-1)
			}
		}
	}
}

// checkFlushes checks the Flushes that have returned and keeps the others: a
// Flush that returned nil came after the answers of every caller before it,
// and after every done of theirs that blocks had returned.
func checkFlushes(t *testing.T, r *ferryRun, flushes []flushing, callers []*fuzzCaller) []flushing {
	var left []flushing
	for _, fl := range flushes {
		select {
		case err := <-fl.c:
			if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Flush: %v", err)
			}
			for _, c := range callers[:fl.before] {
				if err == nil && !c.done {
					t.Fatalf("Flush returned before input %d was answered", c.x.ID)
				}
				r.mu.Lock()
				back := c.gate == nil || r.returned[c.x.ID]
				r.mu.Unlock()
				if err == nil && !back {
					t.Fatalf("Flush returned before the done of Submit %d had returned", c.x.ID)
				}
			}
		default:
			left = append(left, fl)
		}
	}
	return left
}

// checkAnswer verifies what one Do returned: the right output, or an error
// the schedule could have caused.
func checkAnswer(t *testing.T, c *fuzzCaller, exited map[int]bool, cfg Config[any, in]) {
	var p *PanicError
	bad := strings.Contains("nuz", c.x.Key)
	switch err := c.a.err; {
	case bad != (err != nil && strings.Contains(err.Error(), "ferry: key of type")) && !errors.Is(err, context.Canceled):
		t.Fatalf("input %d with key %q: %v", c.x.ID, c.x.Key, err)
	case bad:
	case err == nil:
		if c.a.out != 10*c.x.ID {
			t.Fatalf("input %d got %d", c.x.ID, c.a.out)
		}
	case errors.Is(err, ErrRejected) && cfg.WaitForRoom && !c.never:
		t.Fatalf("input %d: %v, with WaitForRoom, though a room could hold it", c.x.ID, err)
	case errors.Is(err, ErrPaused) && !cfg.PauseOnError:
		t.Fatalf("input %d: %v without PauseOnError", c.x.ID, err)
	case errors.Is(err, ErrPaused) && !errors.Is(err, errFuzzCall) && !errors.As(err, &p) && !errors.Is(err, errGoexit) &&
		!errors.Is(err, ErrCallTimeout):
		t.Fatalf("input %d: %v, not the failure that paused its key", c.x.ID, err)
	case errors.Is(err, ErrPaused):
	case errors.Is(err, ErrRejected), errors.Is(err, ErrClosed), errors.Is(err, errFuzzCall),
		errors.As(err, &p), errors.Is(err, context.Canceled), errors.Is(err, errGoexit),
		errors.Is(err, ErrCallTimeout) && cfg.CallTimeout > 0, errors.Is(err, ErrAbandoned) && cfg.CancelAbandoned:
	case errors.Is(err, errCallerGone):
		if !exited[c.x.ID] {
			t.Fatalf("input %d: Do did not return, yet its call did not run Goexit", c.x.ID)
		}
	default:
		t.Fatalf("input %d: unexpected error %v", c.x.ID, err)
	}
}

// FuzzFerry runs random schedules through a whole ferry in a synctest bubble.
func FuzzFerry(f *testing.F) {
	for _, seed := range ferrySeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		bubble(t, func(t *testing.T) { runFerry(t, data) })
	})
}

var ferrySeeds = [][]byte{
	// batch 2, delay 1ms, 2 workers, room 4: inputs, time, a cancellation
	{1, 0, 1, 1, 3, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 4, 0, 2, 0, 2, 5, 3, 3, 1, 4, 1, 7, 0, 2, 2, 1, 4, 3},
	// direct calls, zero delay, failing and panicking calls, then Close
	{2, 3, 0, 0, 7, 0, 1, 0, 0, 0, 1, 0, 1, 1, 1, 0, 2, 1, 2, 2, 2, 0, 3, 3, 4, 2, 6, 0, 0, 4, 3},
	// weights near the limits, Shutdown with a short deadline
	{3, 4, 2, 2, 5, 9, 0, 0, 0, 0, 1, 3, 0, 4, 1, 0, 2, 2, 1, 0, 1, 4, 2, 4, 4, 3, 7, 6, 0, 1, 3},
	// long calls, many cancellations, Close while calls are in flight
	{0, 0, 1, 0, 7, 0, 0, 0, 0, 0, 0, 0, 12, 0, 1, 0, 0, 13, 3, 0, 3, 1, 4, 1, 0, 2, 1, 1, 14, 6, 0, 0, 4},
	// Retry (3 attempts, 1ms apart, leaders fail twice), direct calls: a fails and is retried while a waits
	{1, 0, 0, 1, 3, 0, 1, 128 | 8, 0, 1 + 2*4 + 16 + 64, 0, 0, 0, 1, 0, 0, 1, 0, 0, 1, 4, 1, 4, 1, 4, 1, 4, 3},
	// Retry with a huge backoff, then Close
	{1, 0, 0, 1, 3, 0, 0, 128 | 8, 0, 2 + 4 + 32 + 64, 0, 0, 0, 1, 0, 0, 1, 0, 0, 2, 4, 1, 6, 0, 0},
	// 1 worker, Retry with a MaxInt64 backoff: a's call fails and parks; b's call runs; a's
	// next input waits behind the park; Resume a; a fails and parks again; Close
	{0, 0, 0, 0, 3, 0, 0, 128, 0, 118, 0, 0, 0, 0, 0, 2, 4, 1, 0, 1, 0, 0, 0, 0, 4, 1,
		0, 0, 0, 0, 0, 0, 7, 12, 3, 0, 4, 1, 0, 0, 0, 0, 0, 2, 4, 1},
	// the same with CancelAbandoned: a's caller gives up during the park, which ends it
	{0, 0, 0, 0, 3, 0, 0, 129, 0, 118, 0, 0, 0, 0, 0, 2, 4, 1, 0, 0, 0, 0, 0, 0, 3, 0, 4, 1,
		0, 1, 0, 0, 0, 0, 4, 1},
	// direct calls: a runs, a waits and its batch runs Goexit, b's direct call runs Goexit; a again
	{0, 0, 0, 0, 3, 0, 1, 0, 0, 0, 0, 1, 0, 5, 0, 0, 1, 0, 16, 0, 1, 1, 0, 16, 4, 2, 0, 0, 1, 0, 0, 4, 3},
	// batch 2, delay 1ms, 2 workers: a batch that runs Goexit, then a batch that does not
	{1, 0, 1, 1, 3, 0, 0, 0, 0, 0, 0, 1, 0, 16, 0, 0, 1, 0, 0, 4, 2, 0, 0, 1, 0, 0, 4, 2},
	// batch 2, delay 1ms, 2 workers, OnBatch: a Submit whose done blocks, a Flush that makes
	// it due and waits for its done, a Do on another key meanwhile; the done returns; the
	// next done calls Close
	{1, 0, 1, 1, 3, 0, 0, 0, 0, 11, 0, 0, 1, 0, 0, 10, 0, 4, 1, 0, 1, 0, 1, 0, 0, 4, 1, 12, 0, 12, 1, 8, 2, 0, 1, 0, 0, 4, 2, 0, 0, 0, 1, 0, 0},
	// direct calls, 1 worker, OnBatch: the next OnBatch (of a direct call) calls Close
	// while a done blocks; Do after it gets ErrClosed
	{0, 0, 0, 0, 3, 0, 1, 0, 0, 11, 0, 0, 1, 0, 0, 12, 1, 0, 1, 0, 1, 0, 0, 4, 1, 0, 2, 0, 1, 0, 0},
	// 1 worker, zero delay, PauseOnError, no OnBatch: a's call takes 2ms and fails; a's next
	// input waits, and is answered ErrPaused; a Do of a is refused; Resume a; a again
	{0, 0, 0, 0, 3, 0, 0, 8, 1, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 4, 3, 1, 0, 0, 0, 0, 0, 12, 3, 0,
		2, 0, 0, 0, 0, 0, 4, 3},
	// batch 2, delay 1ms, 2 workers, room 1, WaitForRoom and PauseOnError: b and c wait for
	// room, b gives up, a DoMany of two waits behind c, time passes, a Submit waits
	{1, 0, 1, 1, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 1,
		9, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 4, 2, 4, 2, 4, 2, 8, 2, 0, 0, 0, 0, 4, 3},
}
