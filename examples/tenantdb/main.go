// Command tenantdb writes events for many tenants, each tenant with its own
// SQLite database file, from many goroutines at once. A SQLite file takes one
// writer at a time: exactly the one call in flight per key that ferry
// guarantees. It runs the same workload twice, one transaction per event and
// then one transaction per ferry batch, and prints them side by side.
//
//	go run ./tenantdb [-tenants 16] [-writers 256] [-duration 4s] [-batch 256] [-delay 1ms] [-sync full]
//
// The first build compiles modernc.org/sqlite, a pure-Go SQLite: about 30 s
// on 2 cores (`GOCACHE=$(mktemp -d) go build ./tenantdb`), then it is cached.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ferrygo/ferry"
	_ "modernc.org/sqlite"
)

// config is what the flags set.
type config struct {
	tenants  int
	writers  int
	duration time.Duration // per mode
	batch    int
	delay    time.Duration
	sync     string // SQLite's synchronous pragma: off, normal or full
	mode     string // "do": unbatched against ferry's Do; "bulk": against DoMany
	bulk     int    // events per DoMany in bulk mode
	progress io.Writer
	tty      bool // progress is a terminal: one line, redrawn in place
}

// event is one write: writer w's seq-th event for tenant.
type event struct {
	tenant, writer, seq int
}

// result is one mode's run.
type result struct {
	mode       string
	events     int // acknowledged
	elapsed    time.Duration
	p50, p99   time.Duration
	txs        int
	batchSizes []int // ferry mode: the size of every batch
	rows       int   // found in the databases afterwards
	lost, dups int
}

func main() {
	var c config
	flag.IntVar(&c.tenants, "tenants", 16, "tenants, each with its own database file")
	flag.IntVar(&c.writers, "writers", 256, "goroutines writing at once")
	flag.DurationVar(&c.duration, "duration", 4*time.Second, "how long each mode runs")
	flag.IntVar(&c.batch, "batch", 256, "ferry's MaxBatchSize")
	flag.DurationVar(&c.delay, "delay", time.Millisecond, "ferry's MaxBatchDelay (0: batch only while a tenant's transaction is in flight)")
	flag.StringVar(&c.sync, "sync", "full", "SQLite synchronous mode: off, normal or full")
	flag.StringVar(&c.mode, "mode", "do", "do: each writer writes one event at a time, through ferry's Do; bulk: -bulk events at a time, through DoMany")
	flag.IntVar(&c.bulk, "bulk", 32, "events per write in bulk mode")
	flag.Parse()
	c.progress = os.Stderr
	if fi, err := os.Stderr.Stat(); err == nil {
		c.tty = fi.Mode()&os.ModeCharDevice != 0
	}
	if _, err := run(c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tenantdb:", err)
		os.Exit(1)
	}
}

// run runs both modes, prints their table to out and returns them.
func run(c config, out io.Writer) ([]result, error) {
	switch c.sync {
	case "off", "normal", "full":
	default:
		return nil, fmt.Errorf("-sync %q: want off, normal or full", c.sync)
	}
	if c.tenants < 1 || c.writers < 1 || c.batch < 1 || c.duration <= 0 || c.delay < 0 {
		return nil, fmt.Errorf("tenants, writers, batch and duration must be positive, delay not negative")
	}
	modes := []string{"unbatched", "ferry"}
	switch c.mode {
	case "", "do":
		c.bulk = 1
	case "bulk":
		if c.bulk < 1 {
			return nil, fmt.Errorf("-bulk %d: want at least 1", c.bulk)
		}
		modes[1] = "ferry-bulk"
	default:
		return nil, fmt.Errorf("-mode %q: want do or bulk", c.mode)
	}
	fmt.Fprintf(out, "%d tenants, %d writers of %d events at a time, %v per mode, synchronous=%s, ferry batch %d, delay %v\n\n",
		c.tenants, c.writers, c.bulk, c.duration, c.sync, c.batch, c.delay)
	var results []result
	for _, mode := range modes {
		r, err := runMode(c, mode)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode, err)
		}
		results = append(results, r)
	}
	report(out, results)
	for _, r := range results {
		if r.lost > 0 || r.dups > 0 {
			return results, fmt.Errorf("%s: %d acknowledged events lost, %d duplicated", r.mode, r.lost, r.dups)
		}
	}
	return results, nil
}

// tenants is one database per tenant, in a temporary directory.
type tenants struct {
	dir string
	dbs []*sql.DB
}

func openTenants(n int, syncMode string) (*tenants, error) {
	dir, err := os.MkdirTemp("", "tenantdb-")
	if err != nil {
		return nil, err
	}
	t := &tenants{dir: dir}
	for i := range n {
		dsn := fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=synchronous(%s)&_pragma=busy_timeout(10000)",
			filepath.Join(dir, fmt.Sprintf("tenant%03d.db", i)), syncMode)
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			t.close()
			return nil, err
		}
		db.SetMaxOpenConns(1) // one writer per file
		t.dbs = append(t.dbs, db)
		if _, err := db.Exec(`CREATE TABLE events (writer INTEGER, seq INTEGER, payload TEXT, PRIMARY KEY (writer, seq))`); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

func (t *tenants) close() {
	for _, db := range t.dbs {
		db.Close()
	}
	os.RemoveAll(t.dir)
}

const insert = `INSERT INTO events (writer, seq, payload) VALUES (?, ?, ?)`

func payload(e event) string {
	return fmt.Sprintf("tenant %d writer %d event %d", e.tenant, e.writer, e.seq)
}

// writeBatch writes events in one transaction of one tenant's database.
func writeBatch(ctx context.Context, db *sql.DB, events []event) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	stmt, err := tx.PrepareContext(ctx, insert)
	if err != nil {
		return err
	}
	for _, e := range events {
		if _, err := stmt.ExecContext(ctx, e.writer, e.seq, payload(e)); err != nil {
			return err
		}
	}
	return tx.Commit()
}

func runMode(c config, mode string) (result, error) {
	t, err := openTenants(c.tenants, c.sync)
	if err != nil {
		return result{}, err
	}
	defer t.close()
	r := result{mode: mode}
	var mu sync.Mutex // guards r.txs and r.batchSizes, written by writers and OnBatch
	// Unbatched, each event is a transaction of its own.
	write := func(ctx context.Context, es []event) error {
		for _, e := range es {
			mu.Lock()
			r.txs++
			mu.Unlock()
			if _, err := t.dbs[e.tenant].ExecContext(ctx, insert, e.writer, e.seq, payload(e)); err != nil {
				return err
			}
		}
		return nil
	}
	closeFerry := func() {}
	if mode != "unbatched" {
		f, err := ferry.New(func(ctx context.Context, tenant int, events []event) ([]struct{}, error) {
			return make([]struct{}, len(events)), writeBatch(ctx, t.dbs[tenant], events)
		}, ferry.Config[int, event]{
			OnBatch: func(b ferry.Batch[int]) { // every call is one transaction
				mu.Lock()
				r.txs++
				r.batchSizes = append(r.batchSizes, b.Size)
				mu.Unlock()
			},
			Key:                func(e event) int { return e.tenant },
			MaxBatchSize:       c.batch,
			MaxBatchDelay:      c.delay,
			MaxInFlightBatches: c.tenants,          // every tenant may write at once
			MaxQueued:          c.writers * c.bulk, // room for every writer: nobody is rejected
		})
		if err != nil {
			return r, err
		}
		defer f.Close()
		closeFerry = func() { _ = f.Close() } // OnBatch has told of every call once Close returns
		write = func(ctx context.Context, es []event) error {
			if len(es) == 1 {
				_, err := f.Do(ctx, es[0])
				return err
			}
			_, err := f.DoMany(ctx, es) // one admission; the events join their tenants' lanes at once
			return err
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), c.duration)
	defer cancel()
	acked := make([][]int, c.writers)         // per writer: the seqs acknowledged
	lat := make([][]time.Duration, c.writers) // per writer: latency of each write
	errs := make(chan error, c.writers)
	var done sync.WaitGroup
	var count progressCount
	start := time.Now()
	stopProgress := count.show(c.progress, c.tty, mode, start)
	for w := range c.writers {
		done.Go(func() {
			es := make([]event, c.bulk)
			for seq := 0; ctx.Err() == nil; seq += c.bulk {
				for i := range es {
					es[i] = event{tenant: (w + seq + i) % c.tenants, writer: w, seq: seq + i}
				}
				t0 := time.Now()
				if err := write(context.WithoutCancel(ctx), es); err != nil {
					errs <- err
					return
				}
				for i := range es {
					lat[w] = append(lat[w], time.Since(t0))
					acked[w] = append(acked[w], seq+i)
					count.add()
				}
			}
		})
	}
	done.Wait()
	r.elapsed = time.Since(start)
	closeFerry()
	stopProgress()
	close(errs)
	if err := <-errs; err != nil {
		return r, err
	}
	var all []time.Duration
	for w := range c.writers {
		r.events += len(acked[w])
		all = append(all, lat[w]...)
	}
	slices.Sort(all)
	if len(all) > 0 {
		r.p50, r.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return r, verify(t, c, acked, &r)
}

// verify counts the rows of every tenant and checks that every acknowledged
// event is in its tenant's database exactly once.
func verify(t *tenants, c config, acked [][]int, r *result) error {
	for i, db := range t.dbs {
		rows, err := db.Query(`SELECT writer, seq FROM events`)
		if err != nil {
			return err
		}
		found := map[[2]int]int{}
		for rows.Next() {
			var k [2]int
			if err := rows.Scan(&k[0], &k[1]); err != nil {
				rows.Close()
				return err
			}
			found[k]++
			r.rows++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for w, seqs := range acked {
			for _, seq := range seqs {
				if (w+seq)%c.tenants != i {
					continue
				}
				switch found[[2]int{w, seq}] {
				case 0:
					r.lost++
				case 1:
				default:
					r.dups++
				}
			}
		}
	}
	return nil
}

// progressCount counts acknowledged events for the progress line.
type progressCount struct {
	c chan struct{}
}

func (p *progressCount) add() { p.c <- struct{}{} }

// show prints progress to w until the returned stop is called: on a terminal
// one line redrawn every 200 ms, else one line per second, so that a log
// holds no carriage returns.
func (p *progressCount) show(w io.Writer, tty bool, mode string, start time.Time) (stop func()) {
	every, cr, nl := time.Second, "", "\n"
	if tty {
		every, cr, nl = 200*time.Millisecond, "\r", ""
	}
	p.c = make(chan struct{}, 4096)
	quit, gone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(gone)
		tick := time.NewTimer(every)
		defer tick.Stop()
		n := 0
		line := func() {
			el := time.Since(start)
			fmt.Fprintf(w, "%s%-10s %8d events  %8.0f events/s  %5.1fs%s", cr, mode, n, float64(n)/el.Seconds(), el.Seconds(), nl)
		}
		for {
			select {
			case <-p.c:
				n++
			case <-tick.C:
				line()
				tick.Reset(every)
			case <-quit:
				for len(p.c) > 0 {
					<-p.c
					n++
				}
				line()
				if tty {
					fmt.Fprintln(w)
				}
				return
			}
		}
	}()
	return func() { close(quit); <-gone }
}

func report(w io.Writer, rs []result) {
	row := func(name string, f func(r result) string) {
		fmt.Fprintf(w, "%-26s", name)
		for _, r := range rs {
			fmt.Fprintf(w, "%16s", f(r))
		}
		fmt.Fprintln(w)
	}
	row("", func(r result) string { return r.mode })
	row("events/s", func(r result) string { return fmt.Sprintf("%.0f", float64(r.events)/r.elapsed.Seconds()) })
	row("write latency p50", func(r result) string { return r.p50.Round(time.Microsecond).String() })
	row("write latency p99", func(r result) string { return r.p99.Round(time.Microsecond).String() })
	row("events acknowledged", func(r result) string { return fmt.Sprint(r.events) })
	row("transactions committed", func(r result) string { return fmt.Sprint(r.txs) })
	row("mean batch size", func(r result) string { return fmt.Sprintf("%.1f", float64(r.events)/float64(max(r.txs, 1))) })
	row("rows in the databases", func(r result) string { return fmt.Sprint(r.rows) })
	row("acknowledged, not found", func(r result) string { return fmt.Sprint(r.lost) })
	row("duplicated", func(r result) string { return fmt.Sprint(r.dups) })
	for _, r := range rs {
		if len(r.batchSizes) > 0 {
			fmt.Fprintf(w, "\nferry batch sizes (%d batches):\n", len(r.batchSizes))
			histogram(w, r.batchSizes)
		}
	}
	if len(rs) == 2 && rs[0].events > 0 {
		a, b := rs[0], rs[1]
		fmt.Fprintf(w, "\n%s: %.1fx the events/s with %.1fx fewer transactions; every acknowledged event is in its tenant's database: %v\n",
			b.mode, (float64(b.events)/b.elapsed.Seconds())/(float64(a.events)/a.elapsed.Seconds()),
			float64(a.txs)/float64(max(b.txs, 1)), a.lost+b.lost+a.dups+b.dups == 0)
	}
}

// histogram prints batch sizes in power-of-two buckets as text bars.
func histogram(w io.Writer, sizes []int) {
	var buckets [32]int
	top := 0
	for _, s := range sizes {
		b := bits.Len(uint(s)) - 1
		buckets[b]++
		top = max(top, b)
	}
	most, largest := slices.Max(buckets[:top+1]), slices.Max(sizes)
	for b := 0; b <= top; b++ {
		lo, hi := 1<<b, min(1<<(b+1)-1, largest)
		bar := strings.Repeat("#", (buckets[b]*40+most-1)/most)
		fmt.Fprintf(w, "  %5d-%-5d %7d %s\n", lo, hi, buckets[b], bar)
	}
}
