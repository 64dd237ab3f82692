/*
 * ferry.pml: a SPIN model of ferry's protocol as the Go code implements it
 * (do.go, submit.go, many.go, loop.go, worker.go, call.go, state.go). See
 * README.md in this directory; model/check runs every configuration and every
 * mutation.
 *
 * Processes and the Go code they stand for:
 *   caller    Ferry.Do (ferry.go), finishDo, abandon (do.go), direct (call.go); or
 *             Ferry.Submit (caller 1, SUBMIT: ferry.go), or Ferry.DoMany and
 *             group.abandon (caller 0, MANY: many.go)
 *   loop      loop.run, receive, handle, admit, letIn, drop, admitPart,
 *             dispatch, startRound, settle, close, end, and the core
 *             state.admit/claims/join/fits/enter/claim/take/release/drop/
 *             unplace/drain/shutdown/flush (loop.go, state.go, schedule.go)
 *   worker    work, finish, reply (worker.go): the call, the release, the
 *             answers (and a Submit's done), then opIdle; started by the
 *             loop's dispatch as batches need them (takeSlot, adopt: slots.go),
 *             up to NW
 *   notifier  callDoneAll, started by loop.close           (worker.go)
 *   flusher   Flush                                        (ferry.go)
 *   closer    Close, Shutdown                              (ferry.go)
 *
 * Configuration (-D on spin's command line):
 *   DIRECT=0|1   Config.DirectCalls, with MaxBatchDelay 0 when on. When off,
 *                MaxBatchDelay > 0: deadlines exist, as "due or not".
 *   ROUNDS0      how many Do calls caller 0 makes in turn (default 1)
 *   CANCELMASK   bit c: caller c's ctx may end (default 1: caller 0's)
 *   SUBMIT=1     caller 1 uses Submit (its ctx bounds its admission alone, so
 *                it never gives up once its opAdmit is sent)
 *   MANY=1       caller 0 uses DoMany with two inputs, of keys 0 and 1; its
 *                answers count down a token on g.count.left, the last sends fin
 *   FLUSH=1|2    flushers, each calling Flush once; FCANCEL=1: their ctx may end
 *   CLOSER       0: the closer calls Close or Shutdown; 1: Close; 2: Shutdown
 *   FWAIT        1: the closer starts once every flusher has returned (a
 *                Close deferred behind the Flushes): a Flush must end without
 *                it; 2: it does so or not, as it chooses at first
 *   CWAIT=1      the closer starts once every caller has returned: an input
 *                that is never taken (nor dropped) is an invalid end state
 *   CALLERS      callers that make a call (default 3; 2: caller 2 makes none)
 *   ONBATCH=1    Config.OnBatch is set: a direct call releases its key
 *                carrying its fin, runs OnBatch, then sends opReported
 *   INCSZ        capacity of s.inc (default 4; Go: 1024)
 *   CALLS        Config.MaxCallsPerKey, N (default 1): a key's calls in
 *                flight at once, batched and direct (lane.calls, lc[k])
 *   BS           MaxBatchSize (default 2; 1: a lane taken keeps its second
 *                input, which goes again while the key has a call to spare)
 *   KEY2         caller 2's key (default 1; 0: all three callers use key 0)
 *   CORECHECK    0: leave out the core's own invariants (checkState's);
 *                the mutations of the count run without them, so that a
 *                property of the protocol must catch them
 *   MUT_*        one mutation each; see README.md
 */

#ifndef DIRECT
#define DIRECT 0
#endif
#if DIRECT
#define DELAY 0
#else
#define DELAY 1
#endif
#ifndef ROUNDS0
#define ROUNDS0 1
#endif
#ifndef INCSZ
#define INCSZ 4
#endif
#ifndef CANCELMASK
#define CANCELMASK 1
#endif
#ifndef SUBMIT
#define SUBMIT 0
#endif
#ifndef MANY
#define MANY 0
#endif
#ifndef FLUSH
#define FLUSH 0
#endif
#ifndef FCANCEL
#define FCANCEL 0
#endif
#ifndef FWAIT
#define FWAIT 0
#endif
#ifndef CWAIT
#define CWAIT 0
#endif
#define NF FLUSH      /* flushers: 0, 1 or 2 */
#ifndef CLOSER
#define CLOSER 0      /* 0: Close or Shutdown; 1: Close only; 2: Shutdown only */
#endif
#ifndef CALLERS
#define CALLERS 3     /* callers that make a call: 2 leaves caller 2 out */
#endif
#ifndef ONBATCH
#define ONBATCH 0     /* OnBatch set: a direct call's report (opReported) follows its release */
#endif
#define CANCELS(c) ((CANCELMASK >> (c)) & 1)

#ifndef CALLS
#define CALLS 1       /* MaxCallsPerKey */
#endif
#ifndef BS
#define BS   2        /* MaxBatchSize: 1 or 2 */
#endif
#ifndef KEY2
#define KEY2 1        /* caller 2's key */
#endif
#ifndef CORECHECK
#define CORECHECK 1
#endif

#define NC   3    /* callers */
#define NI   4    /* inputs: one per caller, and a DoMany's second (id 3) */
#define NK   2    /* keys */
#define NW   2    /* workers: MaxInFlightBatches, the most the loop starts */
#define MAXQ 2    /* MaxQueued: the room */
#define LQ   MAXQ /* a lane's slots in it[]: it never holds more than the room */

#define DIRECTW 2 /* the worker of caller c's direct call's release (Go: byCaller = -1, and
                   * m.w its input) is DIRECTW + c; DIRECTW + NC + c: carrying its fin (its
                   * OnBatch runs, opReported follows) */

/* an input's key: inputs 0 and 1 are key 0's, input 3 key 1's, input 2
 * key 1's or (KEY2=0) key 0's */
#define ikey(i) (((i) == 3 || ((i) == 2 && KEY2)) -> 1 : 0)
#define isMany(i) (MANY && ((i) == 0 || (i) == 3))  /* a DoMany's input */
#define isSub(i) (SUBMIT && (i) == 1)                /* a Submit's input */

/* lane phases (state.go); IDLE is "no lane". BUSY: calls in flight, and
 * none to spare or no input (out of line); READY and WAITING lanes have a
 * call to spare (lc[k] < CALLS), and may have calls in flight */
#define IDLE    0
#define BUSY    1
#define READY   2
#define WAITING 3

/* a DoMany's words on its part's channel p.c, the loop's only sends there
 * (Go: struct{}, with the part's err and dropped written before it) */
#define W_OK   10
#define W_ERR  11
#define W_DROP 12

mtype = { ADMIT, ADMITMANY, DROP, DROPMANY, START, RELEASE, IDLEM, REPORTED,
          NOTIFIED, EXIT, FLUSHM, CLOSE, SHUTDOWN,                   /* to the loop */
          CLAIMED, REJECTED, CLOSED, ANSWER, DROPPED, KEPT, ADMITTED,
          OK };                                                      /* replies */

chan inc = [INCSZ] of { mtype, byte, byte }; /* s.inc: op, input or key, worker or n (or a DoMany's part: 0) */
chan rep[NC] = [1] of { mtype };             /* each waiter's w.c, buffered 1 */
chan jobs[NW] = [1] of { byte };             /* wk.jobs: a batch's key, only while idle */
chan pc = [1] of { byte };                   /* the DoMany's one part's p.c, words only: capacity 1 */
chan gleft = [1] of { byte };                /* g.count.left: the token, the count of inputs not yet answered */
chan gfin = [1] of { bit };                  /* g.count.fin: sent once, by what answers the last input */
chan nch = [1] of { bit };                   /* go callDoneAll(l.s, subs, ErrClosed, after, fin) */
chan fc[2] = [1] of { mtype };               /* each Flush's reply, c */

bool done;                                   /* s.done is closed */
bool ending;                                 /* loop-owned: end() will close it */

/* ---- owned by the loop: the core (state.go) ---- */
byte ph[NK];        /* lane phase per key */
byte lc[NK];        /* lane.calls: the key's calls in flight, batched and direct, CALLS at most */
byte it[NK*LQ];     /* lane items, in order: input+1, 0 for none */
byte ln[NK];        /* items per lane */
byte rq[NK];        /* the ready line: key+1, first come first served */
byte rn;            /* lanes in the ready line */
byte queued;        /* inputs waiting */
byte busy;          /* calls in flight, batched and direct */
bool closed;        /* drained */
bool flushing;      /* st.shuttingDown: set by Shutdown */
bit  old[NI];       /* seq <= flushed, and <= the round's seq: admitted before the Flush */
/* ---- owned by the loop: the shell (loop.go) ---- */
byte idl[NW];       /* l.slots.idle, a stack */
byte nidle;
byte nwk;           /* len(l.slots.workers): workers started (adopt), 0 at New */
byte bufc[NW*BS];   /* wk.fl.batch: input+1 */
byte wowe[NW];      /* wk.fl.owe: what its batch owes the round in progress, told by its opIdle */
bool closing, stopped;
byte exited;
bit  dcl[NC];       /* l.directs.calls has caller c's input: its key claimed for a direct call */
bit  dir[NC];       /* and its cancel: the call has started */
byte notify;        /* l.life.notify */
bool rnd;           /* l.rounds.cur != nil */
byte left;          /* l.rounds.cur.left */
byte rfl;           /* l.rounds.cur.replies: bit f, flusher f's */
byte qfl;           /* l.rounds.queued, for the round after it: bit f, flusher f's */
bit  dold[NC];      /* caller c's direct call's claim is counted by the round */
bit  drep[NC];      /* l.directs.reports: caller c's direct call is released and its OnBatch runs */
bit  rold[NC];      /* and the round counts its claim (rounds.claimed) */
byte gdrop;         /* the DoMany part's dropped, written before its word */

/* ---- ghosts: observers only, never read by the protocol ---- */
byte calls[NK];     /* calls in flight per key, batched and direct */
byte nbc;           /* batched calls in flight */
bit  bu[NW];        /* the worker still reads its batch buffer */
bit  ret[NI];       /* the input's caller has returned without its answer */
bit  seen[NC];      /* the loop has read the current Do's admit */
bit  outc[NI];      /* the input has had its one outcome */
bit  pend[NI];      /* the input is admitted and not yet answered */
bit  taken[NI];     /* the input has been taken into a batch */
bit  inb[NC];       /* the caller has a call (batched or direct) not yet released */
byte wcl[NW];       /* the callers of the worker's batch (bit c: caller c's input), until its release */
bit  dcg[NC];       /* the caller's direct call is claimed, and not over: released, and
                     * with OnBatch, OnBatch returned */
bit  gold[NC];      /* and it was claimed before the round in progress started */
bit  dst[NC];       /* the loop has seen caller c's direct call's opStart */
bit  dcan[NC];      /* that direct call has been cancelled */
byte nret;          /* callers whose last call has returned */
byte wgone;         /* workers that have sent opExit and gone */
bool cdone;         /* the closer has returned */
byte fdone;         /* flushers that have returned */
bool sadm;          /* the Submit's input was admitted */
byte sdone;         /* times the Submit's done has been called */
bool gpool;         /* the DoMany's caller has pooled g: no one may touch it again */
bool swords;        /* the loop has sent the Submit's admission word */

/* loop temporaries, dead between the loop's atomic steps */
hidden byte mb, ma, k, c, ti, tw, tk, tn, kk2, gl, gn, dc;
hidden byte ok;
hidden mtype mop;

/* ------------------------------------------------------------------ */
/* the core                                                            */

/* a loop reply on a Do's or Submit's w.c: never blocks */
inline reply(cc, v) {
	assert(len(rep[cc]) == 0);
	rep[cc]!v
}

/* the Submit's admission word, on a channel the Submit takes from a pool and
 * pools once it has read it: the loop's one send on it */
inline sword(v) {
	assert(!swords); swords = 1;
	reply(1, v)
}

/* the one outcome of input ii, from the loop or a worker */
inline outcome(ii) {
	assert(!outc[ii]);
	outc[ii] = 1
}

/* a Do's outcome, from the loop */
inline doReply(cc, v) {
	reply(cc, v); outcome(cc)
}

/* a loop's word on the DoMany's part's p.c: never blocks (one word for each
 * request, which reads it before the next), never into a pooled g */
inline pword(v) {
	assert(!gpool && nfull(pc));
	pc!v
}

/* countdown.done(n), by a worker (reply) or the loop (close's reply): take
 * the count from g.count.left, put it back less n, and if none is left, send fin.
 * Take, put and fin are one step: no one else can touch g.count.left while it is
 * taken, and fin never blocks (see README). MUT_FIN_BEFORE_PUT: fin first,
 * and a worker puts the count back in a step of its own (owe). */
inline answered(n, lv, owe) {
	assert(!gpool);                                  /* a pooled g is not touched */
	gleft?lv;
	assert(lv >= n);
	lv = lv - n;
#ifdef MUT_FIN_BEFORE_PUT
	if
	:: lv == 0 -> assert(nfull(gfin)); gfin!1; owe = 1  /* MUTATION: fin before the put */
	:: else -> gleft!lv
	fi;
#else
	gleft!lv;
	if
	:: lv == 0 -> assert(nfull(gfin)); gfin!1
	:: else -> skip
	fi;
#endif
	lv = 0
}

/* putGroup: g goes back to the pool, for another DoMany. Nothing may answer
 * into it any more and its channels must be empty (the token taken, fin
 * read, every word read); after this, nothing touches it (!gpool). */
inline pool() {
	assert(empty(gleft) && empty(gfin) && empty(pc));
	assert(!pend[0] && !pend[3]);
	gpool = 1
}

/* schedule.push: the lane at the back of the ready line */
inline pushReady(kk) {
	ph[kk] = READY;
	assert(rn < NK);
	rq[rn] = kk + 1; rn++
}

inline unready(kk) {
	if
	:: rq[0] == kk + 1 -> rq[0] = rq[1]; rq[1] = 0
	:: else -> assert(rq[1] == kk + 1); rq[1] = 0
	fi;
	rn--
}

/* state.removeLane: the lane is gone, and with it its count of calls (0
 * but in the mutations that remove a lane with calls in flight) */
inline removeLane(kk) {
	if
	:: ph[kk] == READY -> unready(kk)
	:: else -> skip
	fi;
	ph[kk] = IDLE; lc[kk] = 0
}

/* state.unplace: a lane left with no input out of the schedule: removed if
 * no call of its key is in flight, else busy */
inline unplace(kk) {
	if
	:: lc[kk] == 0 -> removeLane(kk)
	:: else ->
		if
		:: ph[kk] == READY -> unready(kk)
		:: else -> skip
		fi;
		ph[kk] = BUSY
	fi
}

/* the lane has a call to spare: fewer than CALLS of its key's calls are in
 * flight, so that a lane with inputs goes (again) in line */
#ifdef MUT_CALLS_OVER
#define SPARE(kk) (1)                                /* MUTATION: the count ignored */
#else
#define SPARE(kk) (lc[kk] < CALLS)
#endif

/* state.claims for a key that has a lane: busy, a call to spare, no input
 * waiting; with none, claims (claimsLane) */
#ifdef MUT_CLAIM_OVER
#define CLAIMS(kk) (ph[kk] == IDLE || ph[kk] == BUSY && ln[kk] == 0)   /* MUTATION: the count ignored */
#else
#define CLAIMS(kk) (ph[kk] == IDLE || ph[kk] == BUSY && lc[kk] < CALLS && ln[kk] == 0)
#endif

/* a lane holds an input that a Flush made due: its deadline is MinInt64 */
#define hurried(kk) ((it[(kk)*LQ] > 0 && old[it[(kk)*LQ] - 1]) || (it[(kk)*LQ + 1] > 0 && old[it[(kk)*LQ + 1] - 1]))

/* place: an idle lane with items to the ready line if it is full, hurried
 * (made due by a Flush) or the room is shutting down, else to waiting. Go
 * also sends a partial lane that is already due to the ready line; here its
 * deadline passes later, at once. */
inline place(kk) {
	if
	:: DELAY && !flushing && ln[kk] < BS && !hurried(kk) -> ph[kk] = WAITING
	:: else -> pushReady(kk)
	fi
}

/* every waiting lane becomes ready, in deadline order: either */
inline allReady() {
	if
	:: ph[0] == WAITING && ph[1] == WAITING ->
		if
		:: pushReady(0); pushReady(1)
		:: pushReady(1); pushReady(0)
		fi
	:: else ->
		if
		:: ph[0] == WAITING -> pushReady(0)
		:: else -> skip
		fi;
		if
		:: ph[1] == WAITING -> pushReady(1)
		:: else -> skip
		fi
	fi
}

/* state.enter: input ii joins its lane (room has said yes) */
inline enter(ii) {
	assert(!closing);                               /* no input admitted after close */
	queued++;
	kk2 = ikey(ii);
	it[kk2*LQ + ln[kk2]] = ii + 1; ln[kk2]++;
	pend[ii] = 1; old[ii] = 0;
	if
	:: ph[kk2] == IDLE -> place(kk2)
	:: ph[kk2] == BUSY && SPARE(kk2) -> place(kk2)  /* a call to spare: it goes again */
	:: ph[kk2] == WAITING && ln[kk2] >= BS -> pushReady(kk2)   /* full */
	:: else -> skip                                 /* rekey; or ready; or busy, none to spare */
	fi;
	assert(queued <= MAXQ);
	kk2 = 0
}

/* state.fits(1) is refused: closed or shutting down */
#ifdef MUT_ADMIT_IGNORES_CLOSED
#define REFUSED (flushing)                           /* MUTATION: closed not checked */
#else
#define REFUSED (closed || flushing)
#endif

/* loop.handle(opAdmit) for a Do, with state.admit */
inline admitDo(cc) {
	assert(!inb[cc]);    /* a caller's next Do comes after its last call's release */
	seen[cc] = 1;
	k = ikey(cc);
	if
	:: REFUSED -> doReply(cc, CLOSED)
	:: else ->
		if
		:: DIRECT && CLAIMS(k) ->                   /* claim: counted, busy if new */
			assert(!closing);
			ph[k] = BUSY; lc[k]++; busy++; inb[cc] = 1; dcg[cc] = 1; gold[cc] = 0;
			dcl[cc] = 1; dold[cc] = 0;
			doReply(cc, CLAIMED)
		:: else ->
			if
			:: queued >= MAXQ -> doReply(cc, REJECTED)
			:: else -> enter(cc)
			fi
		fi
	fi
}

/* loop.letIn of a Submit, with state.join: it never claims */
inline submit() {
	if
	:: REFUSED -> sword(CLOSED)
	:: else ->
		if
		:: queued >= MAXQ -> sword(REJECTED)
		:: else -> enter(1); sadm = 1; sword(ADMITTED)
		fi
	fi
}

/* loop.admitPart: both inputs or neither */
inline admitMany() {
	if
	:: REFUSED -> pword(W_ERR)
	:: else ->
		if
#ifdef MUT_MANY_ROOM_ONE
		:: queued + 1 > MAXQ -> pword(W_ERR)         /* MUTATION: room for one only */
#else
		:: queued + 2 > MAXQ -> pword(W_ERR)
#endif
		:: else -> enter(0); enter(3); pword(W_OK)
		fi
	fi
}

/* loop.drop (a DoMany's: loop.dropOne) with state.drop: ok if input ii was
 * waiting, now gone */
inline dropOne(ii) {
	k = ikey(ii);
	ti = 0;
	do
	:: ti < ln[k] && it[k*LQ + ti] != ii + 1 -> ti++
	:: else -> break
	od;
	ok = (ti < ln[k]);
	if
	:: ok ->
		if
		:: ti == 0 -> it[k*LQ] = it[k*LQ + 1]
		:: else -> skip
		fi;
		it[k*LQ + 1] = 0; ln[k]--;
		queued--;
		if
#ifndef MUT_UNPLACE_REMOVES
		:: ln[k] == 0 -> unplace(k)                 /* a stale ready ref is skipped by take */
#else
		:: ln[k] == 0 && ph[k] != BUSY -> removeLane(k)  /* MUTATION: removed if not busy, as with one call per key */
#endif
		:: else ->
			if
			:: DELAY && ph[k] == READY && !flushing && ln[k] < BS && !hurried(k) ->
				if
				:: unready(k); ph[k] = WAITING      /* Ready -> Waiting: not yet due */
				:: skip                             /* due already */
				fi
			:: else -> skip
			fi
		fi
	:: else -> skip
	fi;
	ti = 0
}

/* l.rounds.countIf(w.tk.seq <= l.rounds.seq()) */
inline countOld(ii) {
	if
	:: rnd && old[ii] -> assert(left > 0); left--
	:: else -> skip
	fi
}

/* loop.handle(opDrop) for a Do. The word on a drop goes through
 * loop.replyAfterLend,
 * which with one shard sends it at once, as here (with several it waits for
 * the wake-up's lend, in turn: see shards.pml) */
inline dropDo(cc) {
	dropOne(cc);
	if
	:: ok -> countOld(cc); pend[cc] = 0; doReply(cc, DROPPED)   /* replyAfterLend: w.c is empty */
	:: else ->
#ifdef MUT_KEPT_ALWAYS
		assert(len(rep[cc]) == 0); rep[cc]!KEPT     /* MUTATION: errKept even into a full w.c */
#else
		if
		:: nfull(rep[cc]) -> rep[cc]!KEPT
		:: full(rep[cc]) -> skip                     /* w.c holds its answer */
		fi
#endif
	fi
}

/* loop.handle(opDropMany) */
inline dropMany() {
	gdrop = 0;
	dropOne(0);
	if
	:: ok -> countOld(0); pend[0] = 0; outcome(0); gdrop++
	:: else -> skip
	fi;
	dropOne(3);
	if
	:: ok -> countOld(3); pend[3] = 0; outcome(3); gdrop++
	:: else -> skip
	fi;
	pword(W_DROP)                                    /* replyAfterLend: at once, one shard */
}

/* loop.handle(opRelease) with state.release: a call of key kk ends, worker
 * wk's batch (wk < DIRECTW) or a caller's direct call (see DIRECTW) */
inline release(kk, wk) {
	assert(lc[kk] > 0);        /* busyLane. Go: panic, a release of a key with no call in flight */
	lc[kk]--; busy--;
	if
	:: ph[kk] != BUSY -> skip                        /* in line already, with a call to spare */
#ifndef MUT_RELEASE_NO_PLACE
	:: ph[kk] == BUSY && ln[kk] > 0 -> place(kk)     /* out of line with inputs left */
#else
	:: ph[kk] == BUSY && ln[kk] > 0 -> skip          /* MUTATION: its inputs left where they are */
#endif
#ifndef MUT_RELEASE_REMOVES
	:: ph[kk] == BUSY && ln[kk] == 0 && lc[kk] == 0 -> removeLane(kk)
	:: ph[kk] == BUSY && ln[kk] == 0 && lc[kk] > 0 -> skip   /* busy: its other calls */
#else
	:: ph[kk] == BUSY && ln[kk] == 0 -> removeLane(kk)   /* MUTATION: its other calls forgotten */
#endif
	fi;
	if
	:: wk < DIRECTW ->
		/* ghost: the batch's callers may come again */
		if
		:: wcl[wk] & 1 -> inb[0] = 0
		:: else -> skip
		fi;
		if
		:: wcl[wk] & 2 -> inb[1] = 0
		:: else -> skip
		fi;
		if
		:: wcl[wk] & 4 -> inb[2] = 0
		:: else -> skip
		fi;
		wcl[wk] = 0;
#ifdef MUT_IDLE_AT_RELEASE
		idle(wk)                                     /* MUTATION: idle at its release */
#else
		skip                                         /* idle only at its opIdle */
#endif
	:: else ->                                       /* endDirect: caller dc's, by its input */
		dc = (wk - DIRECTW) % NC;
		inb[dc] = 0;                                 /* ghost: it may come again */
		assert(dcl[dc] && ikey(dc) == kk);
		assert(!(closing && dst[dc]) || dcan[dc]);   /* close cancelled it */
		if
#ifndef MUT_REPORT_AT_RELEASE
		:: wk >= DIRECTW + NC ->                     /* carrying its fin: its report is to come */
			assert(!drep[dc]);
			drep[dc] = 1; rold[dc] = dold[dc]
#endif
		:: else ->                                   /* MUTATION: counted here, even with a fin */
			if
			:: rnd && dold[dc] -> assert(left > 0); left--
			:: else -> skip
			fi
		fi;
		dcl[dc] = 0; dir[dc] = 0; dold[dc] = 0; dst[dc] = 0; dcan[dc] = 0; dc = 0
	fi
}

/* handle(opIdle): loop.idleWorker, which pays what the worker's batch owed
 * the round in progress (rounds.paid) and gives it back as idle
 * (slots.releaseSlot: with one shard, to the loop's idle list) */
inline idle(wk) {
	if
	:: rnd -> assert(left >= wowe[wk]); left = left - wowe[wk]
	:: else -> skip
	fi;
	wowe[wk] = 0;
	idl[nidle] = wk; nidle++
}

/* handle(opReported): loop.reported, caller c's OnBatch has returned */
inline reported(cc) {
#ifndef MUT_REPORT_AT_RELEASE
	assert(drep[cc]);
#endif
	if
	:: rnd && rold[cc] -> assert(left > 0); left--
	:: else -> skip
	fi;
	drep[cc] = 0; rold[cc] = 0
}

/* loop.close with state.drain */
inline lclose() {
	if
	:: closing -> skip
	:: else ->
		closing = 1; closed = 1;
		k = 0;
		do
		:: k < NK ->
			ti = 0;
			do
			:: ti < ln[k] ->
				c = it[k*LQ + ti] - 1;
				if
				:: isMany(c) -> gn++; pend[c] = 0; outcome(c)  /* one run: consecutive seqs */
				:: isSub(c) -> notify++; assert(nfull(nch)); nch!1  /* its done: off the loop */
				:: else -> doReply(c, CLOSED); pend[c] = 0
				fi;
				it[k*LQ + ti] = 0; ti++
			:: else -> break
			od;
			ln[k] = 0;
			if
#ifndef MUT_DRAIN_REMOVES
			:: lc[k] > 0 -> ph[k] = BUSY             /* out of the schedule, busy until released */
			:: else -> ph[k] = IDLE
#else
			:: ph[k] != BUSY -> removeLane(k)        /* MUTATION: removed if not busy, as with one call per key */
			:: else -> skip
#endif
			fi;
			k++
		:: else -> break
		od;
		c = 0;
		do                                           /* go d.cancel(ErrClosed), each started direct call's */
		:: c < NC ->
			if
			:: dir[c] -> dcan[c] = 1
			:: else -> skip
			fi;
			c++
		:: else -> break
		od;
		rq[0] = 0; rq[1] = 0; rn = 0; queued = 0;
		if
		:: gn > 0 ->                                 /* reply's g.count.done(n) */
			assert(nempty(gleft));                   /* the loop never waits for the token */
			answered(gn, gl, ok);
			if
			:: ok -> gleft!0; ok = 0                 /* MUT_FIN_BEFORE_PUT: the put, after fin */
			:: else -> skip
			fi;
			gn = 0
		:: else -> skip
		fi;
		if
		:: rnd -> tell(rfl, CLOSED); rnd = 0; left = 0; clearOwed()  /* the round's replies: ErrClosed */
		:: else -> skip
		fi;
		tell(qfl, CLOSED);                           /* and the flushers' after it */
		k = 0; ti = 0; c = 0
	fi
}

/* the replies of the Flushes in fl (bits): tell(err) on each one's c */
inline tell(fl, v) {
	if
	:: fl & 1 -> assert(nfull(fc[0])); fc[0]!v
	:: else -> skip
	fi;
	if
	:: fl & 2 -> assert(nfull(fc[1])); fc[1]!v
	:: else -> skip
	fi;
	fl = 0
}

/* loop.startRound: a round for the Flushes waiting (l.rounds.queued); every input
 * admitted so far is older than it; it waits for those, for the direct
 * calls in flight and those released whose OnBatch runs (their reports),
 * for the Submits' done in flight (notify), and for every worker busy with a
 * batch, whose opIdle comes once it has answered it (slots.owe: 1 each); what waits
 * is made due (state.flush). The round's id is left out: what a worker owes
 * is set for the round in progress at dispatch and at startRound, for every
 * busy worker, and a round ends only once all it was owed has come, so
 * rounds.paid's o.round == cur.id holds whenever a round is on; what is
 * owed is cleared as a round ends (clearOwed), which changes nothing. */
#define INIDLE(w) ((nidle > 0 && idl[0] == (w)) || (nidle > 1 && idl[1] == (w)))
inline startRound() {
	assert(!closing && !rnd && qfl != 0);
	rnd = 1; rfl = qfl; qfl = 0;
#ifndef MUT_ROUND_NO_REPORTS
	left = queued + dcl[0] + dcl[1] + dcl[2] + drep[0] + drep[1] + drep[2] + notify;
#else
	left = queued + dcl[0] + dcl[1] + dcl[2] + notify;   /* MUTATION: l.directs.reports left out */
#endif
	old[0] = 1; old[1] = 1; old[2] = 1; old[3] = 1;
	dold[0] = dcl[0]; dold[1] = dcl[1]; dold[2] = dcl[2];
	rold[0] = drep[0]; rold[1] = drep[1]; rold[2] = drep[2];
	gold[0] = dcg[0]; gold[1] = dcg[1]; gold[2] = dcg[2];
	k = 0;
	do
	:: k < nwk && !INIDLE(k) ->
#ifndef MUT_FLUSH_NO_BUSY
		wowe[k] = 1; left++;                         /* a busy worker: its opIdle */
#endif
		k++
	:: k < nwk && INIDLE(k) -> k++
	:: k >= nwk -> break
	od;
	k = 0;
	allReady()
}

/* a round is over: what was owed to it is no more */
inline clearOwed() {
	wowe[0] = 0; wowe[1] = 0;
	rold[0] = 0; rold[1] = 0; rold[2] = 0;
	gold[0] = 0; gold[1] = 0; gold[2] = 0
}

/* loop.settle: while the round has nothing left, its Flushes are told nil
 * and the next round starts for those queued behind it, which may have
 * nothing left either (no input, call, report or notify, no busy worker).
 * With the property a Flush's nil stands for. */
inline settle() {
	do
	:: rnd && left == 0 ->
		/* every input admitted before the Flush has been answered, and every
		 * direct call in flight then is over, its OnBatch returned */
		assert(!(old[0] && pend[0]) && !(old[1] && pend[1]));
		assert(!(old[2] && pend[2]) && !(old[3] && pend[3]));
		assert(!dold[0] && !dold[1] && !dold[2]);
		assert(!gold[0] && !gold[1] && !gold[2]);
		tell(rfl, OK); rnd = 0; clearOwed();
		if
		:: qfl != 0 && !closing -> startRound()
		:: else -> skip
		fi
#if defined(MUT_SETTLE_IN_END) || defined(MUT_SETTLE_ONCE)
		; break                                      /* MUTATION: one round at most, an if */
#endif
	:: else -> break
	od
}

/* loop.dispatch: a batch on each idle worker while a lane is ready (state.take);
 * slots.takeSlot pops an idle worker, or starts one (hold, newWorker) if none
 * is idle and fewer than NW (most) have started; a worker is idle again only
 * at its opIdle, once it has answered its batch */
inline turn() {
	do
	:: rn > 0 && (nidle > 0 || nwk < NW) ->
		if
		:: nidle == 0 ->                             /* newWorker: go work(f, c) */
			assert(!stopped);
			idl[0] = nwk; nidle = 1;
			run worker(nwk); nwk++
		:: else -> skip
		fi;
		nidle--; tw = idl[nidle]; idl[nidle] = 0;
		tk = rq[0] - 1; rq[0] = rq[1]; rq[1] = 0; rn--;
		assert(ph[tk] == READY);
#ifndef MUT_TAKE_NOT_BUSY
		ph[tk] = BUSY; lc[tk]++;                     /* busy, its call counted */
#endif
		busy++;
		assert(!bu[tw]);                             /* the worker no longer reads wk.fl.batch */
		bu[tw] = 1;
		ti = 0; tn = 0;
		do
		:: ti < ln[tk] && ti < BS ->
			c = it[tk*LQ + ti] - 1;
			assert(!ret[c]);     /* no input whose caller has given up joins a call */
			assert(!taken[c]);
			taken[c] = 1;
			if
			:: c < NC -> inb[c] = 1; wcl[tw] = wcl[tw] | (1 << c)
			:: else -> skip
			fi;
			if
			:: rnd && old[c] -> tn++                 /* its batch owes the round for it */
			:: else -> skip
			fi;
			bufc[tw*BS + ti] = c + 1;
			ti++
		:: else -> break
		od;
		queued = queued - ti; ln[tk] = ln[tk] - ti;
#if BS == 1
		it[tk*LQ] = it[tk*LQ + 1]; it[tk*LQ + 1] = 0;   /* the rest moves up */
#else
		it[tk*LQ] = 0; it[tk*LQ + 1] = 0;
#endif
#ifndef MUT_TAKE_NO_REPLACE
		if
		:: ln[tk] > 0 && SPARE(tk) -> place(tk)      /* a call to spare: the rest go again */
		:: else -> skip
		fi;
#endif
		wowe[tw] = tn;                               /* wk.fl.owe: rounds.owe(n) */
		assert(nfull(jobs[tw]));                     /* a batch only while idle */
		jobs[tw]!tk;
		tw = 0; tk = 0; ti = 0; c = 0; tn = 0
	:: else -> break
	od
}

/* loop.end, up to close(s.done): a closing loop with no call in flight, no
 * Submits' done running, every worker idle and every direct call's OnBatch
 * reported stops its workers; MUT_SETTLE_IN_END: with the settle that the
 * code had there before its own wake-up's (285c12b) */
/* after each wake-up, checkState's rules of the count (CORECHECK): no lane
 * in line with no call to spare, none busy with inputs and a call to spare
 * or with no call, no count or input without a lane */
inline corekey(kk) {
	assert(!((ph[kk] == READY || ph[kk] == WAITING) && lc[kk] >= CALLS));
	assert(!(ph[kk] == BUSY && (lc[kk] == 0 || lc[kk] < CALLS && ln[kk] > 0)));
	assert(ph[kk] != IDLE || lc[kk] == 0 && ln[kk] == 0)
}
inline coreok() {
#if CORECHECK
	corekey(0); corekey(1)
#else
	skip
#endif
}

#define REPORTS (drep[0] + drep[1] + drep[2])
inline endcheck() {
#ifdef MUT_SETTLE_IN_END
	settle();                                        /* MUTATION: after the dispatch */
#endif
	if
	:: flushing && queued == 0 && busy == 0 -> lclose()
	:: else -> skip
	fi;
	if
#if defined(MUT_NO_NOTIFY_WAIT)
	:: closing && busy == 0 && nidle == nwk && REPORTS == 0 ->  /* MUTATION: done callbacks not waited for */
#elif defined(MUT_NO_REPORT_WAIT)
	:: closing && busy == 0 && notify == 0 && nidle == nwk ->   /* MUTATION: reports not waited for */
#else
	:: closing && busy == 0 && notify == 0 && nidle == nwk && REPORTS == 0 ->
#endif
		stopped = 1;                                 /* slots.stopWorkers: a stop to each, all idle */
		if
#ifdef MUT_NO_EXIT_WAIT
		:: true ->                                   /* MUTATION: no wait for the workers */
#else
		:: exited == nwk ->                          /* every worker started has gone */
#endif
			assert(!dir[0] && !dir[1] && !dir[2]);
			ending = 1                               /* end() will return true */
		:: else -> skip
		fi
	:: else -> skip
	fi
}

/* time passes: the deadline of one waiting lane or more passes; they are
 * promoted in deadline order, either when both */
inline fire() {
	if
	:: ph[0] == WAITING && ph[1] == WAITING ->
		if
		:: pushReady(0)
		:: pushReady(1)
		:: pushReady(0); pushReady(1)
		:: pushReady(1); pushReady(0)
		fi
	:: ph[0] == WAITING && ph[1] != WAITING -> pushReady(0)
	:: ph[0] != WAITING && ph[1] == WAITING -> pushReady(1)
	fi
}

inline handle() {
	if
	:: mop == ADMIT && isSub(ma) -> submit()
	:: mop == ADMIT && !isSub(ma) -> admitDo(ma)
	:: mop == ADMITMANY -> admitMany()
	:: mop == DROP     -> dropDo(ma)                 /* never a Submit's */
	:: mop == DROPMANY -> dropMany()
	:: mop == START    ->                            /* ma: the caller, by its input (m.w) */
		assert(dcl[ma]);
		dst[ma] = 1;
		if
		:: closing -> dcan[ma] = 1                   /* go m.cancel(ErrClosed) */
		:: else -> dir[ma] = 1
		fi
	:: mop == RELEASE  -> release(ma, mb)
	:: mop == IDLEM    ->                            /* opIdle: loop.idleWorker */
#ifndef MUT_IDLE_AT_RELEASE
		assert(!INIDLE(ma));
		idle(ma)
#else
		skip                                         /* MUTATION: idle at its release */
#endif
	:: mop == REPORTED -> reported(ma)               /* loop.reported */
	:: mop == NOTIFIED -> assert(notify > 0); notify--  /* loop.notified: close's */
	:: mop == EXIT     -> exited++
	:: mop == FLUSHM   ->                            /* ma: the flusher */
		if
		:: closing -> assert(nfull(fc[ma])); fc[ma]!CLOSED
		:: else ->
			qfl = qfl | (1 << ma);                   /* l.rounds.queued */
			if
			:: !rnd -> startRound()
			:: else -> skip                          /* the round after it */
			fi
		fi
	:: mop == CLOSE    -> lclose()
	:: mop == SHUTDOWN ->
		if
		:: !closed && !flushing -> flushing = 1; allReady()   /* state.shutdown */
		:: else -> skip
		fi
	fi;
	mop = 0; ma = 0; mb = 0; k = 0; ok = 0
}

/* ------------------------------------------------------------------ */

proctype loop() {
	byte n;
	do
	:: ending -> done = 1; break                     /* end(): close(s.done); messages sent
	                                                  * since the last receive stay in inc */
	:: else ->
		if
		:: atomic {                                  /* receive: one wake-up */
			inc?mop, ma, mb ->
			handle();
			n = len(inc);                            /* and every message queued behind */
			do
			:: n > 0 -> inc?mop, ma, mb; handle(); n--
			:: else -> break
			od;
#ifndef MUT_SETTLE_IN_END
			settle();                                /* before dispatch: a round it starts made lanes due */
#endif
			turn(); endcheck(); coreok()
		   }
		:: atomic { (ph[0] == WAITING || ph[1] == WAITING) -> fire(); turn(); endcheck(); coreok() }  /* a deadline: no settle */
		fi
	od;
	/* end(): every message sent before done was closed is in inc now */
	atomic {
		n = len(inc);
		do
		:: n > 0 ->
			inc?mop, ma, mb;
			if
#ifndef MUT_NO_FINAL_DRAIN
			:: mop == ADMIT && !isSub(ma) -> seen[ma] = 1; doReply(ma, CLOSED)
			:: mop == ADMIT && isSub(ma) -> sword(CLOSED)
			:: mop == ADMITMANY -> pword(W_ERR)
			:: mop == DROPMANY -> pword(W_DROP)          /* dropped: 0 */
			:: mop == FLUSHM -> assert(nfull(fc[ma])); fc[ma]!CLOSED
#endif
			:: else -> skip
			fi;
			n--
		:: else -> break
		od;
		mop = 0; ma = 0; mb = 0
	}
}

/* a worker answers input wc-1 of its batch: reply, for a Do or a DoMany;
 * a Submit's done comes after them (here in the same step) */
inline answerOne(wc) {
	outcome(wc - 1); pend[wc - 1] = 0;
	if
	:: isMany(wc - 1) -> answered(1, lv, owe)         /* a run of one: one input per key */
	:: isSub(wc - 1) -> sdone++; assert(sdone == 1)  /* callDone: done(out, err) */
	:: else -> rep[wc - 1]!ANSWER                    /* after an errKept, once it is read */
	fi
}

/* work and finish: the call, its release, the answers (a Submit's done
 * after the Do and DoMany callers'; OnBatch after them), then, in a step of
 * its own, clear(fl.batch) and opIdle: a slow done or OnBatch holds its own
 * worker, which is idle only once it has sent opIdle */
proctype worker(byte id) {
	byte wk, i, wc, lv;
	bit owe;
	do
	:: atomic {
		jobs[id]?wk ->                               /* the call starts */
		calls[wk]++; assert(calls[wk] <= CALLS);
		nbc++; assert(nbc <= NW)
	   };
#ifndef MUT_ANSWER_BEFORE_RELEASE
		atomic { inc!RELEASE, wk, id; calls[wk]--; nbc-- };  /* it returns; finish: release first */
#else
		d_step { calls[wk]--; nbc-- };
#endif
		atomic {                                     /* answer each input */
			i = 0;
			do
			:: i < BS && bufc[id*BS + i] > 0 ->
				wc = bufc[id*BS + i];
				answerOne(wc);
				wc = 0; i++
			:: else -> break
			od;
			i = 0;
#ifdef MUT_ANSWER_BEFORE_RELEASE
			inc!RELEASE, wk, id;                     /* MUTATION: release after the answers */
#endif
#if BS == 1
			bufc[id] = 0;                            /* read no more (the ghost bu says when it is cleared) */
#else
			bufc[id*BS] = 0; bufc[id*BS + 1] = 0;    /* read no more (the ghost bu says when it is cleared) */
#endif
			wk = 0
		};
#ifdef MUT_FIN_BEFORE_PUT
		if
		:: atomic { owe -> assert(!gpool); gleft!0; owe = 0 }  /* the put, after fin */
		:: else -> skip
		fi;
#endif
		atomic {                                     /* done and OnBatch have returned */
			assert(bu[id]);
			bu[id] = 0;                              /* clear(fl.batch) */
			inc!IDLEM, id, 0
		}
	:: atomic { stopped && empty(jobs[id]) -> break }  /* a stop: the loop stops only idle workers */
	od;
	atomic { inc!EXIT, 0, 0; wgone++ }
}

/* a call returns */
inline fin() {
	nret++; r = 0
}

/* a Do that got its call's answer, or whose direct call is over, returned
 * with its waiter pooled: caller 0 may make another Do */
inline againOrFin() {
	if
	:: me == 0 && round + 1 < ROUNDS0 && (r == ANSWER || r == CLAIMED) ->
		assert(outc[me]);
		round++; outc[me] = 0; seen[me] = 0; taken[me] = 0; r = 0;
		goto do_
	:: else -> fin(); goto out
	fi
}

/* answer(): r was read from w.c. A claimed caller starts its direct call
 * (opStart, then the call); any other returns r. */
inline got() {
	if
	:: r == CLAIMED ->
		inc!START, me, 0;
#ifndef MUT_EARLY_RELEASE
		calls[key]++; assert(calls[key] <= CALLS)
#else
		inc!RELEASE, key, DIRECTW + me               /* MUTATION: released before the call */
#endif
	:: else -> againOrFin()
	fi
}

/* shard.send, and Do's own first select: the fast path if inc has room,
 * else a select with done (then ok is false) */
inline send(m, a) {
	if
	:: atomic { inc!m, a, 0; sent = 1 }
	:: full(inc) ->
		if
		:: atomic { inc!m, a, 0; sent = 1 }
		:: done -> sent = 0
		fi
	fi
}

proctype caller(byte me) {
	byte key = ikey(me);
	byte round = 0;
	bit sent;
	mtype r;
	byte gw;
	if
	:: me >= CALLERS -> fin(); goto out
	:: isSub(me) -> goto sub
	:: isMany(me) -> goto many
	:: else -> skip
	fi;
do_:
	/* Do: send opAdmit, by the fast path or in a select with done; then, at
	 * once (see README), look at done */
	if
	:: atomic { inc!ADMIT, me, 0; if :: done -> goto dn :: else -> goto wt fi }
	:: full(inc) ->
		if
		:: atomic { inc!ADMIT, me, 0; if :: done -> goto dn :: else -> goto wt fi }
		:: atomic { done -> fin() }; goto out        /* ErrClosed */
		fi
	fi;
dn:	/* done is closed: take an answer if there is one, else ErrClosed */
	if
	:: atomic { rep[me]?r -> got() }; goto called
	:: atomic { empty(rep[me]) -> ret[me] = 1; fin() }; goto out  /* w not pooled */
	fi;
wt:	/* wait for the answer or the end of ctx */
	if
	:: atomic { rep[me]?r -> got() }
	:: atomic { CANCELS(me) && nfull(inc) -> inc!DROP, me, 0 }; goto abandon /* ctx ended */
	:: atomic { CANCELS(me) && done -> ret[me] = 1; fin() }; goto out    /* ctx ended, done closed */
	fi;
called:
	/* only a claimed caller gets here: its direct call is in flight */
#ifndef MUT_EARLY_RELEASE
#if ONBATCH
	/* it returns; releaseDirect carries its fin; then OnBatch, then opReported */
	atomic { inc!RELEASE, key, DIRECTW + NC + me; calls[key]-- };
	atomic { dcg[me] = 0; gold[me] = 0; inc!REPORTED, me, 0; againOrFin() }  /* OnBatch has returned */
#else
	atomic { inc!RELEASE, key, DIRECTW + me; calls[key]--; dcg[me] = 0; gold[me] = 0; againOrFin() } /* it returns; releaseDirect */
#endif
#else
	atomic { calls[key]++; assert(calls[key] <= CALLS) }
	atomic { calls[key]--; dcg[me] = 0; gold[me] = 0; againOrFin() }
#endif
abandon:
	/* drop sent; wait for one word */
#ifdef MUT_NO_DROP_WAIT
	atomic { ret[me] = 1; fin() }; goto out          /* MUTATION: no wait for the word */
#endif
	if
	:: atomic {
		rep[me]?r ->
		if
		:: r == CLAIMED -> inc!RELEASE, key, DIRECTW + me; dcg[me] = 0; gold[me] = 0  /* it will not make the call */
		:: else -> skip
		fi;
		ret[me] = 1; fin()
	   }
	:: atomic { done -> ret[me] = 1; fin() }
	fi;
	goto out;

sub:	/* Submit: its ctx bounds its admission alone (its check before the
	 * send is left out: then Submit returns and sends nothing) */
	send(ADMIT, me);
	if
	:: !sent -> goto refused                        /* ErrClosed */
	:: else -> skip
	fi;
	if                                              /* await(s, c, nil) */
	:: atomic { done ->
		if
		:: rep[me]?r
		:: empty(rep[me]) -> r = CLOSED; goto refused  /* ErrClosed: c not pooled */
		fi }
	:: else -> rep[me]?r
	fi;
	if
	:: r == ADMITTED -> fin(); goto out              /* nil: done will be called */
	:: else -> skip
	fi;
refused:
	atomic { ret[me] = 1; fin() };
	goto out;

many:	/* DoMany of inputs 0 (key 0) and 3 (key 1): one shard, so one part,
	 * one request(opAdmitMany) and nothing answered by the caller itself */
	gleft!2;                                        /* g.count.start(len(ins)) */
	send(ADMITMANY, 0);
	if
	:: !sent -> atomic { gleft?gw; pool(); ret[0] = 1; ret[3] = 1; fin(); gw = 0 }; goto out  /* ErrClosed */
	:: else -> skip
	fi;
	if                                              /* request: as in Do */
	:: atomic { done ->
		if
		:: pc?gw
		:: empty(pc) -> gleft?gw; ret[0] = 1; ret[3] = 1; fin(); gw = 0; goto out  /* g.lost: not pooled */
		fi }
	:: else -> pc?gw
	fi;
	if
	:: gw == W_ERR -> atomic { gleft?gw; pool(); ret[0] = 1; ret[3] = 1; fin(); gw = 0 }; goto out
	:: else -> assert(gw == W_OK)
	fi;
	if                                              /* select: fin or ctx */
	:: atomic { gfin?_ -> assert(!pend[0] && !pend[3] && outc[0] && outc[3]); gw = 0 }
	:: CANCELS(0) -> gw = 0; goto abandonMany       /* ctx ended */
	fi;
#ifndef MUT_NO_TAKE_AT_FIN
	atomic { gleft?gw -> assert(gw == 0); pool(); fin(); gw = 0 };  /* put back before fin */
#else
	atomic { pool(); fin() };                       /* MUTATION: pooled with the token in g.count.left */
#endif
	goto out;
abandonMany:
	send(DROPMANY, 0);
	if
	:: !sent -> atomic { ret[0] = 1; ret[3] = 1; fin() }; goto out  /* request's ErrClosed: not pooled */
	:: else -> skip
	fi;
	if                                              /* request */
	:: atomic { done ->
		if
		:: pc?gw
		:: empty(pc) -> ret[0] = 1; ret[3] = 1; fin(); gw = 0; goto out  /* g.lost */
		fi }
	:: else -> pc?gw
	fi;
	assert(gw == W_DROP);
	gleft?gw;                                       /* left */
	if
	:: gw == 0 ->                                   /* all answered: the last sends fin */
#ifndef MUT_NO_FIN_WAIT
		gfin?_;
#endif
		atomic { pool(); gw = 0 }
	:: gw != 0 && gw == gdrop -> atomic { pool(); gw = 0 }  /* the rest dropped */
	:: else ->
#ifdef MUT_POOL_WHEN_PENDING
		atomic { pool(); gw = 0 }                   /* MUTATION: pooled with answers to come */
#else
		atomic { gleft!gw; gw = 0 }                 /* answers to come: never pooled */
#endif
	fi;
	atomic { ret[0] = 1; ret[3] = 1; fin() };
out:
	skip
}

/* callDoneAll: the Submit's done, with ErrClosed, off the loop */
proctype notifier() {
end_n:
	if
	:: nch?_ ->
		atomic {
			outcome(1); pend[1] = 0;
			sdone++; assert(sdone == 1)
		};
		inc!NOTIFIED, 0, 0
	:: done -> skip
	fi
}

proctype flusher(byte me) {
	bit sent;
	mtype r;
	send(FLUSHM, me);
	if
	:: !sent -> goto out                             /* ErrClosed */
	:: else -> skip
	fi;
	if
	:: fc[me]?r
	:: FCANCEL -> skip                               /* ctx's error */
	:: atomic { done ->
		if
		:: fc[me]?r
		:: empty(fc[me]) -> skip                     /* ErrClosed */
		fi }
	fi;
out:
	fdone++
}

inline closedok() {  /* Close (or Shutdown) returns: every call over (a direct call's OnBatch
                      * returned too), every goroutine gone */
	assert(done && wgone == nwk && calls[0] == 0 && calls[1] == 0 && busy == 0);
	assert(!dcg[0] && !dcg[1] && !dcg[2]);
	assert(notify == 0 && (!sadm || sdone == 1))     /* every admitted Submit's done has run */
}

proctype closer() {
#if CWAIT
	nret == NC;                                      /* Close once every caller has returned */
#endif
#if FWAIT == 1
	fdone == NF;                                     /* Close deferred behind the Flushes */
#elif FWAIT == 2
	if
	:: skip -> fdone == NF                           /* deferred behind the Flushes */
	:: skip                                          /* or racing them */
	fi;
#endif
	if
	:: CLOSER != 2 -> goto close_
	:: CLOSER != 1 -> /* Shutdown */
		if
		:: inc!SHUTDOWN, 0, 0
		:: atomic { done -> closedok(); cdone = 1 }; goto out  /* nil */
		fi;
		if
		:: atomic { done -> closedok(); cdone = 1 }; goto out  /* nil */
		:: goto close_                               /* its ctx ended, then Close */
		fi
	fi;
close_:
	if
	:: inc!CLOSE, 0, 0
	:: atomic { done -> closedok(); cdone = 1 }; goto out
	fi;
	atomic { done -> closedok(); cdone = 1 };
out:
	skip
}

init {
	atomic {
		run loop();                                  /* workers: started by dispatch (takeSlot) */
		run caller(0); run caller(1); run caller(2);
#if SUBMIT
		run notifier();
#endif
#if FLUSH >= 1
		run flusher(0);
#endif
#if FLUSH >= 2
		run flusher(1);
#endif
		run closer()
	}
	_nr_pr == 1;    /* every other process has ended */
	d_step {
		assert(done && busy == 0 && queued == 0 && rn == 0 && notify == 0);
		assert(ph[0] == IDLE && ph[1] == IDLE && calls[0] == 0 && calls[1] == 0 && lc[0] == 0 && lc[1] == 0);
		assert(exited == nwk && wgone == nwk && nret == NC && cdone && fdone == NF);
		/* every Do the loop heard of had exactly one outcome */
		assert((!seen[0] || outc[0] || MANY) && (!seen[1] || outc[1] || SUBMIT) && (!seen[2] || outc[2]));
		assert(!pend[0] && !pend[1] && !pend[2] && !pend[3]);
		assert(!sadm || sdone == 1);
		assert(nidle == nwk && REPORTS == 0 && !dcg[0] && !dcg[1] && !dcg[2])
	}
}

/* ---- liveness, checked with pan -a -f ---- */
#define allend (done && cdone && fdone == NF && nret == NC && wgone == nwk)
ltl live {
	[] ((pend[0] -> <> !pend[0]) && (pend[1] -> <> !pend[1]) &&
	    (pend[2] -> <> !pend[2]) && (pend[3] -> <> !pend[3]) &&
	    (ln[0] > 0 -> <> (ln[0] == 0)) && (ln[1] > 0 -> <> (ln[1] == 0))) && <> allend
}
