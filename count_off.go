//go:build !ferrycount

package ferry

// sharedOps counts a loop's operations on the channels that every shard of
// its ferry shares (the room's pool, the free slots, the count of ended
// shards), with the build tag ferrycount (see count_on.go). Without it, as
// here, it is empty and counts nothing: add compiles to nothing. loop: its
// methods run on the shard's loop goroutine.
type sharedOps struct{}

// add counts n operations: none in this build.
func (*sharedOps) add(int) {}
