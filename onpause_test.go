package ferry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Seeing and driving pauses (issue 37, item 3): Config.OnPause, Ferry.Paused.

// events records what user code saw, in order, with the bubble's time, and
// fails where it ran on the loop.
type events struct {
	start time.Time
	mu    sync.Mutex
	got   []string
	bad   []string
}

func newEvents() *events { return &events{start: time.Now()} }

func (e *events) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, fmt.Sprintf("%v ", time.Since(e.start))+fmt.Sprintf(format, args...))
	if fn := onLoop(); fn != "" {
		e.bad = append(e.bad, fn)
	}
}

func (e *events) list(t *testing.T) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	require.Empty(t, e.bad, "user code ran on the loop")
	return append([]string(nil), e.got...)
}

// named names an error for events.
func named(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrPaused) && errors.Is(err, errBoom):
		return "paused"
	case errors.Is(err, ErrClosed):
		return "closed"
	case errors.Is(err, errBoom):
		return "failed"
	}
	return err.Error()
}

// slowCall takes a second per call and fails every input whose ID is in
// fail, with errBoom.
func slowCall(fail ...int) Call[string, in, int] {
	return func(ctx context.Context, _ string, ins []in) ([]int, error) {
		time.Sleep(time.Second)
		for _, x := range ins {
			for _, id := range fail {
				if x.ID == id {
					return nil, errBoom
				}
			}
		}
		return tens(ins), nil
	}
}

// OnPause comes once per pause, off the loop, in the key's order of
// completions: after the failed batch's done and OnBatch (a slow done
// holds it), after the dones of the Submits that waited in the lane, and
// before the done and OnBatch of the key's next batch, which a Resume
// from OnPause lets in and which runs, but whose completions wait for
// OnPause to return. Its err is the call's. Mutations: notifyPaused not
// waiting for after (OnPause before 1's done), calling OnPause before the
// dones (before 2's), not closing fin after OnPause (3's done before
// OnPause returns), OnPause twice for one pause (told as pause reports no
// fresh pause), on the loop.
func TestOnPauseOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ev := newEvents()
		release := make(chan struct{})
		var f *Ferry[string, in, int]
		var err error
		f, err = New(slowCall(1), Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true,
			OnBatch: func(b Batch[string]) { ev.add("OnBatch %s %v", b.Key, named(b.Err)) },
			OnPause: func(key string, err error) {
				ev.add("OnPause %s %v paused:%v", key, named(err), errors.Is(err, ErrPaused))
				f.Resume(key)
				<-release
				ev.add("OnPause returns")
			},
		})
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		sub := func(id int, hold time.Duration) {
			require.NoError(t, f.Submit(ctx, in{Key: "a", ID: id}, func(_ int, err error) {
				time.Sleep(hold)
				ev.add("done %d %v", id, named(err))
			}))
		}
		sub(1, 2*time.Second) // its call takes 1s and fails; its done 2s more
		synctest.Wait()
		sub(2, 0) // waits in the lane: refused as the key pauses
		advance(3 * time.Second)
		sub(3, 0) // in after the Resume from OnPause: called at 3s, done at 4s
		advance(5 * time.Second)
		assert.Equal(t, []string{
			"3s done 1 failed", "3s OnBatch a failed", "3s done 2 paused", "3s OnPause a failed paused:false",
		}, ev.list(t), "3's completions wait for OnPause")
		close(release)
		synctest.Wait()
		assert.Equal(t, []string{
			"3s done 1 failed", "3s OnBatch a failed", "3s done 2 paused", "3s OnPause a failed paused:false",
			"8s OnPause returns", "8s done 3 ok", "8s OnBatch a ok",
		}, ev.list(t))
		assert.Equal(t, uint64(1), f.Stats().PausedOut)
	})
}

// A direct call that fails pauses its key and OnPause comes after the
// call's OnBatch; the Do of the failed call is answered meanwhile. Paused
// lists the key until Resume. Mutations: pause not telling OnPause for a
// direct call's release (no OnPause); OnPause not after the key's last
// completions (before OnBatch, which takes 1s).
func TestOnPauseDirect(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ev := newEvents()
		f, err := New(slowCall(1), Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true, DirectCalls: true,
			OnBatch: func(b Batch[string]) {
				time.Sleep(time.Second)
				ev.add("OnBatch %s %v direct:%v", b.Key, named(b.Err), b.Direct)
			},
			OnPause: func(key string, err error) { ev.add("OnPause %s %v", key, named(err)) },
		})
		require.NoError(t, err)
		defer f.Close()
		a := do(f, context.Background(), in{Key: "a", ID: 1})
		advance(2 * time.Second)
		assert.ErrorIs(t, got(t, a).err, errBoom)
		assert.Equal(t, []string{"2s OnBatch a failed direct:true", "2s OnPause a failed"}, ev.list(t))
		assert.Equal(t, []string{"a"}, f.Paused())
		f.Resume("a")
		assert.Nil(t, f.Paused())
	})
}

// A panic in OnPause is recovered and counted; the next pause of the key,
// after a Resume, is told again. Close from OnPause returns at once, and
// Flush and Shutdown from it return an error, as from an OnBatch. Close
// waits for OnPause. Mutations: onPause without recover (the test binary
// dies); the panic not counted; inUserCode not knowing onPause (Flush from
// OnPause runs, and Close from it waits for itself: the bubble deadlocks);
// end not waiting for the notifier (Close returns while OnPause runs).
func TestOnPausePanicsAndClose(t *testing.T) {
	bubble(t, func(t *testing.T) {
		var f *Ferry[string, in, int]
		told := make(chan []error, 2) // what the second OnPause's calls returned
		hold := make(chan struct{})
		calls := 0 // OnPause's own: they never overlap
		f, err := New(slowCall(1, 2), Config[string, in]{Key: inCfg.Key, Shards: 1, PauseOnError: true,
			OnPause: func(key string, err error) {
				if calls++; calls == 1 {
					panic("OnPause")
				}
				told <- []error{f.Flush(context.Background()), f.Shutdown(context.Background()), f.Close()}
				<-hold
			},
		})
		require.NoError(t, err)
		ctx := context.Background()
		_, err = f.Do(ctx, in{Key: "a", ID: 1})
		assert.ErrorIs(t, err, errBoom)
		synctest.Wait()
		assert.Equal(t, uint64(1), f.Stats().OnPausePanics)
		f.Resume("a")
		second := do(f, ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 3}, nil)) // refused in its done as the key pauses
		advance(time.Second)
		assert.ErrorIs(t, got(t, second).err, errBoom)
		require.Len(t, told, 1, "the second pause is told")
		errs := <-told
		assert.ErrorIs(t, errs[0], errFlushInCallback)
		assert.ErrorIs(t, errs[1], errShutdownInCallback)
		assert.NoError(t, errs[2], "Close from OnPause returns at once")
		closed := make(chan error, 1)
		go func() { closed <- f.Close() }()
		advance(time.Hour)
		assert.Empty(t, closed, "Close waits for OnPause")
		close(hold)
		synctest.Wait()
		require.Len(t, closed, 1)
		st := f.Stats()
		assert.Equal(t, uint64(1), st.OnPausePanics)
		assert.Equal(t, uint64(1), st.PausedOut)
	})
}

// Paused lists the keys paused, over shards, in the order their failures
// were stamped (see counter); a key resumed leaves it, and paused again goes
// last; after Close it gives the keys paused as the ferry ended. Mutations:
// Paused not merging (shard order: b, d, a, c); pauses.list keeping a key's
// first pause (a first at the end); Paused after Close returning nil (the
// final list lost). TestPausedInAnswerOrderOverShards orders pauses at one
// instant.
func TestPausedOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		f, err := New(slowCall(1), Config[string, in]{Key: inCfg.Key, Shards: 2, MaxInFlightBatches: 4, PauseOnError: true})
		require.NoError(t, err)
		h := &harness{t: t, f: f}
		s0, s1 := keysIn(h, 0, 2), keysIn(h, 1, 2)
		a, b, c, d := s1[0], s0[0], s1[1], s0[1]
		ctx := context.Background()
		fail := func(key string, at time.Duration) { // its call fails a second later
			go func() {
				time.Sleep(at)
				f.Do(ctx, in{Key: key, ID: 1})
			}()
		}
		assert.Nil(t, f.Paused())
		fail(a, 0)
		fail(b, time.Second)
		fail(c, 2*time.Second)
		fail(d, 3*time.Second)
		advance(4 * time.Second)
		assert.Equal(t, []string{a, b, c, d}, f.Paused())
		assert.Equal(t, 4, f.Stats().Paused)
		f.Resume(a)
		fail(a, 0)
		advance(time.Second)
		assert.Equal(t, []string{b, c, d, a}, f.Paused())
		require.NoError(t, f.Close())
		assert.Equal(t, []string{b, c, d, a}, f.Paused(), "as the ferry ended")
	})
}
