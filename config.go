package ferry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// This file holds what the user gives and gets back: the Call, Config and
// its validation into the core's limits, Batch, and Stats.

// Call runs one batch for one key and returns one output per input, in order.
// A batched call's context carries no caller's values (with
// Config.KeepContexts, Callers gives their contexts) and has no deadline
// unless CallTimeout; it ends on close (cause ErrClosed), after CallTimeout
// (ErrCallTimeout) or, with CancelAbandoned, once every caller has gone
// (ErrAbandoned). A direct call's context is its caller's, and ends on close too.
// inputs is reused after it returns. [Errors] fails some inputs; a panic fails
// all with a *PanicError. It must not call Shutdown, Flush, or Do for its key; Close from
// it starts the close and returns at once (see Ferry.Close).
type Call[K comparable, I, O any] func(ctx context.Context, key K, inputs []I) ([]O, error)

// Config configures a Ferry. Key is required; every other zero field means
// its documented default. A negative limit is invalid and New rejects it.
// Its one method runs in New, on the caller's goroutine.
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

	// MaxCallsPerKey is the most calls of one key in flight at once,
	// batched and direct together. With N > 1 a key's lane is taken again
	// while fewer than N of its calls are in flight, each batch still in rank
	// and arrival order. A direct call claims a key with no input waiting
	// and fewer than N calls in flight. So a slow call holds only its own
	// callers. A key's calls may then end in any order, and so may their
	// completions: done and OnBatch run as each call ends, and may overlap.
	// New refuses N > 1 with Retry or PauseOnError, which keep a key's order
	// through its failures. For reads: see the load package. 0: 1, one call
	// per key; < 0: invalid.
	MaxCallsPerKey int

	OnBatch         func(Batch[K]) // nil: none. Called after every call, off the loop: see Batch. Close from it returns at once; Flush, Shutdown fail
	CallTimeout     time.Duration  // 0: none. A call's context ends this long after it starts (ErrCallTimeout); < 0: invalid
	CancelAbandoned bool           // cancel a batched call (ErrAbandoned) once every Do and DoMany caller of its batch has given up; a Submit's input never gives up
	Shards          int            // loops, keys spread by hash, sharing the bounds; 0: GOMAXPROCS, at most MaxInFlightBatches; < 0: invalid

	// Retry decides, after a call for key fails (an error, a panic, or
	// CallTimeout; with an Errors, for the inputs it failed), whether to call
	// again: attempt is the attempt that failed (1 for the first), err its
	// error. With ok, the inputs still failed whose callers still wait are
	// called again, in their order, after backoff; the answers come once,
	// at the end. It runs on the worker (or the direct call's caller) whose
	// call failed; a panic in it is recovered as no retry. A batched call's
	// backoff holds no worker: the batch is parked in its key's lane until
	// the backoff is over (or Resume(key)), and the worker and its slot go
	// on with other keys' batches. A backoff holds the key: no other call
	// for it starts. The inputs that join its lane meanwhile wait, in the
	// room (within MaxQueued and MaxQueuedWeight, which the parked inputs,
	// in flight, do not count in), and go after the retried ones. A
	// direct call's caller retries it itself, holding the key. Close, or
	// (for a direct call) the caller's ctx ending, ends a backoff at once
	// with the last error (matching ErrClosed on close); with
	// CancelAbandoned, so does every caller of the batch giving up. Flush
	// and Shutdown wait for a backoff to run out. Close from Retry starts the
	// close and returns at once; Flush and Shutdown from it return an error
	// at once (as from a done). A backoff <= 0 retries at once; one past
	// 292 years is capped there. nil: never.
	Retry func(key K, attempt int, err error) (backoff time.Duration, ok bool)

	// PauseOnError pauses a key once a call for it fails for good: it
	// returned an error (for any of its inputs), a panic or CallTimeout,
	// after Retry if set, while its context still held. A call ended by
	// Close, by its direct caller's ctx or by CancelAbandoned pauses
	// nothing. The inputs of the failed call get its answers as usual. The
	// inputs waiting in the key's lane, and every input of the key given to
	// Do, Submit or DoMany after that, get an error matching ErrPaused and
	// the call's error, at once, until Resume(key). A paused key holds no
	// lane and takes no room; other keys go on. A paused key's waiting
	// Submits are told in their done, after the failed call's completions
	// and before any later one of the key. A failure pauses its key though
	// Retry never said no: when the callers of every input still failed gave
	// up between attempts, say; so watch for ErrPaused rather than Retry's
	// no to know a key is paused. false: a failure pauses nothing.
	PauseOnError bool

	// OnPause is told of each pause (PauseOnError) once: key, and the
	// call's error that paused it (as the last attempt's Batch.Err). It
	// runs off the loop, on a goroutine of the ferry, in the key's order of
	// completions. That is after the failed call's done and OnBatch have
	// returned and the key's waiting Submits are told ErrPaused in their
	// done, and before any later done or OnBatch of the key. (A Do or DoMany of the failed
	// call is answered as OnPause starts, and may return before or after
	// it.) So a Resume from it, or from a probe it starts, finds the key
	// paused.
	// A slow OnPause holds the key's later completions, not other keys;
	// Close and a Flush whose inputs the pause answered wait for it. A panic
	// in it is recovered and counted in Stats.OnPausePanics; it must not
	// call runtime.Goexit. Close from it starts the close and returns at
	// once; Flush and Shutdown from it return an error at once. New rejects
	// it without PauseOnError. nil: none.
	OnPause func(key K, err error)

	// HoldPaused makes a pause (PauseOnError) hold the key's inputs rather
	// than refuse them. A batch that fails for good keeps its failed inputs
	// whose callers still wait, and the key's lane its waiting inputs, in
	// order, parked (holding no worker) until Resume(key). Its other inputs,
	// which succeeded, are answered at once, with the reports of its
	// attempts so far (the last with Batch.Retried false), before OnPause.
	// Later inputs are admitted while the lane keeps at most an eighth of
	// the room (MaxQueued/8 inputs, one at least, and MaxQueuedWeight/8 of
	// weight). Beyond that they get ErrPaused at once, with WaitForRoom
	// too, so a long outage of one key never fills the room. At Resume the
	// failed inputs are called first (the next Batch.Attempt, Retry as
	// before), then the rest in order; a new failure holds again. A Do
	// still returns when its ctx ends, with ctx's error: its input, taken,
	// is not retried; one still in the lane is dropped, matching ErrDropped.
	// If no failed input has a caller left at Resume, none is called and
	// the key simply resumes. A Submit's done runs once its input's call
	// answers. Flush waits for held inputs as for any other: until Resume.
	// Close, and Shutdown, answer a held key's inputs ErrClosed, the failed
	// ones with their failure too. A direct call that fails for good
	// answers its caller and holds the key's lane from then on. Paused
	// lists held keys and OnPause is told of them. New rejects it without
	// PauseOnError. false: a pause refuses the key's inputs.
	HoldPaused bool

	// WaitForRoom makes an admission that the room cannot hold now wait
	// for room instead of failing with ErrRejected. Do, Submit and DoMany
	// block until room frees or ctx ends (then ctx's error, matching
	// ErrDropped too: nothing was admitted and nothing is held). They are
	// let in in the order they began to wait, over every shard. Within a
	// shard, while any waits, a new admission waits behind it even if it
	// would fit, so a waiting DoMany is not starved by single inputs. The
	// room freed goes to the shards' first waiting admissions in that order
	// too. A DoMany over several shards waits in its first input's shard,
	// its other inputs joining their lanes (in their shards' lines) once it
	// has the room. An input no room could ever hold (heavier than
	// MaxQueuedWeight, a DoMany of more inputs than MaxQueued) is still
	// ErrRejected at once. Close and Shutdown answer waiting admissions with
	// ErrClosed, on every shard, and the room they free lets none in. A
	// waiting admission costs its caller's goroutine, parked, and nothing
	// else. false: a full room is ErrRejected at once.
	WaitForRoom bool

	// KeepContexts keeps each input's caller's ctx (a Do's, a DoMany's, a
	// Submit's) with the input while it waits, for its call: inside a call,
	// Callers returns them and CallInfo the attempt and whether it is
	// direct. It costs one allocation per call (per attempt), none per input.
	// A direct call of a ferry without it, made inside a call of one with it,
	// sees that call's. false: a batched call's context carries nothing of
	// its callers, and Callers returns nil.
	KeepContexts bool
}

// limits validates cfg and returns the core's limits and the number of
// workers, or an error naming the field: a Key that is nil, a limit that is
// negative, MaxInFlightBatches over MaxInFlightBatchesLimit, OnPause or
// HoldPaused without PauseOnError.
func (cfg Config[K, I]) limits() (limits, int, error) {
	if cfg.Key == nil {
		return limits{}, 0, errors.New("ferry: Config.Key is nil")
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
		{"MaxCallsPerKey", int64(cfg.MaxCallsPerKey)},
	} {
		if c.v < 0 {
			return limits{}, 0, fmt.Errorf("ferry: Config.%s is negative: %d", c.name, c.v)
		}
	}
	if cfg.MaxInFlightBatches > MaxInFlightBatchesLimit {
		return limits{}, 0, fmt.Errorf("ferry: Config.MaxInFlightBatches is %d, over MaxInFlightBatchesLimit %d",
			cfg.MaxInFlightBatches, MaxInFlightBatchesLimit)
	}
	lim := limits{
		batchSize:    cmp.Or(cfg.MaxBatchSize, DefaultMaxBatchSize),
		batchWeight:  cfg.MaxBatchWeight,
		delay:        cfg.MaxBatchDelay,
		queued:       cmp.Or(cfg.MaxQueued, DefaultMaxQueued),
		queuedWeight: cfg.MaxQueuedWeight,
		direct:       cfg.DirectCalls,
		calls:        cmp.Or(cfg.MaxCallsPerKey, 1),
	}
	workers := cmp.Or(cfg.MaxInFlightBatches, DefaultMaxInFlightBatches)
	for _, c := range []struct {
		name string
		on   bool
	}{{"Retry", cfg.Retry != nil}, {"PauseOnError", cfg.PauseOnError}} {
		if c.on && lim.calls > 1 {
			return limits{}, 0, fmt.Errorf("ferry: Config.%s is set with MaxCallsPerKey %d: it keeps a key's order "+
				"through failures, which several calls per key in flight do not have", c.name, lim.calls)
		}
	}
	if cfg.OnPause != nil && !cfg.PauseOnError {
		return limits{}, 0, errors.New("ferry: Config.OnPause is set without PauseOnError, which alone pauses keys")
	}
	if cfg.HoldPaused && !cfg.PauseOnError {
		return limits{}, 0, errors.New("ferry: Config.HoldPaused is set without PauseOnError, which alone pauses keys")
	}
	if cfg.Shards < 0 {
		return limits{}, 0, fmt.Errorf("ferry: Config.Shards is negative: %d", cfg.Shards)
	}
	return lim, workers, nil
}

// Batch describes one finished call, for Config.OnBatch, which runs on the
// goroutine that made the call: after its callers are answered (Submits' done
// too) and before a direct call's Do returns. For one key, OnBatch and the
// Submits' done run one at a time, in the order of the calls, a direct
// call's too (not with MaxCallsPerKey > 1: as each call ends). A slow OnBatch holds that goroutine (a worker, and one of
// MaxInFlightBatches) and the key's later completions, not the key's calls;
// Flush and Close wait for it. A panic in OnBatch is recovered and counted in
// Stats.OnBatchPanics; OnBatch must not call runtime.Goexit. Close from
// OnBatch starts the close and returns at once, as it cannot wait for
// OnBatch (see Ferry.Close); Flush and Shutdown from it return an error at once.
type Batch[K comparable] struct {
	Key    K
	Size   int           // inputs in the call
	Weight int64         // their total weight
	Wait   time.Duration // from the oldest input's submission (its admission, without MaxBatchDelay) to the call's start; 0 if Direct
	Took   time.Duration // the call's own duration
	Err    error         // the call's error: nil, an Errors, or any other error
	Direct bool          // a direct call, made by its caller
	// Attempt is the call's attempt for its inputs: 1 for the first, more for
	// a retry (see Config.Retry) or a held batch resumed (Config.HoldPaused).
	// OnBatch is told of every attempt, in order, once the last is over, or
	// as the batch is held: the attempts after a Resume are told on their own.
	Attempt int
	// Retried says that Retry had this attempt's failed inputs called again:
	// its Err is not the call's last word. The last attempt's is false, and
	// so is that of an attempt whose failure held its key (HoldPaused).
	Retried bool
}

// Defaults for the zero fields of Config, and the most workers New accepts.
const (
	DefaultMaxBatchSize       = 64
	DefaultMaxInFlightBatches = 4
	DefaultMaxQueued          = 4096
	MaxInFlightBatchesLimit   = 1 << 16
)

// Stats is a snapshot of a Ferry. Its zero value is an idle, unused ferry.
// Its one method runs in Ferry.Stats, on the caller's goroutine.
type Stats struct {
	Queued int   // inputs admitted, in their lanes until a call takes them (not WaitingForRoom)
	Weight int64 // their total weight
	Busy   int   // calls in flight, batched and direct
	Lanes  int   // keys with inputs waiting or a call in flight
	// Since New: Admitted, the inputs that joined the waiting room; Rejected,
	// those rejected for room (ErrRejected); Dropped, admitted inputs dropped
	// as their caller gave up. Batches, the batched calls started;
	// DirectCalls, the keys claimed for a direct call; DonePanics, the
	// Submits' done callbacks that panicked (recovered and dropped).
	Admitted, Rejected, Dropped, Batches, DirectCalls, DonePanics uint64
	// Since New: Taken, the admitted inputs taken by batched calls.
	// RejectedFull, RejectedWeight and RejectedHeavy split Rejected by reason
	// (they sum to it): the room held MaxQueued inputs, its weight would pass
	// MaxQueuedWeight, or the inputs were heavier than the room can ever
	// hold. OnBatchPanics, the OnBatch calls that panicked (recovered and
	// dropped).
	Taken, RejectedFull, RejectedWeight, RejectedHeavy, OnBatchPanics uint64
	// Paused is the number of keys paused now (Config.PauseOnError), and
	// PausedOut, since New, the admitted inputs answered ErrPaused because
	// their key was paused while they waited (those refused at admission are
	// never admitted, and not counted).
	Paused    int
	PausedOut uint64
	// OnPausePanics is, since New, the OnPause calls that panicked
	// (recovered and dropped).
	OnPausePanics uint64
	// Parked is the number of keys whose failed batch waits out a backoff
	// now (Config.Retry), or is held until Resume (Config.HoldPaused). A
	// direct call's failure counts too: it holds the key's lane with no
	// input. Such a batch holds the key and no worker (or is due, and not
	// yet taken up again). Its inputs are in neither Queued nor Busy.
	Parked int
	// WaitingForRoom is the number of inputs waiting for room now
	// (Config.WaitForRoom): not admitted, and not in Queued.
	WaitingForRoom int
	// Waiting is WaitingForRoom, filled in with the same number.
	//
	// Deprecated: use WaitingForRoom, whose name does not read as Queued.
	Waiting int
}

// add adds t to s. Weight saturates at MaxInt64: each shard's is within it,
// their sum may not be.
func (s *Stats) add(t Stats) {
	s.Queued += t.Queued
	if s.Weight > math.MaxInt64-t.Weight {
		s.Weight = math.MaxInt64
	} else {
		s.Weight += t.Weight
	}
	s.Busy += t.Busy
	s.Lanes += t.Lanes
	s.Admitted += t.Admitted
	s.Rejected += t.Rejected
	s.Dropped += t.Dropped
	s.Batches += t.Batches
	s.DirectCalls += t.DirectCalls
	s.DonePanics += t.DonePanics
	s.Taken += t.Taken
	s.RejectedFull += t.RejectedFull
	s.RejectedWeight += t.RejectedWeight
	s.RejectedHeavy += t.RejectedHeavy
	s.OnBatchPanics += t.OnBatchPanics
	s.Paused += t.Paused
	s.PausedOut += t.PausedOut
	s.Parked += t.Parked
	s.OnPausePanics += t.OnPausePanics
	s.WaitingForRoom += t.WaitingForRoom
	s.Waiting += t.Waiting
}

// shardCount is how many shards a ferry with these totals gets: n, or by
// default one per processor (GOMAXPROCS, which procs is), at most one per
// worker. One loop is one core: past one processor a second loop took the
// headline workload from 1.9x dataloadgen's cost to 1.3x (see docs/performance.md).
func shardCount(n, workers, procs int) (int, error) {
	switch {
	case n == 0:
		return max(1, min(procs, workers)), nil
	case n > workers:
		return 0, fmt.Errorf("ferry: Config.Shards is %d, more than MaxInFlightBatches (%d): one worker per shard at least", n, workers)
	}
	return n, nil
}

// shareOf is shard i's part of total split n ways: total/n, and one more for
// the first total%n shards. The shares sum to total.
func shareOf(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}
