package ferry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStress runs many goroutines with random keys, weights and cancellations
// against a real clock, and checks that every answer is the right one.
func TestStress(t *testing.T) {
	if testing.Short() {
		t.Skip("stress")
	}
	var mu sync.Mutex
	busy := map[string]bool{}
	var bad []string
	f, err := New(func(ctx context.Context, key string, ins []in) ([]int, error) {
		mu.Lock()
		if busy[key] {
			bad = append(bad, "two calls for "+key)
		}
		busy[key] = true
		mu.Unlock()
		runtime.Gosched()
		mu.Lock()
		busy[key] = false
		mu.Unlock()
		outs := make([]int, len(ins))
		for i, x := range ins {
			outs[i] = 10 * x.ID
		}
		return outs, nil
	}, Config[string, in]{
		Key: inCfg.Key, Weight: inCfg.Weight, Rank: inCfg.Rank,
		MaxBatchSize: 8, MaxBatchWeight: 20, MaxBatchDelay: 50 * time.Microsecond,
		MaxInFlightBatches: 3, MaxQueued: 256, MaxQueuedWeight: 600,
	})
	require.NoError(t, err)
	const goroutines, each = 64, 300
	var wg sync.WaitGroup
	var ok, cancelled, rejected, wrong int64
	var cmu sync.Mutex
	for g := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range each {
				id := g*each + i
				x := in{Key: string(rune('a' + rng.IntN(8))), ID: id, W: rng.Int64N(6), R: rng.Int64N(3)}
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(8) == 0 {
					time.AfterFunc(time.Duration(rng.IntN(100))*time.Microsecond, cancel)
				}
				out, err := f.Do(ctx, x)
				cancel()
				cmu.Lock()
				switch {
				case err == nil && out == 10*id:
					ok++
				case errors.Is(err, context.Canceled):
					cancelled++
				case errors.Is(err, ErrRejected):
					rejected++
				default:
					wrong++
				}
				cmu.Unlock()
			}
		})
	}
	wg.Wait()
	require.NoError(t, f.Close()) // calls of callers that gave up may still run until now
	s := f.Stats()
	assert.Empty(t, bad)
	assert.Zero(t, wrong)
	assert.Equal(t, int64(goroutines*each), ok+cancelled+rejected)
	assert.Positive(t, ok)
	assert.Equal(t, 0, s.Queued+s.Busy+s.Lanes)
	t.Logf("ok %d, cancelled %d, rejected %d, %d batches for %d admitted", ok, cancelled, rejected, s.Batches, s.Admitted)
}

// Submits and Dos run side by side. A worker may pool a Submit's waiter
// before the Submit has read its admission word, which is on a channel of
// the Submit's own, pooled apart from Do's waiters: so no Do ever sees a
// word meant for a Submit, nor two callers one waiter.
func TestSubmitAndDoShareThePool(t *testing.T) {
	f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) {
		outs := make([]int, len(ins))
		for i, x := range ins {
			outs[i] = 10 * x.ID
		}
		return outs, nil
	}, Config[string, in]{Key: inCfg.Key, MaxInFlightBatches: 8, MaxQueued: 1 << 16})
	require.NoError(t, err)
	defer f.Close()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 3000 {
				x := in{Key: keys[(g+i)%len(keys)], ID: g*10000 + i}
				if g%2 == 0 {
					if err := f.Submit(context.Background(), x, nil); err != nil {
						errs <- err
						return
					}
					continue
				}
				out, err := f.Do(context.Background(), x)
				if err != nil || out != 10*x.ID {
					errs <- fmt.Errorf("Do(%d) = %d, %v", x.ID, out, err)
					return
				}
			}
		})
	}
	over := make(chan struct{})
	go func() { wg.Wait(); close(over) }()
	select {
	case <-over:
	case <-time.After(time.Minute): // the bug this guards against loses answers: a Do hangs
		t.Fatal("a caller never got its answer")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// DoMany callers over one and two shards give up at random moments, so that
// groups go back to the pool with answers, drops and late answers racing:
// every DoMany that returns nil must have every output right, and a group
// reused too early would show as a wrong output or a hang.
func TestDoManyStress(t *testing.T) {
	if testing.Short() {
		t.Skip("stress")
	}
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) {
			f, err := New(func(_ context.Context, _ string, ins []in) ([]int, error) {
				runtime.Gosched()
				outs := make([]int, len(ins))
				for i, x := range ins {
					outs[i] = 10 * x.ID
				}
				return outs, nil
			}, Config[string, in]{Key: inCfg.Key, MaxBatchSize: 4, MaxInFlightBatches: 4, MaxQueued: 512, Shards: shards})
			require.NoError(t, err)
			const goroutines, each = 16, 400
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 2))
					for i := range each {
						ins := make([]in, 1+rng.IntN(8))
						for j := range ins {
							ins[j] = in{Key: string(rune('a' + rng.IntN(6))), ID: (g*each+i)*8 + j}
						}
						ctx, cancel := context.WithCancel(context.Background())
						if rng.IntN(3) == 0 {
							time.AfterFunc(time.Duration(rng.IntN(50))*time.Microsecond, cancel)
						}
						outs, err := f.DoMany(ctx, ins)
						cancel()
						switch {
						case err == nil:
							for j, x := range ins {
								if outs[j] != 10*x.ID {
									errs <- fmt.Errorf("input %d of %v: %d", j, ins, outs[j])
									return
								}
							}
						case errors.Is(err, context.Canceled), errors.Is(err, ErrRejected):
						default:
							errs <- err
							return
						}
					}
				})
			}
			over := make(chan struct{})
			go func() { wg.Wait(); close(over) }()
			select {
			case <-over:
			case <-time.After(time.Minute):
				t.Fatal("a DoMany never returned")
			}
			require.NoError(t, f.Close())
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			s := f.Stats()
			assert.Equal(t, 0, s.Queued+s.Busy+s.Lanes)
		})
	}
}
