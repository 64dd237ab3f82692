package ferry

import (
	"math"
	"time"

	"github.com/gammazero/deque"
	"github.com/google/btree"
)

// item is one waiting input. Items are ordered by (rank, seq) in their lane.
type item[E any] struct {
	rank   int64
	seq    uint64
	at     time.Duration // submission time, since the origin; 0 with zero delay
	weight int64
	entry  E
}

func itemLess[E any](a, b item[E]) bool {
	return a.rank < b.rank || a.rank == b.rank && a.seq < b.seq
}

// queue holds one lane's items in ascending (rank, seq), as part of the core.
//
// While items arrive in rank order (always, when ranks are equal) they sit in
// a deque: push, pop and peek are O(1). A drop is a binary search by seq that
// leaves a tombstone, O(log n); tombstones are compacted once they outnumber
// the live items, O(1) amortized. The first item out of rank order moves the
// queue into a btree, O(log n) for everything, until it empties. Its zero value is an empty queue. loop: its methods run on the
// shard's loop goroutine, as part of the core's state.
type queue[E any] struct {
	run  deque.Deque[item[E]] // sorted by (rank, seq); both ends live; dead items weigh -1
	dead int                  // tombstones in run
	tree *btree.BTreeG[item[E]]
}

const dead = -1 // the weight of a tombstone

func (q *queue[E]) len() int {
	if q.tree != nil {
		return q.tree.Len()
	}
	return q.run.Len() - q.dead
}

// push adds an item whose seq is greater than any before it. free supplies the
// btree's nodes when the queue has to become a tree.
func (q *queue[E]) push(it item[E], free *btree.FreeListG[item[E]]) {
	switch {
	case q.tree != nil:
		q.tree.ReplaceOrInsert(it)
	case q.run.Len() == 0 || q.run.Back().rank <= it.rank:
		q.run.PushBack(it)
	default:
		q.tree = btree.NewWithFreeListG(degree, itemLess[E], free)
		for q.run.Len() > 0 {
			if x := q.run.PopFront(); x.weight != dead {
				q.tree.ReplaceOrInsert(x)
			}
		}
		q.dead = 0
		q.tree.ReplaceOrInsert(it)
	}
}

// min is the first item; the queue must not be empty.
func (q *queue[E]) min() item[E] {
	if q.tree != nil {
		it, _ := q.tree.Min()
		return it
	}
	return q.run.Front()
}

// pop removes the first item; the queue must not be empty.
func (q *queue[E]) pop() item[E] {
	if q.tree != nil {
		it, _ := q.tree.DeleteMin()
		q.untree()
		return it
	}
	it := q.run.PopFront()
	q.trim()
	return it
}

// take pops up to n items onto batch, in order, and returns batch and their
// total weight. After the first it stops at an item that would take the total
// past budget; with a budget of MaxInt64 none can, as weights that wait
// together sum within it.
func (q *queue[E]) take(batch []E, n int, budget int64) ([]E, int64) {
	var w int64
	if q.tree == nil && budget == math.MaxInt64 && n > 0 { // one pass, no peeking
		for it := range q.run.IterPopFront() {
			if it.weight == dead {
				q.dead--
				continue
			}
			w += it.weight
			batch = append(batch, it.entry)
			if n--; n == 0 {
				break
			}
		}
		q.trim()
		return batch, w
	}
	for k := 0; k < n && q.len() > 0; k++ {
		if k > 0 && budget < math.MaxInt64 && q.min().weight > budget-w {
			break // does not fit: it starts the next batch
		}
		it := q.pop()
		w += it.weight
		batch = append(batch, it.entry)
	}
	return batch, w
}

// remove deletes the item (rank, seq) if it is there.
func (q *queue[E]) remove(rank int64, seq uint64) (item[E], bool) {
	if q.tree != nil {
		it, ok := q.tree.Delete(item[E]{rank: rank, seq: seq})
		q.untree()
		return it, ok
	}
	lo, hi := 0, q.run.Len() // seq ascends along run
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if q.run.At(mid).seq < seq {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == q.run.Len() {
		return item[E]{}, false
	}
	it := q.run.At(lo)
	if it.seq != seq || it.weight == dead {
		return item[E]{}, false
	}
	q.run.Set(lo, item[E]{rank: it.rank, seq: it.seq, weight: dead})
	q.dead++
	q.trim()
	return it, true
}

// each calls f with every item in order.
func (q *queue[E]) each(f func(item[E])) {
	if q.tree != nil {
		q.tree.Ascend(func(it item[E]) bool { f(it); return true })
		return
	}
	for it := range q.run.Iter() {
		if it.weight != dead {
			f(it)
		}
	}
}

// clear empties the queue, keeping its buffers.
func (q *queue[E]) clear() {
	q.run.Clear()
	q.dead = 0
	if q.tree != nil {
		q.tree.Clear(true)
		q.tree = nil
	}
}

// trim pops tombstones off both ends, so that both ends are live, and
// compacts the rest once they outnumber the live items. Each tombstone is
// compacted at most once, so that costs O(1) for each remove.
func (q *queue[E]) trim() {
	for q.run.Len() > 0 && q.run.Front().weight == dead {
		q.run.PopFront()
		q.dead--
	}
	for q.run.Len() > 0 && q.run.Back().weight == dead {
		q.run.PopBack()
		q.dead--
	}
	if q.dead > q.run.Len()-q.dead {
		q.compact()
	}
}

// compact removes every tombstone.
func (q *queue[E]) compact() {
	for range q.run.Len() {
		if it := q.run.PopFront(); it.weight != dead {
			q.run.PushBack(it)
		}
	}
	q.dead = 0
}

// untree returns an emptied tree's nodes, so the queue is a deque again.
func (q *queue[E]) untree() {
	if q.tree.Len() == 0 {
		q.tree.Clear(true)
		q.tree = nil
	}
}
