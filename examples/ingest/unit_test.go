package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/jackc/pgx/v5/pgconn"
)

// The tests in this file need no database.

func TestTally(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	records := []record{
		{tenant: "a", id: "1", sent: at(0), ack: at(10), seq: 1},
		{tenant: "a", id: "2", sent: at(5), ack: at(12)},              // posted before 1's ack: either order
		{tenant: "a", id: "3", sent: at(20), ack: at(30), seq: 2},     // after both, stored before 2: out of order
		{tenant: "a", id: "4", sent: at(40), ack: at(50), seq: 9},     // its 201 said 9
		{tenant: "a", id: "5", sent: at(60), ack: at(70)},             // lost
		{tenant: "a", id: "6", sent: at(80)},                          // not acknowledged: not counted
		{tenant: "b", id: "1", sent: at(0), ack: at(1)},               // stored twice
		{tenant: "b", id: "2", sent: at(2), ack: at(3), seq: 3},       // another tenant's numbers are its own
		{tenant: "b", id: "3", sent: at(100), ack: at(101), seq: 100}, // after all
	}
	stored := map[eventKey][]int64{
		{"a", "1"}: {1}, {"a", "2"}: {3}, {"a", "3"}: {2}, {"a", "4"}: {4}, {"a", "6"}: {5},
		{"b", "1"}: {2, 7}, {"b", "2"}: {3}, {"b", "3"}: {100},
	}
	got := tally(records, stored)
	want := figures{acked: 8, stored: 9, lost: 1, duplicated: 1, violations: 1, wrongSeq: 1}
	if got != want {
		t.Errorf("tally = %+v, want %+v", got, want)
	}
	// The same events stored in the order they were acknowledged: no violation.
	stored[eventKey{"a", "2"}], stored[eventKey{"a", "3"}] = []int64{2}, []int64{3}
	records[2].seq = 3
	if got := tally(records, stored); got.violations != 0 || got.wrongSeq != 1 {
		t.Errorf("in order: %+v", got)
	}
}

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true}, // terminated by an administrator
		{&pgconn.PgError{Code: "57P03"}, true}, // the server is starting
		{&pgconn.PgError{Code: "08006"}, true},
		{&pgconn.PgError{Code: "40P01"}, true},
		{&pgconn.PgError{Code: "57014"}, true}, // statement timeout
		{&pgconn.PgError{Code: "53300"}, true},
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "40001"}), true},
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation
		{&pgconn.PgError{Code: "22P02"}, false}, // bad data
		{&pgconn.PgError{Code: "42P01"}, false}, // no such table
		{io.ErrUnexpectedEOF, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{ferry.Errors{nil, io.ErrUnexpectedEOF, io.ErrUnexpectedEOF}, true}, // a pass event by event ended by the connection
		{fmt.Errorf("%w: %w", ferry.ErrCallTimeout, context.DeadlineExceeded), true},
		{fmt.Errorf("%w: %w", ferry.ErrCallTimeout, &pgconn.PgError{Code: "57014"}), true},
		{context.DeadlineExceeded, false},
		{context.Canceled, false},
		{&ferry.PanicError{Value: "x"}, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v", c.err, got)
		}
	}
	if ambiguous(&pgconn.PgError{Code: "57P01"}) || !ambiguous(io.ErrUnexpectedEOF) || !ambiguous(errLost) {
		t.Error("a server's error is not ambiguous, a broken connection is")
	}
	if !refused(&pgconn.PgError{Code: "22003"}) || refused(&pgconn.PgError{Code: "42P01"}) || refused(io.ErrUnexpectedEOF) {
		t.Error("a data exception is refused, nothing else")
	}
}

func TestRetry(t *testing.T) {
	transient := &pgconn.PgError{Code: "57P01"}
	for attempt := 1; attempt < maxAttempts; attempt++ {
		d, ok := retry(attempt, transient)
		top := min(10*time.Millisecond<<(attempt-1), 500*time.Millisecond)
		if !ok || d < top/2 || d > top {
			t.Errorf("attempt %d: %v, %v; want again after %v to %v", attempt, d, ok, top/2, top)
		}
	}
	if _, ok := retry(maxAttempts, transient); ok {
		t.Errorf("retried after %d attempts", maxAttempts)
	}
	if _, ok := retry(1, &pgconn.PgError{Code: "23505"}); ok {
		t.Error("retried a unique violation")
	}
	timeout := fmt.Errorf("%w: %w", ferry.ErrCallTimeout, context.DeadlineExceeded)
	if _, ok := retry(1, timeout); !ok {
		t.Error("a first timeout not retried")
	}
	if _, ok := retry(maxTimeouts, timeout); ok {
		t.Errorf("retried after %d timeouts", maxTimeouts)
	}
}

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{ferry.ErrRejected, 429},
		{fmt.Errorf("%w: %w", context.DeadlineExceeded, ferry.ErrCallTimeout), 504},
		{ferry.Errors{nil, fmt.Errorf("x: %w", ferry.ErrCallTimeout)}, 504},
		{context.DeadlineExceeded, 504},
		{fmt.Errorf("%w: %w", ferry.ErrPaused, fmt.Errorf("%w: x", ferry.ErrCallTimeout)), 503},
		{&pgconn.PgError{Code: "22003"}, 422},
		{ferry.ErrClosed, 500},
		{&pgconn.PgError{Code: "42P01"}, 500},
	} {
		if got := status(c.err); got != c.want {
			t.Errorf("status(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

func TestSpool(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spool")
	if evs, err := readSpool(path); err != nil || evs != nil {
		t.Fatalf("no file: %v, %v", evs, err)
	}
	evs := []event{
		{Tenant: "a", ID: "1", Payload: json.RawMessage(`{"x":1}`), accepted: 3},
		{Tenant: "b", ID: "2", accepted: 5},
	}
	if err := writeSpool(path, evs[:1]); err != nil {
		t.Fatal(err)
	}
	if err := writeSpool(path, evs); err != nil { // replaces the file whole
		t.Fatal(err)
	}
	got, err := readSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, evs, func(a, b event) bool {
		return a.Tenant == b.Tenant && a.ID == b.ID && string(a.Payload) == string(b.Payload) && a.accepted == b.accepted
	}) {
		t.Errorf("read %+v, want %+v", got, evs)
	}
	if err := appendEvents(path, evs[:1]); err != nil {
		t.Fatal(err)
	}
	if got, _ := readSpool(path); len(got) != 3 {
		t.Errorf("%d events after an append, want 3", len(got))
	}
	if err := removeSpool(path); err != nil {
		t.Fatal(err)
	}
	if err := removeSpool(path); err != nil {
		t.Errorf("removing a missing spool: %v", err)
	}
	if err := os.WriteFile(path, []byte("{\"tenant\":\"a\"}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readSpool(path); err == nil {
		t.Error("a torn spool read without error")
	}
}

// A paused tenant resumes after a backoff and once every done of its async
// events has come: its kept events are written first, in order, then it is
// resumed; a write that fails keeps the tenant paused and tries again after
// a backoff twice as long. A tenant with nothing kept is resumed at once
// after its backoff. stop cancels a resume's write and returns what is kept.
func TestPauses(t *testing.T) {
	bubble(t, func(t *testing.T) {
		start := time.Now()
		var (
			mu      sync.Mutex // the fakes run on the resumes' goroutines
			writes  []string   // "when tenant ids"
			resumes []string   // "when tenant"
			fail    = 1        // writes to fail, each after storing one event
			hold    = map[string]chan struct{}{"g": make(chan struct{})}
		)
		p := newPauses(func(ctx context.Context, tenant string, evs []event) (int, error) {
			ids := ""
			for _, e := range evs {
				ids += e.ID
			}
			mu.Lock()
			writes = append(writes, fmt.Sprint(time.Since(start), " ", tenant, " ", ids))
			failed := fail > 0 && tenant != "c"
			if failed {
				fail--
			}
			mu.Unlock()
			if c := hold[tenant]; c != nil {
				<-c
			}
			switch {
			case tenant == "c": // down until stop
				<-ctx.Done()
				return 0, ctx.Err()
			case failed:
				return 1, errors.New("down")
			}
			return len(evs), nil
		}, func(tenant string) {
			mu.Lock()
			defer mu.Unlock()
			resumes = append(resumes, fmt.Sprint(time.Since(start), " ", tenant))
		})
		check := func(when string, wantWrites, wantResumes []string) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(writes) // those of one instant in any order
			if !slices.Equal(writes, wantWrites) || !slices.Equal(resumes, wantResumes) {
				t.Errorf("at %s: writes %q, resumes %q; want %q, %q", when, writes, resumes, wantWrites, wantResumes)
			}
			writes, resumes = nil, nil
		}
		ev := func(tenant, id string) event { return event{Tenant: tenant, ID: id} }

		for range 3 {
			p.admit("a")
		}
		p.done("a", ev("a", "0"), false) // stored
		p.failed("a")                    // Retry gave up on a call of a's
		p.failed("b")                    // a tenant of Do events only
		time.Sleep(50 * time.Millisecond)
		p.done("a", ev("a", "1"), true) // its call failed
		time.Sleep(100 * time.Millisecond)
		check("150ms", nil, []string{"100ms b"}) // a's third done has not come
		p.done("a", ev("a", "2"), true)          // it waited in a's lane as a was paused
		time.Sleep(time.Second)                  // the first write fails after storing 1
		check("1.15s", []string{"150ms a 12", "350ms a 2"}, []string{"350ms a"})
		p.mu.Lock()
		if len(p.tenants) != 0 {
			t.Errorf("%d tenants held after their resumes", len(p.tenants))
		}
		p.mu.Unlock()

		// An async event of g admitted as g's kept one is written: g resumes
		// once its done has come and what it kept is written too.
		p.admit("g")
		p.done("g", ev("g", "1"), true)
		time.Sleep(200 * time.Millisecond)
		p.admit("g")
		close(hold["g"])
		check("1.35s", []string{"1.25s g 1"}, nil)
		p.done("g", ev("g", "2"), true)
		check("1.35s", []string{"1.35s g 2"}, []string{"1.35s g"})

		p.admit("c")
		p.done("c", ev("c", "1"), true)
		p.admit("d")
		p.done("d", ev("d", "1"), true)
		time.Sleep(time.Second)
		check("2.35s", []string{"1.45s c 1", "1.45s d 1"}, []string{"1.45s d"}) // c's write hangs
		if kept := p.stop(); len(kept) != 1 || kept[0].Tenant != "c" || kept[0].ID != "1" {
			t.Errorf("stop kept %v, want c's 1", kept)
		}
		p.failed("e")
		time.Sleep(time.Minute)
		check("after stop", nil, nil)
	})
}

func TestParseMix(t *testing.T) {
	if w, err := parseMix("do=6,async=3,bulk=1"); err != nil || w != [3]int{6, 3, 1} {
		t.Errorf("%v, %v", w, err)
	}
	if w, err := parseMix("async"); err != nil || w != [3]int{0, 1, 0} {
		t.Errorf("%v, %v", w, err)
	}
	for _, bad := range []string{"do=x", "put=1", "do=0", "do=-1"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestLoadLoopbackOnly(t *testing.T) {
	lc := loadConfig{target: "http://10.1.2.3:8080", n: 1, duration: time.Second, writers: 1, tenants: 1, zipf: 1.1, mix: [3]int{1}, bulk: 1}
	if _, err := generate(context.Background(), lc); err == nil {
		t.Error("a load aimed beyond 127.0.0.1")
	}
}

// bubble runs f in a synctest bubble, but a bubble whose goroutines all
// block for good fails its test instead of crashing the test binary (as the
// root module's tests do).
func bubble(t *testing.T, f func(*testing.T)) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); ok && strings.Contains(err.Error(), "deadlock: all goroutines in bubble are blocked") {
				t.Fatalf("the bubble deadlocked: %v", err)
			}
			panic(r)
		}
	}()
	synctest.Test(t, f)
}
