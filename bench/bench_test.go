// Package bench compares ferry with the batchers a Go user would otherwise
// pick, on one workload in one process: closed-loop callers, each fixed to
// one key with its own context, through an echo call that allocates its
// output. Run ./run for the benchstat tables in docs/performance.md.
//
// BenchmarkCores, how the batchers use 1 to 16 processors, runs where Go is
// not installed: ./cores build DIR makes DIR/bench.test (linux/amd64) and
// copies the script beside it; on the other machine DIR/cores run DIR runs
// one process per -cpu value (1,2,4,8,16, or CPUS) and prints a markdown
// table of median ns/input with ferry's ratios to dataloadgen, in about 3
// minutes. COUNT and BENCHTIME override -test.count (3) and
// -test.benchtime (262144x); the script's header says more.
package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// setup is the shape of a workload: keys (a power of two, so that an input's
// key is in & mask, as cheap as the constant's % was), the batch size and the
// number of closed-loop callers.
type setup struct {
	keys, batch, callers int
	mask                 int
}

func newSetup(keys, batch, callers int) setup {
	if keys <= 0 || keys&(keys-1) != 0 {
		panic(fmt.Sprintf("keys %d is not a power of two", keys))
	}
	return setup{keys: keys, batch: batch, callers: callers, mask: keys - 1}
}

// headline is the headline workload of docs/performance.md, of BenchmarkDo and BenchmarkMany.
var headline = newSetup(keys, batch, callers)

// impl is one batcher under test: do sends in, which has key in & mask.
// shared, for ferry in a build with the tag ferrycount, is after close the
// operations per input on the channels its shards share (see
// BenchmarkCores); nil otherwise.
type impl struct {
	do     func(ctx context.Context, in int) (int, error)
	close  func()
	shared func() float64
}

func echo(ins []int) []int {
	outs := make([]int, len(ins))
	copy(outs, ins)
	return outs
}

var impls = []struct {
	name string
	make func(setup) impl
}{
	{"floor", newFloor},
	{"ferry", newFerry},
	{"ferry-sharded", newFerrySharded},
	{"mutex", newMutex},
	{"dataloader", newDataloader},
	{"dataloadgen", newDataloadgen},
	{"bundler", newBundler},
}

// BenchmarkDo is the headline workload (docs/performance.md): 16 keys, batch 64, 1024
// closed-loop callers, each fixed to one key. Besides drive's figures it
// reports rejected/op, the fraction of Do calls rejected: the room is exactly
// the callers, so it is 0 unless the shards' shared room rejects where one
// loop would not, and the figures of a row where it is not 0 are not
// comparable with the others (a rejected call is not an input answered).
func BenchmarkDo(b *testing.B) {
	for _, im := range impls {
		b.Run("impl="+im.name, func(b *testing.B) {
			x := im.make(headline)
			defer x.close()
			b.ReportMetric(run(b, headline, x, withLive), "rejected/op")
		})
	}
}

// run drives s.callers closed-loop through x, caller c with key c & s.mask,
// and returns the fraction of Do calls rejected (ErrRejected), which do not
// count as inputs; a rejected caller calls again at once. Every other error
// is a wrong answer. Whether it reports live-B/caller is drive's lv.
func run(b *testing.B, s setup, x impl, lv live) float64 {
	return drive(b, s.callers, 1, lv, func(ctx context.Context, c, i int) outcome {
		in := c&s.mask + i*s.keys
		out, err := x.do(ctx, in)
		if err != nil && errors.Is(err, ferry.ErrRejected) {
			return rejected
		}
		return check(err == nil && out == in)
	})
}

// outcome is what one turn of a caller got.
type outcome uint8

const (
	right    outcome = iota
	wrong            // an error or a wrong output: drive fails the benchmark
	rejected         // ErrRejected, for the callers that take it as an answer
)

func check(ok bool) outcome {
	if ok {
		return right
	}
	return wrong
}

// drive runs n closed-loop goroutines, each with its own context, whose
// each(ctx, caller, round) answers per inputs and reports whether they were
// right (or the turn was rejected, answering none), and measures a window of
// at least b.N inputs after a warm-up, so that start and the drain stay out
// of the figures. The warm-up is 4 turns of every caller up to 32,768
// inputs, and one turn of every caller beyond: at 262,144 callers four turns
// would be a million inputs, seconds spent twice per benchmark (b.N=1's
// probe too). The window is at least n*per inputs, a turn of every caller:
// a shorter one ends before it is measured (as at -benchtime=100x). A run
// of b.N = 1 is testing's probe before the run of -benchtime=Nx, whose
// figures it drops: it has no warm-up, a window of 1 and no live-B/caller,
// so that its two GCs do not double the cost at 262,144 callers, where a GC
// takes seconds beside the running callers. So give -benchtime 2x or more.
//
// The callers whose inputs cross the window's ends take its times and
// memory statistics, and the goroutine running drive waits parked until the
// window has ended: one that slept and polled the count could wait seconds
// behind the callers. With tens of thousands of callers runnable most of
// them wait in the scheduler's global run queue, which a processor reads once
// in 61 turns while its local queue has work, and a goroutine preempted
// (after 10ms running, as releasing 65,536 callers at once takes) goes to
// its end: at 65,536 callers on one processor the warm-up of 65,536 inputs
// took 7 s and 3.9 million inputs.
//
// It reports ns, allocations and bytes per answered input, and live-B/caller:
// the heap and stacks in use (HeapAlloc + StackInuse) after a GC, taken once
// the window has been measured and with the callers still running, beyond
// those after a GC before they started (so not the batcher made before drive),
// divided by n. The GC comes after the window so that the window starts where
// it did before there was this metric, not right after a GC. With lv
// withoutLive it does no GC after the window and reports no live-B/caller:
// runtime.GC sweeps what is left of the heap a span per turn through the
// global run queue, and with tens of thousands of callers runnable that one
// GC took from under a second to 50 s at 65,536 callers on 2 processors. It
// returns the fraction of turns rejected in the window, for the callers that
// count them.
func drive(b *testing.B, n, per int, lv live, each func(ctx context.Context, c, i int) outcome) (rejectedPerOp float64) {
	var done, wrongs, rejects atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	// The callers wait for begin, so that making them is not slowed by those
	// already running: with 262,144 callers that took a minute.
	begin := make(chan struct{})
	probe := b.N == 1
	measure := bool(lv) && !probe // live-B/caller
	var base int64
	if !probe {
		runtime.GC() // and again in inUse: what sync.Pools held before is gone
	}
	if measure {
		base = inUse()
	}
	cancels := make([]context.CancelFunc, 0, n)
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	// The window is from the input that brings done to from to the one that
	// brings it to to.
	from := int64(max(n*per, min(4*n*per, 1<<15)))
	to := from + int64(max(b.N, n*per))
	if probe {
		from, to = 0, 1
	}
	w := window{done: &done, rejects: &rejects, started: make(chan struct{}), ended: make(chan struct{})}
	if from == 0 {
		w.start()
	}
	add := func(in int64) {
		d := done.Add(in)
		if d-in < from && d >= from {
			w.start()
		}
		if d-in < to && d >= to {
			w.end()
		}
	}
	for c := range n {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		wg.Go(func() {
			<-begin
			for i := 1; !stop.Load(); i++ {
				switch each(ctx, c, i) {
				case right:
					add(int64(per))
				case wrong:
					wrongs.Add(1)
					add(int64(per))
				case rejected:
					rejects.Add(1)
				}
			}
		})
	}
	b.ResetTimer()
	// Releasing the callers takes more than 10ms at 65,536: a goroutine of
	// its own does, so that this one is parked in the meantime.
	go func() { close(begin) }()
	<-w.ended
	b.StopTimer()
	got, rej := w.d1-w.d0, w.r1-w.r0
	var inuse int64
	if measure {
		inuse = inUse() - base
	}
	stop.Store(true)
	wg.Wait()
	if wrongs.Load() > 0 {
		b.Fatalf("%d wrong answers", wrongs.Load())
	}
	b.ReportMetric(float64(w.t1.Sub(w.t0).Nanoseconds())/float64(got), "ns/input")
	b.ReportMetric(float64(w.m1.Mallocs-w.m0.Mallocs)/float64(got), "allocs/input")
	b.ReportMetric(float64(w.m1.TotalAlloc-w.m0.TotalAlloc)/float64(got), "B/input")
	if measure {
		b.ReportMetric(float64(inuse)/float64(n), "live-B/caller")
	}
	b.ReportMetric(0, "ns/op")
	return float64(rej) / (float64(rej) + float64(got)/float64(per))
}

// window is drive's measured stretch: the counts, times and memory
// statistics at its start and at its end, taken by the callers whose inputs
// cross them, one caller each (or drive itself for a start at 0), and read
// by drive once ended is closed.
type window struct {
	done, rejects  *atomic.Int64 // drive's inputs answered and turns rejected
	started, ended chan struct{}
	t0, t1         time.Time
	d0, d1, r0, r1 int64 // done and rejects at t0 and t1
	m0, m1         runtime.MemStats
}

// start reads the memory statistics (stopping the world) before the time,
// so that their pause stays out of the window.
func (w *window) start() {
	runtime.ReadMemStats(&w.m0)
	w.t0 = time.Now()
	w.d0, w.r0 = w.done.Load(), w.rejects.Load()
	close(w.started)
}

// end waits for the start, which a caller may not have finished marking at
// the smallest windows, and reads the time before the memory statistics.
func (w *window) end() {
	<-w.started
	w.t1 = time.Now()
	w.d1, w.r1 = w.done.Load(), w.rejects.Load()
	runtime.ReadMemStats(&w.m1)
	close(w.ended)
}

// live says whether drive reports live-B/caller.
type live bool

const (
	withLive    live = true
	withoutLive live = false
)

// inUse is the heap and stack memory in use after a GC.
func inUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

// newFloor is the channel floor: a request to one goroutine, the reply
// waited for in a select with the caller's context. It does no batching.
func newFloor(setup) impl {
	reqs := make(chan req, 1024)
	quit := make(chan struct{})
	go answer(reqs, quit)
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

// newFerry is ferry's default config (one shard per processor: 1 at
// GOMAXPROCS 1, 2 at 2) but for MaxBatchSize s.batch and MaxQueued s.callers.
func newFerry(s setup) impl { return newFerryShards(s, 0) }

// newFerrySharded is ferry with two shards whatever GOMAXPROCS is (the way
// past one loop, which used to be two ferries by hand), sharing the room and
// the default's 4 workers.
func newFerrySharded(s setup) impl { return newFerryShards(s, 2) }

// newFerryShards is ferry with n shards, which share a room of s.callers.
func newFerryShards(s setup, shards int) impl {
	return newFerryConfig(s, ferry.DefaultMaxInFlightBatches, shards)
}

// newFerryConfig is ferry with workers calls in flight and shards loops
// (0: the default), sharing a room of s.callers.
func newFerryConfig(s setup, workers, shards int) impl {
	f, err := ferry.New(func(_ context.Context, _ int, ins []int) ([]int, error) { return echo(ins), nil },
		ferry.Config[int, int]{Key: func(v int) int { return v & s.mask }, MaxBatchSize: s.batch,
			MaxQueued: s.callers, MaxInFlightBatches: workers, Shards: shards})
	if err != nil {
		panic(err)
	}
	return impl{do: f.Do, close: func() { f.Close() }, shared: sharedPerInput(f)}
}

// newMutex is the batcher one writes by hand: a mutex, a lane per key, a
// ready line and 4 workers woken by a condition variable.
func newMutex(s setup) impl {
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
				n := min(len(ws), s.batch)
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
			k := in & s.mask
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

func newDataloader(s setup) impl {
	loaders := make([]*dataloader.Loader[int, int], s.keys)
	for i := range loaders {
		loaders[i] = dataloader.NewBatchedLoader(func(_ context.Context, ins []int) []*dataloader.Result[int] {
			rs := make([]*dataloader.Result[int], len(ins))
			for i, v := range echo(ins) {
				rs[i] = &dataloader.Result[int]{Data: v}
			}
			return rs
		}, dataloader.WithBatchCapacity[int, int](s.batch), dataloader.WithWait[int, int](wait),
			dataloader.WithCache[int, int](&dataloader.NoCache[int, int]{}))
	}
	return impl{
		do:    func(ctx context.Context, in int) (int, error) { return loaders[in&s.mask].Load(ctx, in)() },
		close: func() {},
	}
}

// newDataloadgen is one loader per key.
func newDataloadgen(s setup) impl {
	loaders := make([]*dataloadgen.Loader[int, int], s.keys)
	for i := range loaders {
		loaders[i] = dataloadgen.NewLoader(func(_ context.Context, ins []int) ([]int, []error) {
			return echo(ins), nil
		}, dataloadgen.WithBatchCapacity(s.batch), dataloadgen.WithWait(wait), dataloadgen.WithoutCache())
	}
	return impl{
		do:    func(ctx context.Context, in int) (int, error) { return loaders[in&s.mask].Load(ctx, in) },
		close: func() {},
	}
}

func newBundler(s setup) impl {
	type item struct {
		in  int
		out chan int
	}
	bundlers := make([]*bundler.Bundler, s.keys)
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
		b.BundleCountThreshold = s.batch
		b.DelayThreshold = wait
		bundlers[i] = b
	}
	pool := sync.Pool{New: func() any { return &item{out: make(chan int, 1)} }}
	return impl{
		do: func(ctx context.Context, in int) (int, error) {
			it := pool.Get().(*item)
			it.in = in
			if err := bundlers[in&s.mask].AddWait(ctx, it, 1); err != nil {
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
	drive(b, callers/per, per, withLive, func(ctx context.Context, c, i int) outcome {
		for j := range ins[c] {
			ins[c][j] = (c*per+j)%keys + (i*per+j)*keys // distinct, so that no cache could help
		}
		outs, err := do(ctx, ins[c])
		if err != nil || len(outs) != per {
			return wrong
		}
		for j := range outs {
			if outs[j] != ins[c][j] {
				return wrong
			}
		}
		return right
	})
}

// scaleImpls are the batchers of BenchmarkScale.
var scaleImpls = []struct {
	name string
	make func(setup) impl
}{
	{"floor", newFloor},
	{"ferry", newFerry},
	{"ferry-sharded", newFerryScaled},
	{"dataloadgen", newDataloadgen},
	{"mutex", newMutex},
}

// newFerryScaled is ferry with 2 shards per processor: 2 at GOMAXPROCS 1, 4
// at 2, and never more than New allows, which is one shard per worker (4 by
// default).
func newFerryScaled(s setup) impl {
	return newFerryShards(s, min(2*runtime.GOMAXPROCS(0), ferry.DefaultMaxInFlightBatches, s.callers))
}

// BenchmarkScale is the headline workload's shape at other sizes: keys K,
// batch B and K*B closed-loop callers (at most 262,144, so 65536 keys have 4
// callers each at batch 8 and 64), caller c fixed to key c % K. Each batcher
// gets the same callers; the floor does no batching. Besides drive's figures
// it reports rejected/op, the fraction of Do calls rejected (ErrRejected): the
// room is exactly the callers, so it is 0 unless the shards' shared room
// rejects where one loop would not. A rejected call counts as a turn, not
// as an input answered. With -short only keys=16/batch=1 runs.
func BenchmarkScale(b *testing.B) {
	for _, k := range []int{16, 1024, 65536} {
		for _, bt := range []int{1, 8, 64} {
			if testing.Short() && (k != 16 || bt != 1) {
				continue
			}
			s := newSetup(k, bt, min(k*bt, 1<<18))
			for _, im := range scaleImpls {
				b.Run(fmt.Sprintf("keys=%d/batch=%d/impl=%s", k, bt, im.name), func(b *testing.B) {
					x := im.make(s)
					defer x.close()
					b.ReportMetric(run(b, s, x, withLive), "rejected/op")
				})
			}
		}
	}
}

// BenchmarkSkew measures what a skewed key distribution does to rejections
// when the room is shared by shards: a fixed room (MaxQueued 1024, 4
// workers, batch 64) through a call that sleeps 50µs per batch, so that the
// room fills, and closed-loop callers each drawing a key per call from 1024
// keys, Zipf with s=1.1 (key 0 takes 18% of calls, key 1 8%) or uniform as
// the control, through Shards 1, 2 and 4. There are 1024 callers, as many as
// the room, so that one shard never rejects and what shards reject is what
// sharing the room costs; and 2048, twice the room, an overload. A rejected caller
// waits 50µs, the call's own time, before it calls again: callers that call
// again at once make the fraction rejected a measure of how fast the loop
// rejects (98% of calls). Go sleeps at least 50µs, and about 1ms on an idle
// processor (the runtime's timers wait in milliseconds then), so the call
// takes longer the less busy the loop is. With -short only 1024 callers
// run. Each caller has its own seeded source, so the
// draws are the same from run to run. It reports rejected/op, the fraction
// of Do calls rejected, and ns/input per input answered.
func BenchmarkSkew(b *testing.B) {
	const skewKeys = 1024
	for _, n := range []int{1024, 2048} {
		if testing.Short() && n > 1024 {
			continue
		}
		for _, dist := range []string{"zipf1.1", "uniform"} {
			for _, shards := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("callers=%d/dist=%s/shards=%d", n, dist, shards), func(b *testing.B) {
					skew(b, n, skewKeys, dist, shards)
				})
			}
		}
	}
}

func skew(b *testing.B, n, keys int, dist string, shards int) {
	f, err := ferry.New(func(_ context.Context, _ int, ins []int) ([]int, error) {
		time.Sleep(50 * time.Microsecond)
		return echo(ins), nil
	}, ferry.Config[int, int]{Key: func(v int) int { return v % keys },
		MaxBatchSize: 64, MaxQueued: 1024, MaxInFlightBatches: 4, Shards: shards})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	draw := make([]func() int, n)
	for c := range draw {
		r := rand.New(rand.NewPCG(14, uint64(c)))
		if dist == "uniform" {
			draw[c] = func() int { return r.IntN(keys) }
		} else {
			z := rand.NewZipf(r, 1.1, 1, uint64(keys-1))
			draw[c] = func() int { return int(z.Uint64()) }
		}
	}
	rej := drive(b, n, 1, withLive, func(ctx context.Context, c, i int) outcome {
		in := draw[c]() + i*keys
		out, err := f.Do(ctx, in)
		if errors.Is(err, ferry.ErrRejected) {
			time.Sleep(50 * time.Microsecond)
			return rejected
		}
		return check(err == nil && out == in)
	})
	b.ReportMetric(rej, "rejected/op")
}

// coresImpls are the batchers of BenchmarkCores.
var coresImpls = []struct {
	name string
	make func(setup) impl
}{
	{"floor", newFloor},
	{"floor-perP", newFloorPerP},
	{"ferry", newFerry},
	{"ferry-4perP", newFerryPerP},
	{"ferry-1shard", newFerryOneShard},
	{"ferry-noctx", newFerryNoCtx},
	{"ferry-8shards", newFerryEight},
	{"dataloadgen", newDataloadgen},
}

// newFerryEight is ferry with 8 shards and 8 workers (one each), whatever
// GOMAXPROCS is: many shards on few processors, for the count of
// operations on what the shards share.
func newFerryEight(s setup) impl { return newFerryConfig(s, 8, 8) }

// newFerryPerP is ferry with 4 workers per processor (MaxInFlightBatches
// 4*GOMAXPROCS), so that the default Shards, one per processor up to the
// workers, is GOMAXPROCS: 16 loops at 16 processors where the default's 4
// workers allow 4.
func newFerryPerP(s setup) impl {
	return newFerryConfig(s, 4*runtime.GOMAXPROCS(0), 0)
}

// newFerryOneShard is ferry's defaults but for Shards 1: one loop, whatever
// GOMAXPROCS is.
func newFerryOneShard(s setup) impl { return newFerryShards(s, 1) }

// newFerryNoCtx is ferry's defaults with every Do given
// context.Background() in place of its caller's context: a context whose
// Done is nil, so that Do waits on its reply alone, with no select, as
// dataloadgen's Load waits on its batch whatever its context. Its callers
// cannot give up (the bench never cancels a context in the window): it
// measures what watching the caller's context costs ferry's Do, not a way to
// call it.
func newFerryNoCtx(s setup) impl {
	x := newFerry(s)
	do := x.do
	x.do = func(_ context.Context, in int) (int, error) { return do(context.Background(), in) }
	return x
}

// newFloorPerP is the channel floor with one goroutine per processor, each
// with its own channel, as ferry's shards each have their loop: an input
// goes to the goroutine of its key modulo GOMAXPROCS.
func newFloorPerP(s setup) impl {
	procs := runtime.GOMAXPROCS(0)
	reqs := make([]chan req, procs)
	quit := make(chan struct{})
	for i := range reqs {
		reqs[i] = make(chan req, 1024)
		go answer(reqs[i], quit)
	}
	pool := sync.Pool{New: func() any { return make(chan int, 1) }}
	return impl{
		do: func(ctx context.Context, in int) (int, error) {
			c := pool.Get().(chan int)
			reqs[(in&s.mask)%procs] <- req{in, c}
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

// BenchmarkCores measures how the batchers use more processors: run it with
// -cpu 1,2,4,8,16, one process per value (./cores does, from a test binary
// built elsewhere, and prints the table). Its workloads are keys x callers
// per key, the batch being the callers of a key: 16x64 (1,024 callers, the
// headline's), 256x16 (4,096) and 1024x64 (65,536), closed-loop callers each
// fixed to one key through the echo call, as in BenchmarkScale. Besides
// ferry's defaults it runs ferry with 4 workers per processor (so one shard
// per processor), with one shard, and with its callers' contexts left out
// (ferry-noctx: what watching them costs), dataloadgen, and the channel floor
// with one goroutine and with one per processor. The window is at least one
// turn of every caller, so give -benchtime a multiple of the callers. It
// reports rejected/op as BenchmarkScale does, and, built with the tag
// ferrycount (go test -tags ferrycount), shared/input for ferry: its loops'
// operations on the channels all its shards share (the room's pool, the
// free slots), over the whole run, per input taken (see ferry.SharedOps);
// each is a lock that the cores hand each other. With -short only 16x64
// runs.
func BenchmarkCores(b *testing.B) {
	for _, w := range []struct{ keys, per int }{{16, 64}, {256, 16}, {1024, 64}} {
		if testing.Short() && w.keys != 16 {
			continue
		}
		s := newSetup(w.keys, w.per, w.keys*w.per)
		for _, im := range coresImpls {
			b.Run(fmt.Sprintf("w=%dx%d/impl=%s", w.keys, w.per, im.name), func(b *testing.B) {
				x := im.make(s)
				rej := run(b, s, x, withoutLive)
				x.close()
				b.ReportMetric(rej, "rejected/op")
				if x.shared != nil {
					b.ReportMetric(x.shared(), "shared/input")
				}
			})
		}
	}
}

// req is a request to the floor's server: v, answered on c.
type req struct {
	v int
	c chan int
}

// answer is the floor's server: it answers each request with its input
// until quit is closed.
func answer(reqs <-chan req, quit <-chan struct{}) {
	for {
		select {
		case r := <-reqs:
			r.c <- r.v
		case <-quit:
			return
		}
	}
}
