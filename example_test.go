package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"time"

	"github.com/ferrygo/ferry"
)

type Event struct {
	Tenant string
	Name   string
}

// A batching call in front of a per-tenant store: many goroutines call Do,
// and each tenant's inputs reach the call together.
func Example() {
	store := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		ids := make([]string, len(events)) // one insert for the whole batch would go here
		for i, e := range events {
			ids[i] = tenant + "/" + strings.ToUpper(e.Name)
		}
		return ids, nil
	}
	f, err := ferry.New(store, ferry.Config[string, Event]{
		Key:           func(e Event) string { return e.Tenant },
		MaxBatchSize:  100,
		MaxBatchDelay: time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	events := []Event{{"acme", "signup"}, {"acme", "login"}, {"globex", "login"}, {"initech", "logout"}}
	ids := make([]string, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Go(func() {
			id, err := f.Do(context.Background(), e)
			if err != nil {
				id = err.Error()
			}
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		fmt.Println(id)
	}
	// Output:
	// acme/SIGNUP
	// acme/LOGIN
	// globex/LOGIN
	// initech/LOGOUT
}

// A Call fails some inputs and not others by returning Errors.
func ExampleErrors() {
	errOdd := errors.New("odd numbers are not allowed")
	half := func(ctx context.Context, _ string, ins []int) ([]int, error) {
		outs := make([]int, len(ins))
		errs := make(ferry.Errors, len(ins))
		for i, v := range ins {
			if v%2 == 1 {
				errs[i] = errOdd
				continue
			}
			outs[i] = v / 2
		}
		return outs, errs
	}
	f, err := ferry.New(half, ferry.Config[string, int]{Key: func(int) string { return "all" }})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	for _, v := range []int{4, 7, 10} {
		out, err := f.Do(context.Background(), v)
		fmt.Println(v, out, err, errors.Is(err, errOdd))
	}
	// Output:
	// 4 2 <nil> false
	// 7 0 odd numbers are not allowed true
	// 10 5 <nil> false
}

// Shutdown runs what waits at once, without waiting for deadlines, and then
// refuses new inputs.
func ExampleFerry_Shutdown() {
	echo := func(ctx context.Context, _ string, ins []string) ([]string, error) { return ins, nil }
	f, err := ferry.New(echo, ferry.Config[string, string]{
		Key:           func(s string) string { return s },
		MaxBatchDelay: time.Hour, // a partial batch would wait an hour
	})
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan string)
	go func() {
		out, _ := f.Do(context.Background(), "waiting")
		done <- out
	}()
	for f.Stats().Queued == 0 {
		time.Sleep(time.Millisecond) // until the input waits
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println("shutdown:", f.Shutdown(ctx))
	fmt.Println("answered:", <-done)
	_, err = f.Do(context.Background(), "late")
	fmt.Println("late:", err)
	// Output:
	// shutdown: <nil>
	// answered: waiting
	// late: ferry: closed
}

// With DirectCalls and no delay, the caller of an idle key makes the call
// itself, on its own goroutine and with its own context: no hand-off.
func ExampleConfig_directCalls() {
	lookup := func(ctx context.Context, key string, ins []string) ([]int, error) {
		outs := make([]int, len(ins))
		for i, s := range ins {
			outs[i] = len(s)
		}
		return outs, nil
	}
	f, err := ferry.New(lookup, ferry.Config[string, string]{
		Key:         func(s string) string { return s },
		DirectCalls: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	n, err := f.Do(context.Background(), "hello")
	fmt.Println(n, err)
	s := f.Stats()
	fmt.Println("direct calls:", s.DirectCalls, "batches:", s.Batches)
	// Output:
	// 5 <nil>
	// direct calls: 1 batches: 0
}
