package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ferrygo/ferry"
	"github.com/ferrygo/ferry/load"
	"github.com/vikstrous/dataloadgen"
)

// Mode is how the N+1 fields are served.
type Mode string

const (
	// Ferry serves them through process-wide loaders of the load package,
	// shared by every request, with a memo per request.
	Ferry Mode = "ferry"
	// Dataloadgen serves them through dataloadgen loaders made per request,
	// as gqlgen's documentation shows (a 1 ms wait).
	Dataloadgen Mode = "dataloadgen"
	// Naive sends one statement per field.
	Naive Mode = "naive"
)

// ParseMode returns the mode named s.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Ferry, Dataloadgen, Naive:
		return m, nil
	}
	return "", fmt.Errorf("graphql: no mode %q: ferry, dataloadgen or naive", s)
}

// loaders reads by id for the resolvers, in one of the modes. A user
// not found is (nil, nil); the lists are never nil.
type loaders interface {
	user(ctx context.Context, id int) (*User, error)
	users(ctx context.Context, ids []int) ([]*User, error)
	post(ctx context.Context, id int) (*Post, error)
	postsByAuthor(ctx context.Context, author int) ([]*Post, error)
	commentsByPost(ctx context.Context, post int) ([]*Comment, error)
}

// one reads id's entry in a fetch of it alone: the naive mode's field.
func one[V any](ctx context.Context, fetch func(context.Context, []int) (map[int]V, error), id int) (V, error) {
	m, err := fetch(ctx, []int{id})
	return m[id], err
}

// naive sends a statement per field.
type naive struct{ db *store }

func (n naive) user(ctx context.Context, id int) (*User, error) { return one(ctx, n.db.users, id) }
func (n naive) post(ctx context.Context, id int) (*Post, error) { return one(ctx, n.db.posts, id) }
func (n naive) postsByAuthor(ctx context.Context, id int) ([]*Post, error) {
	return one(ctx, n.db.postsByAuthor, id)
}
func (n naive) commentsByPost(ctx context.Context, id int) ([]*Comment, error) {
	return one(ctx, n.db.commentsByPost, id)
}
func (n naive) users(ctx context.Context, ids []int) ([]*User, error) {
	us := make([]*User, len(ids))
	for i, id := range ids {
		u, err := n.user(ctx, id)
		if err != nil {
			return nil, err
		}
		us[i] = u
	}
	return us, nil
}

// ferryLoaders are the process-wide loaders of the ferry mode.
type ferryLoaders struct {
	byID     *load.Loader[int, *User]
	postByID *load.Loader[int, *Post]
	byAuthor *load.Loader[int, []*Post]
	byPost   *load.Loader[int, []*Comment]
}

func newFerryLoaders(db *store, cfg load.Config) (*ferryLoaders, error) {
	var l ferryLoaders
	var errs [4]error
	l.byID, errs[0] = load.New(db.users, cfg)
	l.postByID, errs[1] = load.New(db.posts, cfg)
	l.byAuthor, errs[2] = load.New(db.postsByAuthor, cfg)
	l.byPost, errs[3] = load.New(db.commentsByPost, cfg)
	if err := errors.Join(errs[:]...); err != nil {
		l.close()
		return nil, err
	}
	return &l, nil
}

func (l *ferryLoaders) close() {
	for _, c := range []interface{ Close() error }{l.byID, l.postByID, l.byAuthor, l.byPost} {
		if c != nil {
			c.Close()
		}
	}
}

// found makes ErrNotFound a nil value with no error: a GraphQL null.
func found[V any](v V, err error) (V, error) {
	if errors.Is(err, load.ErrNotFound) || errors.Is(err, dataloadgen.ErrNotFound) {
		return v, nil
	}
	return v, err
}

func (l *ferryLoaders) user(ctx context.Context, id int) (*User, error) {
	return found(l.byID.Load(ctx, id))
}
func (l *ferryLoaders) post(ctx context.Context, id int) (*Post, error) {
	return found(l.postByID.Load(ctx, id))
}
func (l *ferryLoaders) postsByAuthor(ctx context.Context, id int) ([]*Post, error) {
	return l.byAuthor.Load(ctx, id)
}
func (l *ferryLoaders) commentsByPost(ctx context.Context, id int) ([]*Comment, error) {
	return l.byPost.Load(ctx, id)
}
func (l *ferryLoaders) users(ctx context.Context, ids []int) ([]*User, error) {
	us, err := l.byID.LoadMany(ctx, ids)
	return us, notFoundless(err)
}

// notFoundless is a LoadMany's or LoadAll's error, nil if every id that
// failed was not found.
func notFoundless(err error) error {
	var errs []error
	switch e := err.(type) {
	case nil:
		return nil
	case ferry.Errors:
		errs = e
	case dataloadgen.ErrorSlice:
		errs = e
	default:
		return err
	}
	for _, e := range errs {
		if _, err := found(0, e); err != nil {
			return err
		}
	}
	return nil
}

// perRequest are one request's dataloadgen loaders, as gqlgen's
// documentation makes them: in a middleware, for each request.
type perRequest struct {
	byID     *dataloadgen.Loader[int, *User]
	postByID *dataloadgen.Loader[int, *Post]
	byAuthor *dataloadgen.Loader[int, []*Post]
	byPost   *dataloadgen.Loader[int, []*Comment]
}

// dataloadgenWait is the wait of gqlgen's documentation.
const dataloadgenWait = time.Millisecond

func newPerRequest(db *store) *perRequest {
	w := dataloadgen.WithWait(dataloadgenWait)
	return &perRequest{
		byID:     dataloadgen.NewMappedLoader(db.users, w),
		postByID: dataloadgen.NewMappedLoader(db.posts, w),
		byAuthor: dataloadgen.NewMappedLoader(db.postsByAuthor, w),
		byPost:   dataloadgen.NewMappedLoader(db.commentsByPost, w),
	}
}

type perRequestKey struct{}

// dataloadgenMiddleware gives each request its loaders.
func dataloadgenMiddleware(db *store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := context.WithValue(r.Context(), perRequestKey{}, newPerRequest(db))
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// dataloadgenLoaders finds the request's loaders in ctx.
type dataloadgenLoaders struct{}

func (dataloadgenLoaders) of(ctx context.Context) *perRequest {
	return ctx.Value(perRequestKey{}).(*perRequest)
}
func (d dataloadgenLoaders) user(ctx context.Context, id int) (*User, error) {
	return found(d.of(ctx).byID.Load(ctx, id))
}
func (d dataloadgenLoaders) post(ctx context.Context, id int) (*Post, error) {
	return found(d.of(ctx).postByID.Load(ctx, id))
}
func (d dataloadgenLoaders) postsByAuthor(ctx context.Context, id int) ([]*Post, error) {
	return d.of(ctx).byAuthor.Load(ctx, id)
}
func (d dataloadgenLoaders) commentsByPost(ctx context.Context, id int) ([]*Comment, error) {
	return d.of(ctx).byPost.Load(ctx, id)
}
func (d dataloadgenLoaders) users(ctx context.Context, ids []int) ([]*User, error) {
	us, err := d.of(ctx).byID.LoadAll(ctx, ids)
	return us, notFoundless(err)
}
