package ferry

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAwait steps await through each way a wait on a loop's reply ends: the
// reply there or still to come, the shard running or ended, a cancel or none.
func TestAwait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reply  bool // the reply is in the channel before await
		ended  bool // done is closed before await
		cancel int  // 0: none (nil), 1: open, 2: closed
		late   bool // the reply comes once await waits
		want   int
		err    error
	}{
		{name: "reply, running", reply: true, want: 7},
		{name: "reply, ended: taken", reply: true, ended: true, want: 7},
		{name: "reply, ended, cancelled: taken", reply: true, ended: true, cancel: 2, want: 7},
		{name: "none, ended", ended: true, err: ErrClosed},
		{name: "none, ended, cancelled", ended: true, cancel: 2, err: ErrClosed},
		{name: "none, cancelled", cancel: 2, err: errCancelled},
		{name: "later, no cancel", late: true, want: 7},
		{name: "later, cancel open", cancel: 1, late: true, want: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bubble(t, func(t *testing.T) {
				s := &shard[int, int, int]{done: make(chan struct{})}
				c := make(chan int, 1)
				var cancel chan struct{}
				if tc.cancel > 0 {
					cancel = make(chan struct{})
				}
				if tc.cancel == 2 {
					close(cancel)
				}
				if tc.reply {
					c <- 7
				}
				if tc.ended {
					close(s.done)
				}
				type got struct {
					v   int
					err error
				}
				res := make(chan got, 1)
				go func() {
					v, err := await(s, c, cancel)
					res <- got{v, err}
				}()
				synctest.Wait()
				if tc.late {
					select {
					case r := <-res:
						require.Failf(t, "await returned before the reply", "%+v", r)
					default:
					}
					c <- 7
				}
				r := <-res
				assert.Equal(t, tc.want, r.v)
				assert.Equal(t, tc.err, r.err)
			})
		})
	}
}
