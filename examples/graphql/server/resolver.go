package server

import "context"

// Resolver is the schema's root: every N+1 field reads through the mode's
// loaders.
type Resolver struct {
	db *store
	ld loaders
}

func (r *Resolver) Comment() CommentResolver { return commentResolver{r} }
func (r *Resolver) Post() PostResolver       { return postResolver{r} }
func (r *Resolver) Query() QueryResolver     { return queryResolver{r} }
func (r *Resolver) User() UserResolver       { return userResolver{r} }

type queryResolver struct{ *Resolver }

func (r queryResolver) User(ctx context.Context, id int) (*User, error) { return r.ld.user(ctx, id) }
func (r queryResolver) Users(ctx context.Context, ids []int) ([]*User, error) {
	return r.ld.users(ctx, ids)
}
func (r queryResolver) Posts(ctx context.Context, first int, after *int) ([]*Post, error) {
	a := 0
	if after != nil {
		a = *after
	}
	return r.db.postsAfter(ctx, a, min(max(first, 0), 100))
}

type userResolver struct{ *Resolver }

func (r userResolver) Posts(ctx context.Context, u *User) ([]*Post, error) {
	return r.ld.postsByAuthor(ctx, u.ID)
}

type postResolver struct{ *Resolver }

func (r postResolver) Author(ctx context.Context, p *Post) (*User, error) {
	return r.ld.user(ctx, p.AuthorID)
}
func (r postResolver) Comments(ctx context.Context, p *Post) ([]*Comment, error) {
	return r.ld.commentsByPost(ctx, p.ID)
}

type commentResolver struct{ *Resolver }

func (r commentResolver) Author(ctx context.Context, c *Comment) (*User, error) {
	return r.ld.user(ctx, c.AuthorID)
}
func (r commentResolver) Post(ctx context.Context, c *Comment) (*Post, error) {
	return r.ld.post(ctx, c.PostID)
}
