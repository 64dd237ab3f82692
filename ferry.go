// Package ferry batches calls per key.
//
// Many goroutines call [Ferry.Do] with one input each. Inputs wait in a lane
// per key and go to the user's [Call] in batches bounded by count, weight and
// a delay, with at most one call in flight per key, a fixed number of workers,
// keys taking turns and a bounded waiting room that rejects at once when full.
// One goroutine owns the waiting room; see the README for the design.
package ferry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Call runs one batch for one key and returns one output per input, in order.
// A batched call's context carries no caller's values and has no deadline
// unless CallTimeout; it ends on close (cause ErrClosed), after CallTimeout
// (ErrCallTimeout) or, with CancelAbandoned, once every caller has gone
// (ErrAbandoned). A direct call's context is its caller's, and ends on close too.
// inputs is reused after it returns. [Errors] fails some inputs; a panic fails
// all with a *PanicError. It must not call Close, Shutdown, Flush, or Do for its key.
type Call[K comparable, I, O any] func(ctx context.Context, key K, inputs []I) ([]O, error)

// Config configures a Ferry. Key is required; every other zero field means
// its documented default. A negative limit is invalid and New rejects it.
type Config[K comparable, I any] struct {
	Key    func(I) K     // required: the lane an input joins
	Weight func(I) int64 // nil: every input weighs 1. A negative weight is an error from Do
	Rank   func(I) int64 // nil: all 0. Lower ranks go first in a lane; ties keep arrival order

	MaxBatchSize       int           // inputs per call; 0: DefaultMaxBatchSize; < 0: invalid
	MaxBatchWeight     int64         // weight per call; 0: no limit; < 0: invalid
	MaxBatchDelay      time.Duration // how long a partial batch may wait; 0: none; < 0: invalid
	MaxInFlightBatches int           // batched calls in flight, across shards; 0: DefaultMaxInFlightBatches
	MaxQueued          int           // inputs waiting across all keys; 0: DefaultMaxQueued
	MaxQueuedWeight    int64         // their total weight; 0: no limit; < 0: invalid
	DirectCalls        bool          // with MaxBatchDelay 0, an idle key's caller makes the call itself

	OnBatch         func(Batch[K]) // nil: none. Called after every call, off the loop: see Batch
	CallTimeout     time.Duration  // 0: none. A call's context ends this long after it starts (ErrCallTimeout); < 0: invalid
	CancelAbandoned bool           // cancel a batched call (ErrAbandoned) once every caller of its batch has given up
	Shards          int            // loops, keys spread by hash, sharing the bounds; 0: GOMAXPROCS, at most MaxInFlightBatches; < 0: invalid
}

// Batch describes one finished call, for Config.OnBatch, which runs on the
// goroutine that made the call: after its callers are answered (Submits' done
// too) and before a direct call's Do returns. A panic in OnBatch is recovered
// and counted in Stats.OnBatchPanics; OnBatch must not call runtime.Goexit.
type Batch[K comparable] struct {
	Key    K
	Size   int           // inputs in the call
	Weight int64         // their total weight
	Wait   time.Duration // from the oldest input's submission (its admission, without MaxBatchDelay) to the call's start; 0 if Direct
	Took   time.Duration // the call's own duration
	Err    error         // the call's error: nil, an Errors, or any other error
	Direct bool          // a direct call, made by its caller
}

// Defaults for the zero fields of Config, and the most workers New accepts.
const (
	DefaultMaxBatchSize       = 64
	DefaultMaxInFlightBatches = 4
	DefaultMaxQueued          = 4096
	MaxInFlightBatchesLimit   = 1 << 16
)

// Stats is a snapshot of a Ferry. Its zero value is an idle, unused ferry.
type Stats struct {
	Queued int   // inputs waiting to be taken
	Weight int64 // their total weight
	Busy   int   // calls in flight, batched and direct
	Lanes  int   // keys with inputs waiting or a call in flight
	// Since New: inputs that joined the waiting room, inputs rejected for
	// room (ErrRejected), admitted inputs dropped because their caller gave
	// up, batched calls started, keys claimed for a direct call, and Submits'
	// done callbacks that panicked (the panic is recovered and dropped).
	Admitted, Rejected, Dropped, Batches, DirectCalls, DonePanics uint64
	// Since New: admitted inputs taken by batched calls; Rejected split by
	// reason (they sum to it): the room held MaxQueued inputs, its weight
	// would pass MaxQueuedWeight, or the inputs were heavier than the room
	// can ever hold; and OnBatch calls that panicked (recovered and dropped).
	Taken, RejectedFull, RejectedWeight, RejectedHeavy, OnBatchPanics uint64
}

// Errors lets a Call fail some inputs and not others: return it as the error, one entry per input;
// input i then gets Errors[i] if it is not nil, else outputs[i]. A nil Errors returned as the
// error means no error.
type Errors []error

// Error lists the inputs that failed, with their errors.
func (e Errors) Error() string {
	var b strings.Builder
	n := 0
	for i, err := range e {
		if err == nil {
			continue
		}
		if n > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "input %d: %v", i, err)
		n++
	}
	if n == 0 {
		return "ferry: no input failed"
	}
	return b.String()
}

// Unwrap returns the non-nil errors, for errors.Is and errors.As.
func (e Errors) Unwrap() []error {
	var errs []error
	for _, err := range e {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// PanicError is the error every input of a call gets when the Call panics.
// The ferry recovers the panic and goes on; the key is released as usual.
type PanicError struct {
	Value any    // what the Call panicked with
	Stack []byte // the stack of the panicking goroutine
}

// Error gives the panic value and the stack.
func (p *PanicError) Error() string {
	return fmt.Sprintf("ferry: call panicked: %v\n\n%s", p.Value, p.Stack)
}

// Unwrap returns the panic value if it is an error.
func (p *PanicError) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

var (
	// ErrRejected is returned by Do when the waiting room is full, by count
	// or weight, or when the input is heavier than the room can ever hold.
	ErrRejected = errors.New("ferry: rejected")
	// ErrClosed is returned by Do after Close or during Shutdown, and is the
	// cause of a call's context when the ferry closes. A call that fails once
	// its context has ended so gives each failed input an error that matches
	// it, with the call's own error still in the chain.
	ErrClosed = errors.New("ferry: closed")
	// ErrCallTimeout is the cause of a call's context after Config.CallTimeout;
	// a call that then fails gives inputs errors that match it, as ErrClosed.
	ErrCallTimeout = errors.New("ferry: call timed out")
	// ErrAbandoned is the cause of a batched call's context once every caller
	// of its batch has given up, with Config.CancelAbandoned; as ErrClosed.
	ErrAbandoned = errors.New("ferry: every caller gave up")
)

// Ferry batches calls per key. Create one with New; its zero value is not
// usable. All its methods are safe for concurrent use.
type Ferry[K comparable, I, O any] struct {
	// Immutable after New.
	call   Call[K, I, O]
	key    func(I) K
	check  bool // keys of type K may be NaN or incomparable: see badKey
	weight func(I) int64
	rank   func(I) int64
	lim    limits

	onBatch         func(Batch[K])
	stamp           bool          // callers stamp their inputs' submission time, for deadlines
	timeout         time.Duration // Config.CallTimeout
	cancelAbandoned bool

	origin time.Time // of every shard's clock: see clock

	pool   sync.Pool // of a Do's *waiter, whose reply channel is empty and will stay so
	subs   sync.Pool // of a Submit's *waiter, which has no channel: see Submit
	words  sync.Pool // of a Submit's chan result[O] for its admission word, empty
	groups sync.Pool // of *group that no one else holds

	shards []*shard[K, I, O] // a key's is shardOf(key)
	seed   maphash.Seed
	spare  chan budget   // the room no shard holds, with several: see budget
	slots  chan struct{} // the slots for batches no shard holds, with several: see slot
}

// New returns a running Ferry that batches inputs for call. It returns an
// error naming the field if call or cfg.Key is nil, a limit is negative,
// MaxInFlightBatches is over MaxInFlightBatchesLimit or Shards over
// MaxInFlightBatches. Release it with Close.
func New[K comparable, I, O any](call Call[K, I, O], cfg Config[K, I]) (*Ferry[K, I, O], error) {
	switch {
	case call == nil:
		return nil, errors.New("ferry: call is nil")
	case cfg.Key == nil:
		return nil, errors.New("ferry: Config.Key is nil")
	}
	for _, c := range []struct {
		name string
		v    int64
	}{
		{"MaxBatchSize", int64(cfg.MaxBatchSize)},
		{"MaxBatchWeight", cfg.MaxBatchWeight},
		{"MaxBatchDelay", int64(cfg.MaxBatchDelay)},
		{"MaxInFlightBatches", int64(cfg.MaxInFlightBatches)},
		{"MaxQueued", int64(cfg.MaxQueued)},
		{"MaxQueuedWeight", cfg.MaxQueuedWeight},
		{"CallTimeout", int64(cfg.CallTimeout)},
	} {
		if c.v < 0 {
			return nil, fmt.Errorf("ferry: Config.%s is negative: %d", c.name, c.v)
		}
	}
	if cfg.MaxInFlightBatches > MaxInFlightBatchesLimit {
		return nil, fmt.Errorf("ferry: Config.MaxInFlightBatches is %d, over MaxInFlightBatchesLimit %d",
			cfg.MaxInFlightBatches, MaxInFlightBatchesLimit)
	}
	lim := limits{
		batchSize:    cmp.Or(cfg.MaxBatchSize, DefaultMaxBatchSize),
		batchWeight:  cfg.MaxBatchWeight,
		delay:        cfg.MaxBatchDelay,
		queued:       cmp.Or(cfg.MaxQueued, DefaultMaxQueued),
		queuedWeight: cfg.MaxQueuedWeight,
		direct:       cfg.DirectCalls,
	}
	workers := cmp.Or(cfg.MaxInFlightBatches, DefaultMaxInFlightBatches)
	if cfg.Shards < 0 {
		return nil, fmt.Errorf("ferry: Config.Shards is negative: %d", cfg.Shards)
	}
	n, err := shardCount(cfg.Shards, workers, runtime.GOMAXPROCS(0))
	if err != nil {
		return nil, err
	}
	f := &Ferry[K, I, O]{
		call:   call,
		key:    cfg.Key,
		check:  mayBeBadKey(reflect.TypeFor[K]()),
		weight: cfg.Weight,
		rank:   cfg.Rank,
		lim:    lim,

		onBatch:         cfg.OnBatch,
		stamp:           cfg.MaxBatchDelay > 0,
		timeout:         cfg.CallTimeout,
		cancelAbandoned: cfg.CancelAbandoned,

		seed: maphash.MakeSeed(),
	}
	f.pool.New = func() any { return &waiter[K, I, O]{c: make(chan result[O], 1)} }
	f.subs.New = func() any { return new(waiter[K, I, O]) }
	f.words.New = func() any { return make(chan result[O], 1) }
	base := context.WithValue(context.Background(), callKey{}, f)
	f.origin = time.Now()
	if n > 1 { // the shards share the room and the workers' slots
		f.spare, f.slots = make(chan budget, 1), make(chan struct{}, workers)
		f.spare <- budget{lim.queued, lim.queuedWeight}
		for range workers {
			f.slots <- struct{}{}
		}
	}
	for range n {
		s := &shard[K, I, O]{f: f, inc: make(chan msg[K, I, O], incSize), done: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancelCause(base)
		f.shards = append(f.shards, s)
	}
	for i, s := range f.shards {
		go newLoop(s, lim, workers, share(workers, n, i)).run()
	}
	return f, nil
}

// incSize is the capacity of the loop's inbound channel: the messages one
// wake-up of the loop may handle at once.
const incSize = 1024

// Do submits in and blocks until its call returns or ctx ends (then an error
// that errors.Is ctx.Err(); the caller of a direct call waits for its call,
// whose context ends with ctx). A full room is ErrRejected at once, a closed
// ferry ErrClosed; a negative weight or a key unequal to itself is an error.
//
// Close answers a waiting Do with ErrClosed, and one whose call is in flight
// with the call's answer, which, if the call fails once close has ended its
// context, matches ErrClosed as well as the call's error. See Call for contexts.
func (f *Ferry[K, I, O]) Do(ctx context.Context, in I) (O, error) {
	var zero O
	if ctx.Err() != nil {
		return zero, ctxErr(ctx)
	}
	w := f.pool.Get().(*waiter[K, I, O])
	if err := f.prepare(w, in); err != nil {
		f.put(w)
		return zero, err
	}
	if f.stamp {
		w.at = f.clock() // the submission time, as the design says: before the loop sees it
	}
	s := f.shardOf(w.key)
	m := msg[K, I, O]{op: opAdmit, w: w}
	select {
	case s.inc <- m: // the fast path locks one channel
	default:
		select {
		case s.inc <- m:
		case <-s.done:
			f.put(w)
			return zero, ErrClosed
		}
	}
	// The loop answers every admission it reads, and once done is closed it
	// reads, at most once more, those already sent. So if done is not closed
	// now, w.c will be answered, and the wait needs no case for done.
	select {
	case <-s.done:
		select {
		case r := <-w.c:
			return s.answer(ctx, w, r)
		default:
			return zero, ErrClosed // w is not pooled: the loop's last read may yet answer it
		}
	default:
	}
	done := ctx.Done()
	if done == nil { // a context that never ends: no select
		return s.answer(ctx, w, <-w.c)
	}
	select {
	case r := <-w.c:
		return s.answer(ctx, w, r)
	case <-done:
		s.abandon(w)
		return zero, ctxErr(ctx)
	}
}

// prepare fills in w's input, key, weight and rank, and refuses a key that no
// lane can hold or a negative weight.
func (f *Ferry[K, I, O]) prepare(w *waiter[K, I, O], in I) error {
	w.in[0], w.key, w.weight, w.rank = in, f.key(in), 1, 0
	if f.check {
		if err := badKey(w.key); err != nil {
			return err
		}
	}
	if f.weight != nil {
		if w.weight = f.weight(in); w.weight < 0 {
			return fmt.Errorf("ferry: negative weight %d", w.weight)
		}
	}
	if f.rank != nil {
		w.rank = f.rank(in)
	}
	return nil
}

// Submit admits in and returns at once, without waiting for its output: nil when admitted,
// else the error Do would give at admission (ErrRejected, ErrClosed, a negative weight, ctx's
// error). Once admitted, done (if not nil) is called exactly once, never on the loop goroutine:
// with the output or error after the input's call returns; with ErrClosed if the ferry closes
// first; with ctx's error if ctx ends before the input is taken (the input is then dropped).
//
// Submit never makes a direct call. done runs on the worker that ran the call, after the
// batch's Do and DoMany callers are answered, so a slow done holds its worker; on a goroutine
// of the ferry that Close waits for at close; and on ctx's context.AfterFunc goroutine for ctx's
// error. A panic in done is recovered and counted in Stats.DonePanics; done must not call
// runtime.Goexit. Watching ctx costs one AfterFunc, and nothing if ctx.Done() is nil.
func (f *Ferry[K, I, O]) Submit(ctx context.Context, in I, done func(O, error)) error {
	if ctx.Err() != nil {
		return ctxErr(ctx)
	}
	w := f.subs.Get().(*waiter[K, I, O])
	if err := f.prepare(w, in); err != nil {
		f.putSub(w)
		return err
	}
	if w.done = done; done == nil {
		w.done = ignore[O]
	}
	if f.stamp {
		w.at = f.clock()
	}
	s := f.shardOf(w.key)
	if ctx.Done() != nil { // before the admission, so that the loop and workers see stop
		w.stop = context.AfterFunc(ctx, func() { s.withdraw(ctx, w) })
	}
	// The admission word comes on a channel that w holds only until it is
	// read: a waiting input keeps no channel. Once admitted, w is its
	// worker's, which may pool it before the word is read, so c and stop are
	// kept here.
	c := f.words.Get().(chan result[O])
	w.c = c
	stop := w.stop
	if !s.send(msg[K, I, O]{op: opAdmit, w: w}) {
		f.words.Put(c)
		f.unsubmit(w)
		return ErrClosed
	}
	var r result[O]
	select { // as in Do
	case <-s.done:
		select {
		case r = <-c:
		default: // neither w nor c is pooled: the loop's last read may yet answer
			if stop != nil {
				stop()
			}
			return ErrClosed
		}
	default:
		r = <-c
	}
	f.words.Put(c) // the word was the loop's only send on it
	switch r.err {
	case errAdmitted:
		return nil
	case errWithdrawn: // ctx ended as it was submitted; its watcher still holds w
		return ctxErr(ctx)
	}
	f.unsubmit(w)
	return r.err
}

// ignore is the done of a Submit that passed none.
func ignore[O any](O, error) {}

// unsubmit stops watching a Submit's ctx whose input was not admitted, and
// pools w unless the watcher has started, which still holds it.
func (f *Ferry[K, I, O]) unsubmit(w *waiter[K, I, O]) {
	if w.stop == nil || w.stop() {
		f.putSub(w)
	}
}

// putSub pools a Submit's waiter, which no one else holds.
func (f *Ferry[K, I, O]) putSub(w *waiter[K, I, O]) {
	*w = waiter[K, I, O]{}
	f.subs.Put(w)
}

// withdraw runs when a Submit's ctx ends: it drops the input if it still
// waits, and then calls done with ctx's error and tells the loop, which waits
// for that. If the input was taken, or the ferry closed first, done is called
// by what holds it.
func (s *shard[K, I, O]) withdraw(ctx context.Context, w *waiter[K, I, O]) {
	w.drop = make(chan result[O], 1)
	if !s.send(msg[K, I, O]{op: opDrop, w: w}) {
		return
	}
	select {
	case r := <-w.drop:
		if r.err != errDropped {
			return
		}
	case <-s.done:
		return
	}
	s.notify(w, result[O]{err: ctxErr(ctx)})
	s.inc <- msg[K, I, O]{op: opNotified, w: w}
}

// DoMany submits ins in one admission and waits for all their outputs, in order. If the room
// cannot hold them all, none is admitted and it returns ErrRejected. If ctx ends first it returns
// ctx's error at once, and the inputs not yet taken are dropped. Otherwise the error is nil when
// every input succeeded, or an Errors with one entry per input when any failed.
//
// An empty ins gives (empty, nil) at once; more inputs than MaxQueued, or weights that sum past
// MaxInt64, are ErrRejected; a negative weight or a bad key in any input refuses them all. The
// inputs of one key join its lane in slice order, and never make a direct call. Beside an
// Errors, the outputs of the inputs that succeeded are filled in.
func (f *Ferry[K, I, O]) DoMany(ctx context.Context, ins []I) ([]O, error) {
	if len(ins) == 0 {
		return []O{}, nil
	}
	if ctx.Err() != nil {
		return nil, ctxErr(ctx)
	}
	g := f.group(len(ins))
	var total int64 // of all the parts: it may pass MaxInt64 though each part's does not
	var at time.Duration
	if f.stamp {
		at = f.clock()
	}
	for i, in := range ins {
		w := &g.ws[i]
		if err := f.prepare(w, in); err != nil {
			f.putGroup(g)
			return nil, fmt.Errorf("%w (input %d)", err, i)
		}
		w.at, w.g, w.i = at, g, i
		g.join(w, f.shardOf(w.key))
		total = addWeight(total, w.weight)
	}
	if total < 0 { // every shard refuses it as heavier than any room, as one would
		for i := range g.parts {
			g.parts[i].total = -1
		}
	}
	g.outs = make([]O, len(ins))
	g.left <- len(ins)
	if len(g.parts) > 1 && f.never(g, total) {
		g.merge(total)
	}
	got, err := g.admit(f, total)
	if err != nil {
		<-g.left      // nothing was admitted: no one else holds it
		f.putGroup(g) // unless a shard may yet answer into it
		return nil, err
	}
	if got > 0 {
		g.answered(got) // the inputs of parts whose shard closed, answered ErrClosed here
	}
	select {
	case <-g.fin:
	case <-ctx.Done():
		return nil, f.abandonMany(ctx, g)
	}
	<-g.left // put back before fin by the last answer: empty again for the next use
	outs := g.outs
	var errs Errors
	for i, err := range g.errs {
		if err != nil {
			if errs == nil {
				errs = make(Errors, len(ins))
			}
			errs[i] = err
		}
	}
	f.putGroup(g)
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
		g.parts = append(g.parts, part[K, I, O]{s: s})
	}
	p := &g.parts[i]
	w.part = int32(i)
	p.n++
	p.heaviest = max(p.heaviest, w.weight)
	p.total = addWeight(p.total, w.weight)
}

// admit admits all of g's inputs, weighing total, or none. With one part it
// is one message. With several, their room is taken from the shards' shared
// budget in one step (borrow), or, if that lacks it, each shard first holds
// room for its part; then each shard lets its part in. The inputs of a part
// whose shard closed in between are answered ErrClosed here, and admit
// returns how many, for g.answered.
func (g *group[K, I, O]) admit(f *Ferry[K, I, O], total int64) (int, error) {
	if len(g.parts) == 1 {
		return 0, g.ask(0, opAdmitMany)
	}
	if !f.borrow(g, total) {
		for i := range g.parts {
			if err := g.ask(i, opHold); err != nil {
				for j := range i {
					_ = g.ask(j, opUnhold) // a shard that ended holds nothing
				}
				return 0, err
			}
		}
	}
	got, in := 0, 0
	for i := range g.parts {
		err := g.ask(i, opAdmitMany)
		if err == nil {
			in++
			continue
		}
		g.parts[i].gone = true
		for k := range g.ws {
			if w := &g.ws[k]; w.part == int32(i) {
				g.errs[w.i] = err
				got++
			}
		}
	}
	if in == 0 {
		return 0, ErrClosed
	}
	return got, nil
}

// ask sends o for part i of g to its shard's loop and waits for the loop's
// word, as Do waits for its admission's. It returns the part's error, or
// ErrClosed if the shard may have ended unheard.
func (g *group[K, I, O]) ask(i int, o op) error {
	p := &g.parts[i]
	if !p.s.send(msg[K, I, O]{op: o, w: &g.ws[0], worker: int32(i)}) {
		return ErrClosed
	}
	heard := true // the loop answers what it reads, and reads all sent before done
	select {
	case <-p.s.done:
		heard = false
	default:
	}
	for {
		var n int
		if heard {
			n = <-g.c
		} else {
			select {
			case n = <-g.c:
			default:
				g.lost = true // the loop's last read may yet answer it
				return ErrClosed
			}
		}
		if n == word(int32(i)) {
			return p.err
		} // else another part's word that no one waited for
	}
}

// answered counts n more of g's inputs as answered: it takes the count of
// those left from g.left and puts it back less n, so that answers from
// several workers wake the caller only once. Whoever answers the last sends
// on fin; the caller then takes the count back before it pools g, so it
// waits for that put. No answerer blocks while holding the count.
func (g *group[K, I, O]) answered(n int) {
	left := <-g.left - n
	g.left <- left
	if left == 0 {
		g.fin <- struct{}{}
	}
}

// abandonMany drops the inputs of g that still wait, for a DoMany whose ctx
// ended, and returns ctx's error. g goes back to the pool only if nothing can
// answer into it any more.
func (f *Ferry[K, I, O]) abandonMany(ctx context.Context, g *group[K, I, O]) error {
	err := ctxErr(ctx)
	dropped := 0
	for i := range g.parts {
		if g.parts[i].gone {
			continue // never admitted, and answered already
		}
		if g.ask(i, opDropMany) != nil {
			return err
		}
		dropped += g.parts[i].dropped
	}
	switch left := <-g.left; left {
	case 0: // all answered: the last sends on fin, if it has not yet
		<-g.fin
		f.putGroup(g)
	case dropped: // the rest were dropped: no answer is to come
		f.putGroup(g)
	default: // answers to come, into a group never pooled
		g.left <- left
	}
	return err
}

// group returns a group for n inputs, from the pool if one is big enough.
func (f *Ferry[K, I, O]) group(n int) *group[K, I, O] {
	if g, _ := f.groups.Get().(*group[K, I, O]); g != nil && cap(g.ws) >= n {
		g.ws, g.errs = g.ws[:n], g.errs[:n]
		return g
	}
	return &group[K, I, O]{
		ws: make([]waiter[K, I, O], n), errs: make([]error, n),
		c: make(chan int, len(f.shards)+1), left: make(chan int, 1), fin: make(chan struct{}, 1),
	}
}

func (f *Ferry[K, I, O]) putGroup(g *group[K, I, O]) {
	if g.lost {
		return
	}
	clear(g.ws)
	clear(g.errs)
	clear(g.parts)
	g.outs, g.parts = nil, g.parts[:0]
	f.groups.Put(g)
}

// Flush makes every waiting input due now, without closing the ferry, and blocks until every
// input admitted before Flush was called has been answered, or ctx ends (then ctx's error).
//
// Answered includes a Submit's done having returned, and the direct calls in flight when Flush
// is called are waited for too. Inputs admitted after it keep their own deadlines. It returns
// ErrClosed on a closed ferry, or if the ferry closes first; from inside a batched Call, an
// error. From a direct call, a done or OnBatch it would wait for itself: it must not be called there.
func (f *Ferry[K, I, O]) Flush(ctx context.Context) error {
	if v, _ := ctx.Value(callKey{}).(*Ferry[K, I, O]); v == f {
		return errFlushInCall
	}
	cs := make([]chan error, len(f.shards))
	for i, s := range f.shards { // every shard starts its round before any is waited for
		c := make(chan error, 1)
		cs[i] = c
		if !s.send(msg[K, I, O]{op: opFlush, cancel: func(err error) { c <- err }}) {
			return ErrClosed
		}
	}
	for i, s := range f.shards {
		select {
		case err := <-cs[i]:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return ctxErr(ctx)
		case <-s.done:
			select {
			case err := <-cs[i]:
				if err != nil {
					return err
				}
			default:
				return ErrClosed
			}
		}
	}
	return nil
}

// answer finishes a Do whose reply is r: a direct call if the key was claimed.
func (s *shard[K, I, O]) answer(ctx context.Context, w *waiter[K, I, O], r result[O]) (O, error) {
	if r.err == errClaimed {
		out, err := s.direct(ctx, w)
		s.f.put(w)
		return out, err
	}
	s.f.put(w)
	return r.out, r.err
}

// abandon drops w's input if it still waits, for a caller whose ctx ended,
// and waits for one word on w.c, so that an input whose caller has returned
// never joins a call after that. Only a dropped w goes back to the pool: in
// every other case the loop or a worker may still send on w.c.
func (s *shard[K, I, O]) abandon(w *waiter[K, I, O]) {
	select {
	case s.inc <- msg[K, I, O]{op: opDrop, w: w}:
	case <-s.done:
		return
	}
	select {
	case r := <-w.c:
		switch r.err {
		case errDropped:
			s.f.put(w)
		case errClaimed:
			s.inc <- msg[K, I, O]{op: opRelease, key: w.key, worker: direct}
		}
	case <-s.done:
	}
}

func (f *Ferry[K, I, O]) put(w *waiter[K, I, O]) {
	var zero waiter[K, I, O]
	c := w.c
	*w = zero
	w.c = c
	f.pool.Put(w)
}

// clock is the time since the ferry's origin. It reads the monotonic clock
// only, as time.Since does: half the cost of time.Now, which reads the wall
// clock too. Inside a synctest bubble it is the bubble's time.
func (f *Ferry[K, I, O]) clock() time.Duration { return time.Since(f.origin) }

// callKey is the context key under which a batched call's context holds its ferry.
type callKey struct{}

var (
	errShutdownInCall = errors.New("ferry: Shutdown from inside a Call would wait for that call")
	errFlushInCall    = errors.New("ferry: Flush from inside a Call would wait for that call")
)

// mayBeBadKey reports whether a value of type t may be unequal to itself (a
// NaN) or panic when compared (an interface holding a slice, map or func).
func mayBeBadKey(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128, reflect.Interface:
		return true
	case reflect.Array:
		return mayBeBadKey(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if mayBeBadKey(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// badKey is an error for a key that no lane can hold: one that is unequal to
// itself would never be found again, and one of an incomparable dynamic type
// panics in any map. Either is refused here, on the caller's goroutine.
func badKey[K comparable](k K) (err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("ferry: key of type %T is not comparable", k)
		}
	}()
	if k != k {
		return fmt.Errorf("ferry: key of type %T is not equal to itself (a NaN?)", k)
	}
	return nil
}

// ctxErr is ctx's error, with its cause when the cause says more.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// Close answers every waiting caller with ErrClosed, cancels calls in flight
// (cause ErrClosed) and blocks until they return and the ferry's goroutines
// have gone, so a Call that ignores its context holds it up. It returns nil,
// and may be called more than once and concurrently, but never from a Call.
func (f *Ferry[K, I, O]) Close() error {
	for _, s := range f.shards { // every shard closes before any is waited for
		select {
		case s.inc <- msg[K, I, O]{op: opClose}:
		case <-s.done:
		}
	}
	for _, s := range f.shards {
		<-s.done
	}
	return nil
}

// Shutdown stops admitting inputs (Do gets ErrClosed), runs every waiting
// input without waiting for deadlines, then closes the ferry. It blocks until
// that is done (nil) or ctx ends (ctx's error, the shutdown going on: Close
// ends it; at once if ctx had ended). From inside a batched call it is an error.
func (f *Ferry[K, I, O]) Shutdown(ctx context.Context) error {
	if v, _ := ctx.Value(callKey{}).(*Ferry[K, I, O]); v == f {
		return errShutdownInCall
	}
	for _, s := range f.shards { // the shutdown starts, whether or not ctx has ended
		select {
		case s.inc <- msg[K, I, O]{op: opShutdown}:
		case <-s.done:
		}
	}
	if ctx.Err() != nil { // ended before: not a coin toss with a quick shutdown
		return ctxErr(ctx)
	}
	for _, s := range f.shards {
		select {
		case <-s.done:
		case <-ctx.Done():
			return ctxErr(ctx)
		}
	}
	return nil
}

// Stats returns a snapshot of the ferry, taken by its loops (summed over
// shards, each taken in its turn). After Close it returns the final snapshot.
// It blocks only for the loops' turns.
func (f *Ferry[K, I, O]) Stats() Stats {
	var st Stats
	for _, s := range f.shards {
		st.add(s.stats())
	}
	return st
}
