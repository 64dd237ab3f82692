// Package bench compares ferry with the batchers a Go user would otherwise
// pick, on one workload in one process: closed-loop callers, each fixed to
// one key with its own context, through an echo call that allocates its
// output. Run ./run for the benchstat table in the README.
package bench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/graph-gophers/dataloader/v7"
	"github.com/vikstrous/dataloadgen"
	"google.golang.org/api/support/bundler"
)

const (
	keys    = 16
	batch   = 64
	callers = 1024
	wait    = 100 * time.Microsecond // the delay of the peers that batch by time
)

// impl is one batcher under test: do sends in, which has key in % keys.
type impl struct {
	do    func(ctx context.Context, in int) (int, error)
	close func()
}

func echo(ins []int) []int {
	outs := make([]int, len(ins))
	copy(outs, ins)
	return outs
}

var impls = []struct {
	name string
	make func() impl
}{
	{"floor", newFloor},
	{"ferry", newFerry},
	{"ferry-sharded", newFerrySharded},
	{"mutex", newMutex},
	{"dataloader", newDataloader},
	{"dataloadgen", newDataloadgen},
	{"bundler", newBundler},
}

func BenchmarkDo(b *testing.B) {
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			x := im.make()
			defer x.close()
			run(b, x)
		})
	}
}

// run drives callers closed-loop through x.
func run(b *testing.B, x impl) {
	drive(b, callers, 1, func(ctx context.Context, c, i int) bool {
		in := c%keys + i*keys
		out, err := x.do(ctx, in)
		return err == nil && out == in
	})
}

// drive runs n closed-loop goroutines, each with its own context, whose
// each(ctx, caller, round) answers per inputs and reports whether they were
// right, and measures a window of b.N inputs after a warm-up, so that start
// and the drain stay out of the figures.
func drive(b *testing.B, n, per int, each func(ctx context.Context, c, i int) bool) {
	var done, wrong atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range n {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wg.Go(func() {
			for i := 1; !stop.Load(); i++ {
				if !each(ctx, c, i) {
					wrong.Add(1)
				}
				done.Add(int64(per))
			}
		})
	}
	for done.Load() < int64(n*per)*4 {
		time.Sleep(time.Millisecond)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := done.Load()
	b.ResetTimer()
	t0 := time.Now()
	for done.Load()-start < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(t0)
	got := done.Load() - start
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	stop.Store(true)
	wg.Wait()
	if wrong.Load() > 0 {
		b.Fatalf("%d wrong answers", wrong.Load())
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(got), "ns/input")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(got), "allocs/input")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(got), "B/input")
	b.ReportMetric(0, "ns/op")
}

// newFloor is the channel floor: a request to one goroutine, the reply
// waited for in a select with the caller's context. It does no batching.
func newFloor() impl {
	type req struct {
		v int
		c chan int
	}
	reqs := make(chan req, 1024)
	quit := make(chan struct{})
	go func() {
		for {
			select {
			case r := <-reqs:
				r.c <- r.v
			case <-quit:
				return
			}
		}
	}()
	pool := sync.Pool{New: func() any { return make(chan int, 1) }}
	return impl{
		do: func(ctx context.Context, in int) (int, error) {
			c := pool.Get().(chan int)
			reqs <- req{in, c}
			select {
			case v := <-c:
				pool.Put(c)
				return v, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		},
		close: func() { close(quit) },
	}
}

func newFerry() impl {
	f, err := ferry.New(func(_ context.Context, _ int, ins []int) ([]int, error) { return echo(ins), nil },
		ferry.Config[int, int]{Key: func(v int) int { return v % keys }, MaxBatchSize: batch, MaxQueued: callers})
	if err != nil {
		panic(err)
	}
	return impl{do: f.Do, close: func() { f.Close() }}
}

// newFerrySharded is two ferries, each with half the keys and half the
// workers: the README's way past one loop.
func newFerrySharded() impl {
	var fs [2]*ferry.Ferry[int, int, int]
	for i := range fs {
		f, err := ferry.New(func(_ context.Context, _ int, ins []int) ([]int, error) { return echo(ins), nil },
			ferry.Config[int, int]{Key: func(v int) int { return v % keys }, MaxBatchSize: batch,
				MaxQueued: callers, MaxInFlightBatches: 2})
		if err != nil {
			panic(err)
		}
		fs[i] = f
	}
	return impl{
		do: func(ctx context.Context, in int) (int, error) { return fs[in%keys%2].Do(ctx, in) },
		close: func() {
			for _, f := range fs {
				f.Close()
			}
		},
	}
}

// newMutex is the batcher one writes by hand: a mutex, a lane per key, a
// ready line and 4 workers woken by a condition variable.
func newMutex() impl {
	type waiter struct {
		in  int
		out chan int
	}
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		lanes   = map[int][]*waiter{}
		busy    = map[int]bool{}
		ready   []int
		closing bool
		wg      sync.WaitGroup
	)
	for range 4 {
		wg.Go(func() {
			mu.Lock()
			for {
				for len(ready) == 0 && !closing {
					cond.Wait()
				}
				if closing {
					mu.Unlock()
					return
				}
				k := ready[0]
				ready = ready[1:]
				ws := lanes[k]
				n := min(len(ws), batch)
				take := ws[:n:n]
				lanes[k] = ws[n:]
				busy[k] = true
				mu.Unlock()
				ins := make([]int, n)
				for i, w := range take {
					ins[i] = w.in
				}
				outs := echo(ins)
				for i, w := range take {
					w.out <- outs[i]
				}
				mu.Lock()
				busy[k] = false
				if len(lanes[k]) > 0 {
					ready = append(ready, k)
					cond.Signal()
				}
			}
		})
	}
	pool := sync.Pool{New: func() any { return &waiter{out: make(chan int, 1)} }}
	return impl{
		do: func(ctx context.Context, in int) (int, error) {
			w := pool.Get().(*waiter)
			w.in = in
			k := in % keys
			mu.Lock()
			lanes[k] = append(lanes[k], w)
			if !busy[k] && len(lanes[k]) == 1 {
				ready = append(ready, k)
				cond.Signal()
			}
			mu.Unlock()
			select {
			case v := <-w.out:
				pool.Put(w)
				return v, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		},
		close: func() {
			mu.Lock()
			closing = true
			cond.Broadcast()
			mu.Unlock()
			wg.Wait()
		},
	}
}

func newDataloader() impl {
	var loaders [keys]*dataloader.Loader[int, int]
	for i := range loaders {
		loaders[i] = dataloader.NewBatchedLoader(func(_ context.Context, ins []int) []*dataloader.Result[int] {
			rs := make([]*dataloader.Result[int], len(ins))
			for i, v := range echo(ins) {
				rs[i] = &dataloader.Result[int]{Data: v}
			}
			return rs
		}, dataloader.WithBatchCapacity[int, int](batch), dataloader.WithWait[int, int](wait),
			dataloader.WithCache[int, int](&dataloader.NoCache[int, int]{}))
	}
	return impl{
		do:    func(ctx context.Context, in int) (int, error) { return loaders[in%keys].Load(ctx, in)() },
		close: func() {},
	}
}

func newDataloadgen() impl {
	var loaders [keys]*dataloadgen.Loader[int, int]
	for i := range loaders {
		loaders[i] = dataloadgen.NewLoader(func(_ context.Context, ins []int) ([]int, []error) {
			return echo(ins), nil
		}, dataloadgen.WithBatchCapacity(batch), dataloadgen.WithWait(wait), dataloadgen.WithoutCache())
	}
	return impl{
		do:    func(ctx context.Context, in int) (int, error) { return loaders[in%keys].Load(ctx, in) },
		close: func() {},
	}
}

func newBundler() impl {
	type item struct {
		in  int
		out chan int
	}
	var bundlers [keys]*bundler.Bundler
	for i := range bundlers {
		b := bundler.NewBundler(&item{}, func(v any) {
			items := v.([]*item)
			ins := make([]int, len(items))
			for i, it := range items {
				ins[i] = it.in
			}
			for i, out := range echo(ins) {
				items[i].out <- out
			}
		})
		b.BundleCountThreshold = batch
		b.DelayThreshold = wait
		bundlers[i] = b
	}
	pool := sync.Pool{New: func() any { return &item{out: make(chan int, 1)} }}
	return impl{
		do: func(ctx context.Context, in int) (int, error) {
			it := pool.Get().(*item)
			it.in = in
			if err := bundlers[in%keys].AddWait(ctx, it, 1); err != nil {
				return 0, err
			}
			select {
			case v := <-it.out:
				pool.Put(it)
				return v, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		},
		close: func() {
			for _, b := range bundlers {
				b.Flush()
			}
		},
	}
}

// BenchmarkMany is the bulk way in: 16 callers, each asking for 64 inputs
// over the 16 keys at a time (the same 1024 inputs in flight as BenchmarkDo),
// through ferry's DoMany and through dataloadgen's LoadAll on one loader of
// batch 64, the peers' nearest. Figures are per input.
func BenchmarkMany(b *testing.B) {
	const per = 64
	type many func(ctx context.Context, ins []int) ([]int, error)
	f, err := ferry.New(func(_ context.Context, _ int, ins []int) ([]int, error) { return echo(ins), nil },
		ferry.Config[int, int]{Key: func(v int) int { return v % keys }, MaxBatchSize: batch, MaxQueued: callers})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	loader := dataloadgen.NewLoader(func(_ context.Context, ins []int) ([]int, []error) {
		return echo(ins), nil
	}, dataloadgen.WithBatchCapacity(batch), dataloadgen.WithWait(wait), dataloadgen.WithoutCache())
	for _, im := range []struct {
		name string
		do   many
	}{{"ferry", f.DoMany}, {"dataloadgen", loader.LoadAll}} {
		b.Run("impl="+im.name, func(b *testing.B) {
			runMany(b, per, im.do)
		})
	}
}

func runMany(b *testing.B, per int, do func(ctx context.Context, ins []int) ([]int, error)) {
	ins := make([][]int, callers/per)
	for c := range ins {
		ins[c] = make([]int, per)
	}
	drive(b, callers/per, per, func(ctx context.Context, c, i int) bool {
		for j := range ins[c] {
			ins[c][j] = (c*per+j)%keys + (i*per+j)*keys // distinct, so that no cache could help
		}
		outs, err := do(ctx, ins[c])
		if err != nil || len(outs) != per {
			return false
		}
		for j := range outs {
			if outs[j] != ins[c][j] {
				return false
			}
		}
		return true
	})
}
