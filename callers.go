package ferry

import "context"

// This file is what a call learns of its callers, with Config.KeepContexts:
// Callers and CallInfo, and callCtx, the call's context that carries them.
// The goroutine that makes a call (a worker, or a direct call's caller) makes
// its callCtx; the loop only passes each input's context along, untouched.

// Callers returns, inside a call of a ferry with Config.KeepContexts, the
// contexts its inputs were given with, one per input, in the order of the
// call's inputs. Each is the ctx of the input's Do, DoMany or Submit (a
// Submit's may have ended since: use its values only). A retry has those of
// the inputs it carries; a direct call has one, its caller's (the call's ctx
// derives from it already). ctx is the call's, or one derived from it. Elsewhere, or
// with KeepContexts off, it returns nil. The slice is the ferry's, valid
// until the call returns, as its inputs are. It reads ctx.Value and blocks
// on nothing.
func Callers(ctx context.Context) []context.Context {
	if c, _ := ctx.Value(callersKey{}).(*callCtx); c != nil {
		return c.callers
	}
	return nil
}

// CallInfo reports, inside a call of a ferry with Config.KeepContexts (ctx as
// for Callers), the call's attempt, 1 for the first and more for a retry (as
// Batch.Attempt; see Config.Retry), and whether it is a direct call
// (Config.DirectCalls). Elsewhere, or with KeepContexts off, it returns 0 and
// false. It reads ctx.Value and blocks on nothing.
func CallInfo(ctx context.Context) (attempt int, direct bool) {
	if c, _ := ctx.Value(callersKey{}).(*callCtx); c != nil {
		return c.attempt, c.direct
	}
	return 0, false
}

// callersKey is the key under which a callCtx answers its own Value.
type callersKey struct{}

// callCtx is the context of one attempt of a call, with KeepContexts: the
// context the call would have had, and what Callers and CallInfo read. It is
// made by the goroutine that makes the call, one per attempt (its one
// allocation), and never written after; callers is that goroutine's buffer,
// which it reuses once the call has returned.
type callCtx struct {
	context.Context
	callers []context.Context
	attempt int
	direct  bool
	one     [1]context.Context // a direct call's caller's: callers is one[:]
}

// Value returns c for callersKey, else the wrapped context's value.
func (c *callCtx) Value(key any) any {
	if _, ok := key.(callersKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// withCallers returns ctx, a batched call's, carrying attempt and the
// contexts of the inputs of batch that the attempt calls (those at idx, for
// a retry; all of them for idx nil), put in buf, which it returns. The
// contexts buf held past its new length are cleared, so that they are not kept.
func withCallers[K comparable, I, O any](ctx context.Context, batch []*waiter[K, I, O], idx []int, attempt int, buf []context.Context) (context.Context, []context.Context) {
	n := len(buf)
	buf = buf[:0]
	if idx == nil {
		for _, w := range batch {
			buf = append(buf, w.ctx)
		}
	} else {
		for _, i := range idx {
			buf = append(buf, batch[i].ctx)
		}
	}
	if len(buf) < n {
		clear(buf[len(buf):n])
	}
	return &callCtx{Context: ctx, callers: buf, attempt: attempt}, buf
}

// withCaller returns ctx, a direct call's, carrying attempt and its caller's
// context, caller.
func withCaller(ctx, caller context.Context, attempt int) context.Context {
	c := &callCtx{Context: ctx, attempt: attempt, direct: true}
	c.one[0] = caller
	c.callers = c.one[:]
	return c
}
