package ferry

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// This file holds every error the ferry returns, and ctxErr. The words the
// loop answers with inside the ferry (errClaimed, errDropped, ...) are in
// msg.go, beside the replies.

// Errors lets a Call fail some inputs and not others: return it as the error, one entry per input;
// input i then gets Errors[i] if it is not nil, else outputs[i]. A nil Errors returned as the
// error means no error. Its methods run on any goroutine.
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
// Its methods run on any goroutine.
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
	// ErrDropped is matched, beside ctx's error, by the error of a Do whose
	// ctx ended while its input waited, or before Do (likewise a DoMany's
	// input, a Submit). The input was dropped before any call took it, and
	// is safe to send again. A Do whose input a call had taken gets ctx's
	// error alone, as the call may still succeed: ctx's error alone always
	// means that.
	ErrDropped = errors.New("ferry: dropped before its call")
	// ErrPaused is matched, beside the failure that paused the key, by the
	// error of every input of a key paused with Config.PauseOnError. Those
	// that waited in its lane when its call failed for good get it (a Do's or
	// a DoMany's error, a Submit's done). So do those given to Do, Submit or
	// DoMany while it stays paused, at once (nothing is admitted), until
	// Resume. With Config.HoldPaused only inputs past the held lane's share
	// get it.
	ErrPaused = errors.New("ferry: key paused")
)

var (
	errShutdownInCall = errors.New("ferry: Shutdown from inside a Call would wait for that call")
	errFlushInCall    = errors.New("ferry: Flush from inside a Call would wait for that call")
)

// errGoexit fails the inputs of a batched call that ran runtime.Goexit.
var errGoexit = errors.New("ferry: call ran runtime.Goexit")

// ctxErr is ctx's error, with its cause when the cause says more.
func ctxErr(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// dropErr is the error of an input dropped before any call took it as ctx
// ended: ctx's error (see ctxErr), matching ErrDropped too.
func dropErr(ctx context.Context) error { return fmt.Errorf("%w: %w", ctxErr(ctx), ErrDropped) }
