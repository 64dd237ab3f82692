// Package ferry batches calls per key.
//
// Many goroutines call [Ferry.Do] with one input each. Inputs wait in a lane
// per key and go to the user's [Call] in batches bounded by count, weight and
// a delay. At most one call per key is in flight, a fixed number of workers
// make the calls, and keys take turns. The waiting room is bounded: when full
// it rejects at once, or with [Config.WaitForRoom] makes callers wait.
// One goroutine per shard owns the waiting room. docs/design.md lists the
// files in the order an input passes through them, and the design.
package ferry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"runtime"
	"slices"
	"time"
)

// Ferry batches calls per key. Create one with New; its zero value is not
// usable. All its methods are safe for concurrent use. callers: its methods
// run on the callers' goroutines, and talk to the loops only over channels.
type Ferry[K comparable, I, O any] struct {
	// Immutable after New.
	call   Call[K, I, O]
	key    func(I) K
	check  bool // keys of type K may be NaN or incomparable: see keycheck.Err
	weight func(I) int64
	rank   func(I) int64
	lim    limits

	onBatch         func(Batch[K])
	stamp           bool          // callers stamp their inputs' submission time, for deadlines
	timeout         time.Duration // Config.CallTimeout
	cancelAbandoned bool
	retry           func(K, int, error) (time.Duration, bool) // Config.Retry
	pauseOnError    bool
	onPause         func(K, error) // Config.OnPause
	hold            bool           // Config.HoldPaused
	pauses          counter        // with PauseOnError: the failures that pause keys, in order
	waitForRoom     bool
	keep            bool // Config.KeepContexts: see callers.go

	origin time.Time // of every shard's clock: see clock

	pools pools[K, I, O]

	shards []*shard[K, I, O] // a key's is shardOf(key)
	seed   maphash.Seed
	spare  room            // the room no shard holds, with several shards
	slots  tokens[K, I, O] // the slots for batches no shard holds, with several shards
}

// New returns a running Ferry that batches inputs for call. It returns an
// error naming the field if call or cfg.Key is nil, a limit is negative,
// MaxInFlightBatches is over MaxInFlightBatchesLimit, Shards over
// MaxInFlightBatches or OnPause or HoldPaused is set without PauseOnError. Release it with
// Close.
func New[K comparable, I, O any](call Call[K, I, O], cfg Config[K, I]) (*Ferry[K, I, O], error) {
	if call == nil {
		return nil, errors.New("ferry: call is nil")
	}
	lim, workers, err := cfg.limits()
	if err != nil {
		return nil, err
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
		retry:           cfg.Retry,
		pauseOnError:    cfg.PauseOnError,
		onPause:         cfg.OnPause,
		hold:            cfg.HoldPaused,
		waitForRoom:     cfg.WaitForRoom,
		keep:            cfg.KeepContexts,

		seed: maphash.MakeSeed(),
	}
	f.pools.init()
	if cfg.PauseOnError {
		f.pauses = make(counter, 1)
		f.pauses <- 0
	}
	base := context.WithValue(context.Background(), callKey{}, f)
	f.origin = time.Now()
	if n > 1 { // the shards share the room and the workers' slots
		f.spare, f.slots = newRoom(budget{lim.queued, sharedWeight(lim)}), newTokens[K, I, O](workers)
	}
	for range n {
		s := &shard[K, I, O]{f: f, inc: make(chan msg[K, I, O], incSize), done: make(chan struct{})}
		s.ctx, s.cancel = context.WithCancelCause(base)
		f.shards = append(f.shards, s)
	}
	for i, s := range f.shards {
		go newLoop(s, lim, workers, shareOf(workers, n, i), i).run()
	}
	return f, nil
}

// incSize is the capacity of the loop's inbound channel: the messages one
// wake-up of the loop may handle at once.
const incSize = 1024

// Do submits in and blocks until its call returns or ctx ends (then an error
// that errors.Is ctx.Err(); the caller of a direct call waits for its call,
// whose context ends with ctx). A full room is ErrRejected at once (with
// Config.WaitForRoom, Do waits for room, in line, until ctx ends), a closed
// ferry ErrClosed, a paused key (Config.PauseOnError) ErrPaused; a negative
// weight or a key unequal to itself is an error.
//
// When ctx ends first, Do returns once its shard's loop has said whether the
// input still waited: one message there and back, not the call's end. If it
// did, it is dropped and the error also matches ErrDropped (no call will see
// it: safe to send again). If a call had taken it, the error is ctx's alone,
// and the call may still succeed. If its answer had come meanwhile (a
// refusal as its key paused or the ferry closed, or its call's answer), Do
// returns that answer. So ctx's error alone always means that a call took
// the input. A ctx that had ended before Do admits nothing: ctx's error and
// ErrDropped.
//
// Close answers a waiting Do with ErrClosed, and one whose call is in flight
// with the call's answer, which, if the call fails once close has ended its
// context, matches ErrClosed as well as the call's error. See Call for contexts.
func (f *Ferry[K, I, O]) Do(ctx context.Context, in I) (O, error) {
	var zero O
	if ctx.Err() != nil {
		return zero, dropErr(ctx) // nothing admitted
	}
	w := f.pools.getDo()
	if err := w.prepare(f, in); err != nil {
		f.pools.putDo(w)
		return zero, err
	}
	if f.stamp {
		w.at = f.clock() // the submission time, as the design says: before the loop sees it
	}
	if f.keep {
		w.ctx = ctx
	}
	s := f.shardOf(w.key)
	if !s.send(msg[K, I, O]{op: opAdmit, w: w}) {
		f.pools.putDo(w)
		return zero, ErrClosed
	}
	switch r, err := await(s, w.c, ctx.Done()); err {
	case nil:
		return finishDo(ctx, s, w, r)
	case ErrClosed:
		return zero, ErrClosed // w is not pooled: the loop's last read may yet answer it
	default:
		return abandon(ctx, s, w)
	}
}

// Submit admits in and returns at once, without waiting for its output: nil when admitted,
// else the error Do would give at admission (ErrRejected, ErrClosed, ErrPaused, a negative
// weight, or ctx's error and ErrDropped if ctx had ended). With Config.WaitForRoom it blocks while the room is
// full, until room frees or ctx ends (then ctx's error, matching ErrDropped: not admitted, and
// done is never called). ctx bounds the admission alone: once Submit has returned nil the
// input is the ferry's, whatever ctx does. Then done (if not nil) is called exactly once, never
// on the loop goroutine. It gets the output or error after the input's call returns, ErrPaused
// if its key pauses first (Config.PauseOnError without HoldPaused), or ErrClosed if the ferry
// closes first. So ctx may be a request's context that ends as soon as the request is answered
// (a 202).
//
// Submit never makes a direct call. done runs on the worker that ran the call, after the
// batch's Do and DoMany callers are answered (its key is free by then). With MaxCallsPerKey 1, a
// key's dones run one at a time, in input order, never overlapping a later batch's: a later batch's
// call runs, and its Do callers are answered, but its dones (and OnBatch) wait. So a slow done
// holds its worker, and with it one of the MaxInFlightBatches, and the key's later completions
// (the worker of each later batch of the key with a done or OnBatch), not the key's calls. At
// close, or as its key pauses, done runs on a goroutine of the ferry, which Close waits for.
// done may call Submit. A panic in done is recovered and counted in Stats.DonePanics; done must
// not call runtime.Goexit. Close from done starts the close and returns at once, as it cannot
// wait for done (see Close); Flush and Shutdown from done return an error at once.
func (f *Ferry[K, I, O]) Submit(ctx context.Context, in I, done func(O, error)) error {
	if ctx.Err() != nil {
		return dropErr(ctx) // nothing admitted
	}
	w := f.pools.getSub()
	if err := w.prepare(f, in); err != nil {
		f.pools.putSub(w)
		return err
	}
	if w.done = done; done == nil {
		w.done = ignore[O]
	}
	if f.stamp {
		w.at = f.clock()
	}
	if f.keep {
		w.ctx = ctx // for its values: it may end before the call
	}
	s := f.shardOf(w.key)
	// The admission word comes on a channel that w holds only until it is
	// read: a waiting input keeps no channel. Once admitted, w is its
	// worker's, which may pool it before the word is read, so c is kept here.
	c := f.pools.getWord()
	w.c = c
	if !s.send(msg[K, I, O]{op: opAdmit, w: w}) {
		f.pools.putWord(c)
		f.pools.putSub(w)
		return ErrClosed
	}
	var cancel <-chan struct{} // with WaitForRoom, ctx bounds the wait for room
	if f.waitForRoom {
		cancel = ctx.Done()
	}
	r, err := await(s, c, cancel)
	left := err == errCancelled
	if left { // out of the line, unless let in or refused already
		s.send(msg[K, I, O]{op: opLeave, word: c})
		r, err = await(s, c, nil)
	}
	if err != nil { // neither w nor c is pooled: the loop's last read may yet answer
		return ErrClosed
	}
	if !left || r.err == errDropped { // the word was the loop's only send on c, or its answer to the leave
		f.pools.putWord(c)
	} // else the leave, which names c, is yet to be read: c is not pooled, or it might name another Submit
	switch r.err {
	case errAdmitted:
		return nil
	case errDropped:
		r.err = dropErr(ctx)
	}
	f.pools.putSub(w)
	return r.err
}

// DoMany submits ins in one admission and waits for all their outputs, in order. If the room
// cannot hold them all, none is admitted and it returns ErrRejected. With Config.WaitForRoom it
// waits until the room holds them all; if ctx ends first, the error is an Errors whose every
// entry matches ctx's error and ErrDropped: none was admitted. So too if ctx had ended before
// DoMany. If ctx ends first it returns once its shards have said which inputs still waited (one
// message to each and back), and drops those. If every other input has been answered by then,
// it returns as below, with ctx's error and ErrDropped for each input dropped. Else the error is
// ctx's, or an Errors with one entry per input if any input was dropped or answered without a
// call (ErrPaused, ErrClosed). The entry is ctx's error and ErrDropped for one dropped before
// any call took it (safe to send again), the answer for one answered without a call, and ctx's
// error alone for one a call took, which may yet succeed. Otherwise the error is nil when every
// input succeeded, or an Errors with one entry per input when any failed.
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
		return nil, dropErrs(ctx, len(ins)) // nothing admitted
	}
	g := f.pools.getGroup(len(ins))
	var total int64 // of all the parts: it may pass MaxInt64 though each part's does not
	var at time.Duration
	if f.stamp {
		at = f.clock()
	}
	for i, in := range ins {
		w := &g.ws[i]
		if err := w.prepare(f, in); err != nil {
			f.pools.putGroup(g)
			return nil, fmt.Errorf("%w (input %d)", err, i)
		}
		w.at, w.g, w.i = at, g, i
		if f.keep {
			w.ctx = ctx
		}
		g.join(w, f.shardOf(w.key))
		total = addWeight(total, w.weight)
	}
	if total < 0 { // every shard refuses it as heavier than any room, as one would
		for i := range g.parts {
			g.parts[i].total = -1
		}
	}
	g.outs = make([]O, len(ins))
	g.count.start(len(ins))
	if len(g.parts) > 1 && g.neverFits(f.lim, total) {
		g.merge(total)
	}
	got, err := g.admit(ctx, f, total)
	if err != nil {
		if err == errDropped { // ctx ended while it waited for room
			err = dropErrs(ctx, len(g.ws))
		}
		g.count.take()      // nothing was admitted: no one else holds it
		f.pools.putGroup(g) // unless a shard may yet answer into it
		return nil, err
	}
	if got > 0 {
		g.count.done(got) // the inputs of parts whose shard closed, answered ErrClosed here
	}
	select {
	case <-g.count.fin:
	case <-ctx.Done():
		return g.abandon(ctx, f)
	}
	g.count.take() // put back before fin by the last answer: empty again for the next use
	return g.answers(ctx, f)
}

// Flush makes every waiting input due now, without closing the ferry, and blocks until every
// input admitted before Flush was called has been answered, or ctx ends (then ctx's error).
//
// Answered includes a Submit's done having returned and OnBatch having been told, and the direct
// calls in flight when Flush is called are waited for too, with their OnBatch. Inputs admitted
// after it keep their own deadlines. It returns ErrClosed on a closed ferry, or if the ferry
// closes first. From inside a batched Call of f, a done, an OnBatch, an OnPause or a Retry it
// would wait for itself, so it returns an error at once. It does so from a done, OnBatch,
// OnPause or Retry of any ferry, as it cannot tell them apart. From a direct call it would wait
// for itself too: it must not be called there.
func (f *Ferry[K, I, O]) Flush(ctx context.Context) error {
	if v, _ := ctx.Value(callKey{}).(*Ferry[K, I, O]); v == f {
		return errFlushInCall
	}
	if inUserCode(false) {
		return errFlushInCallback
	}
	cs := make([]chan error, len(f.shards))
	for i, s := range f.shards { // every shard starts its round before any is waited for
		c := make(chan error, 1)
		cs[i] = c
		if !s.send(msg[K, I, O]{op: opFlush, flushed: c}) {
			return ErrClosed
		}
	}
	for i, s := range f.shards {
		reply, err := await(s, cs[i], ctx.Done())
		switch {
		case err == errCancelled:
			return ctxErr(ctx)
		case err != nil:
			return err
		case reply != nil:
			return reply
		}
	}
	return nil
}

// Close answers every waiting caller with ErrClosed, cancels calls in flight
// (cause ErrClosed) and blocks until they return, every done, OnBatch and
// OnPause in flight has returned and the ferry's goroutines have gone. So a
// Call that ignores its context holds it up. It returns nil, and may be
// called more than once and concurrently.
//
// From inside user code that a ferry runs (a Call, batched or direct, a
// done, an OnBatch, an OnPause or a Retry) Close cannot wait for that code.
// It starts the close and returns nil at once, and the ferry finishes
// closing once that code has returned. A Close from elsewhere, before or
// after, waits as usual. It tells
// this by the ferry's functions on its goroutine's stack, so it does the same
// inside the user code of another ferry.
func (f *Ferry[K, I, O]) Close() error {
	if f.spare != nil { // before any shard hears: see room.end
		f.spare.end(opClose)
	}
	for _, s := range f.shards { // every shard closes before any is waited for
		s.send(msg[K, I, O]{op: opClose})
	}
	if inUserCode(true) {
		return nil
	}
	for _, s := range f.shards {
		<-s.done
	}
	return nil
}

// Shutdown stops admitting inputs (Do gets ErrClosed), runs every waiting
// input without waiting for deadlines, then closes the ferry. It blocks until
// that is done (nil) or ctx ends (ctx's error, the shutdown going on: Close
// ends it; at once if ctx had ended). From inside a batched Call of f, a
// done, an OnBatch, an OnPause or a Retry (of any ferry, as Flush) it would wait for
// itself: it returns an error at once and starts nothing. From a direct call
// it must not be called.
func (f *Ferry[K, I, O]) Shutdown(ctx context.Context) error {
	if v, _ := ctx.Value(callKey{}).(*Ferry[K, I, O]); v == f {
		return errShutdownInCall
	}
	if inUserCode(false) {
		return errShutdownInCallback
	}
	if f.spare != nil { // before any shard hears: see room.end
		f.spare.end(opShutdown)
	}
	for _, s := range f.shards { // the shutdown starts, whether or not ctx has ended
		s.send(msg[K, I, O]{op: opShutdown})
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

// Stats returns a snapshot of the ferry, taken by its loops. With several
// shards it sums their snapshots, each taken in its turn, not at one
// instant. So in the sum Busy, Queued and Weight can briefly exceed their
// bounds (MaxInFlightBatches batched calls, MaxQueued, MaxQueuedWeight). The
// ferry never exceeds them in fact: a slot or room that one shard counted in
// its turn may move to another before the other's turn. After
// Close it returns the final snapshot. It blocks only for the loops' turns.
func (f *Ferry[K, I, O]) Stats() Stats {
	var st Stats
	for _, s := range f.shards {
		st.add(s.stats())
	}
	return st
}

// Resume lets key's inputs in again after Config.PauseOnError paused it: an
// input of key given to Do, Submit or DoMany after Resume returns is admitted
// as usual (from the same goroutine, or one that saw Resume return). It also
// ends key's batch backoff (Config.Retry) if its batch is parked: the batch
// is retried as soon as a worker is free; so too a held key's failed batch
// (Config.HoldPaused), before the inputs held behind it. A direct call's
// backoff runs on its caller and Resume does not end it. It is a no-op if key
// is neither paused nor parked, or the ferry closed. It blocks only to hand
// the word to the key's shard, never for a call or any user code, so it may
// be called holding a lock of yours. It may be called from user code (a
// Call, a done, an OnBatch, an OnPause, a Retry).
func (f *Ferry[K, I, O]) Resume(key K) {
	f.shardOf(key).send(msg[K, I, O]{op: opResume, key: key})
}

// Paused returns the keys paused now (Config.PauseOnError), in the order
// they paused, nil if none: a key resumed and paused again counts from its
// last pause. The order is that of their failures as their callers saw
// them, over every shard: a key whose failed call answered its callers
// before another key's call started comes first. It blocks only for the
// loops' turns (never for a call or user code), and may be called from
// user code (OnPause, say). After Close it returns the keys paused as the
// ferry ended.
func (f *Ferry[K, I, O]) Paused() []K {
	var all []pausedKey[K]
	for _, s := range f.shards {
		all = append(all, s.pausedKeys()...)
	}
	if len(all) == 0 {
		return nil
	}
	if len(f.shards) > 1 {
		slices.SortFunc(all, func(a, b pausedKey[K]) int { return cmp.Compare(a.order, b.order) })
	}
	keys := make([]K, len(all))
	for i, pk := range all {
		keys[i] = pk.key
	}
	return keys
}

// shardOf returns the shard of key k.
func (f *Ferry[K, I, O]) shardOf(k K) *shard[K, I, O] {
	if len(f.shards) == 1 {
		return f.shards[0]
	}
	return f.shards[maphash.Comparable(f.seed, k)%uint64(len(f.shards))]
}

// clock is the time since the ferry's origin. It reads the monotonic clock
// only, as time.Since does: half the cost of time.Now, which reads the wall
// clock too. Inside a synctest bubble it is the bubble's time.
func (f *Ferry[K, I, O]) clock() time.Duration { return time.Since(f.origin) }

// callKey is the context key under which a batched call's context holds its ferry.
type callKey struct{}
