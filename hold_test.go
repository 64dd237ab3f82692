package ferry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pause that holds (issue 37, item 2): Config.HoldPaused.

// outage is a Call that takes a second and fails every input of a key that
// is down, recording each call with its time.
type outage struct {
	start time.Time
	mu    sync.Mutex
	down  map[string]bool
	calls []called
}

func newOutage(down ...string) *outage {
	o := &outage{start: time.Now(), down: map[string]bool{}}
	for _, k := range down {
		o.down[k] = true
	}
	return o
}

func (o *outage) call(ctx context.Context, key string, ins []in) ([]int, error) {
	o.mu.Lock()
	c := called{key: key, at: time.Since(o.start)}
	for _, x := range ins {
		c.ids = append(c.ids, x.ID)
	}
	o.calls = append(o.calls, c)
	down := o.down[key]
	o.mu.Unlock()
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if down {
		return nil, errBoom
	}
	return tens(ins), nil
}

func (o *outage) set(key string, down bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down[key] = down
}

func (o *outage) got() []called {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]called(nil), o.calls...)
}

func holdFerry(t *testing.T, o *outage, cfg Config[string, in]) *Ferry[string, in, int] {
	cfg.Key = inCfg.Key
	cfg.PauseOnError, cfg.HoldPaused = true, true
	if cfg.Shards == 0 {
		cfg.Shards = 1
	}
	f, err := New(o.call, cfg)
	require.NoError(t, err)
	return f
}

// at is a call seen at a time.
func at(key string, d time.Duration, ids ...int) called { return called{key: key, ids: ids, at: d} }

// A key that fails for good holds its failed inputs and its waiting ones,
// and admits later ones, all in order and none answered, until Resume:
// then the failed inputs are called first (a second attempt), then the
// rest; Do callers and Submits' done get their outputs, in order. Paused
// lists the key and OnPause is told once; Stats counts it paused and
// parked, its lane's inputs queued. Mutations: the worker not holding
// (rt.holds false: 1 answered errBoom, 2 and 3 ErrPaused); of refusing held
// keys (4 ErrPaused); take handing out the lane's items before the held
// batch (2, 3, 4 called before 1); Resume not unparking a hold (nothing
// called after 5s: the bubble deadlocks).
func TestHoldPausedOrder(t *testing.T) {
	bubble(t, func(t *testing.T) {
		o := newOutage("a")
		ev := newEvents()
		f := holdFerry(t, o, Config[string, in]{MaxInFlightBatches: 1,
			OnPause: func(key string, err error) { ev.add("OnPause %s %s", key, named(err)) }})
		defer f.Close()
		ctx := context.Background()
		sub := func(id int) {
			require.NoError(t, f.Submit(ctx, in{Key: "a", ID: id}, func(out int, err error) {
				ev.add("done %d %d %s", id, out, named(err))
			}))
		}
		sub(1) // called at once: fails at 1s, and holds
		synctest.Wait()
		d2 := do(f, ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		sub(3)
		advance(2 * time.Second)
		d4 := do(f, ctx, in{Key: "a", ID: 4}) // admitted while held
		b := do(f, ctx, in{Key: "b", ID: 5})  // other keys go on: the hold holds no worker
		advance(2 * time.Second)
		assert.Equal(t, answer{50, nil}, got(t, b))
		pending(t, d2)
		pending(t, d4)
		assert.Equal(t, []string{"1s OnPause a failed"}, ev.list(t))
		assert.Equal(t, []string{"a"}, f.Paused())
		st := f.Stats()
		assert.Equal(t, 1, st.Paused)
		assert.Equal(t, 1, st.Parked)
		assert.Equal(t, 3, st.Queued)
		assert.Zero(t, st.PausedOut)

		o.set("a", false)
		f.Resume("a") // at 4s
		advance(2 * time.Second)
		assert.Equal(t, answer{20, nil}, got(t, d2))
		assert.Equal(t, answer{40, nil}, got(t, d4))
		assert.Equal(t, []string{"1s OnPause a failed", "5s done 1 10 ok", "6s done 3 30 ok"}, ev.list(t))
		assert.Equal(t, []called{at("a", 0, 1), at("b", 2*time.Second, 5), at("a", 4*time.Second, 1), at("a", 5*time.Second, 2, 3, 4)}, o.got())
		assert.Nil(t, f.Paused())
		assert.Zero(t, f.Stats().Parked)
	})
}

// A held key's inputs take room as waiting inputs do (the held batch's,
// taken, take none): a full room rejects, or with WaitForRoom makes later
// inputs wait, until the Resume frees it. (A held lane keeps at most its
// share, 16/8 here: see TestHeldKeyKeepsABoundedRoom.) Mutations: share or
// letIn treating a held key as refusing (its input answered ErrPaused, or
// borrowing no room, over two shards); the held batch counted in the room
// (the third input rejected).
func TestHoldPausedRoom(t *testing.T) {
	for _, wait := range []bool{false, true} {
		for _, shards := range []int{1, 2} {
			t.Run(map[bool]string{false: "reject", true: "wait"}[wait]+map[int]string{1: "", 2: " over shards"}[shards], func(t *testing.T) {
				bubble(t, func(t *testing.T) {
					o := newOutage("a")
					f := holdFerry(t, o, Config[string, in]{MaxQueued: 16, WaitForRoom: wait, Shards: shards,
						MaxInFlightBatches: 2, MaxBatchDelay: time.Hour})
					defer f.Close()
					ctx := context.Background()
					first := do(f, ctx, in{Key: "a", ID: 1})
					advance(time.Hour + time.Second) // called at 1h, held at 1h+1s
					a2 := do(f, ctx, in{Key: "a", ID: 2})
					a3 := do(f, ctx, in{Key: "a", ID: 3})
					var bs []chan answer // b waits for its deadline, an hour away
					for i := range 14 {
						bs = append(bs, do(f, ctx, in{Key: "b", ID: 100 + i}))
					}
					synctest.Wait()
					assert.Equal(t, 16, f.Stats().Queued)
					full := do(f, ctx, in{Key: "c", ID: 4})
					synctest.Wait()
					if !wait {
						assert.ErrorIs(t, got(t, full).err, ErrRejected)
					} else {
						pending(t, full)
						assert.Equal(t, 1, f.Stats().WaitingForRoom)
					}
					pending(t, first)
					pending(t, a2)
					pending(t, a3)
					o.set("a", false)
					f.Resume("a")
					advance(2 * time.Second)
					assert.Equal(t, answer{10, nil}, got(t, first))
					pending(t, a2) // behind the held batch: at its deadline, 2h+
					advance(3 * time.Hour)
					assert.Equal(t, answer{20, nil}, got(t, a2))
					assert.Equal(t, answer{30, nil}, got(t, a3))
					if wait {
						assert.Equal(t, answer{40, nil}, got(t, full), "let in once a2 and a3 went")
					}
					for _, d := range bs {
						assert.NoError(t, got(t, d).err)
					}
				})
			})
		}
	}
}

// A Do still returns when its ctx ends while its key is held: one of the
// held batch with ctx's error alone (a call took it), and it is not called
// again; one waiting in the lane dropped (ErrDropped). At Resume only the
// others are called. Mutations: takeParked not leaving out the gone (1 is
// called again); drop not finding the lane's input (3 not ErrDropped).
func TestHoldPausedCallerGivesUp(t *testing.T) {
	bubble(t, func(t *testing.T) {
		o := newOutage("a")
		f := holdFerry(t, o, Config[string, in]{MaxBatchSize: 2, MaxBatchDelay: time.Millisecond})
		defer f.Close()
		ctx := context.Background()
		gone1, cancel1 := context.WithCancel(ctx)
		gone3, cancel3 := context.WithCancel(ctx)
		d1 := do(f, gone1, in{Key: "a", ID: 1})
		synctest.Wait()
		d2 := do(f, ctx, in{Key: "a", ID: 2})
		advance(2 * time.Second) // [1 2] called at 0, held at 1s
		d3 := do(f, gone3, in{Key: "a", ID: 3})
		d4 := do(f, ctx, in{Key: "a", ID: 4})
		synctest.Wait()
		cancel1()
		cancel3()
		synctest.Wait()
		a1 := got(t, d1)
		assert.ErrorIs(t, a1.err, context.Canceled)
		assert.NotErrorIs(t, a1.err, ErrDropped, "taken by the held call")
		assert.ErrorIs(t, got(t, d3).err, ErrDropped)
		o.set("a", false)
		f.Resume("a")
		advance(3 * time.Second)
		assert.Equal(t, answer{20, nil}, got(t, d2))
		assert.Equal(t, answer{40, nil}, got(t, d4))
		assert.Equal(t, []called{at("a", 0, 1, 2), at("a", 2*time.Second, 2), at("a", 3*time.Second, 4)}, o.got())
	})
}

// Close answers a held key's inputs ErrClosed: the held batch's with its
// failure too, the lane's alone, the Submits' done in order, the held
// batch's first. Shutdown does the same for held keys and runs the others'
// waiting inputs. Mutations: drain not readying a held lane (Close never
// returns: the bubble deadlocks); stopHolds not called (Shutdown never
// returns); stopHeld not setting stop (the held batch is called again at
// Shutdown); refuseLane's notifier not after the held batch's completions
// (3's done before 1's).
func TestHoldPausedCloseAndShutdown(t *testing.T) {
	for _, shutdown := range []bool{false, true} {
		t.Run(map[bool]string{false: "Close", true: "Shutdown"}[shutdown], func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				o := newOutage("a")
				ev := newEvents()
				f := holdFerry(t, o, Config[string, in]{MaxBatchDelay: time.Hour, MaxBatchSize: 2, MaxInFlightBatches: 2})
				ctx := context.Background()
				sub := func(key string, id int) {
					require.NoError(t, f.Submit(ctx, in{Key: key, ID: id}, func(out int, err error) {
						if id == 1 {
							time.Sleep(time.Second) // a slow done: 3's waits for it
						}
						ev.add("done %d %d %s paused:%v", id, out, named(err), errors.Is(err, ErrPaused))
					}))
				}
				sub("a", 1)
				synctest.Wait()
				d2 := do(f, ctx, in{Key: "a", ID: 2})
				advance(2 * time.Second) // [1 2] full, called at 0, held at 1s
				sub("a", 3)
				synctest.Wait()
				d4 := do(f, ctx, in{Key: "a", ID: 4})
				sub("b", 5) // waits for its deadline, an hour away
				synctest.Wait()
				if shutdown {
					require.NoError(t, f.Shutdown(ctx))
				} else {
					require.NoError(t, f.Close())
				}
				synctest.Wait() // the Dos have their answers, but may not have run since
				a2 := got(t, d2)
				assert.ErrorIs(t, a2.err, ErrClosed)
				assert.ErrorIs(t, a2.err, errBoom, "the failure too")
				a4 := got(t, d4)
				assert.ErrorIs(t, a4.err, ErrClosed)
				assert.NotErrorIs(t, a4.err, errBoom)
				want := []string{"3s done 1 0 closed paused:false", "3s done 3 0 closed paused:false", "3s done 5 0 closed paused:false"}
				if shutdown {
					want = []string{"3s done 1 0 closed paused:false", "3s done 3 0 closed paused:false", "3s done 5 50 ok paused:false"}
				}
				evs := ev.list(t)
				assert.ElementsMatch(t, want, evs)
				evs = slices.DeleteFunc(evs, func(e string) bool { return strings.Contains(e, "done 5") })
				assert.Equal(t, want[:2], evs, "1's done first")
				calls := []called{at("a", 0, 1, 2)}
				if shutdown {
					calls = append(calls, at("b", 2*time.Second, 5))
				}
				assert.Equal(t, calls, o.got())
			})
		})
	}
}

// A direct call that fails for good answers its caller, and holds the
// key's lane from then on: the input that joined meanwhile, and a later
// one, wait until Resume. Mutation: release not holding a direct call's
// failure (2 and 3 ErrPaused).
func TestHoldPausedDirect(t *testing.T) {
	bubble(t, func(t *testing.T) {
		o := newOutage("a")
		f := holdFerry(t, o, Config[string, in]{DirectCalls: true})
		defer f.Close()
		ctx := context.Background()
		d1 := do(f, ctx, in{Key: "a", ID: 1})
		synctest.Wait()
		d2 := do(f, ctx, in{Key: "a", ID: 2})
		advance(2 * time.Second)
		assert.ErrorIs(t, got(t, d1).err, errBoom)
		d3 := do(f, ctx, in{Key: "a", ID: 3})
		advance(time.Hour)
		pending(t, d2)
		pending(t, d3)
		assert.Equal(t, []string{"a"}, f.Paused())
		o.set("a", false)
		f.Resume("a")
		advance(time.Second)
		assert.Equal(t, answer{20, nil}, got(t, d2))
		assert.Equal(t, answer{30, nil}, got(t, d3))
	})
}

// New rejects OnPause and HoldPaused without PauseOnError, naming them.
func TestPauseOptionsNeedPauseOnError(t *testing.T) {
	call := newOutage().call
	_, err := New(call, Config[string, in]{Key: inCfg.Key, HoldPaused: true})
	assert.EqualError(t, err, "ferry: Config.HoldPaused is set without PauseOnError, which alone pauses keys")
	_, err = New(call, Config[string, in]{Key: inCfg.Key, OnPause: func(string, error) {}})
	assert.EqualError(t, err, "ferry: Config.OnPause is set without PauseOnError, which alone pauses keys")
}
