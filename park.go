package ferry

import "time"

// This file is the batches parked in their lanes (Config.Retry,
// Config.HoldPaused) and the loop's handlers for them. A batch whose call
// failed, to be called again after a backoff, goes back from its worker to
// its loop (opPark), which parks its key's lane in the core (see state.park)
// and frees the worker. Once due, at Resume, or at close, the loop hands it
// to a worker as the key's next call (takeParked). A batch held until Resume
// (HoldPaused) is parked the same way, with no deadline: see pause.go.

// parked is a loop's parked batches, by key: each a flight, which the
// loop owns until it hands it to a worker. loop: its methods run on the
// shard's loop goroutine.
type parked[K comparable, I, O any] struct {
	flights peakMap[K, *flight[K, I, O]]
	tags    uint64 // held batches tagged anew, with CancelAbandoned: see loop.hold
}

// owe makes every parked batch owe the round that starts one thing, paid by
// the opIdle of the worker that answers it, and returns how many.
func (p *parked[K, I, O]) owe(rs *rounds) int {
	for _, fl := range p.flights.all() {
		fl.owe = rs.owe(1)
	}
	return p.flights.len()
}

// park parks m.key's lane with m.fl, the batch that worker m.worker ran,
// until its backoff is over: at once if its context ended (Close, or every
// caller gave up). It frees the worker, which takes a new flight record for
// its next batch. The key's completions stay where they were: the batch's
// are still to come. A batch that failed for good with HoldPaused
// (m.fail) is held instead (see hold), and its worker stays busy until it
// has answered the batch's other inputs.
func (l *loop[K, I, O]) park(m msg[K, I, O]) {
	fl, wk := m.fl, l.slots.workers[m.worker]
	l.parks.flights.put(m.key, fl)
	if m.fail != nil {
		l.hold(m.key, fl, wk.fl, m.fail, m.order)
		return
	}
	wk.fl = new(flight[K, I, O]) // fl is the park's now
	d := fl.backoff
	if fl.ctx.Err() != nil { // the ferry's context, or its child: no user code
		d = 0
	}
	l.st.park(m.key, d, l.f.clock())
	l.slots.releaseSlot(int(m.worker))
}

// takeParked gives worker id (wk) key's parked batch, now due, as its next
// job: its inputs whose callers gave up since the call took them are left
// out (not called again). A retry is not a new batch in Stats.
func (l *loop[K, I, O]) takeParked(id int, wk *worker[K, I, O], key K) {
	fl := l.parks.flights.get(key)
	l.parks.flights.del(key)
	n := 0
	for _, i := range fl.idx {
		if !fl.batch[i].gone {
			fl.idx[n] = i
			n++
		}
	}
	fl.idx = fl.idx[:n]
	wk.fl, wk.idle = fl, false
	if fl.cancel != nil { // CancelAbandoned: gaveUp finds the batch with this worker now
		for _, w := range fl.batch {
			w.tk.rank = int64(id)
		}
	}
	l.out.starts = append(l.out.starts, job[K, I, O]{s: l.s, id: int32(id), fl: fl})
}

// abandonParked counts out of key's parked batch an input of the batch
// tagged tag whose caller gave up, with CancelAbandoned. Once none is left,
// its context is cancelled and it is due at once, to be answered as a
// backoff ended by its context was; a held batch stays held until Resume.
// It reports whether key's parked batch is that batch.
func (l *loop[K, I, O]) abandonParked(key K, tag uint64, now time.Duration) bool {
	fl := l.parks.flights.get(key)
	if fl == nil || fl.tag != tag {
		return false
	}
	if fl.live--; fl.live == 0 {
		fl.cancel(ErrAbandoned) // only the ferry's contexts: no user code
		if !fl.held {           // a hold holds the key's lane until Resume, even so
			l.st.unpark(key, l.timeNow(now))
		}
	}
	return true
}
