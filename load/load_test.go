package load

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fetched is one fetch as the backend saw it.
type fetched struct {
	scope any
	ids   []int
	at    time.Duration // since the backend started, in the bubble's fake time
}

// backend is a fetch that records every call and answers "v<id>" for each
// id but those in missing. With hold set, each fetch waits for a token on
// hold (or its ctx) first; err, if set, is every fetch's error; boom makes
// it panic.
type backend struct {
	start   time.Time
	hold    chan struct{}
	missing map[int]bool

	mu    sync.Mutex
	calls []fetched
	err   error
	boom  bool
}

func newBackend(hold bool) *backend {
	b := &backend{start: time.Now(), missing: map[int]bool{}}
	if hold {
		b.hold = make(chan struct{})
	}
	return b
}

func (b *backend) fetch(ctx context.Context, ids []int) (map[int]string, error) {
	b.mu.Lock()
	b.calls = append(b.calls, fetched{ScopeOf(ctx), slices.Clone(ids), time.Since(b.start)})
	err, boom := b.err, b.boom
	b.mu.Unlock()
	if b.hold != nil {
		select {
		case <-b.hold:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	if boom {
		panic("fetch blew up")
	}
	if err != nil {
		return nil, err
	}
	m := make(map[int]string, len(ids))
	for _, id := range ids {
		if !b.missing[id] {
			m[id] = fmt.Sprintf("v%d", id)
		}
	}
	return m, nil
}

// set makes the next fetches fail with err, or panic with boom.
func (b *backend) set(err error, boom bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.err, b.boom = err, boom
}

func (b *backend) seen() []fetched {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// answer is what one Load returned.
type answer struct {
	v   string
	err error
}

// load starts l.Load(ctx, id) in a goroutine; its answer comes on the
// channel returned.
func load(ctx context.Context, l *Loader[int, string], id int) chan answer {
	c := make(chan answer, 1)
	go func() {
		v, err := l.Load(ctx, id)
		c <- answer{v, err}
	}()
	return c
}

// now requires that c has its answer already.
func now(t *testing.T, c chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	default:
		require.FailNow(t, "no answer yet")
		return answer{}
	}
}

// pending requires that c has no answer yet.
func pending(t *testing.T, c chan answer) {
	t.Helper()
	select {
	case a := <-c:
		require.FailNow(t, "answered early", "%+v", a)
	default:
	}
}

func newLoader(t *testing.T, b *backend, cfg Config) *Loader[int, string] {
	t.Helper()
	l, err := New(b.fetch, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// delayed is a config whose loads of one instant make one batch per scope:
// a delay, so no direct calls.
var delayed = Config{MaxBatchDelay: time.Millisecond}

// Loads of one instant go in one batch after the delay, and each gets its
// value. Mutation: New not passing MaxBatchDelay on (direct calls then)
// fails it.
func TestLoadBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		l := newLoader(t, b, delayed)
		ctx := context.Background()
		cs := []chan answer{load(ctx, l, 3), load(ctx, l, 1), load(ctx, l, 2)}
		synctest.Wait()
		for _, c := range cs {
			pending(t, c)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for i, id := range []int{3, 1, 2} {
			a := now(t, cs[i])
			require.NoError(t, a.err)
			assert.Equal(t, fmt.Sprintf("v%d", id), a.v)
		}
		calls := b.seen()
		require.Len(t, calls, 1)
		assert.ElementsMatch(t, []int{3, 1, 2}, calls[0].ids)
		assert.Equal(t, time.Millisecond, calls[0].at)
	})
}

// Equal ids in one batch reach fetch once, and every caller gets the
// value. Mutation: call passing every req's id (no seen map) fails the
// ids fetched.
func TestDuplicatesFetchedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		l := newLoader(t, b, delayed)
		ctx := context.Background()
		var cs []chan answer
		for _, id := range []int{7, 7, 8, 7, 8} {
			cs = append(cs, load(ctx, l, id))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for i, id := range []int{7, 7, 8, 7, 8} {
			a := now(t, cs[i])
			require.NoError(t, a.err)
			assert.Equal(t, fmt.Sprintf("v%d", id), a.v)
		}
		calls := b.seen()
		require.Len(t, calls, 1)
		assert.ElementsMatch(t, []int{7, 8}, calls[0].ids)
	})
}

// An id missing from the map is ErrNotFound for its callers alone.
// Mutation: call returning the first missing id's error for the whole
// batch fails the others.
func TestNotFoundPerID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		b.missing[2] = true
		l := newLoader(t, b, delayed)
		ctx := context.Background()
		c1, c2, c2b, c3 := load(ctx, l, 1), load(ctx, l, 2), load(ctx, l, 2), load(ctx, l, 3)
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for _, c := range []chan answer{c2, c2b} {
			a := now(t, c)
			require.ErrorIs(t, a.err, ErrNotFound)
			assert.ErrorContains(t, a.err, "id 2")
		}
		for i, c := range []chan answer{c1, c3} {
			a := now(t, c)
			require.NoError(t, a.err)
			assert.Equal(t, []string{"v1", "v3"}[i], a.v)
		}
		assert.Len(t, b.seen(), 1)
	})
}

// A fetch's error is every caller's of its batch, and a panic is a
// *ferry.PanicError; the loader goes on after both.
func TestFetchErrorAndPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		l := newLoader(t, b, delayed)
		ctx := context.Background()
		down := errors.New("database is down")
		b.set(down, false)
		cs := []chan answer{load(ctx, l, 1), load(ctx, l, 2)}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for _, c := range cs {
			assert.ErrorIs(t, now(t, c).err, down)
		}

		b.set(nil, true)
		cs = []chan answer{load(ctx, l, 1), load(ctx, l, 2)}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		for _, c := range cs {
			var pe *ferry.PanicError
			require.ErrorAs(t, now(t, c).err, &pe)
			assert.Equal(t, "fetch blew up", pe.Value)
		}

		b.set(nil, false)
		v, err := l.Load(ctx, 5)
		require.NoError(t, err)
		assert.Equal(t, "v5", v)

		direct := newLoader(t, b, Config{}) // a lone Load is a direct call: the same answers
		b.set(down, false)
		_, err = direct.Load(ctx, 6)
		assert.ErrorIs(t, err, down)
		b.set(nil, true)
		_, err = direct.Load(ctx, 6)
		var pe *ferry.PanicError
		assert.ErrorAs(t, err, &pe)
		assert.Equal(t, uint64(2), direct.Stats().DirectCalls)
	})
}

type tenantKey struct{}

func tenant(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, tenantKey{}, name)
}

func tenantOf(ctx context.Context) any { return ctx.Value(tenantKey{}) }

// Two tenants' loads of the same id in one instant reach two fetches, each
// with its own scope, under the defaults (direct calls) and with a delay
// (batched). Mutation: New's Key returning nil for every req fails both.
func TestScopesNeverShareAFetch(t *testing.T) {
	for _, cfg := range []Config{{}, delayed} {
		t.Run(fmt.Sprintf("delay=%v", cfg.MaxBatchDelay), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(false)
				cfg.Scope = tenantOf
				l := newLoader(t, b, cfg)
				acme, globex := tenant(context.Background(), "acme"), tenant(context.Background(), "globex")
				ca, cg := load(acme, l, 1), load(globex, l, 1)
				time.Sleep(cfg.MaxBatchDelay)
				synctest.Wait()
				require.NoError(t, now(t, ca).err)
				require.NoError(t, now(t, cg).err)
				calls := b.seen()
				require.Len(t, calls, 2)
				scopes := []any{calls[0].scope, calls[1].scope}
				assert.ElementsMatch(t, []any{"acme", "globex"}, scopes)
				for _, c := range calls {
					assert.Equal(t, []int{1}, c.ids)
				}
			})
		})
	}
}

// An idle scope's Load makes its fetch at once, in its own ctx; loads
// that come while that fetch runs wait and go together. The figures are
// those of MaxCallsPerKey 1, which this test sets. Mutation: New leaving
// DirectCalls off fails the direct count and the ctx's value.
func TestDirectThenBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		var vals []any
		var mu sync.Mutex
		l, err := New(func(ctx context.Context, ids []int) (map[int]string, error) {
			mu.Lock()
			vals = append(vals, ctx.Value(tenantKey{}))
			mu.Unlock()
			return b.fetch(ctx, ids)
		}, Config{MaxCallsPerKey: 1})
		require.NoError(t, err)
		defer l.Close()
		ctx := tenant(context.Background(), "caller's value")
		first := load(ctx, l, 1)
		synctest.Wait()
		later := []chan answer{load(ctx, l, 2), load(ctx, l, 3), load(ctx, l, 2)}
		synctest.Wait()
		require.Len(t, b.seen(), 1)
		b.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, "v1", now(t, first).v)
		b.hold <- struct{}{}
		synctest.Wait()
		for i, c := range later {
			assert.Equal(t, []string{"v2", "v3", "v2"}[i], now(t, c).v)
		}
		calls := b.seen()
		require.Len(t, calls, 2)
		assert.Equal(t, []int{1}, calls[0].ids)
		assert.ElementsMatch(t, []int{2, 3}, calls[1].ids)
		st := l.Stats()
		assert.Equal(t, uint64(1), st.DirectCalls)
		assert.Equal(t, uint64(1), st.Batches)
		assert.Equal(t, []any{"caller's value", nil}, vals) // a batched fetch has no caller's values
	})
}

// LoadMany answers in order, fetches equal ids once, and fails per id in a
// ferry.Errors.
func TestLoadMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		b.missing[4] = true
		l := newLoader(t, b, Config{})
		ctx := context.Background()
		vs, err := l.LoadMany(ctx, []int{3, 1, 3, 2})
		require.NoError(t, err)
		assert.Equal(t, []string{"v3", "v1", "v3", "v2"}, vs)
		calls := b.seen()
		require.Len(t, calls, 1)
		assert.ElementsMatch(t, []int{3, 1, 2}, calls[0].ids)

		vs, err = l.LoadMany(ctx, []int{1, 4, 2})
		var errs ferry.Errors
		require.ErrorAs(t, err, &errs)
		require.Len(t, errs, 3)
		assert.NoError(t, errs[0])
		assert.ErrorIs(t, errs[1], ErrNotFound)
		assert.NoError(t, errs[2])
		assert.Equal(t, []string{"v1", "", "v2"}, vs)

		vs, err = l.LoadMany(ctx, nil)
		require.NoError(t, err)
		assert.Empty(t, vs)
	})
}

// LoadMany is one admission: ids that the room cannot hold all are
// refused all, each with ErrRejected, and nothing is fetched; the error of
// a failed fetch is an Errors too. Mutation: perID returning err bare
// fails the ErrorAs.
func TestLoadManyOneAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		l := newLoader(t, b, Config{MaxQueued: 3})
		vs, err := l.LoadMany(context.Background(), []int{1, 2, 3, 4})
		var errs ferry.Errors
		require.ErrorAs(t, err, &errs)
		require.Len(t, errs, 4)
		for _, e := range errs {
			assert.ErrorIs(t, e, ferry.ErrRejected)
		}
		assert.Len(t, vs, 4)
		assert.Empty(t, b.seen())

		down := errors.New("down")
		b.set(down, false)
		_, err = l.LoadMany(context.Background(), []int{1, 2})
		require.ErrorAs(t, err, &errs)
		require.Len(t, errs, 2)
		for _, e := range errs {
			assert.ErrorIs(t, e, down)
		}
	})
}

// A Load whose ctx ends while its id waits returns ctx's error and its id
// is dropped; Close answers what waits with ErrClosed.
func TestCtxEndsAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		l := newLoader(t, b, Config{MaxCallsPerKey: 1})
		first := load(context.Background(), l, 1) // direct: holds the key
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		waiting := load(ctx, l, 2)
		synctest.Wait()
		pending(t, waiting)
		time.Sleep(time.Second)
		synctest.Wait()
		a := now(t, waiting)
		assert.ErrorIs(t, a.err, context.DeadlineExceeded)
		assert.ErrorIs(t, a.err, ferry.ErrDropped)
		b.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, "v1", now(t, first).v)
		assert.Len(t, b.seen(), 1) // 2 never reached a fetch

		held := load(context.Background(), l, 3)
		synctest.Wait()
		queued := load(context.Background(), l, 4)
		synctest.Wait()
		require.NoError(t, l.Close())
		synctest.Wait() // the Loads' goroutines send what they got
		assert.ErrorIs(t, now(t, held).err, ferry.ErrClosed)
		assert.ErrorIs(t, now(t, queued).err, ferry.ErrClosed)
		_, err := l.Load(context.Background(), 5)
		assert.ErrorIs(t, err, ferry.ErrClosed)
	})
}

// CallTimeout ends a slow fetch, failing its batch with ErrCallTimeout.
func TestCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		l := newLoader(t, b, Config{CallTimeout: 100 * time.Millisecond, MaxBatchDelay: time.Millisecond})
		c := load(context.Background(), l, 1)
		time.Sleep(101 * time.Millisecond)
		synctest.Wait()
		assert.ErrorIs(t, now(t, c).err, ferry.ErrCallTimeout)
	})
}

// New refuses a nil fetch and a negative bound.
func TestNewRefuses(t *testing.T) {
	_, err := New[int, string](nil, Config{})
	assert.ErrorContains(t, err, "fetch is nil")
	for _, cfg := range []Config{{MaxBatchSize: -1}, {MaxCallsPerKey: -1}, {MaxInFlightBatches: -1},
		{MaxQueued: -1}, {MaxBatchDelay: -1}, {CallTimeout: -1}, {Shards: -1}} {
		_, err := New(newBackend(false).fetch, cfg)
		assert.ErrorContains(t, err, "is negative", "%+v", cfg)
	}
}

// A scope that no key can be is an error from Load, with a memo or not.
func TestBadScope(t *testing.T) {
	b := newBackend(false)
	l := newLoader(t, b, Config{Scope: func(ctx context.Context) any { return ctx.Value(tenantKey{}) }})
	bad := context.WithValue(context.Background(), tenantKey{}, []string{"not comparable"})
	_, err := l.Load(bad, 1)
	assert.ErrorContains(t, err, "not comparable")
	_, err = l.Load(WithMemo(bad), 1)
	assert.ErrorContains(t, err, "not comparable")
	_, err = l.LoadMany(WithMemo(bad), []int{1, 2})
	assert.ErrorContains(t, err, "not comparable")
	assert.False(t, l.Prime(WithMemo(bad), 1, "x"))
	assert.Empty(t, b.seen())
}

// Under the default MaxCallsPerKey (2) an idle scope's first two Loads
// make a fetch each, at once; later ones wait in the lane and go as one
// batch when a fetch returns. Mutation: New leaving MaxCallsPerKey at 0
// (ferry's 1) fails the count.
func TestCallsPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		l := newLoader(t, b, Config{})
		const n = 7 // Loads, more than DefaultMaxCallsPerKey
		var cs []chan answer
		for id := range n {
			cs = append(cs, load(context.Background(), l, id))
			synctest.Wait()
		}
		calls := b.seen()
		require.Len(t, calls, DefaultMaxCallsPerKey)
		for i, c := range calls {
			assert.Equal(t, []int{i}, c.ids)
		}
		b.hold <- struct{}{} // one of them returns; the lane goes at once
		synctest.Wait()
		calls = b.seen()
		require.Len(t, calls, DefaultMaxCallsPerKey+1)
		var rest []int // the ids that waited
		for id := DefaultMaxCallsPerKey; id < n; id++ {
			rest = append(rest, id)
		}
		assert.ElementsMatch(t, rest, calls[DefaultMaxCallsPerKey].ids)
		for range DefaultMaxCallsPerKey {
			b.hold <- struct{}{}
		}
		synctest.Wait()
		for id, c := range cs {
			assert.Equal(t, fmt.Sprintf("v%d", id), now(t, c).v)
		}
	})
}

// A slow fetch holds its own callers alone: the scope's other Loads are
// fetched and answered while it runs. Mutation: New leaving MaxCallsPerKey
// at 0 (ferry's 1) fails it.
func TestSlowFetchHoldsItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := New(func(ctx context.Context, ids []int) (map[int]string, error) {
			if slices.Contains(ids, 1) {
				time.Sleep(2 * time.Second)
			}
			m := map[int]string{}
			for _, id := range ids {
				m[id] = fmt.Sprintf("v%d", id)
			}
			return m, nil
		}, Config{})
		require.NoError(t, err)
		defer l.Close()
		slow := load(context.Background(), l, 1)
		synctest.Wait()
		start := time.Now()
		for id := 2; id < 6; id++ {
			v, err := l.Load(context.Background(), id)
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("v%d", id), v)
		}
		assert.Zero(t, time.Since(start))
		pending(t, slow)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, "v1", now(t, slow).v)
	})
}
