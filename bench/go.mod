module github.com/ferrygo/ferry/bench

go 1.26.0

replace github.com/ferrygo/ferry => ../

require (
	github.com/ferrygo/ferry v0.0.0-00010101000000-000000000000
	github.com/graph-gophers/dataloader/v7 v7.1.0
	github.com/vikstrous/dataloadgen v0.0.10
	google.golang.org/api v0.316.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/gammazero/deque v1.2.1 // indirect
	github.com/google/btree v1.1.3 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
)
