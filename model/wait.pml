/*
 * wait.pml: a SPIN model of Config.WaitForRoom over two shards (issue 24,
 * rule 6), as wait.go, loop.go, share.go, many.go, submit.go and do.go do
 * it: each loop's wait line (admit, wait, admitWaiting, needOf, letIn,
 * admitPart, letInPart, borrowWait, grant, leave, drop, closeWaits), the
 * shared room's ledger with its free room and its reservations in order
 * (ledger.give, reserve, claim, cancel, fill with its pokes, borrow), a
 * shard's side of it (share.borrowRoom, roomFor, giveBackRoom), and the
 * callers: Do and Submit of one input, DoMany of one input in each shard
 * (borrow, then every part sent at once; else opBorrowWait, then part 1),
 * whose ctx may end as they wait (opDrop, opLeave), and Close or Shutdown,
 * which mark the ledger as ending (room.end) before they tell any shard: a
 * shard that takes the ledger after the mark starts that end itself
 * (heedEnd). Every admission that begins to wait takes a wait number
 * from the ledger (share.number), and the reservations stand in the order
 * of their admissions' numbers (ledger.reserve). Nothing
 * else of the ferry is here: see ferry.pml for one loop's protocol,
 * room.pml for the room shared without WaitForRoom, and README.md.
 *
 * Processes and the Go code they stand for:
 *   loop    loop.run (its select: inc, the alarm, the poke while reserved),
 *           receive (borrowRoom, handle, admitWaiting, giveBackRoom,
 *           sendReplies), handle (opAdmit: admit, letIn, wait; opAdmitMany:
 *           admitPart, letInPart, takeRoomOf; opBorrowWait: borrowWait;
 *           opDrop: drop; opLeave: leave; opClose: close, closeWaits,
 *           state.drain; opShutdown: shutdown, closeWaits), heedEnd,
 *           dispatch (admitWaiting, take, giveBackRoom, sendReplies, the
 *           jobs: their answers)
 *   doer    Ferry.Do (await, abandon) or Ferry.Submit
 *           (Ferry.Submit: opLeave when its ctx ends)
 *   many    Ferry.DoMany over two shards (Ferry.DoMany, group.admit, borrow,
 *           requestWaiting, giveBack)
 *   closer  Ferry.Close: room.end, then opClose to each shard
 *   shutter Ferry.Shutdown: room.end, then opShutdown to each shard
 *
 * The room is one quantity, W: MaxQueued with every input weighing 1, or
 * MaxQueuedWeight with MaxQueued never binding (the ledger moves inputs and
 * weight alike and each on its own; see README.md).
 *
 * Configuration (-D on spin's command line): one of
 *   MANY     W 3 (default), weights 1: caller 0 a Do in shard 0 (key 0),
 *            caller 1 a DoMany of key 0 (shard 0, part 2) and key 1
 *            (shard 1, part 3), caller 2 a Do in shard 1 (key 1)
 *   ORDER    W 3 (default): caller 0 a Do of weight 2 in shard 1 (key 2),
 *            in its lane as the run starts (PRE); caller 1 a DoMany of
 *            key 0 (shard 0) and key 1 (shard 1); caller 2 a Do of key 0:
 *            the DoMany borrows, or waits for its room (opBorrowWait), and
 *            a later input of its part 0's key comes behind it
 *   STEAL    W 2: caller 0 a Do of weight 2 in shard 1 (key 1); caller 1
 *            one of weight 1 in shard 0 (key 0); caller 2 one of weight Y
 *            (default 2) in shard 0 (key 2); caller 3 one of weight Z
 *            (default 2) in shard 1 (key 3): reservations whose needs
 *            change as an admission leaves (ledger.fill's taking from later
 *            ones); with Z=1 caller 3's reservation holds its need while
 *            caller 2, behind caller 1, began to wait before it
 *   BUG=1    W 2: caller 0 a Do of weight G (default 1) in shard 0,
 *            caller 1 a DoMany of weights 1 and 1 over both shards: the
 *            code before b1092b1 deadlocked (see README.md)
 *   BUG=2    W 2: caller 0 a Do of weight 2 in shard 0, in its lane (PRE);
 *            caller 1 a DoMany of weights 1 and 1; caller 2 a Do of
 *            weight G (default 2) in shard 1: the code before b1092b1
 *            deadlocked
 *   SHUT_RUN W 2: caller 0 a Do of weight 2 in shard 0, in its lane
 *            (PRE); caller 1 a Do of weight 1 in shard 1 and caller 2 one
 *            in shard 0, which wait; a shutter calls Shutdown at any time
 * and
 *   SUB      bit c: caller c (a Do) is a Submit
 *   CANCEL   bit c: caller c's ctx may end (default none)
 *   PRE      bit c: caller c's input is in its lane as the run starts
 *   CALLERS  bit c: caller c runs (default all)
 *   CLOSER=1 a closer calls Close at any time
 *   SHUTTER=1 a shutter calls Shutdown at any time (SHUT_RUN sets it)
 *   MUT_*    one mutation each; see README.md
 *
 * Properties (assertions, invalid end states; ltl live under weak
 * fairness): the room is conserved: the ledger's free room, what its
 * reservations hold, the shards' cores and the room granted to DoMany
 * parts and not yet taken in by a loop sum to W at every use of the ledger
 * (ROOMOK);
 * what waits in a shard's lanes never passes its core's room; a shard that
 * says it has a reservation (reserved) has one, and a shard has one at
 * most; FIFO within a shard: only the front of a line leaves it to be let
 * in, and an admission is let in as it comes only if nothing waits (fifo);
 * across shards: a shard's first admission gets its room only once every
 * reservation of an admission that began to wait before it is full
 * (ordok); once Close or Shutdown has begun nothing is let in, but the
 * parts of a DoMany granted its room before (endok);
 * a key's inputs enter its lane in the order they came to its shard (the
 * key order; a DoMany's part 0 comes with its opBorrowWait); nothing is
 * refused for room; no input is let in after its caller was told it is
 * not (out); a DoMany is let in all or none, but for a part whose ctx
 * ended or whose shard closed; every caller is answered (no invalid end
 * state) and at the end no reservation is left, the whole room is free,
 * no room is granted, nothing waits and no word is left unread (but a
 * stray errKept in a Do's w.c, which Go does not pool either).
 */

#define NS 2

#define ADM   1          /* opAdmit of a Do or a Submit: input x */
#define AMANY 2          /* opAdmitMany: part x */
#define BWAIT 3          /* opBorrowWait: part x (a DoMany's part 0) */
#define DROP  4          /* opDrop of a Do: input x */
#define LEAVE 5          /* opLeave: a Submit's input x, or NIN + part */
#define CLOSE 6          /* opClose */
#define SHUT  7          /* opShutdown */

#define OK      1        /* a Do's answer, a Submit's errAdmitted, a part's nil */
#define DROPPED 2        /* errDropped */
#define CLOSED  3        /* ErrClosed */
#define KEPT    4        /* errKept */

#define KDO   1
#define KSUB  2
#define KMANY 3

#ifndef CANCEL
#define CANCEL 0
#endif
#ifndef CLOSER
#define CLOSER 0
#endif
#ifndef SUB
#define SUB 0
#endif
#ifdef SHUT_RUN
#undef SHUTTER
#define SHUTTER 1
#endif
#ifndef SHUTTER
#define SHUTTER 0
#endif

#if defined(MANY)
#ifndef W
#define W 3
#endif
#define NCALL 3
#define NIN 4
#define NK 2
#elif defined(STEAL)
#define W 2
#define NCALL 4
#define NIN 4
#define NK 4
#ifndef Y
#define Y 2
#endif
#ifndef Z
#define Z 2
#endif
#elif defined(ORDER)
#ifndef W
#define W 3
#endif
#define NCALL 3
#define NIN 4
#define NK 3
#ifndef PRE
#define PRE 1
#endif
#elif defined(BUG) && BUG == 1
#define W 2
#ifndef G
#define G 1
#endif
#define NCALL 2
#define NIN 3
#define NK 3
#elif defined(BUG) && BUG == 2
#define W 2
#define NCALL 3
#define NIN 4
#define NK 4
#ifndef G
#define G 2
#endif
#ifndef PRE
#define PRE 1
#endif
#elif defined(SHUT_RUN)
#define W 2
#define NCALL 3
#define NIN 3
#define NK 3
#ifndef PRE
#define PRE 1
#endif
#else
#error "wait.pml: define one of MANY, STEAL, ORDER, BUG=1, BUG=2, SHUT_RUN"
#endif
#ifndef PRE
#define PRE 0
#endif
#ifndef CALLERS
#define CALLERS 15
#endif

#define NP    (2*NCALL)              /* parts: p = 2c + j for DoMany c */
#define LS    NCALL                  /* a shard's line: one admission per caller */
#define LN    NIN                    /* a shard's lanes */
#define INCSZ (2*NCALL + 1)          /* s.inc: never fills (asserted) */
#define CAN(c) ((CANCEL >> (c)) & 1)
#define ISPRE(c) ((PRE >> (c)) & 1)
#define RUNS(c) ((CALLERS >> (c)) & 1)

chan inc[NS] = [INCSZ] of { byte, byte };  /* s.inc: op, input or part */
chan poke[NS] = [1] of { bit };             /* the shard's poke, capacity 1 */
chan rep[NCALL] = [2] of { byte };          /* w.c (a Submit's c); a DoMany's answers */
chan gc[NP] = [1] of { bit };               /* p.c: a loop's word on a part */

/* ---- constants, set by init ---- */
byte ish[NIN], ikey[NIN], iwt[NIN], iown[NIN];  /* an input's shard, key, weight, caller */
byte kind[NCALL], cx[NCALL];                   /* a caller's kind, its (first) input */

/* ---- the ledger (pool.go), behind f.spare: one step holds it ---- */
byte free;                   /* p.free */
byte nres;                   /* len(p.resv) */
byte rsh[NS], rneed[NS], rgot[NS];  /* p.resv in order: shard + 1, need, got */
byte rn[NS];                 /* the reservation's admission's wait number */
byte rnext[NS];              /* the number of the admission behind it in its line, 0 if none */
bit  rready[NS];             /* ready: full, every one before it ready, none of their nexts before it */
byte wnum;                   /* p.next: the last wait number given */
byte ending;                 /* p.end: 0, CLOSE or SHUT (room.end) */

/* ---- DoMany parts: the caller's and the loop's ---- */
bit  pgrant[NP];             /* granted: the part's room is aside, the loop adds it */
byte perr[NP];               /* p.err: 0 (nil), DROPPED, CLOSED */

/* ---- each loop's own state ---- */
byte cap[NS];                /* st.room: the room the core holds */
byte q[NS];                  /* st.weight: what waits in its lanes */
bit  closed[NS];             /* closing or shutting down: the room admits nothing */
bit  closing[NS];            /* close has drained the shard */
bit  reserved[NS];           /* share.reserved */
bit  wants[NS];              /* share.wants */
byte nl[NS];                 /* the wait line's length */
byte line[NS*LS];            /* the line, in order: an entry (see EIN, EPART, EBOR) */
byte lnum[NS*LS];            /* the entries' wait numbers */
byte nla[NS];                /* inputs in the lanes */
byte lane[NS*LN];            /* the inputs in the lanes: 1 + input */

/* line entries: a Do's or Submit's input, a part, a part's borrow (all of its DoMany) */
#define EIN(y)  (1 + (y))
#define EPART(p) (1 + NIN + (p))
#define EBOR(p) (1 + NIN + NP + (p))
#define ISIN(e)  ((e) >= 1 && (e) <= NIN)
#define ISPART(e) ((e) > NIN && (e) <= NIN + NP)
#define ISBOR(e) ((e) > NIN + NP)
#define PIN(p)  (cx[(p)/2] + (p)%2)        /* part p's one input */

/* ---- ghosts: observers only ---- */
byte grn;                    /* room granted to parts (borrow, grant) not yet added by a loop */
byte kar[NK];                /* the inputs of each key that have come to its shard */
byte ytk[NIN];               /* an input's place among its key's, as it came */
byte lastk[NK];              /* the place of the last input of each key to enter */
bit  out[NIN];               /* the input's caller was told it is not let in */
bit  adm[NIN];               /* the input was let in */
byte ndone;                  /* callers returned */
bit  endbegun;               /* Close or Shutdown has begun (marked the ledger, or not: a mutation) */

#define UNUSED(s) (cap[s] - q[s])      /* st.unused() */
#define ROOMOK (free + rgot[0] + rgot[1] + cap[0] + cap[1] + grn == W)

/* ================= the ledger: pure bookkeeping ================= */

/* move: to takes from from what it lacks of nd, as much as from has */
inline mv(from, to, nd) {
	dd = ((nd > to) -> nd - to : 0);
	dd = ((from < dd) -> from : dd);
	from = from - dd; to = to + dd; dd = 0
}

/* ledger.fill: the reservations in order, each up to its need, from free,
 * then from the later ones, the last first; each ready once full, after
 * every one before it is ready and no admission behind one of theirs
 * (rnext) began to wait before its own; a poke for each it makes ready */
inline fill() {
	fa = 0; op = 1; mn = 255;
	do
	:: fa < nres ->
		was = rready[fa];
		mv(free, rgot[fa], rneed[fa]);
#ifndef MUT_NO_STEAL
		fb = nres - 1;
		do
		:: fb > fa && rgot[fa] < rneed[fa] -> mv(rgot[fb], rgot[fa], rneed[fa]); fb--
		:: else -> break
		od;
		fb = 0;
#endif
#ifndef MUT_NO_NEXT
		rready[fa] = (op && rgot[fa] >= rneed[fa] && mn > rn[fa]);
#else
		rready[fa] = (op && rgot[fa] >= rneed[fa]);   /* MUTATION: the nexts ignored */
#endif
		op = rready[fa];
		if
		:: rnext[fa] != 0 && rnext[fa] < mn -> mn = rnext[fa]
		:: else -> skip
		fi;
		if
		:: !was && rready[fa] ->                 /* room.put's poke: never blocks */
#ifndef MUT_NO_POKE
			if
			:: nfull(poke[rsh[fa] - 1]) -> poke[rsh[fa] - 1]!1; printf("POKE shard %d\n", rsh[fa] - 1)
			:: full(poke[rsh[fa] - 1]) -> skip
			fi
#else
			skip                                 /* MUTATION: no poke */
#endif
		:: else -> skip
		fi;
		was = 0; fa++
	:: else -> break
	od;
	fa = 0; op = 0; mn = 0
}

/* ledger.find: ri = the index of shard s's reservation, or NS */
inline find(s) {
	ri = 0;
	do
	:: ri < nres && rsh[ri] != s + 1 -> ri++
	:: ri < nres && rsh[ri] == s + 1 -> break
	:: ri >= nres -> ri = NS; break
	od
}

inline give(b) {
	free = free + b; fill()
}

/* take out the reservation at ri */
inline dropResv(ri) {
	do
	:: ri + 1 < nres -> rsh[ri] = rsh[ri + 1]; rneed[ri] = rneed[ri + 1]; rgot[ri] = rgot[ri + 1]; rn[ri] = rn[ri + 1];
		rnext[ri] = rnext[ri + 1]; rready[ri] = rready[ri + 1]; ri++
	:: else -> break
	od;
	nres--; rsh[nres] = 0; rneed[nres] = 0; rgot[nres] = 0; rn[nres] = 0; rnext[nres] = 0; rready[nres] = 0
}

/* ledger.reserve(s's poke, nd, n, nx): the reservation of admission n, with
 * nx behind it, in its place by n, holding what s's held (hg) */
inline reserve(s, nd, n, nx) {
	find(s);
#ifndef MUT_RESV_KEEPS_PLACE
	if
	:: ri < NS && rn[ri] != n -> hg = rgot[ri]; dropResv(ri); ri = NS   /* a new front: out of its place */
	:: else -> skip
	fi;
#else
	if
	:: ri < NS -> rn[ri] = n                     /* MUTATION: it keeps its place */
	:: else -> skip
	fi;
#endif
	if
	:: ri == NS ->
		ri = nres;
		do
		:: ri > 0 && rn[ri - 1] > n ->
			rsh[ri] = rsh[ri - 1]; rneed[ri] = rneed[ri - 1]; rgot[ri] = rgot[ri - 1]; rn[ri] = rn[ri - 1];
			rnext[ri] = rnext[ri - 1]; rready[ri] = rready[ri - 1]; ri--
		:: else -> break
		od;
		rsh[ri] = s + 1; rneed[ri] = 0; rgot[ri] = hg; rn[ri] = n; rready[ri] = 0; nres++; hg = 0
	:: else -> skip
	fi;
	rneed[ri] = nd; rnext[ri] = nx;
	if
	:: rgot[ri] < nd -> rready[ri] = 0            /* ready anew once it holds the new need */
	:: else -> skip
	fi;
	if
	:: rgot[ri] > nd -> free = free + rgot[ri] - nd; rgot[ri] = nd
	:: else -> skip
	fi;
	ri = 0;
	fill()
}

/* ledger.claim(s's poke): got, if ready; else nothing */
inline claim(s) {
	find(s);
	assert(ri < NS);
	if
	:: rready[ri] -> got = rgot[ri]; rgot[ri] = 0; rready[ri] = 0
	:: else -> got = 0
	fi;
	ri = 0
}

/* ledger.cancel(s's poke) */
inline cancel(s) {
	find(s);
	if
	:: ri < NS ->
		got = rgot[ri];
		dropResv(ri);
		give(got); got = 0
	:: else -> skip
	fi;
	ri = 0
}

/* a shard has a reservation exactly when it says so, and one at most */
inline resok() {
	assert(nres <= NS && (nres < 2 || rsh[0] != rsh[1]));
	find(0); assert(ri < NS || !reserved[0]);
	find(1); assert(ri < NS || !reserved[1]);
	ri = 0;
	assert(ROOMOK)
}

/* ================= a loop's side of the room (share.go) ================= */

/* the order across shards: admission n of shard i gets its room only once
 * the reservation of every admission that began to wait before it is full,
 * and no admission behind one of those began to wait before it */
inline ordok(n) {
	fa = 0;
	do
	:: fa < nres -> assert(rn[fa] >= n || rgot[fa] >= rneed[fa] && (rnext[fa] == 0 || rnext[fa] > n)); fa++
	:: else -> break
	od;
	fa = 0
}

/* share.roomFor(nd, n), nd > 0, for admission n: once the ferry's end
 * has begun, nothing (hear: the loop starts it); else the core's unused room
 * to the ledger, the shard's reservation made n's, needing nd, what it holds
 * taken: ok if the core has nd */
inline roomFor(nd, n) {
	if
	:: ending -> hear = 1; ok = 0;
		printf("ROOMFOR shard %d hears the end\n", i)
	:: !ending ->
		b = UNUSED(i); cap[i] = cap[i] - b;
		give(b); b = 0;
		nxt = (nl[i] > 1 -> lnum[i*LS + 1] : 0);   /* waitLine.second */
		reserve(i, nd, n, nxt); nxt = 0;
		reserved[i] = 1;
		claim(i);
		cap[i] = cap[i] + got;
		printf("ROOMFOR shard %d need %d (number %d): claims %d, core %d unused %d; ledger free %d resv %d\n", i, nd, n, got, cap[i], UNUSED(i), free, nres);
		got = 0;
		resok();
		ok = (UNUSED(i) >= nd);
		if
		:: ok -> ordok(n)
		:: else -> skip
		fi
	fi
}

/* share.giveBackRoom */
inline giveBackRoom() {
	b = UNUSED(i);
	if
	:: b > 0 || (reserved[i] && !wants[i]) ->
		cap[i] = cap[i] - b;
		give(b);
		printf("LEND shard %d gives back %d; ledger free %d\n", i, b, free);
		b = 0;
		if
		:: reserved[i] && !wants[i] ->
#ifndef MUT_NO_CANCEL
			cancel(i); printf("CANCEL shard %d's reservation; ledger free %d\n", i, free);
#endif
			reserved[i] = 0
		:: else -> skip
		fi;
		resok()
	:: else -> skip
	fi
}

/* ================= the wait line (wait.go) ================= */

/* a line entry, in words */
inline say(en) {
	if
	:: ISIN(en) -> printf("input %d (caller %d)", en - 1, iown[en - 1])
	:: ISPART(en) -> printf("part %d (DoMany %d, input %d)", en - 1 - NIN, (en - 1 - NIN)/2, PIN(en - 1 - NIN))
	:: ISBOR(en) -> printf("the borrow of DoMany %d", (en - 1 - NIN - NP)/2)
	fi
}

inline push(en) {
	assert(nl[i] < LS);
	wnum++;                                      /* share.number: from the ledger */
	line[i*LS + nl[i]] = en; lnum[i*LS + nl[i]] = wnum; nl[i]++;
	printf("WAIT shard %d: ", i); say(en); printf(" joins the line (%d waiting)\n", nl[i])
}

/* take out the entry at k */
inline removeAt(k) {
	do
	:: k + 1 < nl[i] -> line[i*LS + k] = line[i*LS + k + 1]; lnum[i*LS + k] = lnum[i*LS + k + 1]; k++
	:: else -> break
	od;
	nl[i]--; line[i*LS + nl[i]] = 0; lnum[i*LS + nl[i]] = 0
}

/* k = the index of entry en in the line, or LS */
inline findLine(en) {
	k = 0;
	do
	:: k < nl[i] && line[i*LS + k] != en -> k++
	:: k < nl[i] && line[i*LS + k] == en -> break
	:: k >= nl[i] -> k = LS; break
	od
}

/* FIFO: the line is in the order the admissions came, and only its front
 * leaves it to be let in; an admission let in as it comes is let in only
 * if nothing waits before it */
inline fifo() {
	assert(nl[i] == 0)
}

/* nothing is let in once Close or Shutdown has begun: every let-in takes
 * its room through the ledger, which says the end has begun */
inline endok() {
	assert(!endbegun)
}

/* ================= the core (state.go) ================= */

/* state.enter of input y: into its lane, in its key's order */
inline enter(y) {
	assert(!out[y] && !adm[y]);
	assert(iwt[y] <= UNUSED(i));              /* nothing is refused for room */
	assert(nla[i] < LN);
	lane[i*LN + nla[i]] = y + 1; nla[i]++; q[i] = q[i] + iwt[y];
	assert(q[i] <= cap[i]);
	assert(ytk[y] > lastk[ikey[y]]);         /* the key's order */
	lastk[ikey[y]] = ytk[y];
	adm[y] = 1;
	printf("ENTER shard %d input %d (caller %d, key %d)\n", i, y, iown[y], ikey[y])
}

/* input y comes to its shard: its place among its key's (at its first
 * coming: a DoMany's part 0 comes with its borrow) */
inline ticket(y) {
	if
	:: ytk[y] == 0 -> kar[ikey[y]]++; ytk[y] = kar[ikey[y]]
	:: else -> skip
	fi
}

/* a word to a Do's or a Submit's w.c, never blocking */
inline answer(c, r) {
	assert(nfull(rep[c])); rep[c]!r
}

/* loop.replyAfterLend: a part's word (en = EPART) or a dropped Do's */
inline later(en) {
	assert(nrl < LS + NIN); rl[nrl] = en; nrl++
}

/* takeRoomOf(p): the room granted to part p into the core */
inline takeRoomOf(p) {
	if
	:: pgrant[p] -> cap[i] = cap[i] + iwt[PIN(p)]; grn = grn - iwt[PIN(p)]; pgrant[p] = 0
	:: else -> skip
	fi
}

/* letIn of input y, its room in the core: enter; a Submit's errAdmitted */
inline letIn(y) {
	enter(y);
	if
	:: kind[iown[y]] == KSUB -> answer(iown[y], OK)
	:: else -> skip
	fi
}

/* letInPart(p) in its turn: its room in the core */
inline letInPart(p) {
	takeRoomOf(p);
	enter(PIN(p)); perr[p] = 0; later(EPART(p))
}

/* grant: the room of all of the DoMany of part p (its part 0) aside, each
 * part granted; part p let in now */
inline grant(p, nd) {
	assert(!out[PIN(p)] && !out[PIN(p + 1)]);
	cap[i] = cap[i] - nd; grn = grn + nd;
	pgrant[p] = 1; pgrant[p + 1] = 1;
	printf("GRANT shard %d: DoMany %d granted %d, both parts\n", i, p/2, nd);
#ifndef MUT_GRANT_NO_ENTER
	letInPart(p)
#else
	perr[p] = 0; later(EPART(p))             /* MUTATION: granted only; the caller sends part 0 */
#endif
}

/* needOf(en) */
inline needOf(en) {
	if
	:: ISIN(en) -> nd = iwt[en - 1]
	:: ISPART(en) && pgrant[en - 1 - NIN] -> nd = 0
	:: ISPART(en) && !pgrant[en - 1 - NIN] -> nd = iwt[PIN(en - 1 - NIN)]
	:: ISBOR(en) -> nd = iwt[cx[(en - 1 - NIN - NP)/2]] + iwt[cx[(en - 1 - NIN - NP)/2] + 1]
	fi
}

/* one turn of admitWaiting: the front, if the room holds it (roomFor), is
 * let in; else wants, and stop */
inline admitOne() {
	e = line[i*LS];
	needOf(e);
	if
	:: nd == 0 -> ok = 1
	:: nd > 0 -> roomFor(nd, lnum[i*LS]); if :: ok -> endok() :: else -> skip fi
	fi;
	if
	:: ok ->
		k = 0; removeAt(k); k = 0;
		printf("LETIN shard %d: ", i); say(e); printf(", the front\n");
		if
		:: ISIN(e) -> letIn(e - 1)
		:: ISPART(e) -> x = e - 1 - NIN; letInPart(x)
		:: ISBOR(e) -> x = e - 1 - NIN - NP; grant(x, nd)
		fi
	:: else ->
		if
		:: !hear -> wants[i] = 1
		:: hear -> skip                          /* heedEnd answers the line */
		fi;
		stop = 1
	fi;
	e = 0; nd = 0; ok = 0; x = 0
}

/* ================= handle ================= */

/* opAdmit of input x: behind those waiting, else let in if the room holds
 * it, else wait */
inline admit(x) {
	ticket(x);
	if
#ifndef MUT_FITS_JUMPS
	:: !closed[i] && nl[i] > 0 -> push(EIN(x))
	:: closed[i] || nl[i] == 0 ->
#else
	:: true ->                                   /* MUTATION: what fits goes in */
#endif
		if
		:: closed[i] -> answer(iown[x], CLOSED)  /* refused: ErrClosed */
		:: !closed[i] && iwt[x] <= UNUSED(i) -> fifo(); endok(); letIn(x)
		:: !closed[i] && iwt[x] > UNUSED(i) -> push(EIN(x))      /* rejectedFull: it waits */
		fi
	fi
}

/* opAdmitMany of part p: admitPart */
inline admitPart(p) {
	y = PIN(p); ticket(y);
	if
#if defined(MUT_GRANTED_JUMPS)
	:: !closed[i] && nl[i] > 0 && !pgrant[p] -> push(EPART(p))
	:: closed[i] || nl[i] == 0 || pgrant[p] ->  /* MUTATION: a granted part goes in */
#elif defined(MUT_PART_ASIDE)
	:: !closed[i] && nl[i] > 0 -> push(EPART(p))  /* MUTATION: its room aside while it waits */
	:: closed[i] || nl[i] == 0 ->
#else
	:: !closed[i] && nl[i] > 0 -> takeRoomOf(p); push(EPART(p))   /* its room lent while it waits */
	:: closed[i] || nl[i] == 0 ->
#endif
		gr = pgrant[p];
		takeRoomOf(p);
		if
		:: closed[i] -> perr[p] = CLOSED; later(EPART(p))
		:: !closed[i] && iwt[y] <= UNUSED(i) ->
			fifo();
			if
			:: !gr -> endok()
			:: gr -> skip                        /* its room was granted before */
			fi;
			gr = 0;
			enter(y); perr[p] = 0; later(EPART(p))
		:: !closed[i] && iwt[y] > UNUSED(i) -> push(EPART(p))
		fi
	fi;
	y = 0
}

/* opBorrowWait of part p: all of its DoMany waits in the line */
inline borrowWait(p) {
	ticket(PIN(p));
	if
	:: closed[i] -> perr[p] = CLOSED; later(EPART(p))
	:: else -> push(EBOR(p))
	fi
}

/* opDrop of a Do's input x: out of the line; else out of its lane; else
 * errKept unless its answer is there */
inline drop(x) {
	findLine(EIN(x));
	if
	:: k < LS -> removeAt(k); answer(iown[x], DROPPED)
	:: else ->
		k = 0;
		do
		:: k < nla[i] && lane[i*LN + k] != x + 1 -> k++
		:: k < nla[i] && lane[i*LN + k] == x + 1 -> break
		:: k >= nla[i] -> break
		od;
		if
		:: k < nla[i] ->                          /* state.drop: the room freed */
			q[i] = q[i] - iwt[x];
			do
			:: k + 1 < nla[i] -> lane[i*LN + k] = lane[i*LN + k + 1]; k++
			:: else -> break
			od;
			nla[i]--; lane[i*LN + nla[i]] = 0;
			later(EIN(x))
		:: else ->
			if
			:: nfull(rep[iown[x]]) -> rep[iown[x]]!KEPT
			:: full(rep[iown[x]]) -> skip
			fi
		fi
	fi;
	k = 0
}

/* opLeave: a Submit's input x, or (x >= NIN) part x - NIN, out of the line */
inline leave(x) {
	if
	:: x < NIN ->
		findLine(EIN(x));
		if
		:: k < LS ->
#ifndef MUT_LEAVE_KEEPS
			removeAt(k);
#endif
			answer(iown[x], DROPPED)
		:: else -> skip
		fi
	:: x >= NIN ->
		y = x - NIN;
		findLine(EPART(y));
		if
		:: k == LS -> findLine(EBOR(y))
		:: else -> skip
		fi;
		if
		:: k < LS ->
#ifndef MUT_LEAVE_KEEPS
			removeAt(k);
#endif
			takeRoomOf(y); perr[y] = DROPPED; later(EPART(y))
		:: else -> skip
		fi;
		y = 0
	fi;
	k = 0
}

/* answerWaiting's and drain's word to the caller of input y */
inline closedWord(y) {
	if
	:: kind[iown[y]] == KSUB -> skip             /* drained: done with ErrClosed, off the loop */
	:: else -> answer(iown[y], CLOSED)
	fi
}

/* closeWaits: the line answered ErrClosed, a part's room taken in, its
 * word at once */
inline closeWaits() {
	k = 0;
	do
	:: k < nl[i] ->
		e = line[i*LS + k];
		if
		:: ISIN(e) -> answer(iown[e - 1], CLOSED)
		:: ISPART(e) -> y = e - 1 - NIN; takeRoomOf(y); perr[y] = CLOSED; assert(nfull(gc[y])); gc[y]!1
		:: ISBOR(e) -> y = e - 1 - NIN - NP; takeRoomOf(y); perr[y] = CLOSED; assert(nfull(gc[y])); gc[y]!1
		fi;
		line[i*LS + k] = 0; lnum[i*LS + k] = 0; k++
	:: else -> break
	od;
	nl[i] = 0
}

/* opShutdown: shutdown, once: the room admits nothing, closeWaits; what
 * waits in the lanes runs (take) */
inline lshut() {
	if
	:: !closed[i] ->
		closed[i] = 1;
		printf("SHUTDOWN shard %d\n", i);
		closeWaits();
		k = 0; e = 0; y = 0
	:: else -> skip
	fi
}

/* opClose: close, closeWaits, state.drain */
inline lclose() {
	if
	:: !closing[i] ->
		closing[i] = 1; closed[i] = 1;
		printf("CLOSE shard %d\n", i);
		closeWaits();
		k = 0;
		do
		:: k < nla[i] -> closedWord(lane[i*LN + k] - 1); lane[i*LN + k] = 0; k++
		:: else -> break
		od;
		nla[i] = 0; q[i] = 0;
		k = 0; e = 0; y = 0
	:: else -> skip
	fi
}

/* heedEnd: the end the ledger says has begun */
inline heedEnd() {
	hear = 0;
	if
	:: ending == CLOSE -> lclose()
	:: ending == SHUT -> lshut()
	fi
}

/* share.need and borrowRoom: what the wake-up's admissions take, borrowed
 * from free as far as the core lacks it; once the ferry's end has begun,
 * nothing (hear: the loop starts it) */
inline borrowRoom() {
	if
	:: !closed[i] ->
		nd = 0; k = 0;
		do
		:: k < nb ->
			if
			:: bop[k] == ADM -> nd = nd + iwt[bx[k]]
			:: bop[k] == AMANY && !pgrant[bx[k]] -> nd = nd + iwt[PIN(bx[k])]
			:: else -> skip
			fi;
			k++
		:: else -> break
		od;
		k = 0;
		nd = ((nd > W) -> W : nd);
		if
		:: nd > UNUSED(i) && ending -> hear = 1; printf("BORROW shard %d hears the end\n", i)
		:: nd > UNUSED(i) && !ending ->
			b = nd - UNUSED(i);
			b = ((free < b) -> free : b);
			free = free - b; cap[i] = cap[i] + b;
			printf("BORROW shard %d borrows %d; ledger free %d\n", i, b, free);
			b = 0;
			resok()
		:: else -> skip
		fi;
		nd = 0
	:: else -> skip
	fi
}

/* a message, in words */
inline sayop(op, x) {
	if
	:: op == ADM -> printf("opAdmit of input %d (caller %d)", x, iown[x])
	:: op == AMANY -> printf("opAdmitMany of part %d (DoMany %d, input %d)", x, (x)/2, PIN(x))
	:: op == BWAIT -> printf("opBorrowWait of DoMany %d", (x)/2)
	:: op == DROP -> printf("opDrop of input %d (caller %d)", x, iown[x])
	:: op == LEAVE && x < NIN -> printf("opLeave of input %d (caller %d)", x, iown[x])
	:: op == LEAVE && x >= NIN -> printf("opLeave of part %d (DoMany %d)", x - NIN, (x - NIN)/2)
	:: op == CLOSE -> printf("opClose")
	:: op == SHUT -> printf("opShutdown")
	fi
}

inline handleAll() {
	k2 = 0;
	do
	:: k2 < nb ->
		x = bx[k2];
		printf("HANDLE shard %d: ", i); sayop(bop[k2], x); printf("\n");
		if
		:: bop[k2] == ADM -> admit(x)
		:: bop[k2] == AMANY -> admitPart(x)
		:: bop[k2] == BWAIT -> borrowWait(x)
		:: bop[k2] == DROP -> drop(x)
		:: bop[k2] == LEAVE -> leave(x)
		:: bop[k2] == CLOSE -> lclose()
		:: bop[k2] == SHUT -> lshut()
		fi;
		bop[k2] = 0; bx[k2] = 0; x = 0; k2++
	:: else -> break
	od;
	k2 = 0; nb = 0
}

/* sendReplies: the words held back, after the lend */
inline sendReplies() {
	k = 0;
	do
	:: k < nrl ->
		if
		:: ISIN(rl[k]) -> answer(iown[rl[k] - 1], DROPPED)
		:: else -> assert(nfull(gc[rl[k] - 1 - NIN])); gc[rl[k] - 1 - NIN]!1
		fi;
		rl[k] = 0; k++
	:: else -> break
	od;
	k = 0; nrl = 0
}

/* take: the batches whose deadlines have come, in the order their inputs
 * entered (one FIFO for the shard's lanes): any number of them, at least
 * one if must (the alarm's wake-up); the room they held freed */
inline take() {
	took = 0;
	do
	:: nla[i] > 0 ->                             /* the first is due: taken */
		y = lane[i*LN] - 1;
		q[i] = q[i] - iwt[y];
		printf("TAKE shard %d input %d (weight %d)\n", i, y, iwt[y]);
		assert(nj < LN); job[nj] = y + 1; nj++;
		k3 = 0;
		do
		:: k3 + 1 < nla[i] -> lane[i*LN + k3] = lane[i*LN + k3 + 1]; k3++
		:: else -> break
		od;
		nla[i]--; lane[i*LN + nla[i]] = 0; k3 = 0; y = 0;
		took = 1; must = 0
	:: !must || nla[i] == 0 -> break            /* the rest are not due */
	od;
	must = 0
}

/* the jobs, after the lend: each input's answer (a Submit's done, off the loop) */
inline sendJobs() {
	k = 0;
	do
	:: k < nj ->
		if
		:: kind[iown[job[k] - 1]] != KSUB -> answer(iown[job[k] - 1], OK)
		:: else -> skip
		fi;
		job[k] = 0; k++
	:: else -> break
	od;
	k = 0; nj = 0
}

proctype loop(byte i) {
	byte bop[INCSZ], bx[INCSZ], nb;   /* l.share.msgs: one wake-up's messages */
	byte rl[LS + NIN], nrl;           /* l.out.words: the words held back */
	byte job[LN], nj;                 /* the batches taken: their inputs */
	byte k, k2, k3, x, y, e, nd, b, got, dd, fa, fb, ri, hg, mn, nxt;
	bit ok, stop, was, took, must, disp, hear, gr, op;
end_l:
	if
	:: atomic {                                  /* receive */
		nempty(inc[i]) ->
		do
		:: nempty(inc[i]) -> inc[i]?bop[nb], bx[nb]; nb++
		:: empty(inc[i]) -> break
		od;
		borrowRoom();
		if
		:: hear -> heedEnd()                     /* before the admissions: refused */
		:: else -> skip
		fi;
		handleAll();
		disp = 0; wants[i] = 0
	   }
	:: atomic { reserved[i] && nempty(poke[i]) -> poke[i]?_; disp = 1; wants[i] = 0 }
	:: atomic { nla[i] > 0 -> must = 1; disp = 1; wants[i] = 0 }   /* the alarm */
	fi;
	/* admitWaiting: one step per turn (each takes the ledger once) */
aw:
	do
	:: atomic { !stop && !closed[i] && nl[i] > 0 -> admitOne();
		if
		:: hear -> heedEnd()
		:: else -> skip
		fi
	   }
	:: atomic {
		stop || closed[i] || nl[i] == 0 ->
		stop = 0;
		if
		:: !disp ->                              /* receive: lend, words, then dispatch */
			giveBackRoom(); sendReplies();
			disp = 1; wants[i] = 0
		:: disp ->                               /* dispatch: take, again while it took and some wait */
			take();
			if
			:: took && nl[i] > 0 -> took = 0; wants[i] = 0
			:: else ->
				took = 0;
				giveBackRoom(); sendReplies(); sendJobs();
				disp = 0;
				goto end_l
			fi
		fi
	   }
	od
}

/* ================= callers ================= */

/* a Do's or a Submit's word r read: its outcome */
inline heard() {
	if
	:: kind[c] == KSUB && r == OK -> skip       /* admitted: done comes later */
	:: kind[c] == KDO && r == OK -> assert(adm[x])
	:: r == DROPPED || r == CLOSED -> out[x] = !adm[x]
	:: r == KEPT -> assert(0)                   /* its answer is there first */
	fi;
	printf("CALLER %d hears %d\n", c, r);
	ndone++; r = 0
}

/* Do or Submit of input x = cx[c]: its admission; its ctx may end (CAN):
 * a Do's opDrop, a Submit's opLeave, then one word */
proctype doer(byte c) {
	byte x = cx[c], s = ish[cx[c]], r;
	atomic {
		if
		:: !ISPRE(c) -> assert(nfull(inc[s])); inc[s]!ADM, x;
			printf("CALLER %d sends input %d to shard %d\n", c, x, s)
		:: ISPRE(c) -> skip                      /* admitted before the run */
		fi
	};
	if
	:: atomic { rep[c]?r -> heard() }
	:: atomic {
		CAN(c) ->                                /* ctx ends: abandon, or opLeave */
		printf("CALLER %d: ctx ends\n", c);
		assert(nfull(inc[s]));
		if
		:: kind[c] == KDO -> inc[s]!DROP, x
		:: kind[c] == KSUB -> inc[s]!LEAVE, x
		fi
	   };
	   atomic { rep[c]?r -> heard() }
	fi
}

/* the word on part p read: p.err; for the borrow's (bw), part 0's word:
 * on an error the granted room back (see group.admit) and the end, else
 * part 0 is in; for a part's, its tally */
inline heardPart(p) {
	err = perr[p];
	printf("MANY %d hears part %d: err %d\n", c, p, err);
	if
	:: bw ->
		bw = 0;
		if
		:: err != 0 ->
			out[PIN(p)] = 1; out[PIN(p) + 1] = 1;
			if
			:: pgrant[p + 1] -> giveBack(p + 1)
			:: else -> skip
			fi;
			j = 2
		:: else ->
#ifndef MUT_GRANT_NO_ENTER
			in = 1; j = 1
#else
			j = 0                                /* MUTATION: part 0 is sent too */
#endif
		fi
	:: !bw ->
		left = (err == DROPPED);
		if
		:: err == 0 -> in++
		:: else -> out[PIN(p)] = 1; assert(ended || closed[ish[PIN(p)]])  /* all or none: but for a ctx's end or a close */
		fi;
		j++
	fi;
	err = 0
}

/* requestWaiting(part p, op): the op to its shard, then the word, or the
 * ctx's end: opLeave, then the word */
inline requestWaiting(p, op) {
	atomic { perr[p] = 0; assert(nfull(inc[ish[PIN(p)]])); inc[ish[PIN(p)]]!op, p;
		printf("MANY %d sends ", c); sayop(op, p); printf(" to shard %d\n", ish[PIN(p)]) };
	awaitPart(p)
}

/* the word on part p, or the ctx's end: opLeave, then the word */
inline awaitPart(p) {
	if
	:: atomic { gc[p]?_ -> heardPart(p) }
	:: atomic { CAN(c) -> ended = 1; assert(nfull(inc[ish[PIN(p)]])); inc[ish[PIN(p)]]!LEAVE, NIN + p;
		printf("MANY %d: ctx ends, opLeave for part %d\n", c, p) };
	   atomic { gc[p]?_ -> heardPart(p) }
	fi
}

/* giveBack: part p's granted room, not used, back to the ledger */
inline giveBack(p) {
	pgrant[p] = 0; grn = grn - iwt[PIN(p)];
	give(iwt[PIN(p)]); resok()
}

/* DoMany of inputs cx[c] (part 2c, in shard ish[cx[c]]) and cx[c] + 1
 * (part 2c + 1, the other shard): borrow, else the borrow waits in part
 * 0's shard (opBorrowWait); then the parts (after a borrow every part is
 * sent before any word is awaited, sendParts); then the answers */
proctype many(byte c) {
	byte j, in, err, got, dd, fa, fb, ri, mn;
	bit ok, was, left, ended, bw, op;
	atomic {                                     /* borrow */
		if
		:: !ending && free >= iwt[cx[c]] + iwt[cx[c] + 1] ->
			free = free - iwt[cx[c]] - iwt[cx[c] + 1]; grn = grn + iwt[cx[c]] + iwt[cx[c] + 1];
			pgrant[2*c] = 1; pgrant[2*c + 1] = 1;
			printf("MANY %d borrows %d from the ledger; free %d\n", c, iwt[cx[c]] + iwt[cx[c] + 1], free)
		:: ending || free < iwt[cx[c]] + iwt[cx[c] + 1] -> bw = 1;  /* the room of all, in part 0's shard */
			printf("MANY %d cannot borrow (free %d)\n", c, free)
		fi;
		resok()
	};
	if
	:: bw -> requestWaiting(2*c, BWAIT)
#ifdef MUT_PARTS_IN_TURN
	:: !bw -> skip                               /* MUTATION: the parts sent in turn, below */
#else
	:: !bw ->                                    /* sendParts: every part sent at once */
		atomic { perr[2*c] = 0; assert(nfull(inc[ish[PIN(2*c)]])); inc[ish[PIN(2*c)]]!AMANY, 2*c };
		atomic { perr[2*c + 1] = 0; assert(nfull(inc[ish[PIN(2*c + 1)]])); inc[ish[PIN(2*c + 1)]]!AMANY, 2*c + 1 };
		awaitPart(2*c); left = 0; awaitPart(2*c + 1); left = 0
#endif
	fi;
	do
	:: atomic { j < 2 && left ->                 /* ctx ended: the rest not sent, their room back */
		assert(pgrant[2*c + j]);
		giveBack(2*c + j);
		out[cx[c] + j] = 1; j++
	   }
	:: j < 2 && !left -> requestWaiting(2*c + j, AMANY)
	:: atomic { j >= 2 && in == 0 -> assert(!pgrant[2*c] && !pgrant[2*c + 1]); ndone++; break }
	:: atomic { j >= 2 && in > 0 && nempty(rep[c]) -> rep[c]?_; in-- }  /* count.fin: the answers */
	od
}

/* room.end, then the message to each shard in turn */
proctype closer() {
	atomic {
#ifndef MUT_NO_END_MARK
		ending = CLOSE;
#endif
		endbegun = 1; printf("CLOSE begins\n")
	};
	if
	:: inc[0]!CLOSE, 0; inc[1]!CLOSE, 0
	:: inc[1]!CLOSE, 0; inc[0]!CLOSE, 0
	fi
}

proctype shutter() {
	atomic {
#ifndef MUT_NO_END_MARK
		ending = SHUT;
#endif
		endbegun = 1; printf("SHUTDOWN begins\n")
	};
	if
	:: inc[0]!SHUT, 0; inc[1]!SHUT, 0
	:: inc[1]!SHUT, 0; inc[0]!SHUT, 0
	fi
}

inline input(y, s, key, wt, c) {
	ish[y] = s; ikey[y] = key; iwt[y] = wt; iown[y] = c
}
inline caller(c, kd, y) {
	kind[c] = kd; cx[c] = y
}
#define KIND(c) (((SUB >> (c)) & 1) -> KSUB : KDO)

/* caller c's input y is in its lane as the run starts: admitted before */
inline pre(c, y) {
	s = ish[y];
	lane[s*LN + nla[s]] = y + 1; nla[s]++; q[s] = q[s] + iwt[y]; cap[s] = cap[s] + iwt[y];
	free = free - iwt[y];
	kar[ikey[y]]++; ytk[y] = kar[ikey[y]]; lastk[ikey[y]] = ytk[y]; adm[y] = 1;
	s = 0
}

init {
	byte k, s;
	atomic {
#if defined(MANY)
		input(0, 0, 0, 1, 0); caller(0, KIND(0), 0);
		input(1, 0, 0, 1, 1); input(2, 1, 1, 1, 1); caller(1, KMANY, 1);
		input(3, 1, 1, 1, 2); caller(2, KIND(2), 3);
#elif defined(STEAL)
		input(0, 1, 1, 2, 0); caller(0, KDO, 0);   /* fills the room */
		input(1, 0, 0, 1, 1); caller(1, KDO, 1);   /* its ctx may end */
		input(2, 0, 2, Y, 2); caller(2, KDO, 2);
		input(3, 1, 3, Z, 3); caller(3, KDO, 3);
#elif defined(ORDER)
		input(0, 1, 2, 2, 0); caller(0, KDO, 0);   /* fills the room */
		input(1, 0, 0, 1, 1); input(2, 1, 1, 1, 1); caller(1, KMANY, 1);
		input(3, 0, 0, 1, 2); caller(2, KDO, 3);   /* part 0's key */
#elif BUG == 1
		input(0, 0, 0, G, 0); caller(0, KDO, 0);
		input(1, 0, 1, 1, 1); input(2, 1, 2, 1, 1); caller(1, KMANY, 1);
#elif BUG == 2
		input(0, 0, 0, 2, 0); caller(0, KDO, 0);   /* fills the room */
		input(1, 0, 1, 1, 1); input(2, 1, 2, 1, 1); caller(1, KMANY, 1);
		input(3, 1, 3, G, 2); caller(2, KDO, 3);
#elif defined(SHUT_RUN)
		input(0, 0, 0, 2, 0); caller(0, KDO, 0);   /* fills the room */
		input(1, 1, 1, 1, 1); caller(1, KIND(1), 1);
		input(2, 0, 2, 1, 2); caller(2, KIND(2), 2);
#endif
		free = W;                                /* New: all the room in the ledger */
		k = 0;
		do
		:: k < NCALL && ISPRE(k) -> pre(k, cx[k]); k++
		:: k < NCALL && !ISPRE(k) -> k++
		:: else -> break
		od;
		run loop(0); run loop(1);
		k = 0;
		do
		:: k < NCALL && !RUNS(k) -> ndone++; k++
		:: k < NCALL && RUNS(k) && kind[k] == KMANY -> run many(k); k++
		:: k < NCALL && RUNS(k) && kind[k] != KMANY -> run doer(k); k++
		:: else -> break
		od;
		if
		:: CLOSER -> run closer()
		:: else -> skip
		fi;
		if
		:: SHUTTER -> run shutter()
		:: else -> skip
		fi;
		k = 0
	}
	ndone == NCALL;                              /* every caller has returned */
	timeout;                                     /* and nothing moves any more */
	atomic {
		assert(free == W && nres == 0 && grn == 0);
		assert(cap[0] == 0 && cap[1] == 0 && q[0] == 0 && q[1] == 0);
		assert(!reserved[0] && !reserved[1] && nl[0] == 0 && nl[1] == 0);
		assert(nla[0] == 0 && nla[1] == 0);
		assert(empty(inc[0]) && empty(inc[1]));
		k = 0;
		do
		:: k < NCALL -> assert(empty(rep[k]) || kind[k] == KDO && rep[k]?[KEPT]); k++   /* w.c, not pooled */
		:: else -> break
		od;
		k = 0;
		do
		:: k < NP -> assert(empty(gc[k])); k++
		:: else -> break
		od
	}
}

/* ---- liveness, checked with pan -a -f ---- */
ltl live { <> (ndone == NCALL) }
