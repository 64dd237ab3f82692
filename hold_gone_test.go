package ferry

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A batch that fails for good with HoldPaused after every caller of its
// failed inputs gave up still pauses its key, as without HoldPaused: OnPause
// is told, Paused lists it, and the key's later inputs are held until
// Resume. (Before, with nobody left to hold, the key did not pause.)
func TestHoldPausedWhenCallersGaveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls []int
		down := true
		paused := make(chan string, 4)
		f, err := New(func(ctx context.Context, k string, ins []int) ([]int, error) {
			calls = append(calls, ins...)
			if down {
				return nil, errors.New("down")
			}
			return ins, nil
		}, Config[string, int]{
			Key: func(int) string { return "a" }, PauseOnError: true, HoldPaused: true,
			Retry:   func(string, int, error) (time.Duration, bool) { return 10 * time.Millisecond, true },
			OnPause: func(k string, _ error) { paused <- k },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		defer cancel()
		if _, err := f.Do(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do: %v, want ctx's error", err)
		}
		synctest.Wait() // at 10 ms the parked batch has nobody to retry: it fails for good
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if len(paused) != 1 || !slices.Equal(f.Paused(), []string{"a"}) {
			t.Fatalf("OnPause told %d times, Paused %v: want once, [a]", len(paused), f.Paused())
		}
		done := make(chan error, 1)
		if err := f.Submit(context.Background(), 2, func(_ int, err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if len(done) != 0 || !slices.Equal(calls, []int{1}) {
			t.Fatalf("calls %v, answered %d: want the held key's input neither called nor answered", calls, len(done))
		}
		down = false
		f.Resume("a")
		if err := <-done; err != nil || !slices.Equal(calls, []int{1, 2}) {
			t.Fatalf("after Resume: %v, calls %v", err, calls)
		}
	})
}
