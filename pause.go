package ferry

import (
	"context"
	"fmt"
)

// This file is the paused keys (Config.PauseOnError): a key whose call failed
// for good is paused by the loop as it handles the call's release, which a
// worker (or a direct call's caller) sends before it answers its callers, so
// that their next input of the key finds it paused. The key's waiting inputs
// are answered then, and every later one at its admission, with the error
// pauses keeps for the key, until Resume. A paused key holds no lane: what
// it costs is one entry here.

// pauses is a loop's paused keys and the error each answers its inputs
// with, which matches ErrPaused and the failure that paused the key. It is
// pure bookkeeping: no channels, no clock, no user code. loop: its methods
// run on the shard's loop goroutine.
type pauses[K comparable] struct {
	keys map[K]error // nil until a key is paused
	peak int         // most keys since the map was rebuilt: see shrink
}

// pause pauses key after its call failed with failure, and returns the
// error its inputs get. A key paused already keeps its first error.
func (p *pauses[K]) pause(key K, failure error) error {
	if err, ok := p.keys[key]; ok {
		return err
	}
	if p.keys == nil {
		p.keys = make(map[K]error)
	}
	err := fmt.Errorf("%w: %w", ErrPaused, failure)
	p.keys[key] = err
	p.peak = max(p.peak, len(p.keys))
	return err
}

// of returns the error of key if it is paused.
func (p *pauses[K]) of(key K) (error, bool) {
	if len(p.keys) == 0 { // the common case: one length check
		return nil, false
	}
	err, ok := p.keys[key]
	return err, ok
}

// resume lets key's inputs in again, and reports whether it was paused.
func (p *pauses[K]) resume(key K) bool {
	if _, ok := p.keys[key]; !ok {
		return false
	}
	delete(p.keys, key)
	p.keys = shrink(p.keys, &p.peak)
	return true
}

// count is the number of keys paused; none for a nil p.
func (p *pauses[K]) count() int {
	if p == nil {
		return 0
	}
	return len(p.keys)
}

// pauseNote is a paused key's notifier in flight: the goroutine that calls
// the done of the Submits that waited in the key's lane as it was paused
// (see notifyPaused), and what it owes the Flush round in progress, told by
// its opNotified. It has no methods; the loop owns it.
type pauseNote[K comparable] struct {
	key K
	owe owed
}

// notifyPaused calls the done of the Submits ws, which waited in a paused
// key's lane, with err, in their order, once the key's earlier completions
// (after, if not nil) are over; then it closes fin, which the key's next
// completions wait for, and tells the loop. It runs on a goroutine of its
// own, for the loop, which waits for it.
func notifyPaused[K comparable, I, O any](s *shard[K, I, O], ws []*waiter[K, I, O], err error, after, fin chan struct{}) {
	if after != nil {
		<-after
	}
	for _, w := range ws {
		callDone(s, w, result[O]{err: err})
	}
	close(fin)
	s.send(msg[K, I, O]{op: opNotified, fin: fin})
}

// failedForGood is, with PauseOnError, the failure that pauses the key of a
// call that ended with errs and all (see verdict), after its retries, while
// its context ctx held: nil if no input failed, or if ctx ended (Close, the
// direct call's caller or CancelAbandoned ended it: no fault of the key).
func failedForGood[K comparable, I, O any](f *Ferry[K, I, O], ctx context.Context, errs Errors, all error) error {
	if !f.pauseOnError || ctx.Err() != nil {
		return nil
	}
	if all != nil {
		return all
	}
	for _, err := range errs {
		if err != nil {
			return errs
		}
	}
	return nil
}
