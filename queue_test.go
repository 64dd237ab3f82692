package ferry

import (
	"testing"

	"github.com/google/btree"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func seqs(q *queue[int]) []uint64 {
	var s []uint64
	q.each(func(it item[int]) { s = append(s, it.seq) })
	return s
}

func TestQueueDropsInTheMiddleCompact(t *testing.T) {
	var q queue[int]
	free := btree.NewFreeListG[item[int]](8)
	for i := range 10 {
		q.push(item[int]{seq: uint64(i + 1), weight: 1}, free)
	}
	for _, s := range []uint64{3, 4, 5, 6, 7} {
		_, ok := q.remove(0, s)
		require.True(t, ok)
	}
	assert.Equal(t, 5, q.dead, "tombstones kept while they do not outnumber the live")
	_, ok := q.remove(0, 5)
	assert.False(t, ok, "a tombstone is not removed twice")
	_, ok = q.remove(0, 11)
	assert.False(t, ok, "an absent seq past the end")
	_, ok = q.remove(0, 8)
	require.True(t, ok)
	assert.Equal(t, 0, q.dead, "compacted once the dead outnumber the live")
	assert.Equal(t, 4, q.run.Len())
	assert.Equal(t, []uint64{1, 2, 9, 10}, seqs(&q))

	_, ok = q.remove(0, 1)
	require.True(t, ok)
	assert.Equal(t, uint64(2), q.min().seq, "a dropped front is trimmed")
	_, ok = q.remove(0, 10)
	require.True(t, ok)
	assert.Equal(t, 2, q.len())
	assert.Equal(t, 2, q.run.Len(), "a dropped back is trimmed")
}

func TestQueueOutOfOrderBecomesTreeUntilEmpty(t *testing.T) {
	var q queue[int]
	free := btree.NewFreeListG[item[int]](8)
	q.push(item[int]{rank: 5, seq: 1}, free)
	q.push(item[int]{rank: 5, seq: 2}, free)
	_, ok := q.remove(5, 1)
	require.True(t, ok)
	q.push(item[int]{rank: 1, seq: 3}, free)
	require.NotNil(t, q.tree)
	assert.Equal(t, []uint64{3, 2}, seqs(&q))
	_, ok = q.remove(5, 9)
	assert.False(t, ok)
	assert.Equal(t, uint64(3), q.pop().seq)
	assert.Equal(t, uint64(2), q.pop().seq)
	assert.Nil(t, q.tree, "an emptied tree turns back into a deque")

	q.push(item[int]{rank: 2, seq: 4}, free)
	q.push(item[int]{rank: 1, seq: 5}, free)
	require.NotNil(t, q.tree)
	q.clear()
	assert.Nil(t, q.tree)
	assert.Equal(t, 0, q.len())
}
