package bench

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkWake is the prototype of the cores issue's first question (26):
// what a batch saves by waking its callers with one close rather than one
// send each, and what watching the caller's context costs in each shape.
// It keeps only the hand-off: callers send a request to one server
// goroutine, which answers a batch once it has one from every caller, and
// each caller then sends again. Shapes:
//
//   - send: each caller waits on a channel of its own, which the server
//     sends its answer on (ferry's shape: a worker sends each answer);
//   - close: the callers of a batch wait on the batch's channel, which the
//     server closes once it has written every answer (dataloadgen's);
//
// each with the caller waiting on its channel alone (-noctx), or in a
// select with the Done of its own context as ferry's Do must (one context
// per caller, as a server's requests and BenchmarkCores's callers have: a
// context shared by every caller would add contention on its channel that
// Do's callers do not have). The close shape is given its batch's channel
// for nothing here (the batches are numbered, and their channels made
// ahead): a ferry caller learns its batch only at take, after it parked, so
// it would need a word from the loop first, a second park per input; that is
// not in these figures, which are close's best.
func BenchmarkWake(b *testing.B) {
	for _, batch := range []int{8, 64} {
		for _, shape := range []string{"send", "send-noctx", "close", "close-noctx"} {
			b.Run(fmt.Sprintf("batch=%d/shape=%s", batch, shape), func(b *testing.B) {
				wake(b, batch, shape)
			})
		}
	}
}

// wake runs batch callers for at least b.N inputs in the given shape.
func wake(b *testing.B, batch int, shape string) {
	rounds := max(1, b.N/batch)
	type reqw struct {
		i   int
		own chan int
	}
	reqs := make(chan reqw, batch)
	gens := make([]chan struct{}, rounds+1) // close: batch r's channel, made ahead
	for r := range gens {
		gens[r] = make(chan struct{})
	}
	outs := make([][]int, rounds+1)
	for r := range outs {
		outs[r] = make([]int, batch)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	withCtx := shape == "send" || shape == "close"
	byClose := shape == "close" || shape == "close-noctx"
	for i := range batch {
		ctx, cancel := context.WithCancel(ctx) // its own, as each Do's caller has
		defer cancel()
		go func() {
			own := make(chan int, 1)
			for r := range rounds {
				reqs <- reqw{i, own}
				switch {
				case byClose && withCtx:
					select {
					case <-gens[r]:
					case <-ctx.Done():
						return
					}
					_ = outs[r][i]
				case byClose:
					<-gens[r]
					_ = outs[r][i]
				case withCtx:
					select {
					case <-own:
					case <-ctx.Done():
						return
					}
				default:
					<-own
				}
			}
			done <- struct{}{}
		}()
	}
	b.ResetTimer()
	waiting := make([]reqw, 0, batch)
	for r := range rounds {
		waiting = waiting[:0]
		for range batch {
			waiting = append(waiting, <-reqs)
		}
		if byClose {
			for _, w := range waiting {
				outs[r][w.i] = w.i
			}
			close(gens[r])
			continue
		}
		for _, w := range waiting {
			w.own <- w.i
		}
	}
	for range batch {
		<-done
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(rounds*batch), "ns/input")
}

// BenchmarkIntake is the prototype of the cores issue's third question (26):
// whether callers can hand their inputs to a busy loop more cheaply than
// with one message each. callers goroutines hand n inputs each to one
// server goroutine, which takes them in wake-ups, as ferry's loop reads all
// that is queued at once. Shapes:
//
//   - send: a send each on the server's buffered channel (ferry's inbound
//     channel);
//   - intake: the inputs go into a slice that a channel of one guards (the
//     channel idiom of ferry's shared room: take it, change it, put it
//     back), and only the caller that finds the slice empty sends the
//     server a wake-up; the server swaps the slice out under the same
//     guard. While the server is busy, most inputs cost no message.
func BenchmarkIntake(b *testing.B) {
	for _, callers := range []int{16, 1024} {
		for _, shape := range []string{"send", "intake"} {
			b.Run(fmt.Sprintf("callers=%d/shape=%s", callers, shape), func(b *testing.B) {
				intake(b, callers, shape == "intake")
			})
		}
	}
}

// intake runs callers goroutines handing at least b.N inputs to one server.
func intake(b *testing.B, callers int, guarded bool) {
	per := max(1, b.N/callers)
	inc := make(chan int, 1024)  // send: the inputs; intake: wake-ups
	guard := make(chan []int, 1) // intake: the inputs not yet taken
	guard <- make([]int, 0, 1024)
	done := make(chan struct{})
	for i := range callers {
		go func() {
			for j := range per {
				if !guarded {
					inc <- i + j
					continue
				}
				q := <-guard
				wake := len(q) == 0
				guard <- append(q, i+j)
				if wake {
					inc <- 0
				}
			}
			done <- struct{}{}
		}()
	}
	b.ResetTimer()
	spare := make([]int, 0, 1024)
	sum, left := 0, per*callers
	for left > 0 {
		v := <-inc
		if !guarded {
			sum += v
			left--
			for n := len(inc); n > 0; n-- {
				sum += <-inc
				left--
			}
			continue
		}
		q := <-guard
		guard <- spare
		for _, v := range q {
			sum += v
		}
		left -= len(q)
		spare = q[:0]
	}
	for range callers {
		<-done
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(per*callers), "ns/input")
	_ = sum
}
