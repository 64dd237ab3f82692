/*
 * fail.pml: a SPIN model of what one key's calls do when they fail, as the Go
 * code does it since issue 24: retries in the lane (Config.Retry: retry.go,
 * worker.go, call.go), completions in order per key (loop.completing,
 * job.after and job.fin, a direct call's w.after and w.fin: loop.go,
 * direct.go, worker.go, call.go) and a key paused once a call of it fails for good
 * (Config.PauseOnError: pause.go, loop.go), on one shard and one key.
 * Nothing else of the ferry is here: see ferry.pml for the protocol of the
 * callers, the loop and the workers as a whole, and README.md.
 *
 * Processes and the Go code they stand for:
 *   loop      loop.run, handle: admit (state.admit's claim or join,
 *             admitSubmit, the paused key's refusal), drop (state.drop,
 *             gaveUp), release (state.release, endDirect, pause:
 *             pauses.pause, state.clearLane, reply, notifyPaused's start),
 *             retryWanted, idleWorker, reported, notified, opResume
 *             (pauses.resume), close (state.drain, callDoneAll's start, the
 *             batches' context cancelled, the direct call's cancel); dispatch
 *             (takeSlot, state.take, the batch's place among the key's
 *             completions)
 *   worker    work, retries.run (askRetry, backoff, opRetry), finish
 *             (failedForGood, the release, reply, <-j.after, callDone,
 *             OnBatch, close(j.fin), opIdle)
 *   caller    Ferry.Do (await, abandon, finishDo) and direct
 *             (invoke, retryDirect, failedForGood, releaseDirect, <-w.after,
 *             OnBatch, close(w.fin), opReported); or Ferry.Submit
 *             (Ferry.Submit: caller 1, SUBMIT)
 *   pauser    notifyPaused: a paused key's waiting Submits' done
 *   notifier  callDoneAll, started by close
 *   resumer   Ferry.Resume
 *   closer    Ferry.Close (its message: the loop's end is ferry.pml's)
 *
 * Configuration (-D on spin's command line):
 *   DIRECT=1   Config.DirectCalls (MaxBatchDelay 0): a Do of a key with no
 *              lane claims it and makes the call itself
 *   NA         attempts of a call at most: Retry may say yes while
 *              attempt < NA (default 2; 1: no Retry)
 *   PAUSE=0|1  Config.PauseOnError (default 1)
 *   ONBATCH    1 (default): OnBatch is set, so every batch and every direct
 *              call has completions; 0: only a batch with a Submit has
 *   SUBMIT=1   caller 1 Submits (its done is a completion)
 *   CANCEL     bit c: caller c's ctx may end (default 0): while it waits
 *              (abandon), or during its direct call; a Submit's never does
 *   AGAIN=0|1  caller 0 makes a second Do (input 3) once its first returns
 *              (default 1)
 *   RESUME=1   a resumer calls Resume once, at any time
 *   CLOSER=1   a closer calls Close once, at any time
 *   CALLERS    bit c: caller c runs (default 7: all three)
 *   MUT_*      one mutation each; see README.md
 *
 * Properties (assertions, invalid end states; ltl live under weak
 * fairness): one holder of the key at a time, from a batch's (or direct
 * call's) first attempt to its release, across the attempts and their
 * backoffs (holders <= 1), so one call in flight (calls <= 1); the key's
 * inputs reach calls in the order they joined: a batch's first attempt
 * takes only inputs that joined after every input called before, and a
 * retry only some of its own batch's, with nothing called in between
 * (hi); no input dropped, or whose caller returned before the retry's ask
 * was answered, reaches an attempt; the key's completions (done, OnBatch,
 * a paused key's and close's done) never overlap and run in the order their
 * holders took their place (lastc); a paused key admits nothing and holds no
 * waiting input; a caller whose Do failed for good (or was answered
 * ErrPaused) finds the key paused at its next Do, unless a Resume came
 * in between or the ferry closed; every input has exactly one outcome; a
 * loop reply never blocks; at the end nothing is held, waiting or in flight,
 * every worker is idle and every completion has run.
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
#define RUNS(c) ((CALLERS >> (c)) & 1)
#define CANCELS(c) ((CANCEL >> (c)) & 1)

#define NC    3          /* callers */
#define NI    4          /* inputs: caller c's first is c; caller 0's second is 3 */
#define NW    2          /* workers: MaxInFlightBatches */
#define BS    2          /* MaxBatchSize */
#define INCSZ 8          /* s.inc */

#define isSub(x) (SUBMIT && (x) == 1)

mtype = { ADMIT, DROP, RELEASE, RETRY, IDLE, REPORTED, NOTIFIED, RESUMEM, CLOSEM,  /* to the loop */
          OK, FAIL, PAUSED, CLOSED, DROPPED, KEPT, CLAIMED, ADMITTED };           /* answers, words */

#define FAILED 1         /* a release's flags: m.fail, the call failed for good */
#define WITHW  2         /* m.w: a direct call's OnBatch runs, its report follows */
#define BYCALLER 2       /* a release's worker field from 2 up: 2 + the direct caller (Go: byCaller) */

chan inc = [INCSZ] of { mtype, byte, byte };  /* s.inc: op, worker or input or fin, flags */
chan rep[NI] = [1] of { mtype };              /* each input's w.c (a Submit's: its word channel) */
chan jobs[NW] = [1] of { byte, byte };        /* wk.jobs: the job's after and fin (0: nil) */
chan askc[NW] = [1] of { bit };               /* the worker's ask.c */

/* ---- the loop's: the key's lane (state.go) ---- */
bit  lex, lbusy;         /* the key's lane exists; it is busy (a batch or a claim) */
byte it[NI];             /* its waiting inputs, in order: input + 1 */
byte ln;
/* ---- the loop's: the shell (loop.go, pause.go) ---- */
bit  paused;             /* l.paused has the key */
bool closing;            /* l.closing: drained, s.ctx cancelled */
byte completing;         /* l.completing[key]: the id of a fin, 0 none */
bit  widle[NW];          /* wk.idle: opIdle came since its last batch */
byte wb[NW*BS];          /* wk.buf, the job's batch: input + 1 */
byte wn[NW];             /* its length */
byte wfin[NW];           /* wk.fin */
byte dafter, dfin;       /* l.directs[key]: the claim's after and fin */
byte rfin[NC];           /* l.reports: caller c's direct call's fin, its OnBatch running */
bit  gone[NI];           /* w.gone: its caller gave up after a call took it */
byte notify;             /* l.notify, and len(l.pausing) */
/* ---- shared as in Go ---- */
byte ridx[NW];           /* the worker's ask.idx: bit j, the batch's input j */
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
byte ndone;              /* callers returned; and the resumer and closer */

/* loop temporaries, dead between its atomic steps */
hidden byte a, b, x, k, j, ps, tw, tn, pa;
hidden mtype op;

#define CLOSEDF(f) ((f) == 0 || (closedf & (1 << (f))) != 0)

/* an input's one outcome: an answer, a word that is one, or a done */
inline outcome(y) {
	assert(!outc[y]); outc[y] = 1; nout++
}

/* a loop reply on w.c: never blocks */
inline word(y, v) {
	assert(len(rep[y]) == 0); rep[y]!v
}

/* a holder's completions start (after its after is closed) and end */
inline cstart(f) {
	assert(!incomp); incomp = 1;                 /* one at a time */
	assert(f > lastc); lastc = f                 /* in the order the places were taken */
}
inline cend(f) {
	assert(incomp); incomp = 0;
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
	assert(!paused && !closing);                 /* a paused key admits nothing */
	it[ln] = y + 1; ln++; lex = 1;
	nsq++; sq[y] = nsq
}

/* the paused key's check at admission; MUT_PAUSED_ADMITS: none */
#ifdef MUT_PAUSED_ADMITS
#define ISPAUSED 0                               /* MUTATION: a paused key admits */
#else
#define ISPAUSED paused
#endif

/* handle(opAdmit): admit, admitSubmit */
inline admit() {
	x = a;
	if
	:: x == 3 && f0 && !closing ->
		assert(paused || rap)                    /* the failure's release came first */
	:: else -> skip
	fi;
	if
	:: closing -> word(x, CLOSED); outcome(x)     /* refused: ErrClosed */
	:: !closing && ISPAUSED -> word(x, PAUSED); outcome(x)
	:: !closing && !ISPAUSED && DIRECT && !isSub(x) && !lex ->   /* claim */
		lex = 1; lbusy = 1; holders++; assert(holders <= 1);
		assert(!paused);
		nsq++; sq[x] = nsq;
		if
		:: ONBATCH ->                            /* its OnBatch's place */
			dafter = completing; nfin++; dfin = nfin; completing = dfin
		:: else -> skip
		fi;
		word(x, CLAIMED)
	:: !closing && !ISPAUSED && !(DIRECT && !isSub(x) && !lex) ->  /* join */
		enter(x);
		if
		:: isSub(x) -> word(x, ADMITTED)
		:: else -> skip
		fi
	fi
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
		:: ln == 0 && !lbusy -> lex = 0
		:: else -> skip
		fi;
		word(x, DROPPED); outcome(x)
	:: else ->
		gone[x] = 1;                             /* not retried: see retryWanted */
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
	:: !lbusy -> lex = 0                         /* removeLane */
	:: else -> skip
	fi
}

/* loop.pause: the key paused, its lane cleared, its Submits told by a
 * goroutine that takes its place among the key's completions */
inline pause() {
	paused = 1; rap = 0;
#ifndef MUT_NO_CLEAR_LANE
	clearLane();                                 /* MUTATION (left out): the lane stays */
#endif
	if
	:: ps > 0 ->
		nfin++; pa = completing;
#ifndef MUT_PAUSE_NO_PLACE
		completing = nfin;                       /* MUTATION (left out): no place taken */
#endif
		notify++;
#ifdef MUT_PAUSE_DONE_UNORDERED
		run pauser(0, nfin, ps - 1);             /* MUTATION: no wait for the key's completions */
#else
		run pauser(pa, nfin, ps - 1);
#endif
		ps = 0; pa = 0
	:: else -> skip
	fi
}

/* handle(opRelease): state.release, the worker's or endDirect, then pause */
inline release() {
	assert(lex && lbusy);                        /* a release only of a busy key */
	lbusy = 0;
	if
	:: ln == 0 -> lex = 0
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
	:: b & FAILED -> assert(PAUSE); pause()
	:: else -> skip
	fi
}

/* loop.done: forget the key's completions over with fin f */
inline forget(f) {
	if
	:: f != 0 && completing == f -> completing = 0
	:: else -> skip
	fi
}

/* handle(opRetry): retryWanted keeps the inputs whose callers still wait */
inline retryWanted() {
	k = 0;
	do
	:: k < wn[a] ->
		if
		:: (ridx[a] >> k) & 1 ->
			x = wb[a*BS + k] - 1;
			if
#ifndef MUT_RETRY_IGNORES_GONE
			:: gone[x] -> ridx[a] = ridx[a] & ~(1 << k)
#endif
			:: else -> rb[x] = ret[x]
			fi
		:: else -> skip
		fi;
		k++
	:: else -> break
	od;
	k = 0; x = 0;
	assert(len(askc[a]) == 0); askc[a]!1
}

/* loop.close: state.drain, callDoneAll for the Submit drained, after the
 * completions in flight; s.ctx cancelled (closing, read by the batches'
 * calls) and the direct call's cancel (from now on its ctx may end) */
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
		:: !lbusy -> lex = 0
		:: else -> skip
		fi;
		if
		:: ps > 0 ->
			notify++; nfin++;                    /* its id orders it only: no place */
			run notifier(completing, nfin, ps - 1);
			ps = 0
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
	:: op == RETRY -> retryWanted()
	:: op == IDLE ->                             /* idleWorker */
		widle[a] = 1; forget(wfin[a]); wfin[a] = 0;
		wb[a*BS] = 0; wb[a*BS + 1] = 0; wn[a] = 0
	:: op == REPORTED -> forget(rfin[a]); rfin[a] = 0
	:: op == NOTIFIED -> assert(notify > 0); notify--; forget(a)
	:: op == RESUMEM -> paused = 0; rap = 1      /* pauses.resume */
	:: op == CLOSEM -> lclose()
	fi
}

/* dispatch: takeSlot and state.take of up to BS inputs onto an idle worker;
 * the batch takes its place among the key's completions if it has any */
inline take() {
	if
	:: widle[0] -> tw = 0
	:: else -> tw = 1
	fi;
	assert(!paused);
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
	:: ONBATCH || tn ->                          /* its completions come after the key's last */
		nfin++; wfin[tw] = nfin;
		jobs[tw]!completing, nfin;
		completing = nfin
	:: else -> jobs[tw]!0, 0
	fi;
	tw = 0; tn = 0; j = 0; k = 0; x = 0
}

proctype loop() {
end_l:
	do
	:: atomic {
		inc?op, a, b ->
		handle();
		assert(!paused || ln == 0);              /* a paused key holds no waiting input */
		op = 0; a = 0; b = 0; x = 0
	   }
	:: atomic { lex && !lbusy && ln > 0 && (widle[0] || widle[1]) -> take() }
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
			fi
		:: else -> skip
		fi;
		sq[y] = 0;                               /* read only here */
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
			:: res[y] = FAIL
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

/* MUT_RETRY_RELEASES_KEY: the key released as the retry starts its
 * backoff, as if the retry were a batch of its own; the release at the end
 * is then left out */
#ifdef MUT_RETRY_RELEASES_KEY
#define RELEASEFORRETRY(w) if :: !rel -> inc!RELEASE, w, 0; holders--; rel = 1 :: else -> skip fi
#else
#define RELEASEFORRETRY(w) skip
#endif

proctype worker(byte id) {
	byte after, fin, n, idx, att, fm, i, y, m;
	bit fl, rel;
end_w:
	do
	:: atomic { jobs[id]?after, fin -> n = wn[id]; idx = (1 << n) - 1; att = 1; attemptStarts() };
again:
		atomic { attemptEnds(); failing() };
		/* retries.run: while an input fails and ctx holds, Retry (user code)
		 * says yes or no; attempts are bounded by NA */
		if
		:: atomic { fm != 0 && !closing && att < NA -> idx = fm; fm = 0; RELEASEFORRETRY(id) };
		   /* backoff(d, ctx.Done()): waited out, or ended by the ctx (close) */
		   if
		   :: atomic { closing -> idx = 0 }      /* r.blame, break */
		   :: atomic { ridx[id] = idx; inc!RETRY, id, 0 };   /* the timer won: opRetry */
		      atomic { askc[id]?_; idx = ridx[id]; ridx[id] = 0 }
		   fi;
		   if
		   :: atomic { idx != 0 -> att++; attemptStarts() }; goto again
		   :: idx == 0 -> skip                   /* no one left to retry for */
		   fi
#ifndef RETRYYES
		:: fm != 0 && !closing && att < NA -> fm = 0  /* Retry says no */
#endif
		:: else -> fm = 0
		fi;
		/* finish: the release (failedForGood), the answers */
		atomic {
			i = 0; fl = 0;
			do
			:: i < n -> fl = fl | (res[wb[id*BS + i] - 1] == FAIL); i++
			:: else -> break
			od;
			fl = fl && PAUSE && !closing;
#ifndef MUT_ANSWER_BEFORE_PAUSE
			if
			:: !rel -> inc!RELEASE, id, fl; holders--
			:: else -> skip
			fi;
#endif
			i = 0
		};
		do
		:: i < n ->
			y = wb[id*BS + i] - 1;
			if
			:: !isSub(y) -> atomic { rep[y]!res[y]; outcome(y); res[y] = 0 }  /* may wait for errKept's read */
			:: else -> skip
			fi;
			i++
		:: else -> break
		od;
		i = 0; y = 0;
#ifdef MUT_ANSWER_BEFORE_PAUSE
		atomic { inc!RELEASE, id, fl; holders-- };  /* MUTATION: the release after the answers */
#endif
		fl = 0; rel = 0;
		if
		:: fin != 0 ->
#ifndef MUT_COMPLETION_OVERTAKES
			CLOSEDF(after);                      /* <-j.after */
#endif
			atomic {                             /* callDone for the Submits, OnBatch */
				cstart(fin);
				i = 0;
				do
				:: i < n ->
					y = wb[id*BS + i] - 1;
					if
					:: isSub(y) -> outcome(y); res[y] = 0
					:: else -> skip
					fi;
					i++
				:: else -> break
				od;
				i = 0; y = 0
			};
			atomic { cend(fin); inc!IDLE, id, 0; after = 0; fin = 0; n = 0; idx = 0; att = 0 }
		:: else ->
			atomic { inc!IDLE, id, 0; after = 0; fin = 0; n = 0; idx = 0; att = 0 }
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
		:: res[xi] = FAIL
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
	atomic { ndone++; r = 0 }
}

/* notifyPaused: the Submit's done after the key's earlier completions, then
 * close(fin), opNotified */
proctype pauser(byte after, fin, y) {
	CLOSEDF(after);
	atomic { cstart(fin); outcome(y) };
	atomic { cend(fin); inc!NOTIFIED, fin, 0 }
}

/* callDoneAll at close: the drained Submit's done after every completion in
 * flight (the key's last place, at close); it takes no place, as nothing
 * of the key takes one after close */
proctype notifier(byte after, id, y) {
	CLOSEDF(after);
	atomic { cstart(id); outcome(y) };
	atomic { incomp = 0; inc!NOTIFIED, 0, 0 }
}

/* chainFin, from endClaim: a claim's place given back is over once the
 * key's earlier completions are, so that close's notifier, which may wait
 * on it, goes on (the loop closes it at once when there are none, as the
 * chain does at once then) */
proctype chain(byte after, fin) {
	CLOSEDF(after);
	closedf = closedf | (1 << fin)
}

proctype resumer() {
	atomic { inc!RESUMEM, 0, 0; ndone++ }
}

proctype closer() {
	atomic { inc!CLOSEM, 0, 0; ndone++ }
}

#define NDONE (RUNS(0) + RUNS(1) + RUNS(2) + RESUME + CLOSER)

init {
	atomic {
		widle[0] = 1; widle[1] = 1;
		run loop(); run worker(0); run worker(1);
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
	timeout;                                     /* and nothing moves any more */
	atomic {
		assert(nout == nsent);                   /* every input has its outcome */
		assert(!lex && !lbusy && ln == 0 && holders == 0 && calls == 0);
		assert(widle[0] && widle[1] && notify == 0 && !incomp);
		assert(rfin[0] == 0 && rfin[1] == 0 && rfin[2] == 0);
		assert(CLOSEDF(completing));             /* no completion left to run */
		assert(empty(inc))
	}
}

/* ---- liveness, checked with pan -a -f ---- */
ltl live { <> (ndone == NDONE && nout == nsent && notify == 0) }
