package ferry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The harness the end-to-end tests share: a ferry over a recording Call
// that can hold its calls, and helpers to call Do and Submit and read answers.

// in is a test input: its key, id, weight and rank.
type in struct {
	Key  string
	ID   int
	W, R int64
}

var inCfg = Config[string, in]{
	Key:    func(x in) string { return x.Key },
	Weight: func(x in) int64 { return x.W },
	Rank:   func(x in) int64 { return x.R },
}

// called is one call as the harness saw it.
type called struct {
	key string
	ids []int
	at  time.Duration // since the harness started, in the bubble's fake time
}

// harness runs a ferry whose Call records every batch, checks that no key has
// two calls at once, and answers 10*id per input. With hold set, each call
// waits for a token on hold (or its context) first.
type harness struct {
	t     *testing.T
	f     *Ferry[string, in, int]
	start time.Time
	hold  chan struct{}

	mu      sync.Mutex
	calls   []called
	busy    map[string]bool
	running int
	peak    int
	errs    []error
}

func newHarness(t *testing.T, cfg Config[string, in], hold bool) *harness {
	h := &harness{t: t, start: time.Now(), busy: map[string]bool{}}
	if hold {
		h.hold = make(chan struct{})
	}
	if cfg.Key == nil {
		cfg.Key, cfg.Weight, cfg.Rank = inCfg.Key, inCfg.Weight, inCfg.Rank
	}
	if cfg.Shards == 0 {
		cfg.Shards = 1 // one room and one ready line, whatever GOMAXPROCS is: see shard_test.go
	}
	f, err := New(h.call, cfg)
	require.NoError(t, err)
	h.f = f
	return h
}

func (h *harness) call(ctx context.Context, key string, ins []in) ([]int, error) {
	h.mu.Lock()
	c := called{key: key, at: time.Since(h.start)}
	for _, x := range ins {
		c.ids = append(c.ids, x.ID)
	}
	h.calls = append(h.calls, c)
	if h.busy[key] {
		h.errs = append(h.errs, fmt.Errorf("two calls in flight for key %s", key))
	}
	h.busy[key] = true
	h.running++
	h.peak = max(h.peak, h.running)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.busy[key] = false
		h.running--
		h.mu.Unlock()
	}()
	if h.hold != nil {
		select {
		case <-h.hold:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
	outs := make([]int, len(ins))
	for i, x := range ins {
		outs[i] = 10 * x.ID
	}
	return outs, nil
}

// seen returns the calls so far and fails on a broken rule.
func (h *harness) seen() []called {
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(h.t, h.errs)
	return append([]called(nil), h.calls...)
}

// answer is what one Do returned.
type answer struct {
	out int
	err error
}

// do starts Do in a goroutine; its answer arrives on the returned channel.
func (h *harness) do(ctx context.Context, x in) chan answer {
	c := make(chan answer, 1)
	go func() {
		out, err := h.f.Do(ctx, x)
		c <- answer{out, err}
	}()
	return c
}

// got requires that c has its answer now.
func got(t *testing.T, c chan answer) answer {
	t.Helper()
	select {
	case a := <-c:
		return a
	default:
		require.FailNow(t, "Do has not returned")
		return answer{}
	}
}

// pending requires that c has no answer yet.
func pending(t *testing.T, c chan answer) {
	t.Helper()
	select {
	case a := <-c:
		require.FailNow(t, "Do returned early", "%+v", a)
	default:
	}
}

// advance moves the bubble's fake time on by d and lets everything settle.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func ids(calls []called) [][]int {
	var out [][]int
	for _, c := range calls {
		out = append(out, c.ids)
	}
	return out
}

type ctxKey struct{}

// submitted is what one Submit's done received, and where it ran.
type submitted struct {
	out    int
	err    error
	onLoop string
}

// submit calls Submit with a done that records its answer on the channel,
// which is buffered so that done never blocks.
func (h *harness) submit(ctx context.Context, x in) (chan submitted, error) {
	c := make(chan submitted, 2)
	err := h.f.Submit(ctx, x, func(out int, err error) { c <- submitted{out, err, onLoop()} })
	return c, err
}

// once requires that c has exactly one answer now, and returns it.
func once(t *testing.T, c chan submitted) submitted {
	t.Helper()
	require.Len(t, c, 1, "done called once")
	s := <-c
	assert.Empty(t, s.onLoop, "done ran on the loop")
	return s
}

// reports collects what OnBatch is given, and fails where it ran on the loop.
type reports struct {
	mu     sync.Mutex
	bs     []Batch[string]
	onLoop []string
}

func (r *reports) on(b Batch[string]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bs = append(r.bs, b)
	if fn := onLoop(); fn != "" {
		r.onLoop = append(r.onLoop, fn)
	}
}

// get returns the reports so far, by key, and requires that none ran on the loop.
func (r *reports) get(t *testing.T) []Batch[string] {
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.onLoop, "OnBatch ran on the loop")
	bs := slices.Clone(r.bs)
	slices.SortStableFunc(bs, func(a, b Batch[string]) int { return strings.Compare(a.Key, b.Key) })
	return bs
}

// do starts f.Do in a goroutine; its answer arrives on the returned channel.
func do(f *Ferry[string, in, int], ctx context.Context, x in) chan answer {
	c := make(chan answer, 1)
	go func() {
		out, err := f.Do(ctx, x)
		c <- answer{out, err}
	}()
	return c
}

// tens answers 10*id per input.
func tens(ins []in) []int {
	outs := make([]int, len(ins))
	for i, x := range ins {
		outs[i] = 10 * x.ID
	}
	return outs
}

var errBoom = errors.New("boom")

// bubble runs f in a synctest bubble, as synctest.Test does, but a bubble
// whose goroutines all block for good, or whose test ends (a t.Fatal) with
// goroutines still blocked in it, fails its test instead of crashing the
// test binary: synctest.Test panics with a deadlock error, recovered here.
// Its goroutines stay blocked, and leak; the other tests go on. Any other
// panic goes on up.
func bubble(t *testing.T, f func(*testing.T)) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok && strings.Contains(err.Error(), "deadlock: all goroutines in bubble are blocked") {
				t.Fatalf("the bubble deadlocked: %v", err)
			}
			if err, ok := r.(error); ok && strings.Contains(err.Error(), "deadlock: main bubble goroutine has exited but blocked goroutines remain") {
				t.Fatalf("the bubble's test ended with its goroutines blocked: %v", err)
			}
			panic(r)
		}
	}()
	synctest.Test(t, f)
}

// TestBubbleDeadlockFails checks bubble's promise: a deadlocked bubble, or
// one whose test fails with goroutines still blocked in it, fails its test
// and the binary goes on. It runs each in a process of its own and expects
// that test, alone, to fail. Mutation: bubble calling synctest.Test bare,
// or recovering only the first deadlock (the binary crashes).
func TestBubbleDeadlockFails(t *testing.T) {
	switch os.Getenv("FERRY_BUBBLE_DEADLOCK") {
	case "1":
		bubble(t, func(*testing.T) { <-make(chan int) })
		return
	case "2":
		bubble(t, func(t *testing.T) {
			go func() { <-make(chan int) }()
			synctest.Wait()
			t.Fatal("a failure, with a goroutine blocked")
		})
		return
	}
	for _, tc := range []struct{ mode, says string }{
		{"1", "the bubble deadlocked"},
		{"2", "the bubble's test ended with its goroutines blocked"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBubbleDeadlockFails$", "-test.v")
		cmd.Env = append(os.Environ(), "FERRY_BUBBLE_DEADLOCK="+tc.mode)
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "the deadlocked bubble's test fails")
		assert.Contains(t, string(out), tc.says)
		assert.NotContains(t, string(out), "panic:", "no crash")
	}
}
