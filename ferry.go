// Package ferry batches calls per key.
//
// Many goroutines call [Ferry.Do] with one input each. Inputs wait in a lane
// per key and go to the user's [Call] in batches bounded by count, weight and
// a delay, with at most one call in flight per key, a fixed number of workers,
// keys taking turns and a bounded waiting room that rejects at once when full.
// One goroutine per shard owns the waiting room. docs/design.md lists the
// files in the order an input passes through them, and the design.
package ferry

import (
	"context"
	"errors"
	"hash/maphash"
	"reflect"
	"runtime"
	"time"
)

// Ferry batches calls per key. Create one with New; its zero value is not
// usable. All its methods are safe for concurrent use. callers: its methods
// run on the callers' goroutines, and talk to the loops only over channels.
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
	retry           func(K, int, error) (time.Duration, bool) // Config.Retry
	pauseOnError    bool
	waitForRoom     bool

	origin time.Time // of every shard's clock: see clock

	pools pools[K, I, O]

	shards []*shard[K, I, O] // a key's is shardOf(key)
	seed   maphash.Seed
	spare  room            // the room no shard holds, with several shards
	slots  tokens[K, I, O] // the slots for batches no shard holds, with several shards
}

// New returns a running Ferry that batches inputs for call. It returns an
// error naming the field if call or cfg.Key is nil, a limit is negative,
// MaxInFlightBatches is over MaxInFlightBatchesLimit or Shards over
// MaxInFlightBatches. Release it with Close.
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
		waitForRoom:     cfg.WaitForRoom,

		seed: maphash.MakeSeed(),
	}
	f.pools.init()
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
		go newLoop(s, lim, workers, shareOf(workers, n, i)).run()
	}
	return f, nil
}

// incSize is the capacity of the loop's inbound channel: the messages one
// wake-up of the loop may handle at once.
const incSize = 1024

// Flush makes every waiting input due now, without closing the ferry, and blocks until every
// input admitted before Flush was called has been answered, or ctx ends (then ctx's error).
//
// Answered includes a Submit's done having returned and OnBatch having been told, and the direct
// calls in flight when Flush is called are waited for too, with their OnBatch. Inputs admitted
// after it keep their own deadlines. It returns ErrClosed on a closed ferry, or if the ferry
// closes first. From inside a batched Call of f, a done, an OnBatch or a Retry it would wait for
// itself: it returns an error at once (from a done, OnBatch or Retry of any ferry: it cannot tell
// them apart). From a direct call it would wait for itself too: it must not be called there.
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
// (cause ErrClosed) and blocks until they return, every done and OnBatch in
// flight has returned and the ferry's goroutines have gone, so a Call that
// ignores its context holds it up. It returns nil, and may be called more
// than once and concurrently.
//
// From inside user code that a ferry runs (a Call, batched or direct, a
// done, an OnBatch or a Retry) Close cannot wait for that code: it starts the close and
// returns nil at once, and the ferry finishes closing once that code has
// returned; a Close from elsewhere, before or after, waits as usual. It tells
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
// done, an OnBatch or a Retry (of any ferry, as Flush) it would wait for
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
// shards it sums their snapshots, each taken in its turn, not at one instant:
// so in the sum Busy, Queued and Weight can briefly exceed their bounds
// (MaxInFlightBatches batched calls, MaxQueued, MaxQueuedWeight), as a slot or
// room that one shard counted when its turn came moves to another before the
// other's, though the ferry never exceeds them in fact. After Close it returns
// the final snapshot. It blocks only for the loops' turns.
func (f *Ferry[K, I, O]) Stats() Stats {
	var st Stats
	for _, s := range f.shards {
		st.add(s.stats())
	}
	return st
}

// Resume lets key's inputs in again after Config.PauseOnError paused it: an
// input of key given to Do, Submit or DoMany after Resume returns is admitted
// as usual (from the same goroutine, or one that saw Resume return). It is a
// no-op if key is not paused, or the ferry closed. It blocks only to hand
// the word to the key's shard (never for a call or any user code, so it may
// be called holding a lock of yours), and may be called from user code (a
// Call, a done, an OnBatch).
func (f *Ferry[K, I, O]) Resume(key K) {
	f.shardOf(key).send(msg[K, I, O]{op: opResume, key: key})
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
