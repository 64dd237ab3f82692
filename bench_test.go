package ferry

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// window runs callers closed-loop until b.N inputs have been answered after a
// warm-up, and reports per-input figures for that window only, so that start,
// the partial-batch tail and the drain stay out of them. each is one caller's
// loop body; it answers per inputs and returns false to report a wrong answer.
func window(b *testing.B, callers, per int, each func(caller int) bool, batches func() uint64) {
	var done, wrong atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for !stop.Load() {
				if !each(c) {
					wrong.Add(1)
				}
				done.Add(int64(per))
			}
		})
	}
	warm := int64(callers*per) * 4
	for done.Load() < warm {
		time.Sleep(time.Millisecond)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b0 := batches()
	start := done.Load()
	b.ResetTimer()
	t0 := time.Now()
	for done.Load()-start < int64(b.N) {
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(t0)
	n := done.Load() - start
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	b1 := batches()
	stop.Store(true)
	wg.Wait()
	if wrong.Load() > 0 {
		b.Fatalf("%d wrong answers", wrong.Load())
	}
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/input")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n), "B/input")
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/float64(n), "allocs/input")
	if b1 > b0 {
		b.ReportMetric(float64(n)/float64(b1-b0), "inputs/batch")
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkFloor is the cost of the channel shape itself: a request to one
// goroutine and the reply waited for in a select with the caller's context,
// on a pooled reply channel. Read every ferry figure as a ratio to it.
func BenchmarkFloor(b *testing.B) {
	for _, callers := range []int{1, 1024} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			type req struct {
				v int
				c chan int
			}
			reqs := make(chan req, incSize)
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
			defer close(quit)
			ctxs, replies := callerContexts(b, callers), make([]chan int, callers)
			for i := range replies {
				replies[i] = make(chan int, 1)
			}
			seq := make([]int, callers)
			window(b, callers, 1, func(c int) bool {
				seq[c]++
				reqs <- req{seq[c], replies[c]}
				select {
				case v := <-replies[c]:
					return v == seq[c]
				case <-ctxs[c].Done():
					return false
				}
			}, func() uint64 { return 0 })
		})
	}
}

// callerContexts gives each caller its own cancellable context, as a server's
// requests have. They are cancelled when the benchmark ends.
func callerContexts(b *testing.B, n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		ctx, cancel := context.WithCancel(context.Background())
		b.Cleanup(cancel)
		ctxs[i] = ctx
	}
	return ctxs
}

func echo(_ context.Context, _ int, ins []int) ([]int, error) {
	outs := make([]int, len(ins))
	copy(outs, ins)
	return outs, nil
}

// BenchmarkDo is closed-loop callers, each fixed to one key with its own
// context, through an echo Call: keys x MaxBatchSize, max(128, keys x batch)
// callers.
func BenchmarkDo(b *testing.B) {
	for _, keys := range []int{1, 16, 1024} {
		for _, batch := range []int{1, 8, 64} {
			callers := max(128, keys*batch)
			b.Run(fmt.Sprintf("keys=%d/batch=%d", keys, batch), func(b *testing.B) {
				benchDo(b, keys, batch, callers)
			})
		}
	}
}

func benchDo(b *testing.B, keys, batch, callers int) {
	benchFerry(b, Config[int, int]{MaxBatchSize: batch, MaxQueued: callers}, keys, callers,
		func(s Stats) uint64 { return s.Batches })
}

// BenchmarkOnBatch is BenchmarkDo's keys=16 workloads and BenchmarkDirect's
// callers=128 with OnBatch nil and a no-op OnBatch, each pair run one after
// the other so that the machine's drift hits both alike (benchstat -col
// /onbatch). A whole process may run one of a pair slower for all its counts:
// for a figure, run nil and noop in separate processes, in turn
// (docs/performance.md). With it, each call reads the clock twice and the loop once
// per wake-up that admits.
func BenchmarkOnBatch(b *testing.B) {
	for _, w := range []struct {
		name        string
		keys, batch int
		direct      bool
		calls       func(Stats) uint64
	}{
		{"keys=16/batch=8", 16, 8, false, func(s Stats) uint64 { return s.Batches }},
		{"keys=16/batch=64", 16, 64, false, func(s Stats) uint64 { return s.Batches }},
		{"direct/callers=128", 128, 0, true, func(s Stats) uint64 { return s.DirectCalls }},
	} {
		for _, on := range []bool{false, true} {
			c := Config[int, int]{MaxBatchSize: w.batch, DirectCalls: w.direct}
			name := w.name + "/onbatch=nil"
			if on {
				c.OnBatch, name = func(Batch[int]) {}, w.name+"/onbatch=noop"
			}
			callers := w.keys * max(1, w.batch)
			if !w.direct {
				c.MaxQueued = callers
			}
			b.Run(name, func(b *testing.B) { benchFerry(b, c, w.keys, callers, w.calls) })
		}
	}
}

// BenchmarkKeepContexts is BenchmarkDo's keys=16 workloads and
// BenchmarkDirect's callers=128 with KeepContexts off and on, one after the
// other (benchstat -col /keep): with it on, each call allocates its context
// (one allocation per call, none per input) and each input's waiter holds
// its caller's context.
func BenchmarkKeepContexts(b *testing.B) {
	for _, w := range []struct {
		name        string
		keys, batch int
		direct      bool
		calls       func(Stats) uint64
	}{
		{"keys=16/batch=8", 16, 8, false, func(s Stats) uint64 { return s.Batches }},
		{"keys=16/batch=64", 16, 64, false, func(s Stats) uint64 { return s.Batches }},
		{"direct/callers=128", 128, 0, true, func(s Stats) uint64 { return s.DirectCalls }},
	} {
		for _, keep := range []bool{false, true} {
			c := Config[int, int]{MaxBatchSize: w.batch, DirectCalls: w.direct, KeepContexts: keep}
			callers := w.keys * max(1, w.batch)
			if !w.direct {
				c.MaxQueued = callers
			}
			b.Run(fmt.Sprintf("%s/keep=%v", w.name, keep), func(b *testing.B) { benchFerry(b, c, w.keys, callers, w.calls) })
		}
	}
}

// BenchmarkDirect is DirectCalls on idle keys, each caller with a key of its
// own, beside a plain function call.
func BenchmarkDirect(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		var sink []int
		for i := 0; b.Loop(); i++ {
			sink, _ = echo(context.Background(), 0, []int{i})
		}
		_ = sink
	})
	for _, callers := range []int{1, 128} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			benchFerry(b, Config[int, int]{DirectCalls: true}, callers, callers,
				func(s Stats) uint64 { return s.DirectCalls })
		})
	}
}

// benchFerry runs callers through a ferry with echo and cfg, caller c fixed
// to key c % keys; calls counts the calls in Stats, for inputs per call.
func benchFerry(b *testing.B, cfg Config[int, int], keys, callers int, calls func(Stats) uint64) {
	cfg.Key = func(v int) int { return v % keys }
	f, err := New(echo, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctxs := callerContexts(b, callers)
	seq := make([]int, callers)
	window(b, callers, 1, func(c int) bool {
		seq[c] += keys
		in := c%keys + seq[c]
		out, err := f.Do(ctxs[c], in)
		return err == nil && out == in
	}, func() uint64 { return calls(f.Stats()) })
}

// BenchmarkDoMany is BenchmarkDo's keys=16/batch=64 workload in DoMany calls
// of 64 inputs, 4 per key: the same 1024 inputs in flight, from 16 callers.
// Read it beside BenchmarkDo/keys=16/batch=64, in the same run.
func BenchmarkDoMany(b *testing.B) {
	for _, shards := range []int{1, 2} {
		b.Run(fmt.Sprintf("shards=%d", shards), func(b *testing.B) { benchDoMany(b, shards) })
	}
}

// benchDoMany is BenchmarkDoMany with Config.Shards shards: with more than
// one, each DoMany spans them all.
func benchDoMany(b *testing.B, shards int) {
	const keys, batch, per = 16, 64, 64
	callers := keys * batch / per
	f, err := New(echo, Config[int, int]{Key: func(v int) int { return v % keys }, MaxBatchSize: batch, MaxQueued: 4 * keys * batch, Shards: shards})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctxs := callerContexts(b, callers)
	ins := make([][]int, callers)
	for c := range ins {
		ins[c] = make([]int, per)
	}
	window(b, callers, per, func(c int) bool {
		for i := range ins[c] {
			ins[c][i] += keys
		}
		outs, err := f.DoMany(ctxs[c], ins[c])
		for i, out := range outs {
			if out != ins[c][i] {
				return false
			}
		}
		return err == nil
	}, func() uint64 { return f.Stats().Batches })
}

// BenchmarkSubmit is BenchmarkDo's keys=16/batch=64 workload through Submit:
// 1024 inputs in flight on 16 keys, from producers that keep 1024/producers
// each in flight (a slot taken before Submit, given back by done, which does
// nothing else but check the answer), with a context that never ends
// (ctx=never) or one of their own (ctx=cancellable), which bounds only the admission.
// Read it beside BenchmarkDo/keys=16/batch=64, in the same run.
func BenchmarkSubmit(b *testing.B) {
	const keys, batch = 16, 64
	for _, bc := range []struct {
		producers   int
		cancellable bool
	}{{64, false}, {64, true}, {1024, false}} {
		name := fmt.Sprintf("producers=%d/ctx=never", bc.producers)
		if bc.cancellable {
			name = fmt.Sprintf("producers=%d/ctx=cancellable", bc.producers)
		}
		b.Run(name, func(b *testing.B) {
			producers := bc.producers
			f, err := New(echo, Config[int, int]{Key: func(v int) int { return v % keys }, MaxBatchSize: batch, MaxQueued: keys * batch})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			ctxs := callerContexts(b, producers)
			if !bc.cancellable {
				for i := range ctxs {
					ctxs[i] = context.Background()
				}
			}
			var wrong atomic.Int64
			slots := make([]chan struct{}, producers)
			dones := make([]func(int, error), producers)
			for p := range dones {
				slots[p] = make(chan struct{}, keys*batch/producers)
				dones[p] = func(out int, err error) {
					if err != nil || out%keys != p%keys {
						wrong.Add(1)
					}
					<-slots[p]
				}
			}
			seq := make([]int, producers)
			window(b, producers, 1, func(p int) bool {
				slots[p] <- struct{}{}
				seq[p] += keys
				return f.Submit(ctxs[p], p%keys+seq[p], dones[p]) == nil
			}, func() uint64 { return f.Stats().Batches })
			if err := f.Flush(context.Background()); err != nil || wrong.Load() > 0 {
				b.Fatalf("Flush: %v; %d wrong answers", err, wrong.Load())
			}
		})
	}
}

// BenchmarkFlush is one Flush of n lanes of one input each, waiting for a
// deadline an hour away, per input: linear in what waits if flat in n.
func BenchmarkFlush(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("lanes=%d", n), func(b *testing.B) {
			f, err := New(echo, Config[int, int]{Key: func(v int) int { return v }, MaxBatchDelay: time.Hour, MaxQueued: n})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			ctx := context.Background()
			var flushed time.Duration
			for b.Loop() {
				for i := range n {
					if err := f.Submit(ctx, i, nil); err != nil {
						b.Fatal(err)
					}
				}
				t := time.Now()
				if err := f.Flush(ctx); err != nil {
					b.Fatal(err)
				}
				flushed += time.Since(t)
			}
			b.ReportMetric(float64(flushed.Nanoseconds())/float64(b.N*n), "ns/input")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkState measures the core alone: admit, take and release per input,
// with a lane holding n inputs of equal rank throughout. The cost per input
// must not grow with n.
func BenchmarkState(b *testing.B) {
	const batch = 64
	for _, n := range []int{10, 1000, 100_000} {
		b.Run(fmt.Sprintf("lane=%d", n), func(b *testing.B) {
			lim := limits{batchSize: batch, delay: time.Millisecond, queued: n + batch}
			s := newState[int, int](lim)
			var now time.Duration
			for i := range n {
				s.admit(0, 1, 0, 0, now, i)
			}
			buf := make([]int, 0, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				for j := range batch {
					s.admit(0, 1, 0, 0, now, j)
				}
				_, got, _, ok := s.take(now, buf[:0])
				if !ok || len(got) != batch {
					b.Fatalf("took %d, %v", len(got), ok)
				}
				now += time.Microsecond
				s.release(0, now)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/input")
		})
	}
}

// heap is the live heap after a full collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkWaiting is the memory of waiting inputs: n inputs over n/10 keys.
//   - room: the waiting room alone (the core, as the loop holds it), per input;
//   - ferry: each input in its own goroutine blocked in Do until a deadline an
//     hour away: the room plus each caller's waiter and reply channel, less
//     the heap of as many goroutines blocked in a plain select.
//
// B-after is the heap once they have drained (and the ferry is closed), less
// the heap before; goroutines-after counts what is left running.
func BenchmarkWaiting(b *testing.B) {
	const n, keys = 1_000_000, 100_000
	b.Run("room", func(b *testing.B) {
		for b.Loop() {
			before := heap()
			s := newState[int, *waiter[int, int, int]](limits{batchSize: 64, delay: time.Hour, queued: n})
			for i := range n {
				s.admit(i%keys, 1, 0, 0, t0, nil)
			}
			waiting := heap() - before
			s.flush()
			for {
				key, _, _, ok := s.take(t0, nil)
				if !ok {
					break
				}
				s.release(key, t0)
			}
			after := int64(heap()) - int64(before)
			runtime.KeepAlive(s)
			b.ReportMetric(float64(waiting)/n, "B/input")
			b.ReportMetric(float64(after), "B-after")
		}
		b.ReportMetric(0, "ns/op")
	})
	b.Run("ferry", func(b *testing.B) {
		for b.Loop() {
			park(n) // so both waves below reuse the same goroutines
			base := heap()
			blocked := park(n)
			f, err := New(echo, Config[int, int]{
				Key: func(v int) int { return v % keys }, MaxBatchDelay: time.Hour, MaxQueued: n,
			})
			if err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			before := heap()
			for i := range n {
				wg.Go(func() { f.Do(context.Background(), i) })
			}
			for f.Stats().Queued < n {
				time.Sleep(10 * time.Millisecond)
			}
			waiting := heap() - before
			if err := f.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
			wg.Wait()
			after := int64(heap()) - int64(base)
			b.ReportMetric((float64(waiting)-float64(blocked))/n, "B/input")
			b.ReportMetric(float64(after), "B-after")
			b.ReportMetric(float64(runtime.NumGoroutine()), "goroutines-after")
		}
		b.ReportMetric(0, "ns/op")
	})
	b.Run("submit", func(b *testing.B) {
		for b.Loop() {
			f, err := New(echo, Config[int, int]{
				Key: func(v int) int { return v % keys }, MaxBatchDelay: time.Hour, MaxQueued: n,
			})
			if err != nil {
				b.Fatal(err)
			}
			before := heap()
			for i := range n {
				if err := f.Submit(context.Background(), i, nil); err != nil {
					b.Fatal(err)
				}
			}
			waiting := heap() - before
			if err := f.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(waiting)/n, "B/input")
		}
		b.ReportMetric(0, "ns/op")
	})
}

// park starts n goroutines blocked in a select, and returns the heap they
// took, once they have all gone again.
func park(n int) uint64 {
	block := make(chan struct{})
	ctx := context.Background()
	var wg sync.WaitGroup
	before := heap()
	for range n {
		wg.Go(func() {
			select {
			case <-block:
			case <-ctx.Done():
			}
		})
	}
	taken := heap() - before
	close(block)
	wg.Wait()
	return taken
}
