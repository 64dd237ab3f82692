package server

//go:generate sh -c "cd .. && go run github.com/99designs/gqlgen@v0.17.98 generate"
