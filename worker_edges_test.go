package ferry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The workers' edges (issue 22, items 5 to 10): a slow done or OnBatch holds
// its own worker and no other; Close, Flush and Shutdown from user code the
// ferry runs; a direct call's OnBatch, which Flush and Close wait for; the
// buffers a big batch leaves; the workers of several shards.

// Item 5: a done or OnBatch that blocks holds its own worker and slot, not the
// next batch: with four workers, a Do on another key is called and answered.
func TestSlowDoneHoldsOnlyItsWorker(t *testing.T) {
	for _, how := range []string{"done", "OnBatch", "OnBatch of a Do"} {
		t.Run(how, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				block := make(chan struct{})
				cfg := Config[string, in]{MaxInFlightBatches: 4, Shards: 1}
				if how != "done" {
					cfg.OnBatch = func(b Batch[string]) {
						if b.Key == "a" {
							<-block
						}
					}
				}
				h := newHarness(t, cfg, false)
				defer h.f.Close()
				ctx := context.Background()
				var a chan answer
				if how == "done" {
					require.NoError(t, h.f.Submit(ctx, in{Key: "a", ID: 1}, func(int, error) { <-block }))
				} else {
					a = h.do(ctx, in{Key: "a", ID: 1})
				}
				synctest.Wait() // a's call is over; its done (or OnBatch) blocks
				b := h.do(ctx, in{Key: "b", ID: 2})
				synctest.Wait()
				assert.Len(t, h.seen(), 2, "b's call was made while a's %s blocks", how)
				select {
				case x := <-b:
					assert.Equal(t, answer{20, nil}, x)
				default:
					t.Errorf("b's Do has no answer while a's %s blocks: its batch went to a's worker", how)
					close(block)
					synctest.Wait()
					<-b
					return
				}
				if a != nil {
					assert.Equal(t, answer{10, nil}, got(t, a), "answered before OnBatch")
				}
				s := h.f.Stats()
				assert.Equal(t, uint64(2), s.Batches)
				assert.Zero(t, s.Busy, "both keys are free")
				close(block)
				synctest.Wait()
			})
		})
	}
}

// Item 7: a Flush waits for the OnBatch of a direct call in flight when it
// was called, which runs after the call has released its key.
func TestFlushWaitsForADirectCallsOnBatch(t *testing.T) {
	bubble(t, func(t *testing.T) {
		block := make(chan struct{})
		reported := make(chan Batch[string], 1)
		h := newHarness(t, Config[string, in]{DirectCalls: true, OnBatch: func(b Batch[string]) {
			<-block
			reported <- b
		}}, true)
		defer h.f.Close()
		ctx := context.Background()
		a := h.do(ctx, in{Key: "a", ID: 1}) // a direct call, held
		synctest.Wait()
		flushed := make(chan error, 1)
		go func() { flushed <- h.f.Flush(ctx) }()
		synctest.Wait()
		h.hold <- struct{}{} // the call returns and releases a; OnBatch blocks
		synctest.Wait()
		assert.Empty(t, flushed, "Flush returned while the direct call's OnBatch runs")
		assert.Zero(t, h.f.Stats().Busy, "key a is free")
		close(block)
		synctest.Wait()
		require.Len(t, flushed, 1)
		assert.NoError(t, <-flushed)
		assert.Equal(t, Batch[string]{Key: "a", Size: 1, Direct: true, Attempt: 1}, <-reported)
		assert.Equal(t, answer{10, nil}, got(t, a))
	})
}

// Item 8: the OnBatch of a direct call in flight at Close runs before the
// ferry ends, and its panic is counted in the final Stats.
func TestDirectOnBatchPanicAtCloseIsCounted(t *testing.T) {
	bubble(t, func(t *testing.T) {
		h := newHarness(t, Config[string, in]{DirectCalls: true, OnBatch: func(Batch[string]) {
			time.Sleep(time.Millisecond) // the loop would have ended by now
			panic("OnBatch")
		}}, true)
		a := h.do(context.Background(), in{Key: "a", ID: 1}) // a direct call, held
		synctest.Wait()
		require.NoError(t, h.f.Close())
		advance(time.Millisecond)
		assert.ErrorIs(t, got(t, a).err, ErrClosed)
		assert.Equal(t, Stats{DirectCalls: 1, OnBatchPanics: 1}, h.f.Stats())
	})
}

// userCloses are scenarios in which user code that the ferry runs (a done,
// an OnBatch, a Call) calls Close, Flush or Shutdown: each of which once
// waited forever for that very code. TestCloseFromUserCode runs each in a
// child process, so that such a wait fails the test (synctest panics on a
// bubble with every goroutine blocked) instead of ending the test binary.
var userCloses = map[string]func(t *testing.T){
	"done calls Close":                    func(t *testing.T) { closeFrom(t, "done", Config[string, in]{}) },
	"OnBatch calls Close":                 func(t *testing.T) { closeFrom(t, "OnBatch", Config[string, in]{}) },
	"a direct call's OnBatch calls Close": func(t *testing.T) { closeFrom(t, "OnBatch", Config[string, in]{DirectCalls: true}) },
	"a Call calls Close":                  func(t *testing.T) { closeFrom(t, "Call", Config[string, in]{}) },
	"a direct Call calls Close":           func(t *testing.T) { closeFrom(t, "Call", Config[string, in]{DirectCalls: true}) },
	"done calls Close, with shards":       func(t *testing.T) { closeFrom(t, "done", Config[string, in]{Shards: 3}) },
	"done calls Flush":                    func(t *testing.T) { refusedFrom(t, "done", "Flush") },
	"done calls Shutdown":                 func(t *testing.T) { refusedFrom(t, "done", "Shutdown") },
	"OnBatch calls Flush":                 func(t *testing.T) { refusedFrom(t, "OnBatch", "Flush") },
	"OnBatch calls Shutdown":              func(t *testing.T) { refusedFrom(t, "OnBatch", "Shutdown") },
	"a direct call's OnBatch calls Flush": func(t *testing.T) { refusedFrom(t, "direct OnBatch", "Flush") },
	"a Call of another ferry calls Flush": func(t *testing.T) { flushFromAnotherFerry(t) },
	"done calls Close, one worker":        func(t *testing.T) { closeFrom(t, "done", Config[string, in]{MaxInFlightBatches: 1}) },
}

func TestCloseFromUserCode(t *testing.T) {
	for name, run := range userCloses {
		t.Run(name, func(t *testing.T) {
			if os.Getenv("FERRY_USERCLOSE") == name {
				bubble(t, run) // returns once every goroutine of the bubble has gone
				return
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestCloseFromUserCode$/^"+t.Name()[len("TestCloseFromUserCode/"):]+"$", "-test.v")
			// The race detector sleeps a second as a process exits, unless told not to.
			cmd.Env = append(os.Environ(), "FERRY_USERCLOSE="+name, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "the child process:\n%s", out)
			assert.Contains(t, string(out), "--- PASS: TestCloseFromUserCode/", "the child ran the scenario")
		})
	}
}

// closeFrom runs a ferry whose user code of kind where (done, OnBatch or
// Call) calls Close: that Close returns
// nil at once, the test's own Close returns once the ferry has ended, and a
// Do after it gets ErrClosed.
func closeFrom(t *testing.T, where string, cfg Config[string, in]) {
	var f *Ferry[string, in, int]
	closed := make(chan error, 1)
	closeOnce := func() {
		select {
		case closed <- f.Close():
		default:
			t.Error("Close called twice")
		}
	}
	if where == "OnBatch" {
		cfg.OnBatch = func(Batch[string]) { closeOnce() }
	}
	cfg.Key = inCfg.Key
	f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
		if where == "Call" {
			closeOnce()
			<-ctx.Done() // ended by that close
		}
		return tens(ins), nil
	}, cfg)
	require.NoError(t, err)
	ctx := context.Background()
	var a chan answer
	switch where {
	case "done":
		done := make(chan error, 1)
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 1}, func(_ int, err error) {
			done <- err
			closeOnce()
		}))
		synctest.Wait()
		require.NoError(t, <-done)
	default:
		a = do(f, ctx, in{Key: "a", ID: 1})
	}
	synctest.Wait()
	require.Len(t, closed, 1, "Close from the %s has returned", where)
	assert.NoError(t, <-closed)
	if a != nil {
		x := got(t, a)
		if where == "Call" {
			assert.NoError(t, x.err, "the call ended with ErrClosed as its cause, and returned its outputs")
		} else {
			assert.Equal(t, answer{10, nil}, x)
		}
	}
	require.NoError(t, f.Close(), "a Close from elsewhere waits for the ferry's end")
	_, err = f.Do(ctx, in{Key: "c", ID: 3})
	assert.ErrorIs(t, err, ErrClosed)
	s := f.Stats()
	assert.Zero(t, s.Busy+s.Queued)
	assert.Zero(t, s.OnBatchPanics+s.DonePanics)
}

// refusedFrom runs a ferry whose done or OnBatch (where) calls Flush or
// Shutdown (what): each would wait for that very code, so it is refused at
// once with an error.
func refusedFrom(t *testing.T, where, what string) {
	start := time.Now()
	var f *Ferry[string, in, int]
	errs := make(chan error, 1)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if what == "Flush" {
			errs <- f.Flush(ctx)
		} else {
			errs <- f.Shutdown(ctx)
		}
	}
	cfg := Config[string, in]{Key: inCfg.Key}
	switch where {
	case "OnBatch", "direct OnBatch":
		cfg.OnBatch = func(Batch[string]) { call() }
		cfg.DirectCalls = where == "direct OnBatch"
	}
	f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) { return tens(ins), nil }, cfg)
	require.NoError(t, err)
	ctx := context.Background()
	switch where {
	case "done":
		require.NoError(t, f.Submit(ctx, in{Key: "a", ID: 1}, func(int, error) { call() }))
	default:
		a, err := f.Do(ctx, in{Key: "a", ID: 1})
		assert.Equal(t, answer{10, nil}, answer{a, err})
	}
	synctest.Wait()
	require.Len(t, errs, 1, "%s from %s has returned", what, where)
	err = <-errs
	assert.ErrorContains(t, err, "ferry: "+what+" from inside")
	assert.False(t, errors.Is(err, ErrClosed) || errors.Is(err, context.DeadlineExceeded), "%v", err)
	assert.Zero(t, time.Since(start), "refused at once")
	require.NoError(t, f.Close())
}

// A Call of one ferry may Flush another: only a ferry's own user code is
// refused.
func flushFromAnotherFerry(t *testing.T) {
	other, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) { return tens(ins), nil },
		Config[string, in]{Key: inCfg.Key, MaxBatchDelay: time.Hour})
	require.NoError(t, err)
	defer other.Close()
	o := do(other, context.Background(), in{Key: "x", ID: 9})
	synctest.Wait()
	f, err := New(func(ctx context.Context, _ string, ins []in) ([]int, error) {
		return tens(ins), other.Flush(ctx)
	}, Config[string, in]{Key: inCfg.Key})
	require.NoError(t, err)
	defer f.Close()
	out, err := f.Do(context.Background(), in{Key: "a", ID: 1})
	assert.Equal(t, answer{10, nil}, answer{out, err})
	synctest.Wait() // o's Do has returned; its goroutine sends its answer
	assert.Equal(t, answer{90, nil}, got(t, o), "flushed")
}

// Item 9: a worker keeps no buffer of a big batch once it is over, so that
// an idle ferry's memory follows what waits, not the biggest batch it ran.
func TestBigBatchLeavesNoBuffers(t *testing.T) {
	const n = 1 << 18
	echoIns := func(_ context.Context, _ int, ins []int) ([]int, error) { return ins, nil }
	for _, how := range []string{"DoMany", "Submit"} {
		t.Run(how, func(t *testing.T) {
			f, err := New(echoIns, Config[int, int]{Key: func(int) int { return 0 }, MaxBatchSize: n,
				MaxQueued: n, MaxBatchDelay: time.Hour, Shards: 1})
			require.NoError(t, err)
			defer f.Close()
			ctx := context.Background()
			for i := range 2 { // a small batch first, as any ferry has
				require.NoError(t, f.Submit(ctx, i, nil))
			}
			require.NoError(t, f.Flush(ctx))
			before := heap()
			switch how {
			case "DoMany":
				outs, err := f.DoMany(ctx, make([]int, n)) // a full lane: due at once
				require.NoError(t, err)
				require.Len(t, outs, n)
			case "Submit":
				var done atomic.Int64
				for i := range n {
					require.NoError(t, f.Submit(ctx, i, func(int, error) { done.Add(1) }))
				}
				require.NoError(t, f.Flush(ctx))
				require.Equal(t, int64(n), done.Load())
			}
			s := f.Stats()
			require.Equal(t, uint64(2), s.Batches, "one batch of %d after the small one", n)
			kept := int64(heap()) - int64(before)
			t.Logf("%s: %d bytes kept after a batch of %d", how, kept, n)
			assert.Less(t, kept, int64(1<<20), "bytes kept after the batch")
		})
	}
}

// Item 10: the ferry's workers are MaxInFlightBatches in all, whichever
// shards run batches: a slot is a worker, and shards pass them on.
func TestWorkersWithinMaxInFlightBatches(t *testing.T) {
	for _, shards := range []int{2, 4} {
		t.Run(fmt.Sprint(shards, " shards"), func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				before := workerGoroutines()
				h := newHarness(t, Config[string, in]{Shards: shards, MaxInFlightBatches: 4}, true)
				ctx := context.Background()
				most := 0
				for round := range 2 {
					for sh := range shards {
						var as []chan answer
						for i, k := range keysIn(h, sh, 4) {
							as = append(as, h.do(ctx, in{Key: k, ID: i}))
						}
						synctest.Wait()
						assert.Equal(t, 4, h.f.Stats().Busy, "shard %d runs four batches at once", sh)
						most = max(most, workerGoroutines()-before)
						for range as {
							h.hold <- struct{}{}
						}
						synctest.Wait()
						for i, a := range as {
							assert.Equal(t, answer{10 * i, nil}, got(t, a), "round %d, shard %d", round, sh)
						}
					}
				}
				t.Logf("%d shards: at most %d worker goroutines", shards, most)
				assert.LessOrEqual(t, most, 4)
				require.NoError(t, h.f.Close())
				synctest.Wait()
				assert.Equal(t, 0, workerGoroutines()-before, "all gone after Close")
			})
		})
	}
}

// workerGoroutines counts the goroutines running a ferry's worker.
func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "ferry.work[") {
			count++
		}
	}
	return count
}
