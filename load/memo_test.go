package load

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a memo an id loaded is not fetched again within the request, found
// or not found; another request fetches it. Mutation: Load skipping the
// memo fails the count of fetches.
func TestMemoHits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		b.missing[9] = true
		l := newLoader(t, b, Config{})
		req := WithMemo(context.Background())
		for range 3 {
			v, err := l.Load(req, 1)
			require.NoError(t, err)
			assert.Equal(t, "v1", v)
			_, err = l.Load(req, 9)
			assert.ErrorIs(t, err, ErrNotFound)
		}
		vs, err := l.LoadMany(req, []int{1, 2, 1})
		require.NoError(t, err)
		assert.Equal(t, []string{"v1", "v2", "v1"}, vs)
		calls := b.seen()
		require.Len(t, calls, 3)
		assert.Equal(t, []int{1}, calls[0].ids)
		assert.Equal(t, []int{9}, calls[1].ids)
		assert.Equal(t, []int{2}, calls[2].ids) // LoadMany fetched only what the memo lacked

		_, err = l.Load(WithMemo(context.Background()), 1) // another request
		require.NoError(t, err)
		_, err = l.Load(context.Background(), 1) // no memo
		require.NoError(t, err)
		assert.Len(t, b.seen(), 5)
	})
}

// Loads of one request share an id that is loading: they wait for its
// fetch and make none. Without a memo the later Loads make a second fetch
// (MaxCallsPerKey 1: they wait in the lane while the first runs).
// Mutation: claim making a new entry for every id fails the memo case.
func TestMemoSharesInFlight(t *testing.T) {
	for _, memo := range []bool{true, false} {
		t.Run(map[bool]string{true: "memo", false: "none"}[memo], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBackend(true)
				l := newLoader(t, b, Config{MaxCallsPerKey: 1})
				req := context.Background()
				if memo {
					req = WithMemo(req)
				}
				first := load(req, l, 1)
				synctest.Wait()
				later := []chan answer{load(req, l, 1), load(req, l, 1)}
				synctest.Wait()
				many := make(chan []string, 1)
				go func() {
					vs, err := l.LoadMany(req, []int{1, 1})
					assert.NoError(t, err)
					many <- vs
				}()
				synctest.Wait()
				b.hold <- struct{}{}
				synctest.Wait()
				assert.Equal(t, "v1", now(t, first).v)
				if memo {
					for _, c := range later {
						assert.Equal(t, "v1", now(t, c).v)
					}
					assert.Equal(t, []string{"v1", "v1"}, <-many)
					assert.Len(t, b.seen(), 1)
					return
				}
				b.hold <- struct{}{}
				synctest.Wait()
				for _, c := range later {
					assert.Equal(t, "v1", now(t, c).v)
				}
				assert.Equal(t, []string{"v1", "v1"}, <-many)
				calls := b.seen()
				require.Len(t, calls, 2)
				assert.Equal(t, []int{1}, calls[1].ids) // the second fetch's repeats went as one id
			})
		})
	}
}

// A fetch's error is given to the memo's waiters, and not kept: the next
// Load fetches again. Mutation: settle keeping every error fails the second
// fetch.
func TestMemoErrorNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		l := newLoader(t, b, Config{})
		req := WithMemo(context.Background())
		down := errors.New("down")
		b.set(down, false)
		first := load(req, l, 1)
		synctest.Wait()
		waiter := load(req, l, 1)
		synctest.Wait()
		b.hold <- struct{}{}
		synctest.Wait()
		assert.ErrorIs(t, now(t, first).err, down)
		assert.ErrorIs(t, now(t, waiter).err, down)
		require.Len(t, b.seen(), 1)

		b.set(nil, false)
		again := load(req, l, 1)
		synctest.Wait()
		b.hold <- struct{}{}
		synctest.Wait()
		assert.Equal(t, "v1", now(t, again).v)
		assert.Len(t, b.seen(), 2)
	})
}

// A Load whose ctx ends leaves the id to the request's other Loads, which
// load it themselves; a waiter whose own ctx ends gets ctx's error.
// Mutation: await ignoring gaveUp gives the waiter the first's error.
func TestMemoLoaderGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		l := newLoader(t, b, Config{})
		req := WithMemo(context.Background())
		short, cancel := context.WithCancel(req)
		first := load(short, l, 1)
		synctest.Wait()
		waiter := load(req, l, 1)
		brief, cancelBrief := context.WithTimeout(req, time.Second)
		defer cancelBrief()
		impatient := load(brief, l, 1)
		synctest.Wait()
		time.Sleep(time.Second)
		synctest.Wait()
		assert.ErrorIs(t, now(t, impatient).err, context.DeadlineExceeded)
		pending(t, waiter)

		cancel() // the first's direct fetch ends with its ctx
		synctest.Wait()
		assert.ErrorIs(t, now(t, first).err, context.Canceled)
		pending(t, waiter)
		calls := b.seen()
		require.Len(t, calls, 2) // the waiter fetches it itself
		b.hold <- struct{}{}
		synctest.Wait()
		a := now(t, waiter)
		require.NoError(t, a.err)
		assert.Equal(t, "v1", a.v)
	})
}

// LoadMany with a memo loads what it lacks in one admission, waits for what
// another Load of the request is loading, and fails per id.
func TestMemoLoadMany(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(true)
		b.missing[3] = true
		l := newLoader(t, b, Config{MaxCallsPerKey: 1})
		req := WithMemo(context.Background())
		first := load(req, l, 1)
		synctest.Wait()
		type got struct {
			vs  []string
			err error
		}
		many := make(chan got, 1)
		go func() {
			vs, err := l.LoadMany(req, []int{2, 1, 3, 2})
			many <- got{vs, err}
		}()
		synctest.Wait()
		b.hold <- struct{}{} // the first's fetch of 1
		synctest.Wait()
		require.NoError(t, now(t, first).err)
		b.hold <- struct{}{} // LoadMany's of 2 and 3
		synctest.Wait()
		g := <-many
		var errs ferry.Errors
		require.ErrorAs(t, g.err, &errs)
		require.Len(t, errs, 4)
		assert.NoError(t, errs[0])
		assert.NoError(t, errs[1])
		assert.ErrorIs(t, errs[2], ErrNotFound)
		assert.NoError(t, errs[3])
		assert.Equal(t, []string{"v2", "v1", "", "v2"}, g.vs)
		calls := b.seen()
		require.Len(t, calls, 2)
		assert.ElementsMatch(t, []int{2, 3}, calls[1].ids)
	})
}

// Prime puts a value in the request's memo, unless the memo has the id;
// without a memo it does nothing.
func TestPrime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBackend(false)
		l := newLoader(t, b, Config{})
		assert.False(t, l.Prime(context.Background(), 1, "primed"))
		req := WithMemo(context.Background())
		assert.True(t, l.Prime(req, 1, "primed"))
		assert.False(t, l.Prime(req, 1, "again"))
		v, err := l.Load(req, 1)
		require.NoError(t, err)
		assert.Equal(t, "primed", v)
		vs, err := l.LoadMany(req, []int{1, 2})
		require.NoError(t, err)
		assert.Equal(t, []string{"primed", "v2"}, vs)
		assert.False(t, l.Prime(req, 2, "late")) // loaded already
		calls := b.seen()
		require.Len(t, calls, 1)
		assert.Equal(t, []int{2}, calls[0].ids)
	})
}

// A memo's entries are per loader and per scope. Mutations: tables keyed by
// one constant rather than the loader give the second loader the first's
// entry (a type mismatch, or its value); keyed without the scope, globex
// gets acme's primed value.
func TestMemoPerLoaderAndScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b1, b2 := newBackend(false), newBackend(false)
		l1 := newLoader(t, b1, Config{Scope: tenantOf})
		l2 := newLoader(t, b2, Config{Scope: tenantOf})
		req := WithMemo(context.Background())
		acme, globex := tenant(req, "acme"), tenant(req, "globex")
		assert.True(t, l1.Prime(acme, 1, "acme's"))
		v, err := l1.Load(acme, 1)
		require.NoError(t, err)
		assert.Equal(t, "acme's", v)
		v, err = l1.Load(globex, 1)
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
		v, err = l2.Load(acme, 1)
		require.NoError(t, err)
		assert.Equal(t, "v1", v)
		assert.Len(t, b1.seen(), 1)
		assert.Equal(t, "globex", b1.seen()[0].scope)
		assert.Len(t, b2.seen(), 1)
	})
}
