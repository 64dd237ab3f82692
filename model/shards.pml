/*
 * shards.pml: a SPIN model of how the shards of one ferry share its two
 * bounds, the room (spare) and the workers' slots (tokens), as share.go,
 * slots.go and loop.go implement them: loop.run, receive, handle's opAdmit
 * and opIdle, dispatch; share.borrowRoom, giveBackRoom; slots.takeSlot,
 * gotSlot, releaseSlot, giveBackIdleSlots; shareOf. A slot is a worker: tokens
 * hold idle workers, a shard runs its batches on the workers it holds, and
 * a worker is idle, and its slot free, only once it has answered its batch.
 * Nothing else of the ferry is here: see ferry.pml for one loop's protocol,
 * and README.md.
 *
 * Processes and the Go code they stand for:
 *   loop     loop.run (its select: inbound, tokens while starved below
 *            its share, the slots poke while starved at it: slots.waitOn),
 *            receive, handle (opAdmit: state.join's check, fits; opIdle: idleWorker,
 *            releaseSlot), dispatch; the
 *            inlines and steps reserve, lend, take, unslot, keep stand for
 *            share.borrowRoom, giveBackRoom, slots.takeSlot, releaseSlot,
 *            giveBackIdleSlots
 *   worker   work: a job names the loop that holds the worker's slot; the
 *            call, the answer, then opIdle, to that loop (its opRelease,
 *            before the answer, changes neither room nor slots here: it is
 *            left out, see README.md)
 *   caller   Ferry.Do: one opAdmit, then its one answer (or a rejection)
 *
 * Configuration (-D on spin's command line):
 *   NW      MaxInFlightBatches: the slots (default 2; New wants NW >= 2 for
 *           two shards). Shard 0's share is (NW+1)/2, shard 1's NW/2.
 *   TOTAL   MaxQueued: the room (default 2)
 *   AGAIN=1 caller 0, once answered, makes a second Do on shard 1
 *   C0, C1  callers of shard 0 and of shard 1 (default 2 each), each
 *           admitting one input
 *   KEEPS   1 (default): a shard keeps an allowance of room between its
 *           wake-ups, as without WaitForRoom; 0: it gives back all its
 *           room spare as each wake-up ends (with WaitForRoom)
 *   STUCK=1 the worker of caller 0's batch, once it has answered, sends its
 *           opIdle only after every caller has its answer: a Submit's done
 *           that blocks on the other inputs' answers
 *   MUT_*   one mutation each; see README.md
 *
 * Properties (assertions, invalid end states; ltl live under weak fairness):
 *   the room is conserved: spare + every core's room is MaxQueued whenever no
 *   loop holds spare, and with the amount a loop holds when one does
 *   (ROOMOK); the inputs waiting across shards never pass MaxQueued; a
 *   rejection only when the room is full, but for room a loop has freed by
 *   taking batches that have not started (rejok), and never with a room as
 *   large as the callers; the slots are conserved (SLOTSOK); a job goes out
 *   only when a worker is idle to take it at once (its slot's: the workers
 *   are as many as the slots), and the calls in flight never pass
 *   MaxInFlightBatches; a loop starves only when every
 *   slot is in flight, but for slots held by a loop in a wake-up (starveok);
 *   a loop parked below its share gets the slot of the next batch to end
 *   beyond a share (shareok); no deadlock; at the end the whole room is in
 *   spare and every slot in tokens; every caller is answered (live).
 */

#ifndef NW
#define NW 2
#endif
#ifndef TOTAL
#define TOTAL 2
#endif
#ifndef C0
#define C0 2
#endif
#ifndef STUCK
#define STUCK 0
#endif
#ifndef C1
#define C1 2
#endif
#ifndef AGAIN
#define AGAIN 0
#endif
#ifndef KEEPS
#define KEEPS 1
#endif

#define NS    2                 /* shards: loops */
#define NCALL (C0 + C1)         /* callers: 0 to C0-1 are shard 0's, the rest shard 1's */
#define SHARD(c) (((c) < C0) -> 0 : 1)
#define N1 (C1 + AGAIN)          /* inputs shard 1 may have at once */
#if C0 < C1 + AGAIN
#define CMAX N1
#else
#define CMAX C0
#endif
#define INCSZ (CMAX + NW + 1)   /* s.inc: its admissions, opIdles and an opGiveBack never fill it */
#define OWN(s) (((s) == 0) -> (NW + 1) / 2 : NW / 2)  /* share(NW, 2, s) */
#define MAXC  6                 /* pend's size, for the ltl claim */

#define ADM 1                   /* opAdmit of caller c */
#define IDL 3                   /* opIdle from a worker: it has answered its batch */
#define GIV 4                   /* opGiveBack from the other loop, short of room: see askBack */
#define ANSWER   1              /* a caller's answer: its call's */
#define REJECTED 2              /* or ErrRejected, the room being full */

chan inc[NS] = [INCSZ] of { byte, byte }; /* s.inc: op, caller */
chan jobs = [NW] of { byte, byte };        /* wk.jobs, the workers' (alike: see README): the loop
                                            * that holds the worker's slot, and a batch of one
                                            * caller's input */
chan rep[NCALL] = [1] of { byte };         /* each caller's w.c */
chan spare = [1] of { byte };              /* f.spare: the room no shard holds (its ledger) */
chan slots = [NW] of { bit };              /* f.slots.free: tokens, the slots no shard holds,
                                            * each an idle worker (or one not started) */
chan wpoke[NS] = [1] of { bit };           /* share.poke: a loop waiting for room back is poked */

/* ---- the ledger's marks and waiters (ledger.marks, waiters), tokens.wants:
 * changed only by the loop that holds spare (room) or in one step (wants) ---- */
bool marks[NS];     /* ledger.marks: the shard may keep an allowance between wake-ups */
bool waiter[NS];    /* its poke is among the waiters: it lacks room, holds none */
bool want[NS];      /* its slot poke is in wants: it waits for a slot given back */

/* ---- each loop's own state (loop.go, the core's room in state.go) ---- */
byte cap[NS];       /* st.room.n: the room the shard holds (grow) */
byte q[NS];         /* st.queued: inputs waiting */
byte qa[NS*CMAX];    /* the waiting inputs, in order: callers */
byte held[NS];      /* the slots, each a worker, the shard holds: slots.has() */
byte flying[NS];    /* of those, busy (slots.busy): taken for a batch, no opIdle handled since */
bool starved[NS];   /* l.slots.starved */
bool pressed[NS];   /* share.pressed: an opGiveBack read, give all back at the lend */
bool waiting[NS];   /* slots.waiting: it looks at tokens again only once poked */
bit  spoke[NS];     /* slots.poke, capacity 1 */
byte gave[NS];      /* slots.gave: slots given back, less those taken from tokens, since it last poked wants */
/* ---- what Go's runtime knows: where a loop is, what it was handed ---- */
bool awake[NS];     /* in a wake-up, from its receive (or slot) to its jobs'
                     * start; else at its select in run */
bit  gift[NS];      /* a slot handed to the loop's parked select (see give) */

/* ---- ghosts: observers only, never read by the protocol ---- */
byte fly;           /* calls in flight, across shards */
byte mvr[NS];       /* room freed by this dispatch's takes whose batches have not started */
bit  pend[MAXC];    /* caller c's input is admitted and not yet answered */
byte ndone;         /* callers that have their answer */
byte nrej;          /* rejections */
byte nwork;         /* worker goroutines with a batch: from its job to its opIdle */

/* the room: all of it is in spare, in a core, or in the hands of the one
 * loop that holds spare (x) */
#define ROOMOK(x) ((x) + cap[0] + cap[1] == TOTAL)
/* the slots: all of them are in tokens or held by a shard, and a shard's
 * batches in flight have slots it holds */
#define SLOTSOK (len(slots) + held[0] + held[1] + gift[0] + gift[1] == NW && \
                 flying[0] <= held[0] && flying[1] <= held[1])

/* loop s is parked in its select, starved: nothing it waits on is ready;
 * ACTIVE is its negation (Promela cannot negate empty). Go's runtime
 * decides by it (see give). */
#ifndef MUT_NO_STARVED_CASE
#define PARKED(s) (!awake[s] && starved[s] && !waiting[s] && empty(inc[s]) && empty(slots) && !gift[s])
#define ACTIVE(s) (awake[s] || !starved[s] || waiting[s] || nempty(inc[s]) || nempty(slots) || gift[s])
#else
#define PARKED(s) false
#define ACTIVE(s) true
#endif

/* a slot goes back to tokens (tokens.put, never blocking): a
 * send on a channel that a parked select waits on hands the value to that
 * select, which then returns with it, as Go's runtime does; else it is
 * buffered, and any loop may take it */
inline give() {
	if
	:: PARKED(1-i) -> gift[1-i] = 1
	:: ACTIVE(1-i) -> slots!1
	fi
}

/* at the end of a batch of loop i: the other loop, if it waits for a slot
 * below its share, gets one now (from a loop beyond its share, then): a
 * starved loop gets a slot within one batch of the loops using its share */
inline wasbelow() {
	if
	:: PARKED(1-i) && held[1-i] < OWN(1-i) -> below = 1
	:: ACTIVE(1-i) || held[1-i] >= OWN(1-i) -> skip
	fi
}
inline shareok() {
	assert(!below || gift[1-i]); below = 0
}

/* a rejection: the room is full, but for room another loop has freed by
 * taking batches that have not started yet (their callers cannot have come
 * back); a room as large as its callers never rejects */
inline rejok() {
	assert(TOTAL < NCALL);
	assert(q[0] + q[1] + mvr[0] + mvr[1] == TOTAL);
	nrej++
}

/* loop i starves: every slot is in flight, but for slots held by a loop in
 * the middle of a wake-up (which uses them, or gives them back, before it
 * sleeps); one that waits for a poke (slots.waiting) without looking at
 * tokens holds its share, and a slot in tokens has its poke on the way:
 * poked, or the loop that gave it back still in its wake-up */
inline starveok() {
	assert(held[i] == flying[i]);
	assert(len(slots) == 0 || waiting[i] && (spoke[i] || awake[1-i]));
	assert(!waiting[i] || held[i] >= OWN(i));
	assert(held[1-i] == flying[1-i] || awake[1-i])
}

/* slots.lent: after giving slots back, poke those in wants */
inline lent() {
	if
	:: gave[i] > 0 ->
		gave[i] = 0;
#ifndef MUT_NO_SLOT_POKE
		if                                       /* a poke to a loop no longer waiting */
		:: want[1-i] -> want[1-i] = 0; spoke[1-i] = waiting[1-i]  /* is drained as it next waits */
		:: else -> skip
		fi;
		if
		:: want[i] -> want[i] = 0; spoke[i] = waiting[i]
		:: else -> skip
		fi;
#else
		skip;                                    /* MUTATION: no poke */
#endif
	:: else -> skip                              /* it took back what it gave: no poke */
	fi;
	/* the slots given back are in tokens: one waiting has its poke */
	assert(!waiting[1-i] || spoke[1-i] || empty(slots));
	/* with two shards none is in wants while the other holds beyond its share */
	assert(!waiting[1-i] || held[i] <= OWN(i))
}

/* slots.adopt of a slot from tokens: one fewer given back, net */
inline took() {
	gave[i] = (gave[i] > 0 -> gave[i] - 1 : 0)
}

/* slots.giveBack's end: a loop that gives slots back looks at tokens again */
inline gaveback() {
	gave[i]++;
	waiting[i] = 0; spoke[i] = 0                     /* it looks again; its poke, drained */
}

/* handle(opAdmit): the core admits c if the room it holds has space
 * (state.join, fits), else rejects it */
inline admit1() {
	if
	:: cap[i] > q[i] ->
		qa[i*CMAX + q[i]] = c; q[i]++; pend[c] = 1;
		assert(q[0] + q[1] <= TOTAL)                 /* (a) the room across shards */
	:: else ->
		rejok();
		assert(empty(rep[c])); rep[c]!REJECTED
	fi
}

/* unslot (loop.idleWorker, slots.releaseSlot): the shard's batch is over,
 * its worker idle (opIdle); with its slot it goes back if the shard holds
 * more than its share */
inline unslot() {
#if defined(MUT_NO_UNSLOT) || defined(MUT_NO_SLOT)
	skip                                             /* MUTATION */
#else
	wasbelow();
	assert(flying[i] > 0);
	flying[i]--;
#ifndef MUT_UNSLOT_KEEPS
	if
	:: held[i] > OWN(i) -> held[i]--; give(); gaveback()  /* tokens never fill */
	:: else -> skip
	fi;
#endif
	shareok();
	assert(SLOTSOK)
#endif
}

/* handle every message of the wake-up, in order; then dispatch begins */
inline handleAll() {
	k = 0;
	do
	:: k < nb ->
		c = bc[k];
		if
		:: bop[k] == ADM -> admit1()
		:: bop[k] == IDL -> unslot()
		:: bop[k] == GIV ->                      /* opGiveBack */
#ifndef MUT_IGNORE_ASK
			pressed[i] = 1
#else
			skip                                 /* MUTATION: the ask ignored */
#endif
		fi;
		bop[k] = 0; bc[k] = 0; k++
	:: else -> break
	od;
	assert(cap[i] >= q[i]);
	k = 0; c = 0; nb = 0; need = 0;
	starved[i] = 0;                                  /* dispatch: slots.dispatching */
	if
	:: waiting[i] && spoke[i] -> spoke[i] = 0; waiting[i] = 0
	:: else -> skip
	fi
}

/* state.take of the first waiting input (batches of one), on an idle worker
 * of a slot the shard holds */
inline take() {
	c = qa[i*CMAX];
	k = 0;
	do
	:: k + 1 < q[i] -> qa[i*CMAX + k] = qa[i*CMAX + k + 1]; k++
	:: else -> break
	od;
	qa[i*CMAX + k] = 0; k = 0;
	q[i]--;
#ifndef MUT_NO_SLOT
	flying[i]++;
#endif
	stl[ns] = c; ns++; c = 0;                        /* l.out.starts */
	mvr[i]++;
	assert(SLOTSOK)
}

/* keep (slots.giveBackIdleSlots): the slots the shard holds and does not
 * use go back to tokens */
inline keep() {
#ifndef MUT_NO_KEEP
	do
	:: held[i] > flying[i] -> held[i]--; give(); gaveback()
	:: else -> break
	od;
#endif
	lent();
	assert(SLOTSOK)
}

/* the batches taken start: their jobs go to their workers, idle (a
 * batch only while idle), which tell this loop */
inline startJobs() {
	k = 0;
	do
	:: k < ns ->
		assert(nwork + len(jobs) < NW);              /* a worker is idle to take it */
		jobs!i, stl[k]; stl[k] = 0; k++
	:: else -> break
	od;
	k = 0; ns = 0; mvr[i] = 0; awake[i] = 0
}

proctype loop(byte i) {
	byte bop[INCSZ], bc[INCSZ];  /* l.share.msgs: one wake-up's messages */
	byte stl[NW];               /* l.out.starts: the jobs of the batches taken */
	byte nb, ns, k, c, need, lack, b, got, back, wnt, kp;
	bit below, mark;
end_l:
	/* run: the select; tokens are in it only while the shard is starved (slots.waitOn) */
	if
	:: atomic {
		!gift[i] && nempty(inc[i]) ->
		inc[i]?bop[0], bc[0];                    /* receive: read them all first */
		awake[i] = 1;
		nb = 1;
		do
		:: nempty(inc[i]) -> inc[i]?bop[nb], bc[nb]; nb++
		:: empty(inc[i]) -> break
		od;
		/* reserve (share.borrowRoom): what the core lacks for the wake-up's admissions */
		k = 0;
		do
		:: k < nb -> need = need + (bop[k] == ADM); k++
		:: else -> break
		od;
		k = 0;
		wnt = (need < TOTAL -> need : TOTAL);
		lack = (wnt > cap[i] - q[i] -> wnt - (cap[i] - q[i]) : 0);
#ifdef MUT_BORROW_AHEAD
		if
		:: lack > 0 -> lack++                  /* MUTATION: one ahead */
		:: else -> skip
		fi;
#endif
		if
		:: lack == 0 -> wnt = 0; handleAll()
		:: else -> skip
		fi
	   };
borrow:
		if
		:: lack > 0 ->
			atomic { spare?b -> assert(ROOMOK(b)) };   /* b := <-l.share.spare (room.take) */
			if
			:: atomic {
#ifndef MUT_NO_ASK
				b >= lack || !marks[1-i] ->
#else
				true ->                          /* MUTATION: short, it never asks */
#endif
				wnt = lack + (KEEPS -> q[i] : 0);  /* keeping an allowance: borrow ahead */
				got = (b < wnt -> b : wnt);
				spare!b - got;                   /* room.put: no loop holds it now */
				cap[i] = cap[i] + got;           /* grow */
				if
#ifndef MUT_KEEP_UNMARKED
				:: KEEPS && !waiter[1-i] -> marks[i] = 1   /* what is left may stay */
#endif
				:: else -> skip
				fi;
				if
				:: waiter[1-i] -> pressed[i] = 1
				:: else -> skip
				fi;
				assert(ROOMOK(b - got));
				b = 0; got = 0; lack = 0; wnt = 0;
				handleAll()
			   }
#ifndef MUT_NO_ASK
			:: atomic {                          /* short while the other may hold room: */
				b < lack && marks[1-i] ->        /* give it all, wait as a waiter */
				back = cap[i] - q[i]; cap[i] = q[i];
				spare!b + back;
				marks[i] = 0; waiter[i] = 1;
				assert(ROOMOK(b + back));
				b = 0; back = 0
			   };
			   atomic { assert(nfull(inc[1-i])); inc[1-i]!GIV, 0 };  /* askBack */
			   atomic { wpoke[i]?_ -> lack = wnt };  /* poked: borrow again */
			   goto borrow
#endif
			fi
		:: else -> skip
		fi
#ifndef MUT_NO_STARVED_CASE
	:: atomic {                                  /* case <-slot: (slots.waitOn) */
		starved[i] && !waiting[i] && !gift[i] && nempty(slots) ->
		slots?_; held[i]++; took();
		awake[i] = 1; starved[i] = 0;
		assert(SLOTSOK)
	   }
	:: atomic {                                  /* the same, handed to it parked */
		gift[i] ->
		gift[i] = 0; held[i]++;
		awake[i] = 1; starved[i] = 0;
		assert(SLOTSOK)
	   }
#endif
#ifndef MUT_NO_SLOT_WAKE
	:: atomic {                                  /* case <-given (slots.waitOn): starved at its */
		starved[i] && waiting[i] && spoke[i] && !gift[i] ->  /* share, poked: looks again */
		spoke[i] = 0; waiting[i] = 0;            /* slots.poked */
		awake[i] = 1; starved[i] = 0
	   }
#endif
	fi;

	/* dispatch: a batch on each idle worker while a lane is ready */
	do
#if defined(MUT_NO_SLOT)
	:: atomic { q[i] > 0 && flying[i] < NW -> take() }   /* MUTATION: no tokens, as with one shard */
	:: atomic { q[i] > 0 && flying[i] == NW -> break }
#elif defined(MUT_IGNORE_HELD)
	:: atomic {                                  /* MUTATION: takeSlot ignores the slots it holds */
		q[i] > 0 && nempty(slots) ->
		slots?_; held[i]++; take()
	   }
	:: atomic { q[i] > 0 && empty(slots) -> starved[i] = 1; starveok(); break }
#else
	:: atomic { q[i] > 0 && flying[i] < held[i] -> take() }  /* takeSlot: an idle worker it holds */
	:: atomic {
		q[i] > 0 && flying[i] == held[i] && !waiting[i] && nempty(slots) ->
		slots?_; held[i]++; took(); take()       /* takeSlot: one from tokens (adopt) */
	   }
	:: atomic {                                  /* takeSlot: none, starved */
		q[i] > 0 && flying[i] == held[i] && (waiting[i] || empty(slots)) ->
		starved[i] = 1;
		if
		:: !waiting[i] && held[i] >= OWN(i) ->   /* its share, all busy: into wants */
			want[i] = 1; waiting[i] = 1
		:: else -> skip                          /* waiting: no look; below its share: run waits on tokens */
		fi;
		starveok();
#ifndef MUT_KEEP_UNLESS_STARVED
		keep();                                  /* dispatch calls keep starved or not */
#endif
		break
	   }
#endif
	:: atomic { q[i] == 0 -> keep(); break }     /* no lane ready */
	od;

	/* lend (share.giveBackRoom), then the batches start. (In Go the
	 * wake-up's words on the drops and unearmarks it handled go out there
	 * too, after the lend and before the jobs: loop.replyAfterLend,
	 * sendOut. Drops and unearmarks are not modelled here.) */
#ifdef MUT_JOBS_BEFORE_LEND
	atomic { startJobs() };                          /* MUTATION: the batches start first */
#endif
#ifndef MUT_NO_LEND
	atomic {                                         /* the allowance: none of the spare, or all */
		back = cap[i] - q[i];
		kp = 0;
		if
		:: KEEPS && !pressed[i] ->
			if
			:: kp = back
			:: skip
			fi;
#ifndef MUT_KEEP_UNMARKED
			mark = marks[i] || kp > 0
#else
			mark = 0                             /* MUTATION: it keeps, never marked */
#endif
		:: else -> mark = 0
		fi
	};
	if
	:: atomic {
		(back != kp || mark != marks[i]) && nempty(spare) ->
		spare?b;                                     /* b := <-l.share.spare (room.take) */
		if
		:: waiter[1-i] -> kp = 0; mark = 0           /* one waits: keep nothing */
		:: else -> skip
		fi;
		back = back - kp; cap[i] = cap[i] - back;    /* grow(-back) */
		assert(ROOMOK(b + back))
	   };
	   atomic {
		spare!b + back;
		marks[i] = mark;
		pressed[i] = 0;
		if
		:: waiter[1-i] && (back > 0 || !marks[i]) -> waiter[1-i] = 0; wpoke[1-i]!1  /* ledger.wake */
		:: else -> skip
		fi;
		assert(ROOMOK(b + back));
		b = 0; back = 0; kp = 0; mark = 0;
		startJobs()
	   }
	:: atomic { back == kp && mark == marks[i] -> back = 0; kp = 0; mark = 0; startJobs() }
	fi;
#else
	atomic { startJobs() };                          /* MUTATION: lend never called */
#endif
	goto end_l
}

proctype worker() {
	byte s, c;
	bit stuck;
end_w:
	do
	:: atomic { jobs?s, c -> nwork++; fly++; assert(fly <= NW) }  /* (b) batches in flight across shards */
		atomic {                                     /* the call returns: (release,) answer */
			stuck = (STUCK && c == 0);
			fly--;
#ifdef MUT_IDLE_AT_RELEASE
			assert(nfull(inc[s])); inc[s]!IDL, 0;    /* MUTATION: idle at its release */
#endif
			assert(pend[c] && empty(rep[c]));
			pend[c] = 0; rep[c]!ANSWER; c = 0
		};
		if                                           /* STUCK: caller 0's done blocks until */
		:: stuck -> ndone == NCALL; stuck = 0        /* every caller has its answer */
		:: else -> skip
		fi;
		atomic {                                     /* then opIdle, to the loop that holds it */
			nwork--;
#ifndef MUT_IDLE_AT_RELEASE
			assert(nfull(inc[s])); inc[s]!IDL, 0;
#endif
			s = 0
		}
	od
}

proctype caller(byte c) {
	byte r;
	assert(nfull(inc[SHARD(c)]));
	inc[SHARD(c)]!ADM, c;
#if AGAIN
	if
	:: c == 0 ->                                 /* a second Do, on the other shard, */
		rep[c]?r;                                /* once the first is answered */
		if
		:: r == ANSWER -> assert(nfull(inc[1])); inc[1]!ADM, c
		:: else -> ndone++; goto out             /* rejected: no second */
		fi
	:: else -> skip
	fi;
#endif
	atomic { rep[c]?r -> ndone++; r = 0 }
#if AGAIN
	;
out:
	skip
#endif
}

init {
	byte k;
	atomic {
		spare!TOTAL;                                 /* New: the whole room in spare */
		k = 0;
		do
		:: k < NW -> slots!1; k++                    /* and every slot in tokens */
		:: else -> break
		od;
		run loop(0); run loop(1);
		k = 0;
		do
		:: k < NW -> run worker(); k++               /* one per slot (Go starts each as */
		:: else -> break                              /* a shard first takes its slot) */
		od;
		k = 0;
		do
		:: k < NCALL -> run caller(k); k++
		:: else -> break
		od;
		k = 0
	}
	ndone == NCALL;                                  /* (c) every caller has its answer */
	timeout;                                         /* and nothing moves any more */
	atomic {
		spare?<k>;
		assert(k + cap[0] + cap[1] == TOTAL && q[0] == 0 && q[1] == 0);  /* spare, or allowances */
		assert(!waiter[0] && !waiter[1] && (KEEPS || cap[0] == 0 && cap[1] == 0));
		assert(len(slots) == NW && held[0] == 0 && held[1] == 0 && flying[0] == 0 && flying[1] == 0);
		assert(fly == 0 && nwork == 0 && !starved[0] && !starved[1]);
		assert(empty(inc[0]) && empty(inc[1]) && empty(jobs));
		assert(!awake[0] && !awake[1] && mvr[0] == 0 && mvr[1] == 0 && !gift[0] && !gift[1])
	}
}

/* ---- liveness, checked with pan -a -f ---- */
ltl live { <> (ndone == NCALL) }
