package server

// User is a row of users.
type User struct {
	ID    int    `json:"id"`
	Name  string `json:"name"`
	Email string `json:"email"`
}

// Post is a row of posts; its author is a field resolver's.
type Post struct {
	ID       int    `json:"id"`
	AuthorID int    `json:"-"`
	Title    string `json:"title"`
}

// Comment is a row of comments; its author and post are field resolvers'.
type Comment struct {
	ID       int    `json:"id"`
	PostID   int    `json:"-"`
	AuthorID int    `json:"-"`
	Body     string `json:"body"`
}
