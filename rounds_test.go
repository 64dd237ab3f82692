package ferry

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rounds, without goroutines: a round counts down what its Flushes wait for,
// ends when nothing is left, and the Flushes that came meanwhile wait for
// the next; close ends them all.
func TestRounds(t *testing.T) {
	var told []string
	names := make(map[chan error]string)
	reply := func(name string) chan error {
		c := make(chan error, 1)
		names[c] = name
		return c
	}
	tell := func(c chan error, err error) { told = append(told, names[c]+":"+errText(err)) }
	var rs rounds
	_, ok := rs.over()
	assert.False(t, ok, "no round")
	assert.Zero(t, rs.seq())
	assert.False(t, rs.claimed(1))
	assert.Equal(t, owed{}, rs.owe(3), "no round: nothing owed")
	rs.paid(owed{}) // no round: nothing happens

	require.True(t, rs.wait(reply("a")), "the first Flush starts a round")
	rs.start(7, 2, 3) // inputs up to seq 7, claims up to 2, three things in all
	assert.False(t, rs.wait(reply("b")), "one in progress: b waits for the next")
	assert.Equal(t, uint64(7), rs.seq())
	assert.True(t, rs.claimed(2))
	assert.False(t, rs.claimed(3), "claimed after the round started")

	rs.countIf(false)
	rs.countIf(true)
	o := rs.owe(2)
	assert.Equal(t, owed{1, 2}, o)
	_, ok = rs.over()
	assert.False(t, ok, "two things left")
	rs.paid(o)
	replies, ok := rs.over()
	require.True(t, ok)
	for _, r := range replies {
		tell(r, nil)
	}
	assert.Equal(t, []string{"a:nil"}, told)
	assert.True(t, rs.pending(), "b waits")

	rs.start(9, 2, 1)
	rs.paid(o) // owed to round 1: counts nothing in round 2
	_, ok = rs.over()
	assert.False(t, ok)
	assert.False(t, rs.wait(reply("c")))
	for _, r := range rs.abort() {
		tell(r, ErrClosed)
	}
	assert.Equal(t, []string{"a:nil", "b:" + ErrClosed.Error(), "c:" + ErrClosed.Error()}, told)
	assert.False(t, rs.pending())
	_, ok = rs.over()
	assert.False(t, ok, "none after a close")
	assert.Empty(t, rs.abort())

	var empty rounds // a round with nothing to wait for is over at once
	empty.wait(reply("d"))
	empty.start(0, 0, 0)
	replies, ok = empty.over()
	assert.True(t, ok)
	assert.Len(t, replies, 1)
}

func errText(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
