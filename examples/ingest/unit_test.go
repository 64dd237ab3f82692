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
		{context.DeadlineExceeded, false},
		{fmt.Errorf("%w: %w", ferry.ErrCallTimeout, context.DeadlineExceeded), false},
		{context.Canceled, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v", c.err, got)
		}
	}
	if ambiguous(&pgconn.PgError{Code: "57P01"}) || !ambiguous(io.ErrUnexpectedEOF) {
		t.Error("a server's error is not ambiguous, a broken connection is")
	}
}

func TestRetry(t *testing.T) {
	transient := &pgconn.PgError{Code: "57P01"}
	for attempt := 1; attempt < maxAttempts; attempt++ {
		d, ok := retry("t", attempt, transient)
		top := min(10*time.Millisecond<<(attempt-1), 500*time.Millisecond)
		if !ok || d < top/2 || d > top {
			t.Errorf("attempt %d: %v, %v; want again after %v to %v", attempt, d, ok, top/2, top)
		}
	}
	if _, ok := retry("t", maxAttempts, transient); ok {
		t.Errorf("retried after %d attempts", maxAttempts)
	}
	if _, ok := retry("t", 1, &pgconn.PgError{Code: "23505"}); ok {
		t.Error("retried a unique violation")
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
		{ferry.ErrClosed, 500},
		{&pgconn.PgError{Code: "23505"}, 500},
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
	for i := range evs {
		evs[i].async = true // what a spool holds was posted async
	}
	if !slices.EqualFunc(got, evs, func(a, b event) bool {
		return a.Tenant == b.Tenant && a.ID == b.ID && string(a.Payload) == string(b.Payload) && a.accepted == b.accepted && a.async == b.async
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

// A tenant whose call failed is paused, and poked after a backoff that
// doubles with each failure in a row, until a call stores its events.
func TestCarrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pokes := make(chan string, 8)
		c := newCarrier(func(tenant string) { pokes <- tenant })
		evs := []event{{Tenant: "a", ID: "1"}}
		start := time.Now()
		c.keep("a", evs)
		if !c.paused("a") || c.paused("b") || c.count() != 1 || len(c.peek("a")) != 1 {
			t.Fatal("a is not paused alone")
		}
		if got := <-pokes; got != "a" || time.Since(start) != 100*time.Millisecond {
			t.Errorf("poke %q after %v, want a after 100ms", got, time.Since(start))
		}
		start = time.Now()
		c.keep("a", evs) // failed again
		c.schedule("a")  // one poke pending at most
		<-pokes
		if time.Since(start) != 200*time.Millisecond {
			t.Errorf("second poke after %v, want 200ms", time.Since(start))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if len(pokes) != 0 {
			t.Errorf("%d pokes more", len(pokes))
		}
		c.clear("a")
		if c.paused("a") || c.count() != 0 {
			t.Error("a is paused after clear")
		}
		c.keep("b", evs)
		if got := c.stop(); len(got) != 1 {
			t.Errorf("stop returned %v", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(pokes) != 0 {
			t.Error("a poke after stop")
		}
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
