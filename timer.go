package ferry

import "time"

// alarm is the loop's one timer, set to the core's earliest deadline. It only
// wakes the loop: the loop then asks the core what is due at the time it
// reads, so a late or spurious fire does no harm. loop: its methods run on
// the shard's loop goroutine.
type alarm struct {
	t  *time.Timer
	at time.Time // when t fires; zero while it is stopped or has fired
}

func newAlarm() alarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return alarm{t: t}
}

// arm sets the alarm for at, or stops it if ok is false. It touches the timer
// only when the deadline changed. With go >= 1.23 in go.mod, Reset and Stop
// leave no stale value in t.C.
func (a *alarm) arm(at time.Time, ok bool, now time.Time) {
	switch {
	case !ok:
		if !a.at.IsZero() {
			a.t.Stop()
			a.at = time.Time{}
		}
	case !at.Equal(a.at):
		a.t.Reset(at.Sub(now))
		a.at = at
	}
}

// armed reports whether the alarm is set: t.C will deliver, and nothing else.
func (a *alarm) armed() bool { return !a.at.IsZero() }

// fired records that t.C was received from.
func (a *alarm) fired() { a.at = time.Time{} }
