//go:build !ferrycount

package ferry

// sharedOps counts a loop's operations on the channels that every shard of
// its ferry shares (the room's pool, the free slots, the count of ended
// shards), with the build tag ferrycount (see count_on.go). Without it, as
// here, it is noOps, which counts nothing: add compiles to nothing.
type sharedOps = noOps

// countOps is false without the tag ferrycount: the counts are left out
// where they are guarded by it.
const countOps = false

// noOps is sharedOps without the tag ferrycount: empty. loop: its methods
// run on the shard's loop goroutine.
type noOps struct{}

// add counts n operations: none.
func (*noOps) add(int) {}
