package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrygo/ferry/load"
	"github.com/vikstrous/dataloadgen"
)

// The GraphQL shape of BenchmarkReads: a request resolves readPosts posts.
// Then, all at once as gqlgen does, it loads each post's author and its
// readComments comments, then each comment's author: 50 + 50 + 500 loads
// of two kinds (users by id, comments by post), in three levels.
const (
	readPosts    = 50
	readComments = 10
	readUsers    = 10_000
)

// readBackend is a simulated database: a call holds one of its connections
// for its latency plus its cost per id, sleeping; calls beyond the
// connections wait for one. It counts its calls (statements).
type readBackend struct {
	conns   chan struct{}
	latency time.Duration
	perID   time.Duration
	calls   atomic.Int64
}

func newReadBackend(conns int, latency, perID time.Duration) *readBackend {
	return &readBackend{conns: make(chan struct{}, conns), latency: latency, perID: perID}
}

// call is one statement for n ids.
func (be *readBackend) call(ctx context.Context, n int) error {
	be.calls.Add(1)
	select {
	case be.conns <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	time.Sleep(be.latency + time.Duration(n)*be.perID)
	<-be.conns
	return nil
}

type readUser struct{ id int }

type readComment struct{ id, author int }

func postAuthor(post int) int { return 1 + post*7919%readUsers }

func commentAuthor(comment int) int { return 1 + comment*104729%1000003%readUsers }

func (be *readBackend) users(ctx context.Context, ids []int) (map[int]readUser, error) {
	if err := be.call(ctx, len(ids)); err != nil {
		return nil, err
	}
	m := make(map[int]readUser, len(ids))
	for _, id := range ids {
		m[id] = readUser{id}
	}
	return m, nil
}

func (be *readBackend) comments(ctx context.Context, posts []int) (map[int][]readComment, error) {
	if err := be.call(ctx, len(posts)*readComments); err != nil {
		return nil, err
	}
	m := make(map[int][]readComment, len(posts))
	for _, p := range posts {
		cs := make([]readComment, readComments)
		for j := range cs {
			id := p*readComments + j
			cs[j] = readComment{id, commentAuthor(id)}
		}
		m[p] = cs
	}
	return m, nil
}

// reader is one way to serve a request's loads: with a per-request
// context from begin.
type reader interface {
	begin(ctx context.Context) context.Context
	user(ctx context.Context, id int) (readUser, error)
	comments(ctx context.Context, post int) ([]readComment, error)
	close()
}

// ferryReader is the load package's way: process-wide loaders, a memo per
// request.
type ferryReader struct {
	byID   *load.Loader[int, readUser]
	byPost *load.Loader[int, []readComment]
}

func newFerryReader(be *readBackend, cfg load.Config) reader {
	u, err := load.New(be.users, cfg)
	if err != nil {
		panic(err)
	}
	c, err := load.New(be.comments, cfg)
	if err != nil {
		panic(err)
	}
	return &ferryReader{u, c}
}

func (r *ferryReader) begin(ctx context.Context) context.Context { return load.WithMemo(ctx) }
func (r *ferryReader) user(ctx context.Context, id int) (readUser, error) {
	return r.byID.Load(ctx, id)
}
func (r *ferryReader) comments(ctx context.Context, post int) ([]readComment, error) {
	return r.byPost.Load(ctx, post)
}
func (r *ferryReader) close() { r.byID.Close(); r.byPost.Close() }

// dataloadgenReader makes dataloadgen loaders per request, as gqlgen's
// documentation does, with its 1 ms wait.
type dataloadgenReader struct{ be *readBackend }

type dataloadgenLoaders struct {
	users    *dataloadgen.Loader[int, readUser]
	comments *dataloadgen.Loader[int, []readComment]
}

type dataloadgenKey struct{}

func (r dataloadgenReader) begin(ctx context.Context) context.Context {
	w := dataloadgen.WithWait(time.Millisecond)
	return context.WithValue(ctx, dataloadgenKey{}, &dataloadgenLoaders{
		dataloadgen.NewMappedLoader(r.be.users, w), dataloadgen.NewMappedLoader(r.be.comments, w)})
}
func (dataloadgenReader) of(ctx context.Context) *dataloadgenLoaders {
	return ctx.Value(dataloadgenKey{}).(*dataloadgenLoaders)
}
func (r dataloadgenReader) user(ctx context.Context, id int) (readUser, error) {
	return r.of(ctx).users.Load(ctx, id)
}
func (r dataloadgenReader) comments(ctx context.Context, post int) ([]readComment, error) {
	return r.of(ctx).comments.Load(ctx, post)
}
func (dataloadgenReader) close() {}

// resolve is one request: posts from first, their authors and comments,
// and the comments' authors, each load on a goroutine of its own, as gqlgen
// resolves fields. It checks every answer.
func resolve(ctx context.Context, r reader, first int) error {
	ctx = r.begin(ctx)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	fail := func(err error) { failed.CompareAndSwap(nil, &err) }
	want := func(u readUser, err error, id int) {
		if err == nil && u.id != id {
			err = fmt.Errorf("user %d for %d", u.id, id)
		}
		if err != nil {
			fail(err)
		}
	}
	for p := first; p < first+readPosts; p++ {
		wg.Go(func() {
			u, err := r.user(ctx, postAuthor(p))
			want(u, err, postAuthor(p))
		})
		wg.Go(func() {
			cs, err := r.comments(ctx, p)
			if err != nil || len(cs) != readComments {
				fail(fmt.Errorf("comments of %d: %d, %v", p, len(cs), err))
				return
			}
			for _, c := range cs {
				wg.Go(func() {
					u, err := r.user(ctx, c.author)
					want(u, err, c.author)
				})
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return *err
	}
	return nil
}

// readImpls are the ways BenchmarkReads compares: the load package's
// defaults (zero delay, direct calls), the same with a delay of a quarter
// of the backend's latency, and dataloadgen per request.
var readImpls = []struct {
	name string
	make func(be *readBackend) reader
}{
	{"ferry", func(be *readBackend) reader { return newFerryReader(be, load.Config{MaxQueued: 1 << 18}) }},
	{"ferry-delay", func(be *readBackend) reader {
		return newFerryReader(be, load.Config{MaxQueued: 1 << 18, MaxBatchDelay: be.latency / 4})
	}},
	{"dataloadgen", func(be *readBackend) reader { return dataloadgenReader{be} }},
}

// BenchmarkReads is a GraphQL-shaped read: each request fans out to 600
// loads of two kinds in three levels (see resolve). The simulated database
// has 16 connections; each statement takes 1 ms plus 1 µs per id (a
// comment read counts its 10 rows per post). Closed-loop clients
// (1 and 64; -short: 64) each send requests one after another, through
// the load package's process-wide loaders and dataloadgen's per-request
// ones. An op is a request. It reports calls/req (the statements per
// request) and the requests' p50-ms and p99-ms latencies.
func BenchmarkReads(b *testing.B) {
	for _, clients := range []int{1, 64} {
		if testing.Short() && clients != 64 {
			continue
		}
		for _, im := range readImpls {
			b.Run(fmt.Sprintf("clients=%d/impl=%s", clients, im.name), func(b *testing.B) {
				be := newReadBackend(16, time.Millisecond, time.Microsecond)
				r := im.make(be)
				defer r.close()
				reads(b, be, r, clients)
			})
		}
	}
}

// reads runs b.N requests through r from clients closed-loop goroutines,
// and reports the backend's calls per request and the latencies.
func reads(b *testing.B, be *readBackend, r reader, clients int) {
	var next atomic.Int64
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	b.ResetTimer()
	for c := range clients {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				start := time.Now()
				first := int(i) * readPosts % 100_000
				if err := resolve(context.Background(), r, first); err != nil {
					b.Error(err)
					return
				}
				lats[c] = append(lats[c], time.Since(start))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	all := slices.Concat(lats...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(be.calls.Load())/float64(b.N), "calls/req")
	b.ReportMetric(ms(all[len(all)/2]), "p50-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "p99-ms")
}
