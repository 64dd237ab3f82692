package ferry

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slots over three shards of one slot each, without goroutines: a shard
// beyond its share gives its extra slot back as that batch ends, and pokes
// the shards waiting in wants as its dispatch ends only if it gave back more
// than it took from tokens meanwhile. Mutation: adopt not counting a take
// against gave (the first case pokes c for a pool as empty as it saw it).
func TestLentPokesForSlotsGivenBackNet(t *testing.T) {
	type sl = slots[string, in, int]
	pool := newTokens[string, in, int](3)
	mk := func() *sl {
		s := newSlots(pool, 3, 1, 0, func() *worker[string, in, int] { return &worker[string, in, int]{fl: new(flight[string, in, int])} }, &sharedOps{})
		return &s
	}
	b, c := mk(), mk()
	take := func(s *sl) int {
		t.Helper()
		id, ok := s.takeSlot()
		require.True(t, ok)
		return id
	}
	b1, b2 := take(b), take(b) // b beyond its share, both busy
	take(c)                    // c at its share, busy
	_, ok := c.takeSlot()      // c has a batch ready: the pool is empty, into wants
	require.False(t, ok)
	require.True(t, c.waiting)

	b.releaseSlot(b1) // the batch beyond b's share ends: its slot goes back
	assert.Equal(t, 1, len(pool.free))
	b.dispatching()
	take(b) // and b's next batch takes it again
	b.giveBackIdleSlots()
	assert.Empty(t, c.poke, "b took back what it gave: the pool is as c saw it, and c is not poked")

	b.releaseSlot(b2) // b at its share now: b2 stays, idle
	b.releaseSlot(b1)
	assert.Equal(t, 1, len(pool.free), "b2 beyond the share went back")
	b.dispatching()
	b.giveBackIdleSlots() // and b1, idle, at the dispatch's end: two given back, none taken
	assert.Equal(t, 2, len(pool.free))
	assert.Len(t, c.poke, 1, "c is poked for the slots given back")
}
