/*
 * room.pml: a SPIN model of how the shards of one ferry share its room
 * (MaxQueued and MaxQueuedWeight), as share.go, many.go and loop.go do it
 * since issue 22's items 1-4: a wake-up borrows in one go what its
 * admissions take (share.borrowRoom, share.need, with claims, joins and
 * released for direct calls), and nothing for what takes no room in one
 * loop (an input heavier than the room, a Do that claims its key, a DoMany
 * that no room could hold); it gives back what it holds spare
 * (share.giveBackRoom) before the words on DoMany parts (replyAfterLend)
 * and again before its batches start; a DoMany over two shards takes its
 * whole room from spare in one step (borrow), and earmarks room shard by
 * shard only if spare lacks it (group.admit's opEarmark, opUnearmark); with no
 * MaxQueuedWeight the weight shared is MaxInt64 (sharedWeight). Nothing
 * else of the ferry is here: see ferry.pml for one loop's protocol,
 * shards.pml for the slots, and README.md.
 *
 * Processes and the Go code they stand for:
 *   loop    loop.run, receive, handle (opAdmit: letIn, state.admit's claim
 *           or join; opAdmitMany, opEarmark, opUnearmark: admitPart; opRelease:
 *           state.release), dispatch (state.take, one worker), reject; the
 *           inlines need, borrowRoom, lend stand for share.need (with
 *           claims, joins, released), share.borrowRoom, share.giveBackRoom
 *           and loop.sendOut
 *   worker  work: the call, then opRelease, then the answer
 *   doer    Ferry.Do (finishDo, direct: opRelease after the call)
 *           or Ferry.Submit (its admission: join, never a claim)
 *   many    Ferry.DoMany over two shards (Ferry.DoMany, neverFits, merge,
 *           group.admit, request, borrow)
 *
 * Configuration (-D on spin's command line): one of
 *   HEAVY   item 1: MaxQueued 2, MaxQueuedWeight 2; a Do of weight 3 on
 *           shard 0, Do's of weight 1 (shard 1) and 2 (shard 0)
 *   CLAIM   item 2: direct calls on, MaxQueued 1, no MaxQueuedWeight; caller
 *           0 Do's key 0 twice (a claim, its direct call, its release, a
 *           new claim: the release and the claim may be in one wake-up),
 *           caller 1 Submits on shard 1; CLAIM=2 adds caller 2, a Do of key
 *           0 that joins the claimed key's lane or claims it
 *   NEVER   item 3: MaxQueued 1, no MaxQueuedWeight: a DoMany of 2 inputs
 *           (one per shard) never fits, merged and refused by shard 0; a Do
 *           on each shard. NEVER=2: MaxQueued 2, MaxQueuedWeight 2, the
 *           DoMany's weights 2 and 1
 *   TWO     item 4: MaxQueued 2, no MaxQueuedWeight, weights 1 (a Weight
 *           func): two DoManys of 2 inputs over both shards in opposite
 *           orders, each fitting the empty room alone, not both. TWO=2:
 *           MaxQueuedWeight 3, weights 1 and 2 in each
 *   MIX     a DoMany (weights 1, 2) and a Do on each shard (weights 1, 2),
 *           MaxQueued 2, MaxQueuedWeight 3: borrow, earmarks, unearmarks and Do's
 *           rejections at once
 *   SUBDO   direct calls on, MaxQueued 2: a Submit and then a Do of one key
 *           on shard 0: share.need records the lane a Submit's join makes,
 *           so the Do of its key in the same wake-up joins it and is
 *           counted (MUT_SUBMIT_NO_JOIN: not recorded, as the code once did)
 *   MUT_*   one mutation each; see README.md
 *
 * Properties (assertions, invalid end states; ltl live under weak
 * fairness): the room is conserved, spare + every core's room + the room
 * DoManys took in one step and their shards have not yet added = the total,
 * whenever no one holds spare (ROOMOK); what waits and is earmarked across
 * shards never passes the room; an admission is refused only if it never
 * fits an empty room, or the room lacks space for it (rejok), counting as
 * taken: the inputs waiting in both shards, the room earmarked by DoMany parts
 * (the fallback), the room DoManys took in one step and their shards have
 * not yet added, and room the other loop holds in its core within a
 * wake-up up to what that wake-up's own admissions that take room asked
 * for and were refused, what its unearmarks let go, and what its batches
 * taken freed (lg; the words on parts go only after the lend, asserted,
 * so no one has heard of what was let go): never room borrowed for what
 * takes none; two DoManys
 * that each fit alone are never both refused (TWO); a granted or earmarked part
 * is always admitted; every caller is answered and every loop ends its
 * wake-up (no invalid end state); at the end the whole room is in spare.
 */

#define NS 2
#define MAXW 15          /* no MaxQueuedWeight: the weight shared is MaxInt64, here 15 */

#define ADM    1         /* opAdmit of a Do: input x */
#define SUB    2         /* opAdmit of a Submit (w.done != nil): input x */
#define AMANY  3         /* opAdmitMany: part p */
#define EARMARK   4      /* opEarmark: part p */
#define UNEARMARK 5      /* opUnearmark: part p */
#define REL    6         /* opRelease byCaller: key k */
#define RELW   7         /* opRelease from the shard's worker: key k */

#define ANS      1       /* a caller's answer: its call's (a DoMany: one per input) */
#define CLAIMED  2       /* errClaimed: the caller makes a direct call */
#define REJECTED 3

#define ROK    0         /* state.fits's outcomes: admitted */
#define RFULL  1         /* rejectedFull */
#define RHEAVY 2         /* rejectedHeavy */

#define KDO   1          /* callers' kinds */
#define KSUB  2
#define KMANY 3

#if defined(HEAVY)
#define N 2
#define W 2
#define DIRECT 0
#define NCALL 3
#define NIN 3
#define NK 3
#elif defined(CLAIM)
#define N 1
#define W MAXW
#define DIRECT 1
#if CLAIM == 2
#define NCALL 3
#define NIN 3
#else
#define NCALL 2
#define NIN 2
#endif
#define NK 2
#define R0 2
#elif defined(NEVER)
#if NEVER == 2
#define N 2
#define W 2
#else
#define N 1
#define W MAXW
#endif
#define DIRECT 0
#define NCALL 3
#define NIN 4
#define NK 4
#elif defined(TWO)
#define N 2
#if TWO == 2
#define W 3
#else
#define W MAXW
#endif
#define DIRECT 0
#define NCALL 2
#define NIN 4
#define NK 4
#elif defined(SUBDO)
#define N 2
#define W MAXW
#define DIRECT 1
#define NCALL 2
#define NIN 2
#define NK 1
#elif defined(MIX)
#define N 2
#define W 3
#define DIRECT 0
#define NCALL 3
#define NIN 4
#define NK 4
#else
#error "room.pml: define one of HEAVY, CLAIM, NEVER, TWO, MIX"
#endif
#ifndef R0
#define R0 1             /* caller 0's Do's */
#endif

#define NP     (2*NCALL)          /* parts: p = 2c+j for DoMany c */
#define INCSZ  (NCALL + 2)        /* s.inc: never fills (asserted) */
#define NQ     NIN                /* a shard's waiting inputs */

chan inc[NS] = [INCSZ] of { byte, byte };   /* s.inc: op, input, part or key */
chan jobs[NS] = [1] of { byte };             /* the shard's one worker: input */
chan rep[NCALL] = [2] of { byte };           /* w.c; a DoMany's answers (its countdown) */
chan gc[NCALL] = [1] of { byte };            /* g.c: a loop's word on a part */
chan spare = [1] of { byte, byte };          /* f.spare: the room no one holds: n, w */

/* ---- constants, set by init: the inputs and callers ---- */
byte ish[NIN], ikey[NIN], iwt[NIN], iown[NIN]; /* an input's shard, key, weight, caller */
byte kind[NCALL], cx[NCALL];                  /* a caller's kind, its (first) input */

/* ---- DoMany parts (group.parts): the caller's, then the loop's ---- */
byte np[NCALL];                               /* 1 (one shard, or merged) or 2 */
byte pn[NP], pw[NP], ph[NP], psh[NP];         /* n, total, heaviest, shard */
bit  pmarked[NP], pgrant[NP], perr[NP];       /* earmarked, granted, err != nil */

/* ---- each loop's own state: its core (state.go) and worker ---- */
byte capn[NS], capw[NS];   /* st.room: what it holds of the room, n and w */
byte qn[NS], qw[NS];       /* st.queued, st.weight: inputs waiting */
byte hn[NS], hw[NS];       /* st.earmarked: room earmarked for DoMany parts, n and w */
byte wq[NS*NQ];            /* the waiting inputs, in order (1 + input; 0 none) */
bit  lex[NK], lbusy[NK];   /* key k's lane exists; busy (a batch or a claim) */
byte lcnt[NK];             /* its items */
bit  widle[NS];            /* the shard's worker is idle */

/* ---- ghosts: observers only, never read by the protocol ---- */
byte grn, grw;             /* room DoManys took from spare (borrow) not yet added by their shards */
byte lgn[NS], lgw[NS];     /* the room a loop may hold in its core within a wake-up: see rejok */
bit  awake[NS];            /* a loop in a wake-up */
bit  rej[NCALL];           /* the caller was refused */
byte ndone;                /* callers that have their answer */

#define MIN(a, b) (((a) < (b)) -> (a) : (b))
#define SPN(s) (capn[s] - qn[s] - hn[s])   /* st.unused() */
#define SPW(s) (capw[s] - qw[s] - hw[s])
/* the room: all of it is in spare (n, w), in a core, or taken by a DoMany
 * whose shards have not added it yet */
#define ROOMOK(n, w) ((n) + capn[0] + capn[1] + grn == N && (w) + capw[0] + capw[1] + grw == W)
/* what the room holds: waiting, earmarked, taken in one step */
#define TAKENN (qn[0] + qn[1] + hn[0] + hn[1] + grn)
#define TAKENW (qw[0] + qw[1] + hw[0] + hw[1] + grw)
/* the room free for loop i, one loop's way: the total less what it holds,
 * less what the other loop holds in its core within a wake-up for its own
 * admissions that take room (lg) */
#define FREEN(i) (N - TAKENN - MIN(SPN(1-i), lgn[1-i]))
#define FREEW(i) (W - TAKENW - MIN(SPW(1-i), lgw[1-i]))

/* a refusal of n inputs weighing t, the heaviest hv, with outcome o, by
 * loop i: heavier than the room (rejectedHeavy), never fitting an empty
 * room, or the room lacks space for it */
inline rejok(n, t, hv, o) {
	assert(o != ROK);
	if
	:: o == RHEAVY -> assert(hv > W)
	:: o == RFULL ->
		roomlacks = (n > N || t > W || n > FREEN(i) || t > FREEW(i));
		assert(roomlacks); roomlacks = 0;
		if
		:: n <= N && t <= W -> lgn[i] = lgn[i] + n; lgw[i] = lgw[i] + t /* it asked for room */
		:: else -> skip
		fi
	fi
}

/* state.fits(n, t, hv): may n inputs weighing t, the heaviest hv, join */
inline fits(n, t, hv) {
	if
	:: hv > W -> o = RHEAVY
	:: hv <= W && (n + qn[i] + hn[i] > capn[i] || t + qw[i] + hw[i] > capw[i]) -> o = RFULL
	:: else -> o = ROK
	fi
}

/* state.enter of input y */
inline enter(y) {
	assert(qn[i] < NQ);
	wq[i*NQ + qn[i]] = y + 1; qn[i]++; qw[i] = qw[i] + iwt[y];
	lex[ikey[y]] = 1; lcnt[ikey[y]]++;
	assert(qn[i] + hn[i] <= capn[i] && qw[i] + hw[i] <= capw[i]);
	assert(TAKENN <= N && TAKENW <= W)       /* the room across shards */
}

/* a reply on a Do's or Submit's w.c, never blocking */
inline answer(c, r) {
	assert(nfull(rep[c])); rep[c]!r
}

/* ---- share.need, with its guesses per key (claims, joins, released) ---- */
inline guess(key) {
	if
	:: gset[key] -> ge = gex[key]; gi = gits[key]
	:: else -> ge = lex[key]; gi = (lcnt[key] > 0)
	fi
}
inline claims(key) {
	guess(key);
	gset[key] = 1; gex[key] = 1; gits[key] = ge;
	cl = !ge
}
inline joins(key) {
	gset[key] = 1; gex[key] = 1; gits[key] = 1
}
inline released(key) {
	guess(key);
	if
	:: ge && !gi -> gset[key] = 1; gex[key] = 0; gits[key] = 0
	:: else -> skip
	fi
}
inline count(n, t) {
	nn = nn + n; nw = nw + t
}

inline need() {
	nn = 0; nw = 0; k = 0;
	do
	:: k < nb ->
		x = bx[k];
		if
		:: bop[k] == ADM ->
			if
			:: iwt[x] > W ->                         /* rejectedHeavy */
#ifdef MUT_BORROW_HEAVY
				count(1, iwt[x])                     /* MUTATION: the old code */
#else
				skip
#endif
			:: iwt[x] <= W && DIRECT ->
				claims(ikey[x]);
				if
				:: cl ->
#ifdef MUT_BORROW_CLAIM
					count(1, iwt[x])                 /* MUTATION: room for a claim */
#else
					skip
#endif
				:: else -> count(1, iwt[x])
				fi
			:: iwt[x] <= W && !DIRECT -> count(1, iwt[x])
			fi
		:: bop[k] == SUB ->
			if
			:: iwt[x] > W -> skip
			:: else -> count(1, iwt[x])
			fi;
#ifndef MUT_SUBMIT_NO_JOIN
			if
			:: DIRECT -> joins(ikey[x])              /* a Submit makes a lane too */
			:: else -> skip
			fi
#endif
		:: bop[k] == AMANY || bop[k] == EARMARK ->
			if
			:: pmarked[x] || pgrant[x] -> skip
			:: !pmarked[x] && !pgrant[x] && (pn[x] > N || pw[x] > W) ->  /* never fits */
#ifdef MUT_BORROW_NEVER
				count(pn[x], pw[x])                  /* MUTATION: the old code */
#else
				skip
#endif
			:: !pmarked[x] && !pgrant[x] && pn[x] <= N && pw[x] <= W -> count(pn[x], pw[x])
			fi;
			if
			:: DIRECT && bop[k] == AMANY && np[x/2] == 2 -> joins(ikey[cx[x/2] + x%2])
			:: DIRECT && bop[k] == AMANY && np[x/2] == 1 ->
				joins(ikey[cx[x/2]]); joins(ikey[cx[x/2] + 1])
			:: else -> skip
			fi
		:: bop[k] == REL || bop[k] == RELW ->
			if
#ifndef MUT_NO_RELEASED
			:: DIRECT -> released(x)
#endif
			:: else -> skip
			fi
		:: bop[k] == UNEARMARK -> skip
		fi;
		k++
	:: else -> break
	od;
	k = 0; x = 0; ge = 0; gi = 0; cl = 0;
	do
	:: k < NK -> gset[k] = 0; gex[k] = 0; gits[k] = 0; k++
	:: else -> break
	od;
	k = 0;
	/* borrowRoom's short: what the core lacks of min(need, the whole room) */
	sn = ((MIN(nn, N) > SPN(i)) -> MIN(nn, N) - SPN(i) : 0);
	sw = ((MIN(nw, W) > SPW(i)) -> MIN(nw, W) - SPW(i) : 0);
	nn = 0; nw = 0
}

/* state.release of key y: a lane with items stays (ready), an empty one goes */
inline release(y) {
	assert(lex[y] && lbusy[y]);
	lbusy[y] = 0;
	if
	:: lcnt[y] == 0 -> lex[y] = 0
	:: else -> skip
	fi
}

/* admitPart: part p of a DoMany, for op (AMANY, EARMARK, UNEARMARK) */
inline admitPart(op) {
	if
	:: pmarked[p] ->
		hn[i] = hn[i] - pn[p]; hw[i] = hw[i] - pw[p]; pmarked[p] = 0;
		if
		:: op == UNEARMARK -> lgn[i] = lgn[i] + pn[p]; lgw[i] = lgw[i] + pw[p] /* let go: lent at the end */
		:: else -> assert(op == AMANY)           /* its inputs take the room at once */
		fi
	:: else -> skip
	fi;
	if
	:: pgrant[p] ->                              /* takeRoomOf's state.grow */
		capn[i] = capn[i] + pn[p]; capw[i] = capw[i] + pw[p];
		grn = grn - pn[p]; grw = grw - pw[p]; pgrant[p] = 0;
		assert(op == AMANY)
	:: else -> skip
	fi;
	fits(pn[p], pw[p], ph[p]);
	if
	:: op == UNEARMARK -> skip
	:: op != UNEARMARK && o != ROK ->
		assert(np[p/2] == 1 || op == EARMARK);   /* a granted or earmarked part is let in */
		perr[p] = 1; rejok(pn[p], pw[p], ph[p], o)
	:: op == EARMARK && o == ROK ->
		hn[i] = hn[i] + pn[p]; hw[i] = hw[i] + pw[p]; pmarked[p] = 1;
		assert(TAKENN <= N && TAKENW <= W)
	:: op == AMANY && o == ROK ->
		if
		:: np[p/2] == 2 -> enter(cx[p/2] + p%2)
		:: np[p/2] == 1 -> enter(cx[p/2]); enter(cx[p/2] + 1)
		fi
	fi;
	o = 0;
	wd[nwd] = p + 1; nwd++                       /* replyAfterLend */
}

/* handle each of the wake-up's messages, in order */
inline handleAll() {
	k = 0;
	do
	:: k < nb ->
		x = bx[k];
		if
		:: bop[k] == ADM && DIRECT && !lex[ikey[x]] ->  /* state.admit: claim */
			fits(0, 0, iwt[x]);
			if
			:: o == ROK -> lex[ikey[x]] = 1; lbusy[ikey[x]] = 1; answer(iown[x], CLAIMED)
			:: else -> rejok(1, iwt[x], iwt[x], o); answer(iown[x], REJECTED)
			fi
		:: (bop[k] == ADM && (!DIRECT || lex[ikey[x]])) || bop[k] == SUB ->  /* join */
			fits(1, iwt[x], iwt[x]);
			if
			:: o == ROK -> enter(x)
			:: else -> rejok(1, iwt[x], iwt[x], o); answer(iown[x], REJECTED)
			fi
		:: bop[k] == AMANY || bop[k] == EARMARK || bop[k] == UNEARMARK ->
			p = x; admitPart(bop[k]); p = 0
		:: bop[k] == REL -> release(x)
		:: bop[k] == RELW -> release(x); widle[i] = 1
		fi;
		o = 0; bop[k] = 0; bx[k] = 0; k++
	:: else -> break
	od;
	k = 0; x = 0; nb = 0
}

/* loop.sendOut: the words on the parts, after the lend */
inline sendWords() {
	assert(nwd == 0 || SPN(i) == 0 && SPW(i) == 0);  /* after the lend: see rejok */
	k = 0;
	do
	:: k < nwd ->
		assert(nfull(gc[(wd[k] - 1)/2])); gc[(wd[k] - 1)/2]!wd[k] - 1;
		wd[k] = 0; k++
	:: else -> break
	od;
	k = 0; nwd = 0
}

/* dispatch: state.take of the first waiting input whose lane is not busy
 * (a batch of one) onto the idle worker */
inline take() {
	k = 0;
	do
	:: k < qn[i] && lbusy[ikey[wq[i*NQ + k] - 1]] -> k++
	:: k < qn[i] && !lbusy[ikey[wq[i*NQ + k] - 1]] -> break
	:: k >= qn[i] -> break
	od;
	if
	:: widle[i] && k < qn[i] ->
		job = wq[i*NQ + k];
		do
		:: k + 1 < qn[i] -> wq[i*NQ + k] = wq[i*NQ + k + 1]; k++
		:: else -> break
		od;
		wq[i*NQ + k] = 0;
		qn[i]--; qw[i] = qw[i] - iwt[job - 1];
		lcnt[ikey[job - 1]]--; lbusy[ikey[job - 1]] = 1; widle[i] = 0;
		lgn[i] = lgn[i] + 1; lgw[i] = lgw[i] + iwt[job - 1]   /* freed until the lend */
	:: else -> skip
	fi;
	k = 0
}

/* giveBackRoom, in two steps (b := <-spare, spare <- b + back), then what
 * follows it in Go: after the first, the words and dispatch's take (then)
 * ; after the second, the jobs */
inline lendTake() {
	spare?bn, bw;
	gn = SPN(i); gw = SPW(i);
	capn[i] = capn[i] - gn; capw[i] = capw[i] - gw;  /* grow(-back) */
	assert(ROOMOK(bn + gn, bw + gw))
}
inline lendPut() {
	spare!bn + gn, bw + gw;
	assert(ROOMOK(bn + gn, bw + gw));
	bn = 0; bw = 0; gn = 0; gw = 0
}

proctype loop(byte i) {
	byte bop[INCSZ], bx[INCSZ];    /* l.share.msgs: one wake-up's messages */
	byte wd[INCSZ], nwd;           /* l.out.words: the words held back (1 + part) */
	byte nb, k, x, p, o, nn, nw, sn, sw, bn, bw, gn, gw, job;
	bit gset[NK], gex[NK], gits[NK], ge, gi, cl;   /* sh.lanes */
	bit roomlacks;                 /* see rejok */
end_l:
	atomic {                                     /* receive: read them all first */
		nempty(inc[i]) ->
		awake[i] = 1; nb = 0;
		do
		:: nempty(inc[i]) -> inc[i]?bop[nb], bx[nb]; nb++
		:: empty(inc[i]) -> break
		od;
		need();                                  /* borrowRoom: sn, sw */
		if
		:: sn == 0 && sw == 0 -> handleAll()
		:: else -> skip
		fi
	};
	if
	:: sn > 0 || sw > 0 ->
		atomic { spare?bn, bw -> assert(ROOMOK(bn, bw)) };   /* b := sh.spare.take() */
		atomic {
			gn = MIN(bn, sn); gw = MIN(bw, sw);
			spare!bn - gn, bw - gw;              /* sh.spare.put(b - got) */
			capn[i] = capn[i] + gn; capw[i] = capw[i] + gw;  /* grow(got) */
			assert(ROOMOK(bn - gn, bw - gw));
			bn = 0; bw = 0; gn = 0; gw = 0; sn = 0; sw = 0;
			handleAll()
		}
	:: else -> skip
	fi;
	/* giveBackRoom, sendOut, dispatch's take */
	if
	:: atomic { SPN(i) > 0 || SPW(i) > 0 -> lendTake() };
	   atomic { lendPut(); lgn[i] = 0; lgw[i] = 0; sendWords(); take() }
	:: atomic { SPN(i) == 0 && SPW(i) == 0 -> lgn[i] = 0; lgw[i] = 0; sendWords(); take() }
	fi;
	/* dispatch's giveBackRoom, then the batch's job */
	if
	:: atomic { SPN(i) > 0 || SPW(i) > 0 -> lendTake() };
	   atomic { lendPut(); lgn[i] = 0; lgw[i] = 0; goto start }
	:: atomic { SPN(i) == 0 && SPW(i) == 0 -> lgn[i] = 0; lgw[i] = 0; goto start }
	fi;
start:
	atomic {
		if
		:: job > 0 -> assert(nfull(jobs[i])); jobs[i]!job - 1; job = 0
		:: else -> skip
		fi;
		awake[i] = 0;
		goto end_l
	}
}

proctype worker(byte i) {
	byte x;
end_w:
	do
	:: atomic {                                  /* the call; its release, then the answer */
		jobs[i]?x ->
		assert(nfull(inc[i])); inc[i]!RELW, ikey[x];
		assert(nfull(rep[iown[x]])); rep[iown[x]]!ANS;
		x = 0
	   }
	od
}

/* Do or Submit: one admission, its answer; a claim's direct call, then
 * its release; caller 0 makes R0 of them */
proctype doer(byte c) {
	byte x = cx[c], r, round;
again:
	assert(nfull(inc[ish[x]]));
	if
	:: kind[c] == KDO -> inc[ish[x]]!ADM, x
	:: kind[c] == KSUB -> inc[ish[x]]!SUB, x
	fi;
	rep[c]?r;
	if
	:: r == CLAIMED -> assert(nfull(inc[ish[x]])); inc[ish[x]]!REL, ikey[x]
	:: r == REJECTED -> rej[c] = 1
	:: r == ANS -> skip
	fi;
	r = 0;
	if
	:: c == 0 && round + 1 < R0 -> round++; goto again
	:: else -> skip
	fi;
	atomic { ndone++; round = 0 }
}

/* request: part j's op to its shard, then the loop's word on it */
inline request(j, op) {
	assert(nfull(inc[psh[2*c + j]]));
	inc[psh[2*c + j]]!op, 2*c + j;
	gc[c]?w; assert(w == 2*c + j); w = 0
}

/* DoMany of inputs cx[c] and cx[c]+1, in shards 0 and 1 or 1 and 0 (or
 * merged, np 1, set up by init) */
proctype many(byte c) {
	byte bn, bw, w, t;
	bit ok;
	if
	:: np[c] == 1 ->                             /* one part: one message */
		request(0, AMANY);
		if
		:: perr[2*c] -> rej[c] = 1; goto out
		:: else -> skip
		fi
	:: np[c] == 2 ->
		t = pw[2*c] + pw[2*c + 1];
		atomic {                                 /* borrow */
			spare?bn, bw -> assert(ROOMOK(bn, bw));
			if
#ifdef MUT_UNSHARED_WEIGHT
			:: W == MAXW -> spare!bn, bw         /* MUTATION: weights not shared, no borrow */
			:: W != MAXW && bn >= 2 && bw >= t ->
#else
			:: bn >= 2 && bw >= t ->
#endif
				spare!bn - 2, bw - t;
				grn = grn + 2; grw = grw + t;
				pgrant[2*c] = 1; pgrant[2*c + 1] = 1; ok = 1
			:: else -> spare!bn, bw
			fi;
			assert(ROOMOK(bn - 2*ok, bw - t*ok));
			bn = 0; bw = 0; t = 0
		};
		if
		:: !ok ->                                /* earmark room shard by shard */
			request(0, EARMARK);
			if
			:: perr[2*c] -> rej[c] = 1; goto out
			:: else -> skip
			fi;
			request(1, EARMARK);
			if
			:: perr[2*c + 1] -> request(0, UNEARMARK); rej[c] = 1; goto out
			:: else -> skip
			fi
		:: else -> ok = 0
		fi;
		request(0, AMANY); assert(!perr[2*c]);
		request(1, AMANY); assert(!perr[2*c + 1])
	fi;
	rep[c]?ANS; rep[c]?ANS;                      /* count.fin */
out:
	ndone++
}

inline input(y, s, key, wt, c) {
	ish[y] = s; ikey[y] = key; iwt[y] = wt; iown[y] = c
}
inline caller(c, kd, y) {
	kind[c] = kd; cx[c] = y
}
/* Ferry.DoMany: the parts of DoMany c (g.join), and merge if it never fits */
inline parts(c) {
	pn[2*c] = 1; pw[2*c] = iwt[cx[c]]; ph[2*c] = iwt[cx[c]]; psh[2*c] = ish[cx[c]];
	pn[2*c + 1] = 1; pw[2*c + 1] = iwt[cx[c] + 1]; ph[2*c + 1] = iwt[cx[c] + 1];
	psh[2*c + 1] = ish[cx[c] + 1];
	assert(psh[2*c] != psh[2*c + 1]);
	np[c] = 2;
	if
	:: 2 > N || pw[2*c] + pw[2*c + 1] > W ->     /* neverFits: merge into part 0 */
		pn[2*c] = 2; pw[2*c] = pw[2*c] + pw[2*c + 1];
		ph[2*c] = ph[2*c] + ph[2*c + 1] - MIN(ph[2*c], ph[2*c + 1]);  /* the heaviest */
		pn[2*c + 1] = 0; pw[2*c + 1] = 0; ph[2*c + 1] = 0; psh[2*c + 1] = 0;
		np[c] = 1
	:: else -> skip
	fi
}

init {
	byte k, bn, bw;
	atomic {
#if defined(HEAVY)
		input(0, 0, 0, 3, 0); caller(0, KDO, 0);    /* heavier than the room */
		input(1, 1, 1, 1, 1); caller(1, KDO, 1);
		input(2, 0, 2, 2, 2); caller(2, KDO, 2);
#elif defined(CLAIM)
		input(0, 0, 0, 1, 0); caller(0, KDO, 0);    /* claims key 0, R0 times */
		input(1, 1, 1, 1, 1); caller(1, KSUB, 1);
#if CLAIM == 2
		input(2, 0, 0, 1, 2); caller(2, KDO, 2);    /* key 0 too */
#endif
#elif defined(NEVER)
#if NEVER == 2
		input(0, 0, 0, 2, 0); input(1, 1, 1, 1, 0);    /* weighs 3 > 2 */
#else
		input(0, 0, 0, 1, 0); input(1, 1, 1, 1, 0);    /* 2 inputs > 1 */
#endif
		caller(0, KMANY, 0); parts(0);
		input(2, 1, 2, 1, 1); caller(1, KDO, 2);
		input(3, 0, 3, 1, 2); caller(2, KDO, 3);
#elif defined(TWO)
		input(0, 0, 0, 1, 0); input(1, 1, 1, TWO, 0);
		caller(0, KMANY, 0); parts(0);
		input(2, 1, 2, 1, 1); input(3, 0, 3, TWO, 1);
		caller(1, KMANY, 2); parts(1);
#elif defined(SUBDO)
		input(0, 0, 0, 1, 0); caller(0, KSUB, 0);  /* a Submit and a Do of key 0 */
		input(1, 0, 0, 1, 1); caller(1, KDO, 1);
#elif defined(MIX)
		input(0, 0, 0, 1, 0); input(1, 1, 1, 2, 0);
		caller(0, KMANY, 0); parts(0);
		input(2, 1, 2, 1, 1); caller(1, KDO, 2);
		input(3, 0, 3, 2, 2); caller(2, KDO, 3);
#endif
		spare!N, W;                              /* New: the whole room in spare */
		widle[0] = 1; widle[1] = 1;
		run loop(0); run loop(1);
		run worker(0); run worker(1);
		k = 0;
		do
		:: k < NCALL && kind[k] == KMANY -> run many(k); k++
		:: k < NCALL && kind[k] != KMANY -> run doer(k); k++
		:: else -> break
		od;
		k = 0
	}
	ndone == NCALL;                              /* every caller has its answer */
	timeout;                                     /* and nothing moves any more */
	atomic {
		spare?<bn, bw>;
		assert(bn == N && bw == W && grn == 0 && grw == 0);
		assert(capn[0] == 0 && capn[1] == 0 && capw[0] == 0 && capw[1] == 0);
		assert(qn[0] == 0 && qn[1] == 0 && hn[0] == 0 && hn[1] == 0);
		assert(widle[0] && widle[1] && !awake[0] && !awake[1]);
		k = 0;
		do
		:: k < NK -> assert(!lex[k] && !lbusy[k] && lcnt[k] == 0); k++
		:: else -> break
		od;
#if defined(TWO)
		assert(!(rej[0] && rej[1]));             /* one of two that each fit alone is let in */
#endif
		assert(empty(inc[0]) && empty(inc[1]) && empty(jobs[0]) && empty(jobs[1]))
	}
}

/* ---- liveness, checked with pan -a -f ---- */
ltl live { <> (ndone == NCALL) }
