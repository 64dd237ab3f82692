package server

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Sizes is a dataset: users, posts and comments. Each user writes
// Posts/Users posts; the first Comments/CommentsPerPost posts have
// CommentsPerPost comments each, the others none.
type Sizes struct {
	Users, Posts, Comments int
}

// CommentsPerPost is how many comments a commented post has, and the most
// that Post.comments returns.
const CommentsPerPost = 10

// Full is the load command's dataset; the test seeds a smaller one.
var Full = Sizes{Users: 10_000, Posts: 50_000, Comments: 200_000}

// Commented is the number of posts with comments, 1 to Commented.
func (s Sizes) Commented() int { return s.Comments / CommentsPerPost }

// Schema is the PostgreSQL schema that holds the dataset of these sizes,
// so that datasets of other sizes can share a database.
func (s Sizes) Schema() string {
	return fmt.Sprintf("gql_v%d_%d_%d_%d", seedVersion, s.Users, s.Posts, s.Comments)
}

// seedVersion names the seed's formulas in the schema: a change to them
// makes a new schema.
const seedVersion = 2

// Tracer counts the statements a pool sends (pgx's QueryTracer), and those
// in flight.
type Tracer struct {
	sent, inFlight atomic.Int64
}

// TraceQueryStart counts a statement.
func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.sent.Add(1)
	t.inFlight.Add(1)
	return ctx
}

// TraceQueryEnd counts a statement done.
func (t *Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {
	t.inFlight.Add(-1)
}

// Sent is the number of statements sent since the pool was made.
func (t *Tracer) Sent() int64 { return t.sent.Load() }

// InFlight is the number of statements sent and not yet answered.
func (t *Tracer) InFlight() int64 { return t.inFlight.Load() }

// Connect opens a pool of at most conns connections to dsn, whose
// statements tr counts, with sizes' schema as its search path. It seeds the
// schema first if it does not hold that dataset.
func Connect(ctx context.Context, dsn string, sizes Sizes, conns int, tr *Tracer) (*pgxpool.Pool, error) {
	if err := Seed(ctx, dsn, sizes); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns)
	cfg.ConnConfig.RuntimeParams["search_path"] = sizes.Schema()
	cfg.ConnConfig.Tracer = tr
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Seed makes sizes' schema and fills it, in one transaction, unless it
// holds the dataset already (a table seeded records the sizes once done).
// Authors are spread by multiplying ids by primes modulo Users.
func Seed(ctx context.Context, dsn string, sizes Sizes) error {
	if sizes.Commented() > sizes.Posts || sizes.Users <= 0 || sizes.Users%7919 == 0 {
		return fmt.Errorf("graphql: cannot seed %+v", sizes)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	s := pgx.Identifier{sizes.Schema()}.Sanitize()
	var done bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.tables
		WHERE table_schema = $1 AND table_name = 'seeded')`, sizes.Schema()).Scan(&done)
	if err != nil || done {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{
		`DROP SCHEMA IF EXISTS ` + s + ` CASCADE`,
		`CREATE SCHEMA ` + s,
		`SET LOCAL search_path = ` + s,
		`CREATE TABLE users (id int PRIMARY KEY, name text NOT NULL, email text NOT NULL)`,
		`CREATE TABLE posts (id int PRIMARY KEY, author_id int NOT NULL REFERENCES users, title text NOT NULL)`,
		`CREATE TABLE comments (id int PRIMARY KEY, post_id int NOT NULL REFERENCES posts,
			author_id int NOT NULL REFERENCES users, body text NOT NULL)`,
		fmt.Sprintf(`INSERT INTO users SELECT i, 'user ' || i, 'user' || i || '@example.com'
			FROM generate_series(1, %d) i`, sizes.Users),
		fmt.Sprintf(`INSERT INTO posts SELECT i, 1 + (i::bigint * 7919) %% %d, 'post ' || i
			FROM generate_series(1, %d) i`, sizes.Users, sizes.Posts),
		fmt.Sprintf(`INSERT INTO comments SELECT i, 1 + (i - 1) %% %d, 1 + (i::bigint * 104729) %% 1000003 %% %d,
			'comment ' || i FROM generate_series(1, %d) i`, sizes.Commented(), sizes.Users, sizes.Comments),
		`CREATE INDEX ON posts (author_id, id)`,
		`CREATE INDEX ON comments (post_id, id)`,
		`CREATE TABLE seeded ()`,
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("graphql: seeding: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `ANALYZE `+s+`.users, `+s+`.posts, `+s+`.comments`)
	return err
}

// store reads the tables: each method is one statement for many ids, which
// every mode uses (the naive mode with one id). A users read whose ids hold
// the slow id sleeps first, in the same statement.
type store struct {
	pool    *pgxpool.Pool
	slowID  int
	slowFor time.Duration
}

func (s *store) users(ctx context.Context, ids []int) (map[int]*User, error) {
	q, args := `SELECT id, name, email FROM users WHERE id = ANY($1)`, []any{ids}
	if s.slowID != 0 && slices.Contains(ids, s.slowID) {
		q = `SELECT id, name, email FROM users, pg_sleep($2) WHERE id = ANY($1)`
		args = append(args, s.slowFor.Seconds())
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	m := make(map[int]*User, len(ids))
	var u User
	_, err = pgx.ForEachRow(rows, []any{&u.ID, &u.Name, &u.Email}, func() error {
		v := u
		m[u.ID] = &v
		return nil
	})
	return m, err
}

func (s *store) posts(ctx context.Context, ids []int) (map[int]*Post, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, author_id, title FROM posts WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, err
	}
	m := make(map[int]*Post, len(ids))
	var p Post
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.AuthorID, &p.Title}, func() error {
		v := p
		m[p.ID] = &v
		return nil
	})
	return m, err
}

// postsByAuthor has an entry, maybe empty, for every id.
func (s *store) postsByAuthor(ctx context.Context, authors []int) (map[int][]*Post, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, author_id, title FROM posts WHERE author_id = ANY($1) ORDER BY id`, authors)
	if err != nil {
		return nil, err
	}
	m := make(map[int][]*Post, len(authors))
	for _, a := range authors {
		m[a] = []*Post{}
	}
	var p Post
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.AuthorID, &p.Title}, func() error {
		v := p
		m[p.AuthorID] = append(m[p.AuthorID], &v)
		return nil
	})
	return m, err
}

// commentsByPost has an entry, maybe empty, for every id: its first
// CommentsPerPost comments.
func (s *store) commentsByPost(ctx context.Context, posts []int) (map[int][]*Comment, error) {
	rows, err := s.pool.Query(ctx, `SELECT c.id, c.post_id, c.author_id, c.body
		FROM unnest($1::int[]) p(id), LATERAL (
			SELECT * FROM comments WHERE post_id = p.id ORDER BY id LIMIT $2) c
		ORDER BY c.post_id, c.id`, posts, CommentsPerPost)
	if err != nil {
		return nil, err
	}
	m := make(map[int][]*Comment, len(posts))
	for _, p := range posts {
		m[p] = []*Comment{}
	}
	var c Comment
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.PostID, &c.AuthorID, &c.Body}, func() error {
		v := c
		m[c.PostID] = append(m[c.PostID], &v)
		return nil
	})
	return m, err
}

// postsAfter is the root query's list: one statement in every mode.
func (s *store) postsAfter(ctx context.Context, after, first int) ([]*Post, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, author_id, title FROM posts WHERE id > $1 ORDER BY id LIMIT $2`, after, first)
	if err != nil {
		return nil, err
	}
	ps := []*Post{}
	var p Post
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.AuthorID, &p.Title}, func() error {
		v := p
		ps = append(ps, &v)
		return nil
	})
	return ps, err
}
