package ferry_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
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

// Shutdown refuses new inputs at once, then runs what waits without waiting
// for deadlines, and closes the ferry.
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

// With MaxCallsPerKey 2, a slow call holds only its own callers: a second
// Do of the same key gets a call of its own and is answered while the
// first call still runs.
func ExampleConfig_maxCallsPerKey() {
	started, slow := make(chan struct{}), make(chan struct{})
	fetch := func(ctx context.Context, table string, ids []int) ([]string, error) {
		outs := make([]string, len(ids))
		for i, id := range ids {
			if id == 13 { // a slow read
				close(started)
				<-slow
			}
			outs[i] = fmt.Sprint(table, "/", id)
		}
		return outs, nil
	}
	f, err := ferry.New(fetch, ferry.Config[string, int]{
		Key:            func(int) string { return "users" }, // one key: the table
		DirectCalls:    true,
		MaxCallsPerKey: 2,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	first := make(chan string)
	go func() {
		v, _ := f.Do(context.Background(), 13)
		first <- v
	}()
	<-started // the slow call runs
	v, err := f.Do(context.Background(), 7)
	fmt.Println(v, err)
	close(slow)
	fmt.Println(<-first)
	// Output:
	// users/7 <nil>
	// users/13
}

// Submit is for fire-and-forget producers: it tells at once whether the input
// was admitted, and done gets its answer later. Flush waits for what was
// submitted, as a checkpoint.
func ExampleFerry_Submit() {
	store := func(ctx context.Context, tenant string, events []Event) ([]int, error) {
		return make([]int, len(events)), nil // one insert per tenant
	}
	f, err := ferry.New(store, ferry.Config[string, Event]{
		Key:           func(e Event) string { return e.Tenant },
		MaxBatchDelay: time.Hour, // Flush does not wait for it
		MaxQueued:     2,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	var mu sync.Mutex
	written := 0
	done := func(_ int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			written++
		}
	}
	for _, e := range []Event{{"acme", "signup"}, {"acme", "login"}, {"globex", "login"}} {
		if err := f.Submit(context.Background(), e, done); err != nil {
			fmt.Println(e.Name, "for", e.Tenant, "not accepted:", errors.Is(err, ferry.ErrRejected)) // a 503, say
		}
	}
	if err := f.Flush(context.Background()); err != nil {
		log.Fatal(err)
	}
	mu.Lock()
	fmt.Println("written:", written)
	mu.Unlock()
	// Output:
	// login for globex not accepted: true
	// written: 2
}

// DoMany is for bulk endpoints: one admission for all the inputs, which join
// their lanes at once, and the outputs in order.
func ExampleFerry_DoMany() {
	store := func(ctx context.Context, tenant string, events []Event) ([]string, error) {
		ids := make([]string, len(events))
		for i, e := range events {
			ids[i] = fmt.Sprintf("%s/%s (batch of %d)", tenant, e.Name, len(events))
		}
		return ids, nil
	}
	f, err := ferry.New(store, ferry.Config[string, Event]{Key: func(e Event) string { return e.Tenant }})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()

	ids, err := f.DoMany(context.Background(), []Event{{"acme", "signup"}, {"globex", "login"}, {"acme", "login"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range ids {
		fmt.Println(id)
	}
	// Output:
	// acme/signup (batch of 2)
	// globex/login (batch of 1)
	// acme/login (batch of 2)
}

// An HTTP handler maps ferry's errors to statuses: a full room or a closing
// ferry is 503, so the client retries later or elsewhere; a client that went
// away gets nothing, since no one reads the answer.
func ExampleErrRejected() {
	lookup := func(ctx context.Context, _ string, ins []string) ([]int, error) {
		outs := make([]int, len(ins))
		for i, s := range ins {
			outs[i] = len(s)
		}
		return outs, nil
	}
	f, err := ferry.New(lookup, ferry.Config[string, string]{
		Key:           func(s string) string { return s },
		MaxQueued:     1,
		MaxBatchDelay: time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	handler := func(w http.ResponseWriter, r *http.Request) {
		n, err := f.Do(r.Context(), r.URL.Query().Get("q"))
		switch {
		case errors.Is(err, ferry.ErrRejected), errors.Is(err, ferry.ErrClosed), errors.Is(err, ferry.ErrPaused),
			errors.Is(err, ferry.ErrDropped): // no call saw it: safe to send again (ErrDropped: ctx ended as it waited)
			w.Header().Set("Retry-After", "1")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		case errors.Is(err, ferry.ErrCallTimeout):
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		case r.Context().Err() != nil: // the client went away after a call took the input: it may have run
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadGateway)
		default:
			fmt.Fprintln(w, n)
		}
	}
	go f.Do(context.Background(), "waiting") // it waits an hour: the room of 1 is full
	for f.Stats().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	rec := httptest.NewRecorder()
	handler(rec, httptest.NewRequest("GET", "/?q=hello", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 503 ferry: rejected: the room is full (MaxQueued 1)
}
