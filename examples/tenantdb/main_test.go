package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestBothModesKeepEveryEvent(t *testing.T) {
	var out strings.Builder
	rs, err := run(config{tenants: 4, writers: 32, duration: 300 * time.Millisecond, batch: 64, delay: time.Millisecond, sync: "normal", progress: io.Discard}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 {
		t.Fatalf("%d results", len(rs))
	}
	for _, r := range rs {
		if r.events == 0 || r.lost != 0 || r.dups != 0 || r.rows != r.events {
			t.Errorf("%s: %d acknowledged, %d rows, %d lost, %d duplicated", r.mode, r.events, r.rows, r.lost, r.dups)
		}
	}
	unbatched, f := rs[0], rs[1]
	if unbatched.txs != unbatched.events {
		t.Errorf("unbatched: %d transactions for %d events", unbatched.txs, unbatched.events)
	}
	if f.txs >= f.events {
		t.Errorf("ferry: %d transactions for %d events, want fewer", f.txs, f.events)
	}
	for _, want := range []string{"events/s", "transactions committed", "ferry batch sizes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the table has no %q:\n%s", want, out.String())
		}
	}
}

func TestBulkModeKeepsEveryEvent(t *testing.T) {
	var out strings.Builder
	rs, err := run(config{tenants: 4, writers: 8, duration: 300 * time.Millisecond, batch: 64, delay: time.Millisecond,
		sync: "normal", mode: "bulk", bulk: 16, progress: io.Discard}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[1].mode != "ferry-bulk" {
		t.Fatalf("results %+v", rs)
	}
	for _, r := range rs {
		if r.events == 0 || r.events%16 != 0 || r.lost != 0 || r.dups != 0 || r.rows != r.events {
			t.Errorf("%s: %d acknowledged, %d rows, %d lost, %d duplicated", r.mode, r.events, r.rows, r.lost, r.dups)
		}
	}
	if f := rs[1]; f.txs*4 > f.events {
		t.Errorf("ferry-bulk: %d transactions for %d events, want batches of 4 or more", f.txs, f.events)
	}
	if !strings.Contains(out.String(), "of 16 events at a time") {
		t.Errorf("the table does not say the bulk size:\n%s", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	if _, err := run(config{tenants: 1, writers: 1, duration: time.Second, batch: 1, sync: "sometimes", progress: io.Discard}, io.Discard); err == nil {
		t.Error("no error for -sync sometimes")
	}
	if _, err := run(config{tenants: 1, writers: 1, duration: time.Second, batch: 1, sync: "full", mode: "many", progress: io.Discard}, io.Discard); err == nil {
		t.Error("no error for -mode many")
	}
	if _, err := run(config{sync: "full", progress: io.Discard}, io.Discard); err == nil {
		t.Error("no error for zero tenants")
	}
}

func TestProgressLines(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var out strings.Builder
		var p progressCount
		stop := p.show(&out, tty, "ferry", time.Now())
		p.add()
		p.add()
		stop()
		got := out.String()
		if !strings.Contains(got, "ferry             2 events") || !strings.HasSuffix(got, "\n") {
			t.Errorf("tty %v: %q", tty, got)
		}
		if strings.Contains(got, "\r") != tty || !tty && strings.Count(got, "\n") != 1 {
			t.Errorf("tty %v: a terminal's line is redrawn with \\r, a log's lines are whole: %q", tty, got)
		}
	}
}
