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

// A paused tenant is resumed after a backoff that doubles with each pause in
// a row, from 100 ms up to 3.2 s, until a call of it commits; it is held
// (its Do requests get 503) from its pause to its resume. After stop no
// resume comes.
func TestResumes(t *testing.T) {
	bubble(t, func(t *testing.T) {
		start := time.Now()
		var (
			mu      sync.Mutex // the fake runs on the timers' goroutines
			resumes []string   // "when tenant"
		)
		r := newResumes(func(tenant string) {
			mu.Lock()
			defer mu.Unlock()
			resumes = append(resumes, fmt.Sprint(time.Since(start), " ", tenant))
		})
		check := func(when string, want ...string) {
			t.Helper()
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(resumes, want) {
				t.Errorf("at %s: resumes %q, want %q", when, resumes, want)
			}
			resumes = nil
		}
		r.pause("a")
		if !r.held("a") || r.held("b") {
			t.Error("a not held, or b held")
		}
		time.Sleep(time.Second)
		check("1s", "100ms a")
		if r.held("a") {
			t.Error("a held after its resume")
		}
		for range 7 { // a's resumed calls fail for good again: 200 ms, 400 ms, ... 3.2 s, 3.2 s
			r.pause("a")
			time.Sleep(4 * time.Second)
		}
		check("29s", "1.2s a", "5.4s a", "9.8s a", "14.6s a", "20.2s a", "24.2s a", "28.2s a")
		r.committed("a") // a's call committed: the next pause waits 100 ms again
		r.pause("a")
		time.Sleep(10 * time.Millisecond)
		r.pause("b")
		time.Sleep(time.Second)
		check("30s", "29.1s a", "29.11s b")
		r.pause("c")
		r.stop()
		r.pause("d")
		time.Sleep(time.Minute)
		check("after stop")
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
