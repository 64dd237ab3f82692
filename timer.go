package ferry

import "time"

// alarm is the loop's one timer, set to the core's earliest deadline. It only
// wakes the loop: the loop then asks the core what is due at the time it
// reads, so a late or spurious fire does no harm. loop: its methods run on
// the shard's loop goroutine.
type alarm struct {
	t   *time.Timer
	at  time.Duration // when t fires, since the ferry's origin, while set
	set bool          // t.C will deliver, and nothing else: false while t is stopped or has fired
}

func newAlarm() alarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return alarm{t: t}
}

// arm sets the alarm for at, or stops it if ok is false; at and now are
// since the ferry's origin. It touches the timer only when the deadline
// changed. With go >= 1.23 in go.mod, Reset and Stop leave no stale value in
// t.C.
func (a *alarm) arm(at time.Duration, ok bool, now time.Duration) {
	switch {
	case !ok:
		if a.set {
			a.t.Stop()
			a.set = false
		}
	case !a.set || at != a.at:
		a.t.Reset(at - now)
		a.at, a.set = at, true
	}
}

// fired records that t.C was received from.
func (a *alarm) fired() { a.set = false }
