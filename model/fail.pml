/*
 * fail.pml: a SPIN model of what one key's calls do when they fail, as the Go
 * code does it since issues 24, 37 and 45: a batch's retries parked in its lane
 * (Config.Retry: the backoff parks the lane in the core and frees the
 * worker: flight.go, worker.go, park.go, state.park), a direct call's
 * retries on its caller (call.go, retry.go), completions in order per key
 * (l.order, completions: a flight's after and fin, a direct call's w.after
 * and w.fin: loop.go, direct.go, worker.go, call.go), a key paused once a call of it fails for
 * good (Config.PauseOnError: pause.go, loop.go), or held (HoldPaused: its
 * failed and waiting inputs kept in its lane until Resume, the others
 * answered at once), and OnPause; on
 * one shard, one key (and KEYB, a second key that only needs a worker).
 * Nothing else of the ferry is here: see ferry.pml for the protocol of the
 * callers, the loop and the workers as a whole, and README.md.
 *
 * Processes and the Go code they stand for:
 *   loop      loop.run, handle: admit (letIn: the paused key's refusal;
 *             state.admit's claim or join, a held lane's share, overHeld;
 *             a Submit's errAdmitted), drop (state.drop,
 *             gaveUp), release (state.release, endDirect, pause:
 *             pauses.pause, state.clearLane, reply, notifyPaused's start),
 *             park (opPark: loop.park, state.park, the worker's slot back;
 *             with HOLD loop.hold of the failed inputs, state.hold,
 *             OnPause's notifier started, the held inputs' place; the
 *             worker busy until its opIdle), holdDirect, idleWorker, reported,
 *             notified, opResume (loop.resume: pauses.resume, state.unpark),
 *             close (state.drain, which makes a parked lane ready,
 *             callDoneAll's start, the batches' context cancelled, the
 *             direct call's cancel); the deadline (schedule.promote:
 *             parked -> ready);
 *             dispatch (takeSlot, state.take: a ready continuation alone,
 *             takeParked, which leaves out the inputs whose callers gave
 *             up; else the items, with the batch's place among the key's
 *             completions)
 *   worker    work, flight.first and settle (askRetry: a yes parks the
 *             flight, opPark), flight.again (a continuation's next
 *             attempt, or blame if the ctx ended; none if no caller is
 *             left, and then a held flight's failure is forgotten),
 *             flight.holds and split (the failed inputs in an opPark),
 *             finish (failedForGood, the release, reply, <-fl.after,
 *             callDone, OnBatch, close(fl.fin), opIdle); key B's batch
 *   caller    Ferry.Do (await, abandon, finishDo) and direct
 *             (invoke, retryDirect, failedForGood, releaseDirect, <-w.after,
 *             OnBatch, close(w.fin), opReported); or Ferry.Submit
 *             (Ferry.Submit: caller 1, SUBMIT); caller 2, KEYB: key B's Do
 *   pauser    notifyPaused: a paused key's waiting Submits' done, OnPause
 *   notifier  callDoneAll, started by close
 *   chain     chainFin, from endClaim
 *   resumer   Ferry.Resume (PROBE: called from a probe OnPause starts)
 *   closer    Ferry.Close (its message: the loop's end is ferry.pml's)
 *
 * Configuration (-D on spin's command line):
 *   DIRECT=1   Config.DirectCalls (MaxBatchDelay 0): a Do of a key with no
 *              lane claims it and makes the call itself
 *   NA         attempts of a call at most: Retry may say yes while
 *              attempt < NA (default 2; 1: no Retry)
 *   NW         workers, MaxInFlightBatches: 1 or 2 (default)
 *   HOUR=1     a park's deadline comes only once nothing else can move (an
 *              hour-long backoff); default: at any time
 *   PAUSE=0|1  Config.PauseOnError (default 1)
 *   HOLD=1     Config.HoldPaused: a batch that fails for good holds its
 *              failed inputs in its lane, unanswered, until Resume or
 *              Close, and its worker answers the others; a direct call
 *              that does, or a parked batch whose callers all gave up,
 *              holds the lane with no input (holdDirect); a held batch
 *              with no caller left at Resume makes no call and no failure;
 *              a held lane keeps HELDCAP (1) waiting inputs at most, its
 *              share of the room: a later input of the key is answered
 *              ErrPaused at once (only 3 callers of key A, CALLERS=7, reach it)
 *   ONPAUSE=1  Config.OnPause (batched calls); with HOLD, OnPause comes
 *              after the failed batch's completions so far, before the
 *              held inputs' own
 *   PROBE=1    with HOLD, ONPAUSE and RESUME: the resumer is a resume probe
 *              that OnPause starts: it calls Resume once OnPause has run,
 *              and the calls succeed from then on
 *   ONBATCH    1 (default): OnBatch is set, so every batch and every direct
 *              call has completions; 0: only a batch with a Submit has
 *              (or, with ONPAUSE, every batch)
 *   SUBMIT=1   caller 1 Submits (its done is a completion)
 *   CANCEL     bit c: caller c's ctx may end (default 0): while it waits
 *              (abandon), or during its direct call; a Submit's never does
 *   AGAIN=0|1  caller 0 makes a second Do (input 3) once its first returns
 *              (default 1)
 *   KEYB=1     caller 2's Do is of key B, which never fails
 *   RESUME=1   a resumer calls Resume once, at any time
 *   CLOSER=1   a closer calls Close once, at any time
 *   CALLERS    bit c: caller c runs (default 7: all three)
 *   MUT_*      one mutation each; see README.md
 *
 * Properties (assertions, invalid end states; ltl live under weak
 * fairness): one holder of the key at a time, from a batch's (or direct
 * call's) first attempt to its release, across the attempts and their
 * backoffs, parked or held (holders <= 1), so one call in flight (calls <=
 * 1); the key's inputs reach calls in the order they joined: a batch's
 * first attempt takes only inputs that joined after every input called
 * before, and a retry only some of its own batch's, with nothing called in
 * between (hi); no input dropped, or whose caller returned before its
 * continuation was taken, reaches an attempt; the key's completions (done,
 * OnBatch, a paused key's done and OnPause, close's done) never overlap and
 * run in the order their holders took their place (lastc); OnPause runs
 * after the failed call's answers (a held batch's: those of its inputs
 * that succeeded), and a held batch's before the held inputs' own
 * completions (with PROBE, else the probe's Resume never comes: an invalid
 * end state); a key is paused, or held, only by a call that failed since
 * it last resumed (fsr); the loop gives a worker a batch only once the
 * worker has stopped reading its buffer; a paused key admits nothing and holds
 * no waiting input, unless it holds (HOLD), and then its lane keeps its
 * share of the room at most, and only an input past that share is answered
 * ErrPaused; ErrPaused comes only from a paused key; a caller whose Do
 * failed for good (or was answered ErrPaused) finds the key paused at its
 * next Do, unless a Resume came in between or the ferry closed; with HOUR,
 * a park's deadline comes after key B's call (a park holds no worker) and
 * never after Close (Close ends parks); every input has exactly one
 * outcome; a loop reply never blocks; at the end
 * nothing is held, parked, waiting or in flight, every worker is idle and
 * every completion has run.
 * live: every caller returns and every input has its outcome.
 */

#ifndef DIRECT
#define DIRECT 0
#endif
#ifndef NA
#define NA 2
#endif
#ifndef PAUSE
#define PAUSE 1
#endif
#ifndef ONBATCH
#define ONBATCH 1
#endif
#ifndef SUBMIT
#define SUBMIT 0
#endif
#ifndef CANCEL
#define CANCEL 0
#endif
#ifndef AGAIN
#define AGAIN 1
#endif
#ifndef RESUME
#define RESUME 0
#endif
#ifndef CLOSER
#define CLOSER 0
#endif
#ifndef CALLERS
#define CALLERS 7
#endif
#ifndef HOUR
#define HOUR 0
#endif
#ifndef HOLD
#define HOLD 0
#endif
#ifndef ONPAUSE
#define ONPAUSE 0
#endif
#ifndef KEYB
#define KEYB 0
#endif
#ifndef PROBE
#define PROBE 0
#endif
/* a new fin's id: its place in the key's order of completions */
#define NEWFIN nfin++
#define RUNS(c) ((CALLERS >> (c)) & 1)
#define CANCELS(c) ((CANCEL >> (c)) & 1)

#define NC    3          /* callers */
#define HELDCAP 1        /* a held lane's share of the room: heldShare's one input at least */
#define NI    4          /* inputs: caller c's first is c; caller 0's second is 3 */
#ifndef NW
#define NW    2          /* workers: MaxInFlightBatches (1 or 2) */
#endif
#define BS    2          /* MaxBatchSize */
#define INCSZ 8          /* s.inc */

#define isSub(x) (SUBMIT && (x) == 1)
#define isB(x) (KEYB && (x) == 2)  /* caller 2's input is key B's (KEYB) */

mtype = { ADMIT, DROP, RELEASE, IDLE, REPORTED, NOTIFIED, RESUMEM, CLOSEM,  /* to the loop */
          PARKM, RELEASEB,
          OK, FAIL, PAUSED, CLOSED, DROPPED, KEPT, CLAIMED, ADMITTED };           /* answers, words */

#define FAILED 1         /* a release's flags: m.fail, the call failed for good */
#define WITHW  2         /* m.fin: a direct call's OnBatch runs, its report follows */
#define BYCALLER 2       /* a release's worker field from 2 up: 2 + the direct caller (Go: byCaller) */
#define HELDF  32        /* a park's flags: m.fail set, the call failed for good, held (HoldPaused); */
                         /* its bits 0-1: the inputs to call again; 2-4: the attempt last over */

chan inc = [INCSZ] of { mtype, byte, byte };  /* s.inc: op, worker or input or fin, flags */
chan rep[NI] = [1] of { mtype };              /* each input's w.c (a Submit's: its word channel) */
chan jobs[NW] = [1] of { byte, byte };        /* wk.jobs: the job's flight's after and fin (0: nil) */

/* ---- the loop's: the key's lane (state.go) ---- */
bit  lex, lbusy;         /* the key's lane exists; it is busy (a batch or a claim) */
byte it[NI];             /* its waiting inputs, in order: input + 1 */
byte ln;
/* ---- the loop's: the shell (loop.go, pause.go) ---- */
bit  paused;             /* l.pauses.keys has the key */
bool closing;            /* l.life.closing: drained, s.ctx cancelled */
byte completing;         /* l.order.last[key]: the id of a fin, 0 none */
bit  widle[NW];          /* wk.idle: opIdle came since its last batch */
byte wb[NW*BS];          /* wk.fl.batch, the job's batch: input + 1 */
byte wn[NW];             /* its length */
byte wfin[NW];           /* wk.fl.fin */
byte dafter, dfin;       /* l.directs.calls[key]: the claim's after and fin */
byte rfin[NC];           /* l.directs.reports: caller c's direct call's fin, its OnBatch running */
bit  gone[NI];           /* w.gone: its caller gave up after a call took it */
byte notify;             /* l.life.notify, and l.pauses.notes.len() */
/* the lane's continuation: a failed batch parked in it (lane.cont) */
byte pk;                 /* 0 none; 1 parked until its deadline; 2 ready (deadline, Resume or Close); */
                         /* 3 held (HoldPaused: until Resume or Close); 4 ready after a hold */
byte cb[BS];             /* its batch: input + 1 */
byte cn, cidx, catt;     /* its length; the indexes to call again (bits); the attempt last over */
byte caf, cfi;           /* its place among the key's completions: after and fin */
byte cbh;                /* ghost: the highest sq of its batch (bhi) */
#if PROBE
bit  onp;                /* ghost: OnPause has run (the probe's Resume waits for it) */
bit  up;                 /* ghost: the probe has resumed; calls succeed from then on */
#endif
byte jaf[NW];            /* the job's after, as the loop gave it */
byte watt[NW], widx[NW]; /* a continuation's job: its attempt last over (0: a fresh batch), indexes */
bit  wheld[NW];          /* and fl.held: it was held (HoldPaused; holdDirect's too) */
#if KEYB
byte bl;                 /* key B's lane: 0 none; 1 its input waits; 2 busy */
bit  wkb[NW];            /* the worker's job is key B's */
bit  bret;               /* ghost: caller 2 (key B's) has returned */
#endif
/* ---- shared as in Go ---- */
mtype res[NI];           /* an input's answer so far: r.outs, r.errs (a direct call's r) */
byte nfin;               /* channels made (fins): the last one's id */
int  closedf;            /* bit f: fin f is closed */

/* ---- ghosts: observers only, never read by the protocol ---- */
byte holders;            /* batches and direct calls holding the key: first attempt to release */
byte calls;              /* calls in flight */
byte nsq;                /* inputs admitted so far */
byte sq[NI];             /* an input's place in the key's order: its admission */
byte hi;                 /* the highest sq that has reached a call */
byte bhi[NW];            /* the highest sq of the worker's batch */
bit  ret[NI];            /* its caller returned without its answer (dropped, kept, claim given up) */
bit  rb[NI];             /* kept for a retry although its caller had returned */
bit  outc[NI];           /* it has had its one outcome */
byte nsent, nout;        /* inputs sent to the loop; outcomes */
bit  incomp;             /* a holder's completions run */
byte lastc;              /* the id of the last holder whose completions started */
bit  f0;                 /* caller 0's first Do failed for good, or was answered ErrPaused */
bit  rap;                /* a Resume has been handled since the last pause */
#if RESUME
bit  fsr;                /* an attempt of the key failed since a Resume last unpaused it */
#define FAILS() fsr = 1
#define FSR fsr
#else
#define FAILS() skip     /* with no Resume, every pause follows a failure */
#define FSR 1
#endif
byte ndone;              /* callers returned; and the resumer and closer */
#if PROBE
#define UP up
#else
#define UP 0
#endif
#if ONPAUSE
byte rmask;              /* the inputs of the batch whose release paused the key, or whose hold */
                         /* held the key, that its worker answers (bit: input) */
#endif

/* loop temporaries, dead between its atomic steps */
hidden byte a, b, x, k, j, ps, tw, tn, pa;
hidden mtype op;

#define CLOSEDF(f) ((f) == 0 || (closedf & (1 << (f))) != 0)
#if NW > 1
#define IDLEANY (widle[0] || widle[1])
#define PICKIDLE() if :: widle[0] -> tw = 0 :: else -> tw = 1 fi
#else
#define IDLEANY widle[0]
#define PICKIDLE() tw = 0
#endif
/* a lane's items may be taken: not while it holds a continuation */
#if defined(MUT_PARK_RELEASES_KEY)
#define ITEMSOK (pk <= 1)                        /* MUTATION: nor while it is parked */
#elif defined(MUT_PARK_LATER_FIRST)
#define ITEMSOK (pk == 0 || pk == 2)             /* MUTATION: before the continuation, after a park */
#elif defined(MUT_HOLD_LATER_FIRST)
#define ITEMSOK (pk == 0 || pk == 4)             /* MUTATION: before the continuation, after a hold */
#else
#define ITEMSOK (pk == 0)
#endif
#define NOCONT (pk == 0)                         /* a lane that holds a continuation stays */

/* an input's one outcome: an answer, a word that is one, or a done */
inline outcome(y) {
	assert(!outc[y]); outc[y] = 1; nout++
}

/* a loop reply on w.c: never blocks */
inline word(y, v) {
	assert(len(rep[y]) == 0);
	assert(v != PAUSED || paused);               /* ErrPaused only while the key is paused */
#if HOLD
	assert(v != PAUSED || pk == 3 && ln >= HELDCAP);  /* HoldPaused: only past a held lane's share */
#endif
	rep[y]!v
}

/* a holder's completions start (after its after is closed) and end */
inline cstart(f) {
	assert(!incomp); incomp = 1;                 /* one at a time */
	assert(f > lastc); lastc = f                 /* in the order the places were taken */
}
inline cend(f) {
	assert(incomp && f < 31); incomp = 0;
	closedf = closedf | (1 << f)                 /* close(fin) */
}

/* a call of the key starts: one at a time */
inline callStarts() {
	calls++; assert(calls <= 1)
}

/* ------------------------------------------------------------------ */
/* the loop                                                            */

/* state.enter: the input joins the key's lane */
inline enter(y) {
	assert((!paused || HOLD) && !closing);       /* a paused key admits nothing, unless it holds */
	assert(!HOLD || pk != 3 || ln < HELDCAP);    /* a held lane keeps its share of the room at most */
	it[ln] = y + 1; ln++; lex = 1;
	nsq++; sq[y] = nsq
}

/* the paused key's check at admission; MUT_PAUSED_ADMITS: none */
#ifdef MUT_PAUSED_ADMITS
#define ISPAUSED 0                               /* MUTATION: a paused key admits */
#elif defined(MUT_HOLD_REFUSES)
#define ISPAUSED paused                          /* MUTATION: a held key refuses */
#else
#define ISPAUSED (paused && !HOLD)               /* a held key admits */
#endif

/* state.overHeld: a held lane (pk 3: lane.held, until Resume or Close)
 * keeps at most its share of the room, HELDCAP waiting inputs (heldShare:
 * max(1, MaxQueued/8), 1 in a small room); an input past it is answered
 * ErrPaused at once. Only 3 callers of key A reach it (CALLERS=7). */
#if defined(MUT_HELD_NO_SHARE)
#define OVERHELD 0                               /* MUTATION: no share */
#elif defined(MUT_SHARE_AFTER_RESUME)
#define OVERHELD (HOLD && pk >= 3 && ln >= HELDCAP)  /* MUTATION: lane.held kept past unpark */
#else
#define OVERHELD (HOLD && pk == 3 && ln >= HELDCAP)
#endif

/* handle(opAdmit): admit, letIn */
inline admit() {
	x = a;
#if KEYB
	if
	:: isB(x) && closing -> word(x, CLOSED); outcome(x); goto admitted
	:: isB(x) && !closing -> bl = 1; goto admitted      /* key B's lane */
	:: else -> skip
	fi;
#endif
	if
	:: x == 3 && f0 && !closing ->
		assert(paused || rap)                    /* the failure's release came first */
	:: else -> skip
	fi;
	if
	:: closing -> word(x, CLOSED); outcome(x)     /* refused: ErrClosed */
	:: !closing && ISPAUSED -> word(x, PAUSED); outcome(x)
	:: !closing && !ISPAUSED && OVERHELD -> word(x, PAUSED); outcome(x)  /* past the held lane's share */
	:: !closing && !ISPAUSED && !OVERHELD && DIRECT && !isSub(x) && !lex ->   /* claim */
		lex = 1; lbusy = 1; holders++; assert(holders <= 1);
		assert(!paused);
		nsq++; sq[x] = nsq;
		if
		:: ONBATCH ->                            /* its OnBatch's place */
			dafter = completing; NEWFIN; dfin = nfin; completing = dfin
		:: else -> skip
		fi;
		word(x, CLAIMED)
	:: !closing && !ISPAUSED && !OVERHELD && !(DIRECT && !isSub(x) && !lex) ->  /* join */
		enter(x);
		if
		:: isSub(x) -> word(x, ADMITTED)
		:: else -> skip
		fi
	fi;
#if KEYB
admitted:
#endif
	skip
}

/* handle(opDrop): state.drop, else gaveUp and errKept if w.c is empty */
inline drop() {
	x = a; k = 0;
	do
	:: k < ln && it[k] != x + 1 -> k++
	:: else -> break
	od;
	if
	:: k < ln ->                                 /* it waits: dropped */
		do
		:: k + 1 < ln -> it[k] = it[k + 1]; k++
		:: else -> break
		od;
		it[k] = 0; ln--;
		if
		:: ln == 0 && !lbusy && NOCONT -> lex = 0
		:: else -> skip
		fi;
		word(x, DROPPED); outcome(x)
	:: else ->
		gone[x] = 1;                             /* not retried: see ctake */
		if
		:: len(rep[x]) == 0 -> rep[x]!KEPT
		:: else -> skip                          /* w.c holds its answer */
		fi
	fi;
	k = 0
}

/* state.clearLane and reply: the waiting inputs answered ErrPaused, a Do's
 * on w.c, the Submit's (ps) by notifyPaused */
inline clearLane() {
	k = 0;
	do
	:: k < ln ->
		x = it[k] - 1; it[k] = 0;
		if
		:: isSub(x) -> ps = x + 1
		:: else -> word(x, PAUSED); outcome(x)
		fi;
		k++
	:: else -> break
	od;
	ln = 0; k = 0;
	if
	:: !lbusy && NOCONT -> lex = 0               /* removeLane */
	:: else -> skip
	fi
}

#if ONPAUSE
#define PMASK rmask
#else
#define PMASK 0
#endif

/* loop.pause: the key paused, its lane cleared, its Submits told by a
 * goroutine that takes its place among the key's completions */
inline pause() {
	assert(FSR);                                 /* paused only by a call that failed since the last Resume */
	paused = 1; rap = 0;
#ifndef MUT_NO_CLEAR_LANE
	clearLane();                                 /* MUTATION (left out): the lane stays */
#endif
	if
	:: ps > 0 || ONPAUSE ->                      /* the Submits' done, OnPause */
		NEWFIN; pa = completing;
#ifndef MUT_PAUSE_NO_PLACE
		completing = nfin;                       /* MUTATION (left out): no place taken */
#endif
		notify++;
#if defined(MUT_PAUSE_DONE_UNORDERED) || defined(MUT_ONPAUSE_UNORDERED)
		run pauser(0, nfin, ps, PMASK);          /* MUTATION: no wait for the key's completions */
#else
		run pauser(pa, nfin, ps, PMASK);
#endif
		ps = 0; pa = 0
	:: else -> skip
	fi
}

/* loop.hold: the key held (state.hold) and paused, only by a call that
 * failed since the key last resumed; with OnPause, if it was not paused, its
 * notifier takes the key's last place, which is after the completions of
 * the batch whose failed inputs are held (its worker's fin: the answers of
 * the others, their done, the attempts' OnBatch); then, if that batch had
 * completions (pl), the held inputs' own take their place after OnPause
 * (h.after, h.fin = l.order.place). holdDirect's hold has no input and no place
 * (pl 0). */
#if defined(MUT_HOLD_KEEPS_PLACE)
#define HELDPLACE(pl) if :: pl -> caf = jaf[a]; cfi = wfin[a] :: else -> caf = 0; cfi = 0 fi  /* MUTATION: the batch's place, as a backoff's */
#else
#define HELDPLACE(pl) if :: pl -> NEWFIN; caf = completing; cfi = nfin; completing = nfin :: else -> caf = 0; cfi = 0 fi
#endif
inline holdKey(pl) {
	assert(FSR);                                 /* held only by a call that failed since the last Resume */
	pk = 3;
#ifdef MUT_HOLD_ONPAUSE_AFTER
	HELDPLACE(pl);                               /* MUTATION: the held inputs' place before OnPause's */
#endif
	if
	:: !paused && ONPAUSE ->
		notify++; NEWFIN; pa = completing; completing = nfin;
		run pauser(pa, nfin, 0, PMASK); pa = 0
	:: else -> skip
	fi;
	paused = 1; rap = 0;
#ifndef MUT_HOLD_ONPAUSE_AFTER
	HELDPLACE(pl);
#endif
	skip
}

/* handle(opRelease): state.release, the worker's or endDirect, then pause */
inline release() {
	assert(lex && lbusy);                        /* a release only of a busy key */
	lbusy = 0;
	if
	:: ln == 0 && NOCONT -> lex = 0
	:: else -> skip
	fi;
	if
	:: a >= BYCALLER ->                          /* endDirect */
		if
		:: b & WITHW -> rfin[a - BYCALLER] = dfin
		:: else ->                               /* no OnBatch after all: abandoned */
#ifndef MUT_CLAIM_KEEPS_PLACE
			if                                   /* MUTATION (left out): the place stays */
			:: dfin != 0 && completing == dfin -> completing = dafter
			:: else -> skip
			fi;
#endif
#ifndef MUT_NO_CLAIM_FIN
			if                                   /* endClaim: its fin closes after its after (chainFin) */
			:: dfin != 0 -> run chain(dafter, dfin)   /* MUTATION (left out): never closed */
			:: else -> skip
			fi;
#endif
			skip
		fi;
		dafter = 0; dfin = 0
	:: else -> skip
	fi;
	if
#if HOLD
	:: (b & FAILED) && !closing ->   /* holdDirect: a hold of no input (a direct call's, or a batch's whose callers all gave up) */
		lbusy = 0; lex = 1; holders++;
		cn = 0; cidx = 0; catt = 1; cbh = 0;
		holdKey(0)
	:: (b & FAILED) && closing -> skip           /* with HoldPaused nothing pauses once closing */
#else
	:: b & FAILED -> assert(PAUSE); pause()
#endif
	:: else -> skip
	fi;
#if ONPAUSE
	rmask = 0;
#endif
	skip
}

/* completions.done: forget the key's completions over with fin f */
inline forget(f) {
	if
	:: f != 0 && completing == f -> completing = 0
	:: else -> skip
	fi
}

/* loop.close: state.drain, callDoneAll for the Submit drained, after the
 * completions in flight, its fin the key's last place (l.order.last), so
 * that what a failure handled after the close places (OnPause, a held
 * batch's completions) comes after the drained done; s.ctx cancelled
 * (closing, read by the batches' calls) and the direct call's cancel (from
 * now on its ctx may end) */
inline lclose() {
	if
	:: !closing ->
		closing = 1;
		k = 0;
		do
		:: k < ln ->
			x = it[k] - 1; it[k] = 0;
			if
			:: isSub(x) -> ps = x + 1
			:: else -> word(x, CLOSED); outcome(x)
			fi;
			k++
		:: else -> break
		od;
		ln = 0; k = 0;
		if
		:: !lbusy && NOCONT -> lex = 0
		:: else -> skip
		fi;
		if                                       /* state.drain: a continuation is ready at once */
#ifndef MUT_DRAIN_KEEPS_PARKS
		:: pk == 1 -> pk = 2                     /* MUTATION (left out): a park runs out */
#endif
		:: pk == 3 -> pk = 4
		:: else -> skip
		fi;
#if KEYB
		if
		:: bl == 1 -> bl = 0; word(2, CLOSED); outcome(2)
		:: else -> skip
		fi;
#endif
		if
		:: ps > 0 ->                             /* its fin the drained key's last place */
			notify++; NEWFIN; pa = completing;
#ifndef MUT_CLOSE_NO_PLACE
			completing = nfin;                   /* MUTATION (left out): no place taken */
#endif
			run notifier(pa, nfin, ps - 1);
			ps = 0; pa = 0
		:: else -> skip
		fi
	:: else -> skip
	fi
}

inline handle() {
	if
	:: op == ADMIT -> admit()
	:: op == DROP -> drop()
	:: op == RELEASE -> release()
	:: op == IDLE ->                             /* idleWorker */
		widle[a] = 1; forget(wfin[a]); wfin[a] = 0;
		wb[a*BS] = 0; wb[a*BS + 1] = 0; wn[a] = 0
	:: op == REPORTED -> forget(rfin[a]); rfin[a] = 0
	:: op == NOTIFIED -> assert(notify > 0); notify--; forget(a)
	:: op == RESUMEM ->                          /* pauses.resume, state.unpark */
#if RESUME
		if
		:: paused -> fsr = 0                     /* ghost: no call in flight while paused */
		:: else -> skip
		fi;
#endif
		paused = 0; rap = 1;
		if
		:: pk == 1 -> pk = 2
		:: pk == 3 -> pk = 4
		:: else -> skip
		fi;
		skip
	:: op == PARKM -> park()
#if KEYB
	:: op == RELEASEB -> assert(bl == 2); bl = 0
#endif
	:: op == CLOSEM -> lclose()
	fi
}

/* dispatch: takeSlot and state.take of up to BS inputs onto an idle worker;
 * the batch takes its place among the key's completions if it has any */
inline take() {
	PICKIDLE();
	assert(!paused);
	assert(wn[tw] == 0);                         /* its worker has stopped reading its buffer */
	widle[tw] = 0; lbusy = 1;
	k = 0;
	do
	:: k < ln && k < BS ->
		x = it[k] - 1;
		assert(!ret[x]);                         /* no dropped input joins a call */
		wb[tw*BS + k] = x + 1;
		if
		:: isSub(x) -> tn = 1
		:: else -> skip
		fi;
		k++
	:: else -> break
	od;
	wn[tw] = k;
	j = 0;
	do
	:: j + k < ln -> it[j] = it[j + k]; j++
	:: else -> break
	od;
	do
	:: j < ln -> it[j] = 0; j++
	:: else -> break
	od;
	ln = ln - k;
	if
#ifdef MUT_ONPAUSE_NO_PLACE
	:: ONBATCH || tn ->                          /* MUTATION: no place for OnPause's sake */
#else
	:: ONBATCH || ONPAUSE || tn ->               /* its completions come after the key's last */
#endif
		NEWFIN; wfin[tw] = nfin;
		jaf[tw] = completing;
		jobs[tw]!completing, nfin;
		completing = nfin
	:: else -> jobs[tw]!0, 0
	fi;
	tw = 0; tn = 0; j = 0; k = 0; x = 0
}

/* handle(opPark): loop.park, state.park: a backoff's park, the worker idle
 * at once (idleWorker: its slot back), the batch keeping its place among the
 * key's completions; or (held) loop.hold with the batch's failed inputs
 * only, all to call again, while the worker, still busy, answers the others
 * (it keeps wn, their wb entries and wfin, forgotten at its opIdle); a
 * drained room parks nothing (ready at once) */
inline park() {
	assert(lex && lbusy && pk == 0);
	lbusy = 0;
	k = 0;
	do
	:: k < wn[a] ->
		if
		:: !(b & HELDF) || (b >> k) & 1 -> cb[cn] = wb[a*BS + k]; wb[a*BS + k] = 0; cn++
		:: else -> skip                          /* succeeded: its worker answers it */
		fi;
		k++
	:: else -> break
	od;
	k = 0;
	catt = (b >> 2) & 7;
	cbh = bhi[a]; bhi[a] = 0;
	if
	:: b & HELDF ->                              /* held: Paused lists the key */
		cidx = (1 << cn) - 1;
		holdKey(wfin[a] != 0);
#ifdef MUT_HOLD_FREES_WORKER
		widle[a] = 1;                            /* MUTATION: the worker free at the hold */
#endif
#if ONPAUSE
		rmask = 0;
#endif
		jaf[a] = 0
	:: else ->
		cidx = b & 3; wn[a] = 0;
		caf = jaf[a]; cfi = wfin[a]; jaf[a] = 0; wfin[a] = 0;
#ifndef MUT_PARK_HOLDS_WORKER
		widle[a] = 1;                            /* MUTATION (left out): the slot kept */
#endif
		pk = 1
	fi;
#ifndef MUT_PARK_AFTER_CLOSE
	if                                           /* MUTATION (left out): parked after Close */
	:: closing -> pk++                           /* 2 or 4: ready at once */
	:: else -> skip
	fi;
#endif
#ifdef MUT_PARK_RELEASES_KEY
	if                                           /* MUTATION: the lane released, the continuation aside */
	:: ln == 0 -> lex = 0
	:: else -> skip
	fi;
#endif
	skip
}

/* dispatch: state.take of a ready lane's continuation alone, onto an idle
 * worker, with its place: takeParked, which leaves out the inputs whose
 * callers gave up */
inline ctake() {
	PICKIDLE();
	assert(wn[tw] == 0);                         /* its worker has stopped reading its buffer */
	widle[tw] = 0; lbusy = 1; lex = 1; wheld[tw] = (pk == 4);
	k = 0;
	do
	:: k < cn ->
		wb[tw*BS + k] = cb[k]; cb[k] = 0;
		if
		:: (cidx >> k) & 1 ->
			x = wb[tw*BS + k] - 1;
			if
#ifndef MUT_RETRY_IGNORES_GONE
			:: gone[x] -> cidx = cidx & ~(1 << k)
#endif
			:: else -> rb[x] = ret[x]
			fi
		:: else -> skip
		fi;
		k++
	:: else -> break
	od;
	wn[tw] = cn; watt[tw] = catt; widx[tw] = cidx;
	wfin[tw] = cfi; jaf[tw] = caf; bhi[tw] = cbh;
	jobs[tw]!caf, cfi;
	pk = 0; cn = 0; cidx = 0; catt = 0; caf = 0; cfi = 0; cbh = 0;
	tw = 0; k = 0; x = 0
}

#if KEYB
/* dispatch: key B's batch of its one input */
inline btake() {
	PICKIDLE();
	assert(wn[tw] == 0);
	widle[tw] = 0; bl = 2; wkb[tw] = 1;
	jobs[tw]!0, 0;
	tw = 0
}
#endif

proctype loop() {
end_l:
	do
	:: atomic {
		inc?op, a, b ->
		handle();
		assert(!paused || ln == 0 || HOLD);      /* a paused key holds no waiting input, unless it holds */
		op = 0; a = 0; b = 0; x = 0
	   }
	:: atomic { lex && !lbusy && ln > 0 && ITEMSOK && IDLEANY -> take() }
	:: atomic { (pk == 2 || pk == 4) && !lbusy && IDLEANY -> ctake() }
#if !HOUR
	:: atomic { pk == 1 -> pk = 2 }              /* the deadline, at any time */
#else
	:: atomic { pk == 1 && timeout ->            /* the deadline, an hour on: once nothing else moves */
#if KEYB
		assert(bret);                            /* key B's call did not wait for it */
#endif
		assert(!closing);                        /* Close ends parks */
		pk = 2
	   }
#endif
#if KEYB
	:: atomic { bl == 1 && IDLEANY -> btake() }
#endif
	od
}

/* ------------------------------------------------------------------ */
/* workers                                                             */

/* an attempt's call starts on the inputs of idx (bits of the batch) */
inline attemptStarts() {
	m = 0; i = 0;
	do
	:: i < n ->
		if
		:: (idx >> i) & 1 ->
			y = wb[id*BS + i] - 1;
			assert(!rb[y]);                      /* retried only if its caller still waited */
			if
			:: att == 1 -> assert(sq[y] > hi)    /* joined after all called before it */
			:: else -> skip
			fi;
			if
			:: sq[y] > m -> m = sq[y]
			:: else -> skip
			fi;
			sq[y] = 0                            /* read only here */
		:: else -> skip                          /* (y is another input's) */
		fi;
		i++
	:: else -> break
	od;
	if
	:: att == 1 -> hi = m; bhi[id] = m; holders++; assert(holders <= 1)
	:: else -> assert(hi == bhi[id])             /* nothing called in between */
	fi;
	callStarts();
	i = 0; y = 0; m = 0
}

/* the call returns: each input of the attempt succeeds or fails */
inline attemptEnds() {
	calls--;
	i = 0;
	do
	:: i < n ->
		if
		:: (idx >> i) & 1 ->
			y = wb[id*BS + i] - 1;
			if
			:: res[y] = OK
			:: !UP -> res[y] = FAIL; FAILS()
			fi
		:: else -> skip
		fi;
		i++
	:: else -> break
	od;
	i = 0; y = 0
}

/* the inputs of idx still failing */
inline failing() {
	i = 0; fm = 0;
	do
	:: i < n ->
		if
		:: (idx >> i) & 1 && res[wb[id*BS + i] - 1] == FAIL -> fm = fm | (1 << i)
		:: else -> skip
		fi;
		i++
	:: else -> break
	od;
	i = 0
}

/* MUT_RETRY_RELEASES_KEY: a direct call's key released as its retry
 * starts its backoff, as if the retry were a call of its own; the release at
 * the end is then left out */
#ifdef MUT_RETRY_RELEASES_KEY
#define RELEASEFORRETRY(w) if :: !rel -> inc!RELEASE, w, 0; holders--; rel = 1 :: else -> skip fi
#else
#define RELEASEFORRETRY(w) skip
#endif

/* the job a worker reads: a fresh batch's first attempt starts; a
 * continuation goes on from its attempt last over; key B's (KEYB) */
#if KEYB
#define BJOB wkb[id]
#else
#define BJOB 0
#endif
#define STARTJOB() \
	att = watt[id]; idx = widx[id]; ph = wheld[id]; watt[id] = 0; widx[id] = 0; wheld[id] = 0; \
	if \
	:: BJOB -> skip \
	:: !BJOB && att == 0 -> idx = (1 << n) - 1; att = 1; attemptStarts() \
	:: !BJOB && att != 0 -> ct = 1 \
	fi

/* its batch holds a Submit (caller 1's input) */
#define HASSUB() (SUBMIT && (wb[id*BS] == 2 || wb[id*BS + 1] == 2))

/* the batch's input i is held (HoldPaused): its worker does not answer it */
#define HELD(i) (hd && ((fm >> (i)) & 1))

/* ghost: the inputs of the batch released, or those of a held batch its
 * worker answers, for OnPause's check */
#if ONPAUSE
#define RMASK() rmask = 0; i = 0; do :: i < n -> if :: !HELD(i) -> rmask = rmask | (1 << (wb[id*BS + i] - 1)) :: else -> skip fi; i++ :: else -> break od; i = 0
#else
#define RMASK() skip
#endif

/* the worker's locals once it has handed its batch back to be parked */
#define HANDEDBACK() after = 0; fin = 0; n = 0; idx = 0; att = 0; fm = 0; fl = 0; i = 0

/* a continuation with no attempt to make: its last attempt's failure stands
 * (failedForGood of fl.last), unless it was held (again: no call, so no
 * new failure for a hold resumed); MUT_RESUME_HOLDS_AGAIN: a held batch's
 * stands too (holdDirect's has none) */
#ifdef MUT_RESUME_HOLDS_AGAIN
#define LASTSTANDS() lst = !ph || n > 0               /* MUTATION: the held batch's failure kept */
#else
#define LASTSTANDS() lst = !ph
#endif

proctype worker(byte id) {
	byte after, fin, n, idx, att, fm, i, y, m;
	bit fl, ct, hd, ph, lst;
end_w:
	do
	:: atomic { jobs[id]?after, fin -> n = wn[id]; STARTJOB() };
#if KEYB
		if
		:: wkb[id] ->                            /* key B's call: it succeeds */
			atomic { inc!RELEASEB, id, 0; rep[2]!OK; outcome(2); wkb[id] = 0 };
			atomic { inc!IDLE, id, 0 };
			goto end_w
		:: else -> skip
		fi;
#endif
		if
		:: ct ->                                 /* a continuation: its next attempt */
			ct = 0;
			if
			:: atomic { idx != 0 && !closing -> att++; attemptStarts(); ph = 0 }
			:: atomic { idx == 0 || closing -> idx = 0; LASTSTANDS() }; goto finish  /* none left, or blame */
			fi
		:: else -> skip
		fi;
again:
		atomic { attemptEnds(); failing() };
		/* flight.settle: while an input fails and ctx holds, Retry (user code)
		 * says yes or no; attempts are bounded by NA */
		if
		:: atomic {                              /* Retry says yes: the backoff parks the lane */
			fm != 0 && !closing && att < NA ->   /* (opPark: the continuation, the worker idle at once) */
			inc!PARKM, id, fm | (att << 2); HANDEDBACK()
		   };
#ifdef MUT_PARK_HOLDS_WORKER
		   atomic { pk != 1 -> inc!IDLE, id, 0 };   /* MUTATION: the slot kept through the backoff */
#endif
		   goto end_w
#ifndef RETRYYES
		:: fm != 0 && !closing && att < NA -> skip   /* Retry says no */
#endif
		:: else -> skip
		fi;
		/* finish: the release (failedForGood of the last attempt's failure:
		 * fm, the inputs it failed, or lst), the answers; with HOLD
		 * (flight.holds: inputs still failing, ctx holds) the failed inputs
		 * held instead of the release (flight.split, opPark), the others
		 * answered */
finish:
		atomic {
			fl = (fm != 0 || lst) && PAUSE && !closing;
#if HOLD
			hd = fl && fm != 0;
			if
			:: hd -> RMASK(); inc!PARKM, id, fm | (att << 2) | HELDF
			:: else -> skip
			fi;
#endif
#ifndef MUT_ANSWER_BEFORE_PAUSE
			if
			:: !hd -> inc!RELEASE, id, fl; holders--; RMASK()
			:: else -> skip
			fi;
#endif
			if
			:: !hd -> fm = 0                     /* read on only for a hold */
			:: else -> skip
			fi;
			ph = ph && !HASSUB();                /* no completion to run (locals only below: cheaper) */
			lst = 0; i = 0
		};
		do
		:: i < n ->
			y = wb[id*BS + i] - 1;
			if
			:: !isSub(y) && !HELD(i) -> atomic { rep[y]!res[y]; outcome(y); res[y] = 0 }  /* may wait for errKept's read */
			:: else -> skip
			fi;
			i++
		:: else -> break
		od;
		i = 0; y = 0;
#ifdef MUT_ANSWER_BEFORE_PAUSE
		atomic { if :: !hd -> inc!RELEASE, id, fl; holders-- :: else -> skip fi };  /* MUTATION: the release after the answers */
#endif
		fl = 0;
		if
		:: fin != 0 && ph ->                     /* a held batch with no attempt (no OnBatch) and no done */
			CLOSEDF(after);                      /* <-fl.after */
			atomic { closedf = closedf | (1 << fin); inc!IDLE, id, 0; after = 0; fin = 0; n = 0; idx = 0; att = 0; ph = 0 }
		:: fin != 0 && !ph ->
#ifndef MUT_COMPLETION_OVERTAKES
			CLOSEDF(after);                      /* <-fl.after */
#endif
			atomic {                             /* callDone for the Submits, OnBatch */
				cstart(fin);
				i = 0;
				do
				:: i < n ->
					y = wb[id*BS + i] - 1;
					if
					:: isSub(y) && !HELD(i) -> outcome(y); res[y] = 0
					:: else -> skip
					fi;
					i++
				:: else -> break
				od;
				i = 0; y = 0
			};
			atomic { cend(fin); inc!IDLE, id, 0; after = 0; fin = 0; n = 0; idx = 0; att = 0; fm = 0; hd = 0; ph = 0 }
		:: else ->
			atomic { inc!IDLE, id, 0; after = 0; fin = 0; n = 0; idx = 0; att = 0; fm = 0; hd = 0; ph = 0 }
		fi
	od
}

/* ------------------------------------------------------------------ */
/* callers                                                             */

/* cctx.Err() of a direct call: once the ferry is closing (close, or
 * opStart after it, cancels it on a goroutine of its own: at some point
 * after close) or its caller's ctx has ended (bit me of CANCEL), it may be
 * seen ended, and then stays so */
inline dctx() {
	if
	:: !dc && (closing || CANCELS(me) && !isSub(me)) -> dc = 1
	:: true -> skip
	fi
}

/* direct: the call and its retries on the caller's goroutine, holding the
 * key; the release (failedForGood), then OnBatch after the key's earlier
 * completions */
inline direct() {
	att = 1;
	atomic {
		assert(sq[xi] > hi); hi = sq[xi];
		callStarts()
	};
dagain:
	atomic {
		calls--;
		if
		:: res[xi] = OK
		:: res[xi] = FAIL; FAILS()
		fi;
		dctx()
	};
	/* retryDirect: while it fails and ctx holds, Retry says yes or no */
	if
	:: atomic { res[xi] == FAIL && !dc && att < NA -> RELEASEFORRETRY(BYCALLER + me); dctx() };
	   if
	   :: atomic { dc -> skip }              /* backoff ended by ctx: blame */
	   :: atomic { att++; assert(hi == sq[xi]); callStarts() }; goto dagain
	   fi
#ifndef RETRYYES
	:: res[xi] == FAIL && !dc && att < NA -> skip  /* Retry says no */
#endif
	:: else -> skip
	fi;
	atomic {
		dctx();                                  /* failedForGood: cctx.Err() */
		fl = (res[xi] == FAIL) && PAUSE && !dc;
		if
		:: !rel -> inc!RELEASE, BYCALLER + me, fl | (ONBATCH -> WITHW : 0); holders--
		:: else -> skip
		fi;
		fl = 0; rel = 0; dc = 0
	};
	if
	:: ONBATCH ->
		CLOSEDF(waf);                            /* <-w.after */
		atomic { cstart(wfi) };                  /* OnBatch */
		atomic { cend(wfi); inc!REPORTED, me, 0; waf = 0; wfi = 0 }
	:: else -> skip
	fi;
	atomic { r = res[xi]; outcome(xi); res[xi] = 0; att = 0 }
}

proctype caller(byte me) {
	byte xi = me, att, waf, wfi;
	bit fl, dc, rel;
	mtype r;
again:
	atomic { inc!ADMIT, xi, 0; nsent++ };
	if
	:: isSub(xi) -> rep[xi]?r; goto out            /* Submit: its admission word */
	:: else -> skip
	fi;
	if
	:: atomic { rep[xi]?r -> if :: r == CLAIMED -> waf = dafter; wfi = dfin :: else -> skip fi }
	:: CANCELS(me) && !isSub(me) ->                      /* ctx ended: abandon */
		inc!DROP, xi, 0;
		rep[xi]?r;
		if
		:: r == DROPPED -> ret[xi] = 1; goto out
		:: r == KEPT -> ret[xi] = 1; goto out
		:: r == CLAIMED ->                       /* a claim not made: given back */
			atomic {
				inc!RELEASE, BYCALLER + me, 0;
				holders--; ret[xi] = 1; outcome(xi)
			};
			goto out
		:: else -> goto out                      /* its answer: the ctx's error returned */
		fi
	fi;
	if
	:: r == CLAIMED -> direct()                  /* with w.after, w.fin */
	:: else -> skip
	fi;
	if
	:: AGAIN && xi == 0 ->
		f0 = PAUSE && (r == FAIL || r == PAUSED);
		xi = 3; r = 0; goto again
	:: else -> skip
	fi;
out:
	atomic {
		ndone++; r = 0;
#if KEYB
		if
		:: isB(me) -> bret = 1
		:: else -> skip
		fi;
#endif
		skip
	}
}

/* notifyPaused: the waiting Submit's done (y: its input + 1; 0: none),
 * then OnPause (m: the inputs of the failed batch, with ONPAUSE), after the
 * key's earlier completions; then close(fin), opNotified */
proctype pauser(byte after, fin, y, m) {
	CLOSEDF(after);
	atomic {                                     /* done of the Submit (y: input + 1), then OnPause */
		cstart(fin);
#if ONPAUSE
		assert((m & 1) == 0 || outc[0]);         /* OnPause: after the failed call's answers */
		assert((m & 2) == 0 || outc[1]);
		assert((m & 4) == 0 || outc[2]);
		assert((m & 8) == 0 || outc[3]);
#endif
		if
		:: y > 0 -> outcome(y - 1)
		:: else -> skip
		fi
	};
	atomic {
		cend(fin); inc!NOTIFIED, fin, 0;
#if PROBE
		onp = 1;
#endif
		skip
	}
}

/* callDoneAll at close: the drained Submit's done after every completion in
 * flight (the key's last place, at close), then close(fin), the place the
 * close took as the key's last, and opNotified (nil fin: the loop forgets
 * no place) */
proctype notifier(byte after, fin, y) {
	CLOSEDF(after);
	atomic { cstart(fin); outcome(y) };
	atomic { cend(fin); inc!NOTIFIED, 0, 0 }
}

/* chainFin, from endClaim: a claim's place given back is over once the
 * key's earlier completions are, so that close's notifier, which may wait
 * on it, goes on (the loop closes it at once when there are none, as the
 * chain does at once then) */
proctype chain(byte after, fin) {
	CLOSEDF(after);
	closedf = closedf | (1 << fin)
}

/* Resume, at any time; PROBE: the resume probe OnPause starts, once it
 * has run, after which the calls succeed (the outage is over) */
proctype resumer() {
#if PROBE
	ndone++;                                     /* no caller waits for it */
end_r:
	onp;                                         /* OnPause has run, if ever */
	atomic { inc!RESUMEM, 0, 0; up = 1 }
#else
	atomic { inc!RESUMEM, 0, 0; ndone++ }
#endif
}

proctype closer() {
	atomic { inc!CLOSEM, 0, 0; ndone++ }
}

#define NDONE (RUNS(0) + RUNS(1) + RUNS(2) + RESUME + CLOSER)

/* what the configurations may combine */
#if KEYB && (DIRECT || CANCELS(2) || !RUNS(2))
#error "KEYB: key B's caller 2 makes one batched Do"
#endif
#if ONPAUSE && DIRECT
#error "ONPAUSE: batched calls"
#endif
#if HOLD && !PAUSE
#error "HOLD: with PauseOnError"
#endif
#if PROBE && !(HOLD && ONPAUSE && RESUME)
#error "PROBE: a resume probe from OnPause, with HOLD, ONPAUSE and RESUME"
#endif

init {
	atomic {
		widle[0] = 1; run loop(); run worker(0);
#if NW > 1
		widle[1] = 1; run worker(1);
#endif
		if
		:: RUNS(0) -> run caller(0)
		:: else -> skip
		fi;
		if
		:: RUNS(1) -> run caller(1)
		:: else -> skip
		fi;
		if
		:: RUNS(2) -> run caller(2)
		:: else -> skip
		fi;
		if
		:: RESUME -> run resumer()
		:: else -> skip
		fi;
		if
		:: CLOSER -> run closer()
		:: else -> skip
		fi
	}
	ndone == NDONE;                              /* every caller has returned */
#if HOUR
	timeout && pk != 1;                          /* and nothing moves any more, nor waits for an hour */
#else
	timeout;                                     /* and nothing moves any more */
#endif
	atomic {
		assert(nout == nsent);                   /* every input has its outcome */
		assert(!lex && !lbusy && ln == 0 && holders == 0 && calls == 0);
		assert(IDLEANY && (NW == 1 || widle[NW - 1]) && notify == 0 && !incomp);
		assert(pk == 0);
#if KEYB
		assert(bl == 0);
#endif
		assert(rfin[0] == 0 && rfin[1] == 0 && rfin[2] == 0);
		assert(CLOSEDF(completing));             /* no completion left to run */
		assert(empty(inc))
	}
}

/* ---- liveness, checked with pan -a -f ---- */
ltl live { <> (ndone == NDONE && nout == nsent && notify == 0) }
