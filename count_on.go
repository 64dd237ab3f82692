//go:build ferrycount

package ferry

// sharedOps counts a loop's operations on the channels that every shard of
// its ferry shares (the room's pool, the free slots, the count of ended
// shards): each send and each receive, a failed try too. This build, with
// the tag ferrycount, is for measuring (BenchmarkCores reports it); without
// the tag it is empty (count_off.go). Each loop counts in its own state, so
// no count is shared; the loop copies its count to its shard as it ends
// (see loop.end).
type sharedOps = opCount

// countOps is true with the tag ferrycount: the loops count their
// operations on the channels the shards share.
const countOps = true

// opCount is sharedOps with the tag ferrycount: a count. loop: its methods
// run on the shard's loop goroutine.
type opCount struct{ n uint64 }

// add counts n operations.
func (c *opCount) add(n int) { c.n += uint64(n) }

// SharedOps is, with the build tag ferrycount only, the operations f's loops
// made on the channels all its shards share, since New: 0 with one shard.
// It reads each loop's count as the loop ended, so call it after Close has
// returned; before, it counts the loops that have ended. The caller side's
// operations (a DoMany's borrow over several shards and its give-back,
// Close's and Shutdown's mark on the room) are not counted.
func SharedOps[K comparable, I, O any](f *Ferry[K, I, O]) uint64 {
	var n uint64
	for _, s := range f.shards {
		select {
		case <-s.done:
			n += s.ops.n
		default:
		}
	}
	return n
}
