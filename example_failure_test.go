package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ferrygo/ferry"
)

// Retry calls a failed call again after a backoff, on the worker that made
// it, with the inputs still failed; OnBatch hears of every attempt, and
// Retried marks those that were called again.
func ExampleConfig_retry() {
	var mu sync.Mutex
	var reports []string
	tries := 0
	flaky := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if tries++; tries < 3 {
			return nil, errors.New("connection reset") // the database restarts
		}
		return make([]string, len(events)), nil
	}
	f, err := ferry.New(flaky, ferry.Config[string, Event]{
		Key: func(e Event) string { return e.Tenant },
		Retry: func(tenant string, attempt int, err error) (time.Duration, bool) {
			return time.Duration(attempt) * time.Millisecond, attempt < 5 // 1ms, 2ms, ...; 5 attempts at most
		},
		OnBatch: func(b ferry.Batch[string]) { // after the callers are answered
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, fmt.Sprint("attempt ", b.Attempt, " failed: ", b.Err != nil, " retried: ", b.Retried))
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	_, err = f.Do(context.Background(), Event{"acme", "signup"})
	fmt.Println("Do:", err)
	f.Close() // waits for OnBatch
	fmt.Println(strings.Join(reports, "\n"))
	// Output:
	// Do: <nil>
	// attempt 1 failed: true retried: true
	// attempt 2 failed: true retried: true
	// attempt 3 failed: false retried: false
}

// PauseOnError pauses a key whose call failed for good: what waits in its
// lane and what comes later get ErrPaused at once, and other keys go on,
// until Resume. A probe (here, the next attempt by hand) decides when.
func ExampleFerry_Resume() {
	var mu sync.Mutex
	down := true
	store := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if tenant == "acme" && down {
			return nil, errors.New("acme's shard is down")
		}
		return make([]string, len(events)), nil
	}
	f, err := ferry.New(store, ferry.Config[string, Event]{
		Key:          func(e Event) string { return e.Tenant },
		PauseOnError: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	_, err = f.Do(ctx, Event{"acme", "signup"})
	fmt.Println("first:", err)
	_, err = f.Do(ctx, Event{"acme", "login"})
	fmt.Println("paused:", errors.Is(err, ferry.ErrPaused))
	_, err = f.Do(ctx, Event{"globex", "login"})
	fmt.Println("other keys:", err)

	mu.Lock()
	down = false // acme's shard is back
	mu.Unlock()
	f.Resume("acme")
	_, err = f.Do(ctx, Event{"acme", "login"})
	fmt.Println("resumed:", err)
	// Output:
	// first: acme's shard is down
	// paused: true
	// other keys: <nil>
	// resumed: <nil>
}

// WaitForRoom makes callers wait, in line, while the room is full, instead
// of ErrRejected; their ctx bounds the wait (then ErrDropped: nothing was
// admitted, safe to send again).
func ExampleConfig_waitForRoom() {
	store := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		ids := make([]string, len(events))
		for i, e := range events {
			ids[i] = tenant + "/" + e.Name
		}
		return ids, nil
	}
	f, err := ferry.New(store, ferry.Config[string, Event]{
		Key:           func(e Event) string { return e.Tenant },
		MaxQueued:     1, // one input waits for its batch at a time
		MaxBatchDelay: 50 * time.Millisecond,
		WaitForRoom:   true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	var mu sync.Mutex
	var ids []string
	var wg sync.WaitGroup
	for _, e := range []Event{{"acme", "signup"}, {"globex", "login"}, {"initech", "login"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := f.Do(context.Background(), e) // two of the three wait for room first
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				ids = append(ids, err.Error())
				return
			}
			ids = append(ids, id)
		}()
	}
	wg.Wait()
	sort.Strings(ids)
	fmt.Println(ids)

	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	go f.Do(context.Background(), Event{"acme", "logout"}) // fills the room for 50ms
	for f.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	_, err = f.Do(ctx, Event{"globex", "logout"})
	fmt.Println("gave up waiting:", errors.Is(err, context.DeadlineExceeded), "safe to send again:", errors.Is(err, ferry.ErrDropped))
	// Output:
	// [acme/signup globex/login initech/login]
	// gave up waiting: true safe to send again: true
}

// OnPause starts a resume probe for each pause, which needs no bookkeeping:
// it waits until the store answers, then resumes the key. Paused lists the
// keys paused meanwhile, in the order they paused.
func ExampleConfig_onPause() {
	var mu sync.Mutex
	down := true
	store := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if tenant == "acme" && down {
			return nil, errors.New("acme's shard is down")
		}
		return make([]string, len(events)), nil
	}
	told := make(chan string, 1)
	resumed := make(chan struct{})
	var f *ferry.Ferry[string, Event, string]
	f, err := ferry.New(store, ferry.Config[string, Event]{
		Key:          func(e Event) string { return e.Tenant },
		PauseOnError: true,
		OnPause: func(tenant string, err error) {
			told <- tenant + ": " + err.Error()
			go func() { // the probe: OnPause itself returns at once
				defer close(resumed)
				for {
					mu.Lock()
					up := !down
					mu.Unlock()
					if up {
						f.Resume(tenant)
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	_, err = f.Do(ctx, Event{"acme", "signup"})
	fmt.Println("first:", err)
	fmt.Println("told:", <-told)
	fmt.Println("paused:", f.Paused())

	mu.Lock()
	down = false // acme's shard is back: the probe resumes it
	mu.Unlock()
	<-resumed
	fmt.Println("paused:", f.Paused())
	_, err = f.Do(ctx, Event{"acme", "login"})
	fmt.Println("resumed:", err)
	// Output:
	// first: acme's shard is down
	// told: acme: acme's shard is down
	// paused: [acme]
	// paused: []
	// resumed: <nil>
}

// HoldPaused holds a failed key's inputs, in order, while its store is
// down, admits more behind them, and runs them all at Resume: no caller is
// answered ErrPaused, and no worker waits meanwhile.
func ExampleConfig_holdPaused() {
	var mu sync.Mutex
	down := true
	store := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return nil, errors.New("the database is down")
		}
		ids := make([]string, len(events))
		for i, e := range events {
			ids[i] = tenant + "/" + e.Name
		}
		return ids, nil
	}
	held := make(chan string, 1)
	f, err := ferry.New(store, ferry.Config[string, Event]{
		Key:          func(e Event) string { return e.Tenant },
		PauseOnError: true,
		HoldPaused:   true,
		OnPause:      func(tenant string, err error) { held <- tenant },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	done := make(chan string, 3)
	submit := func(name string) {
		err := f.Submit(ctx, Event{"acme", name}, func(id string, err error) { done <- fmt.Sprint(id, " ", err) })
		if err != nil {
			log.Fatal(err)
		}
	}
	submit("signup")
	submit("login")
	fmt.Println("held:", <-held)
	submit("logout") // admitted behind them
	fmt.Println("paused:", f.Paused())

	mu.Lock()
	down = false
	mu.Unlock()
	f.Resume("acme")
	for range 3 {
		fmt.Println(<-done)
	}
	// Output:
	// held: acme
	// paused: [acme]
	// acme/signup <nil>
	// acme/login <nil>
	// acme/logout <nil>
}
