package load_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"sync"

	"github.com/ferrygo/ferry/load"
)

type User struct {
	ID   int
	Name string
}

// users is the table the examples read, in place of a database.
var users = map[int]User{1: {1, "ada"}, 2: {2, "grace"}, 3: {3, "edsger"}}

// A process-wide loader: each Load is fetched with the loads of other
// goroutines that wait with it, in one query per batch.
func ExampleNew() {
	var mu sync.Mutex
	var batches [][]int
	fetch := func(ctx context.Context, ids []int) (map[int]User, error) {
		mu.Lock()
		batches = append(batches, slices.Sorted(slices.Values(ids)))
		mu.Unlock()
		m := make(map[int]User, len(ids)) // SELECT ... WHERE id = ANY($1) would go here
		for _, id := range ids {
			if u, ok := users[id]; ok {
				m[id] = u
			}
		}
		return m, nil
	}
	byID, err := load.New(fetch, load.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer byID.Close()

	u, err := byID.Load(context.Background(), 2) // from as many goroutines as you like
	fmt.Println(u.Name, err)
	_, err = byID.Load(context.Background(), 42)
	fmt.Println(errors.Is(err, load.ErrNotFound))
	fmt.Println(batches)
	// Output:
	// grace <nil>
	// true
	// [[2] [42]]
}

// LoadMany admits its ids together; equal ids are fetched once, and an id
// not found fails alone, in a ferry.Errors.
func ExampleLoader_LoadMany() {
	var fetched [][]int
	fetch := func(ctx context.Context, ids []int) (map[int]User, error) {
		fetched = append(fetched, slices.Sorted(slices.Values(ids)))
		m := map[int]User{}
		for _, id := range ids {
			if u, ok := users[id]; ok {
				m[id] = u
			}
		}
		return m, nil
	}
	l, err := load.New(fetch, load.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	us, err := l.LoadMany(context.Background(), []int{3, 1, 3, 7})
	var names []string
	for _, u := range us {
		names = append(names, u.Name)
	}
	fmt.Printf("%q\n", names)
	fmt.Println(errors.Is(err, load.ErrNotFound))
	fmt.Println(fetched)
	// Output:
	// ["edsger" "ada" "edsger" ""]
	// true
	// [[1 3 7]]
}

// A memo per request: an id the request loaded is not fetched again, and
// Prime puts in what the request knows already.
func ExampleWithMemo() {
	fetches := 0
	fetch := func(ctx context.Context, ids []int) (map[int]User, error) {
		fetches++
		m := map[int]User{}
		for _, id := range ids {
			m[id] = users[id]
		}
		return m, nil
	}
	l, err := load.New(fetch, load.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	req := load.WithMemo(context.Background()) // in the request's middleware
	l.Prime(req, 9, User{9, "from the request"})
	for range 3 {
		u, _ := l.Load(req, 1)
		fmt.Println(u.Name)
	}
	u, _ := l.Load(req, 9)
	fmt.Println(u.Name)
	fmt.Println("fetches:", fetches)
	// Output:
	// ada
	// ada
	// ada
	// from the request
	// fetches: 1
}

type tenantKey struct{}

// A scope per tenant: batches cross requests but never tenants, and the
// fetch learns its tenant from ScopeOf.
func ExampleConfig_scope() {
	fetch := func(ctx context.Context, ids []int) (map[int]string, error) {
		tenant := load.ScopeOf(ctx).(string) // SET ROLE, or WHERE tenant = $1
		m := map[int]string{}
		for _, id := range ids {
			m[id] = fmt.Sprintf("%s/%d", tenant, id)
		}
		return m, nil
	}
	l, err := load.New(fetch, load.Config{
		Scope: func(ctx context.Context) any { return ctx.Value(tenantKey{}) },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	for _, t := range []string{"acme", "globex"} {
		ctx := context.WithValue(context.Background(), tenantKey{}, t)
		v, _ := l.Load(ctx, 1)
		fmt.Println(v)
	}
	// Output:
	// acme/1
	// globex/1
}
