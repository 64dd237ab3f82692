package ferry

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Held and paused keys at their edges (issue 45).

// A Resume after every caller of a held batch gave up resumes the key: no
// call is left to make, so no new failure holds it again. OnPause is told
// once, Paused is empty, the input held behind the batch runs, and Flush
// returns. Mutation: again keeping the held batch's last error when no
// input is left (the key is held again at once, OnPause told twice, 2
// never called).
func TestHoldResumeAfterCallersGaveUp(t *testing.T) {
	bubble(t, func(t *testing.T) {
		o := newOutage("a")
		ev := newEvents()
		f := holdFerry(t, o, Config[string, in]{MaxInFlightBatches: 1,
			OnPause: func(key string, err error) { ev.add("OnPause %s %s", key, named(err)) }})
		defer f.Close()
		ctx := context.Background()
		short, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		d1 := do(f, short, in{Key: "a", ID: 1})
		advance(1500 * time.Millisecond) // called at 0, failed and held at 1s
		d2 := do(f, ctx, in{Key: "a", ID: 2})
		advance(time.Second) // 1's caller gave up at 2s
		a1 := got(t, d1)
		assert.ErrorIs(t, a1.err, context.DeadlineExceeded)
		assert.NotErrorIs(t, a1.err, ErrDropped, "taken by the held call")
		pending(t, d2)
		assert.Equal(t, []string{"a"}, f.Paused())

		o.set("a", false)
		f.Resume("a") // at 2.5s: 1 has no caller left, and is not called
		advance(500 * time.Millisecond)
		assert.Nil(t, f.Paused(), "resumed: nothing failed since")
		advance(time.Second) // 2 is called at 2.5s, answered at 3.5s
		assert.Equal(t, answer{20, nil}, got(t, d2))
		assert.Equal(t, []string{"1s OnPause a failed"}, ev.list(t))
		assert.Equal(t, []called{at("a", 0, 1), at("a", 2500*time.Millisecond, 2)}, o.got())
		fctx, fcancel := context.WithTimeout(ctx, time.Minute)
		defer fcancel()
		require.NoError(t, f.Flush(fctx))
		st := f.Stats()
		assert.Zero(t, st.Paused)
		assert.Zero(t, st.Parked)
	})
}

// Paused lists keys in the order their failures were answered, over any
// number of shards: here each key's Do returns its failure before the
// next key's call starts, and the keys are chosen so that their shards
// descend (a tie broken by shard would list them backwards). Under
// synctest every pause happens at one instant of fake time, so the clock
// cannot order them. Mutation: stamping pauses with the clock (or the
// loop's count) as before: the list comes out in shard order.
func TestPausedInAnswerOrderOverShards(t *testing.T) {
	for _, mode := range []string{"batched", "held", "direct"} {
		t.Run(mode, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				cfg := Config[string, in]{Key: inCfg.Key, Shards: 4, MaxInFlightBatches: 4, PauseOnError: true}
				switch mode {
				case "held":
					cfg.HoldPaused = true
				case "direct":
					cfg.DirectCalls = true
				}
				f, err := New(func(context.Context, string, []in) ([]int, error) { return nil, errBoom }, cfg)
				require.NoError(t, err)
				defer f.Close()
				var keys []string // one key per shard, from the last shard to the first
				for sh := len(f.shards) - 1; sh >= 0; sh-- {
					for i := 0; ; i++ {
						if k := fmt.Sprint("k", i); f.shardOf(k) == f.shards[sh] {
							keys = append(keys, k)
							break
						}
					}
				}
				ctx := context.Background()
				for _, k := range keys {
					if mode == "held" { // a held Do waits: its failure is answered as it is held
						d := do(f, ctx, in{Key: k, ID: 1})
						synctest.Wait()
						pending(t, d)
						continue
					}
					_, err := f.Do(ctx, in{Key: k, ID: 1})
					require.ErrorIs(t, err, errBoom)
				}
				assert.Equal(t, keys, f.Paused())
			})
		})
	}
}

// With HoldPaused the inputs of a failed batch that succeeded are answered
// as it is held: their Do returns, their Submit's done runs, and OnBatch
// reports the attempt (its last word: Retried false), all before OnPause;
// only the failed input waits for Resume, whose call is the next attempt,
// reported on its own. Mutations: the worker holding the whole batch (1
// and 3 answered only at Resume); the attempt reported Retried (as the
// batch is retried at Resume); OnPause before the batch's done.
func TestHoldPausedAnswersWhatSucceeded(t *testing.T) {
	bubble(t, func(t *testing.T) {
		ev := newEvents()
		down := true
		calls := 0
		call := func(_ context.Context, key string, ins []in) ([]int, error) {
			calls++
			time.Sleep(time.Second)
			errs := make(Errors, len(ins))
			failed := false
			for i, x := range ins {
				if x.ID == 2 && down {
					errs[i], failed = errBoom, true
				}
			}
			if failed {
				return tens(ins), errs
			}
			return tens(ins), nil
		}
		f, err := New(call, Config[string, in]{Key: inCfg.Key, Shards: 1, MaxBatchSize: 3,
			MaxBatchDelay: time.Hour, PauseOnError: true, HoldPaused: true,
			OnBatch: func(b Batch[string]) {
				ev.add("OnBatch %s size %d attempt %d retried %v %s", b.Key, b.Size, b.Attempt, b.Retried, named(b.Err))
			},
			OnPause: func(key string, err error) { ev.add("OnPause %s %s", key, named(err)) }})
		require.NoError(t, err)
		defer f.Close()
		ctx := context.Background()
		d1 := do(f, ctx, in{Key: "a", ID: 1})
		d2 := do(f, ctx, in{Key: "a", ID: 2})
		synctest.Wait()
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 3}, func(out int, err error) {
			ev.add("done 3 %d %s", out, named(err))
		}))
		advance(2 * time.Second) // [1 2 3] full: called at 0, 2 failed at 1s
		assert.Equal(t, answer{10, nil}, got(t, d1), "succeeded: answered as the batch is held")
		pending(t, d2)
		assert.Equal(t, []string{
			"1s done 3 30 ok",
			"1s OnBatch a size 3 attempt 1 retried false failed",
			"1s OnPause a failed",
		}, ev.list(t))
		assert.Equal(t, []string{"a"}, f.Paused())

		down = false
		f.Resume("a")
		advance(2 * time.Second)
		assert.Equal(t, answer{20, nil}, got(t, d2))
		assert.Equal(t, 2, calls)
		assert.Equal(t, "3s OnBatch a size 1 attempt 2 retried false ok", ev.list(t)[3])
		assert.Len(t, ev.list(t), 4)
	})
}

// A held key keeps at most an eighth of the room (MaxQueued/8 inputs, and
// of MaxQueuedWeight); beyond it, its later inputs get ErrPaused with the
// failure at once (with WaitForRoom too: they never wait). Other keys keep
// being admitted, over every shard, through a long outage. Mutations: no
// bound (the third input of a is held; b is rejected or waits once the room
// fills); the bound counted in the whole room (a's third input admitted).
func TestHeldKeyKeepsABoundedRoom(t *testing.T) {
	for _, wait := range []bool{false, true} {
		for _, shards := range []int{1, 2} {
			t.Run(fmt.Sprintf("wait=%v/shards=%d", wait, shards), func(t *testing.T) {
				bubble(t, func(t *testing.T) {
					o := newOutage("a")
					f := holdFerry(t, o, Config[string, in]{MaxQueued: 16, WaitForRoom: wait,
						Shards: shards, MaxInFlightBatches: 2, MaxBatchSize: 1})
					defer f.Close()
					ctx := context.Background()
					d0 := do(f, ctx, in{Key: "a", ID: 1})
					advance(2 * time.Second) // held at 1s
					var held []chan answer
					for i := range 2 { // 16/8: two inputs of a wait in its held lane
						held = append(held, do(f, ctx, in{Key: "a", ID: 2 + i}))
						synctest.Wait()
					}
					over := do(f, ctx, in{Key: "a", ID: 4})
					synctest.Wait()
					a := got(t, over)
					assert.ErrorIs(t, a.err, ErrPaused)
					assert.ErrorIs(t, a.err, errBoom)
					for _, d := range held {
						pending(t, d)
					}
					// Through an hour's outage, b's inputs keep coming, 14 at a time.
					for round := range 6 {
						var bs []chan answer
						for i := range 14 {
							bs = append(bs, do(f, ctx, in{Key: "b", ID: 100*round + i}))
						}
						advance(10 * time.Minute)
						for i, d := range bs {
							assert.Equal(t, answer{10 * (100*round + i), nil}, got(t, d), "round %d, b %d", round, i)
						}
					}
					st := f.Stats()
					assert.Equal(t, 2, st.Queued)
					assert.Zero(t, st.Rejected)
					o.set("a", false)
					f.Resume("a")
					advance(time.Hour)
					assert.Equal(t, answer{10, nil}, got(t, d0))
					for i, d := range held {
						assert.Equal(t, answer{10 * (2 + i), nil}, got(t, d))
					}
				})
			})
		}
	}
}
