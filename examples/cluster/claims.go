package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The keys in etcd, under the cluster's prefix, are these.
//
//	members/NAME  the node's address, under its lease
//	parts/P       the name of the node that claimed partition P, under its lease
//
// A claim is the key's creation: its revision, which only grows, is the
// claim's token. A node's lease ending (it stopped renewing, or revoked it at
// SIGTERM) deletes its member key and its claims at once.
const (
	membersDir = "members/"
	partsDir   = "parts/"
)

// partition is the partition of a tenant, of n.
func partition(tenant string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(tenant))
	return int(h.Sum32() % uint32(n))
}

// claims keeps this node's fair share of the partitions in etcd, and tells
// the handlers who serves each partition. Its loop (run) is the only writer
// of its claims; the handlers read its table (enter, leave) under mu.
//
// The loop holds a lease, renewed by the etcd client, and registers the node
// under it. It watches the prefix and claims free partitions until the node
// has its share: the partitions over the live members sorted by name, the
// first ones taking one more. A new claim's token goes to PostgreSQL's fence
// (fence) before the node serves the partition. A node over its share
// releases partitions while another is under its own: it stops taking their
// requests, waits for those in flight, then deletes their claims. If the
// lease is lost, the node stops serving every partition and starts again
// with a new lease.
type claims struct {
	cli   *clientv3.Client
	cfg   Config
	addr  string // advertised
	fence func(ctx context.Context, part int, token int64) error
	count *counters

	mu    sync.Mutex
	parts []part // by partition

	quiesce  chan struct{} // closed: claim and release no more
	stop     chan struct{} // closed: revoke the lease and end
	done     chan struct{} // closed once run has returned
	released chan release  // partitions drained for their release
}

// part is a partition as the handlers see it.
type part struct {
	owner     string        // the node whose claim holds it, "" if none
	addr      string        // that node's address, "" if not known
	token     int64         // this node's claim's token while it serves the partition, else 0
	releasing bool          // this node releases it: its requests are refused
	inflight  int           // requests of this node between enter and leave
	drained   chan struct{} // while releasing, closed once inflight is 0
}

// release is a partition drained for its release, under the claim token.
type release struct {
	part  int
	token int64
}

func newClaims(cli *clientv3.Client, cfg Config, addr string, fence func(context.Context, int, int64) error, count *counters) *claims {
	return &claims{
		cli: cli, cfg: cfg, addr: addr, fence: fence, count: count,
		parts:    make([]part, cfg.Partitions),
		quiesce:  make(chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		released: make(chan release),
	}
}

// enter returns the token of this node's claim on partition p, and true, if
// this node serves p; the caller then calls leave(p) once its request is
// answered. Else it returns the address of the node that holds p ("" if none
// or this one, not serving it yet or any more). It never blocks for long.
func (c *claims) enter(p int) (token int64, addr string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.parts[p]
	if s.token != 0 && !s.releasing {
		s.inflight++
		return s.token, "", true
	}
	if s.owner == c.cfg.Name {
		return 0, "", false
	}
	return 0, s.addr, false
}

// leave ends a request that enter let in.
func (c *claims) leave(p int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &c.parts[p]
	s.inflight--
	if s.inflight == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// load is how many partitions this node serves now, and how many requests
// it has taken (between enter and leave).
func (c *claims) load() (served, inflight int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.parts {
		if s.token != 0 && !s.releasing {
			served++
		}
		inflight += s.inflight
	}
	return served, inflight
}

// quiet makes the loop claim and release nothing more: the service calls it
// as its shutdown starts.
func (c *claims) quiet() { closeOnce(c.quiesce) }

// close revokes the lease, which deletes the node's claims at once, and
// waits for the loop to end. The service calls it at the end of its
// shutdown, after the ferry's: the next owner of each partition starts after
// the node's last batch committed.
func (c *claims) close() {
	closeOnce(c.quiesce)
	closeOnce(c.stop)
	<-c.done
}

// closeOnce closes ch unless it is closed; from one goroutine at a time.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}

// errLeaseLost ends a session whose lease expired.
var errLeaseLost = errors.New("the lease is lost")

// run runs sessions, each over one lease, until close; a session that fails
// is followed by another after a pause.
func (c *claims) run() {
	defer close(c.done)
	for {
		err := c.session()
		c.dropAll()
		if err == nil {
			return
		}
		c.count.sessionsLost.Add(1)
		c.cfg.Logf("cluster: %s: etcd session ended: %v; starting another", c.cfg.Name, err)
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-c.stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session is one lease's state, owned by the loop.
type session struct {
	lease   clientv3.LeaseID
	members map[string]string // live nodes' addresses, by name
	owners  []claim           // by partition, as etcd holds them
	revs    []int64           // by partition, the revision of the last change known: older news is ignored
	mine    map[int]int64     // this session's claims, by partition: their tokens
	serving map[int]bool      // those whose fence is set: served
	leaving map[int]bool      // those being released
	drained map[int]bool      // those released and drained, whose claims to delete
	quiet   bool
}

// claim is a partition's claim in etcd: the node's name, the token and the
// lease it is under.
type claim struct {
	node         string
	token, lease int64
}

// op is the time an etcd or PostgreSQL operation of the loop may take.
const op = 2 * time.Second

// session registers the node under a new lease and keeps its share of the
// partitions until close (nil) or the lease or the watch fails.
func (c *claims) session() error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := &session{
		members: map[string]string{}, owners: make([]claim, c.cfg.Partitions), revs: make([]int64, c.cfg.Partitions),
		mine: map[int]int64{}, serving: map[int]bool{}, leaving: map[int]bool{}, drained: map[int]bool{},
	}
	select {
	case <-c.quiesce:
		s.quiet = true
	default:
	}
	octx, ocancel := context.WithTimeout(ctx, op)
	lease, err := c.cli.Grant(octx, int64(c.cfg.TTL/time.Second))
	ocancel()
	if err != nil {
		return fmt.Errorf("granting a lease: %w", err)
	}
	s.lease = lease.ID
	ka, err := c.cli.KeepAlive(ctx, lease.ID)
	if err != nil {
		return fmt.Errorf("keeping the lease alive: %w", err)
	}
	octx, ocancel = context.WithTimeout(ctx, op)
	defer ocancel()
	if _, err := c.cli.Put(octx, c.cfg.Prefix+membersDir+c.cfg.Name, c.addr, clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("registering: %w", err)
	}
	resp, err := c.cli.Get(octx, c.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("reading the claims: %w", err)
	}
	for _, kv := range resp.Kvs {
		c.apply(s, mvccpb.PUT, kv)
	}
	wch := c.cli.Watch(clientv3.WithRequireLeader(ctx), c.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	var retry <-chan time.Time
	quiesce := c.quiesce
	for {
		if err := c.reconcile(ctx, s); err != nil && retry == nil {
			c.cfg.Logf("cluster: %s: %v; trying again", c.cfg.Name, err)
			retry = time.After(200 * time.Millisecond)
		}
		c.publish(s)
		select {
		case <-c.stop:
			octx, ocancel := context.WithTimeout(context.Background(), op)
			defer ocancel()
			if _, err := c.cli.Revoke(octx, lease.ID); err != nil {
				c.cfg.Logf("cluster: %s: revoking the lease: %v (its claims end with it)", c.cfg.Name, err)
			}
			return nil
		case <-quiesce:
			quiesce, s.quiet = nil, true
		case _, ok := <-ka:
			if !ok {
				return errLeaseLost
			}
		case wr, ok := <-wch:
			if !ok {
				return errors.New("the watch ended")
			}
			if err := wr.Err(); err != nil {
				return fmt.Errorf("the watch: %w", err)
			}
			for _, ev := range wr.Events {
				if c.apply(s, ev.Type, ev.Kv) {
					return errLeaseLost
				}
			}
		case r := <-c.released:
			if tok, ok := s.mine[r.part]; ok && tok == r.token && s.leaving[r.part] {
				s.drained[r.part] = true
			}
		case <-retry:
			retry = nil
		}
	}
}

// apply records a change of a key under the prefix, and reports whether it
// is the deletion of this node's member key: its lease is gone. A change of
// a partition older than what the loop knows (its own claim or release, made
// since) is ignored.
func (c *claims) apply(s *session, typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) (lost bool) {
	rest, ok := strings.CutPrefix(string(kv.Key), c.cfg.Prefix)
	if !ok {
		return false
	}
	if name, ok := strings.CutPrefix(rest, membersDir); ok {
		if typ == mvccpb.DELETE {
			delete(s.members, name)
			return name == c.cfg.Name
		}
		s.members[name] = string(kv.Value)
		return false
	}
	ps, ok := strings.CutPrefix(rest, partsDir)
	p, err := strconv.Atoi(ps)
	if !ok || err != nil || p < 0 || p >= len(s.owners) || kv.ModRevision <= s.revs[p] {
		return false
	}
	s.revs[p] = kv.ModRevision
	if typ == mvccpb.DELETE {
		s.owners[p] = claim{}
	} else {
		s.owners[p] = claim{string(kv.Value), kv.CreateRevision, kv.Lease}
	}
	if tok, ok := s.mine[p]; ok && s.owners[p].token != tok {
		c.forget(s, p) // deleted, or claimed again by another
	}
	return false
}

// forget drops this node's claim on p from the session.
func (c *claims) forget(s *session, p int) {
	delete(s.mine, p)
	delete(s.serving, p)
	delete(s.leaving, p)
	delete(s.drained, p)
}

// share is the number of partitions the node ranked i of the sorted live
// members should hold.
func share(partitions, members, i int) int {
	n := partitions / members
	if i < partitions%members {
		n++
	}
	return n
}

// reconcile moves the node toward its share. It deletes the claims of
// partitions released and drained, and claims or releases partitions
// (rebalance). Then it sets the fence of each claim not served yet: after
// the claims, so that a fence that waits for a lock delays none. It returns
// the errors, to be tried again.
func (c *claims) reconcile(ctx context.Context, s *session) error {
	for p, o := range s.owners { // a claim of its lease it does not know, as a txn whose answer was lost
		if _, ok := s.mine[p]; !ok && o.node == c.cfg.Name && o.lease == int64(s.lease) {
			s.mine[p] = o.token
		}
	}
	var errs []error
	for p := range s.drained {
		if err := c.unclaim(ctx, s, p); err != nil {
			errs = append(errs, err)
		}
	}
	if !s.quiet {
		if err := c.rebalance(ctx, s); err != nil {
			errs = append(errs, err)
		}
	}
	for p, tok := range s.mine {
		if !s.serving[p] && !s.leaving[p] && !s.drained[p] {
			if err := c.serve(ctx, s, p, tok); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// rebalance claims free partitions while the node is under its share, and
// releases some while it is over it and another live node is under its own.
func (c *claims) rebalance(ctx context.Context, s *session) error {
	live := make([]string, 0, len(s.members))
	for name := range s.members {
		live = append(live, name)
	}
	slices.Sort(live)
	me := slices.Index(live, c.cfg.Name)
	if me < 0 {
		return nil // not registered yet, as the watch tells
	}
	held := len(s.mine) - len(s.leaving)
	want := share(c.cfg.Partitions, len(live), me)
	switch {
	case held < want:
		for _, p := range rand.Perm(c.cfg.Partitions) {
			if held >= want {
				break
			}
			if s.owners[p].node != "" {
				continue
			}
			ok, err := c.claim(ctx, s, p)
			if err != nil {
				return err
			}
			if ok {
				held++
			}
		}
	case held > want:
		counts := map[string]int{}
		for _, o := range s.owners {
			counts[o.node]++
		}
		under := false
		for i, name := range live {
			under = under || name != c.cfg.Name && counts[name] < share(c.cfg.Partitions, len(live), i)
		}
		for p := range s.mine {
			if !under || held <= want {
				break
			}
			if s.serving[p] && !s.leaving[p] {
				c.release(s, p)
				held--
			}
		}
	}
	return nil
}

// claim claims partition p if it is free; reconcile then sets its fence
// (serve). ok says whether the claim is this node's.
func (c *claims) claim(ctx context.Context, s *session, p int) (ok bool, err error) {
	key := c.partKey(p)
	octx, cancel := context.WithTimeout(ctx, op)
	defer cancel()
	resp, err := c.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, c.cfg.Name, clientv3.WithLease(s.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, fmt.Errorf("claiming partition %d: %w", p, err)
	}
	if !resp.Succeeded { // another node's: the watch will say so too
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 1 {
			c.apply(s, mvccpb.PUT, kvs[0])
		}
		return false, nil
	}
	tok := resp.Header.Revision
	s.owners[p], s.revs[p] = claim{c.cfg.Name, tok, int64(s.lease)}, tok
	s.mine[p] = tok
	c.count.claims.Add(1)
	return true, nil
}

// serve sets the fence of this node's claim on p in PostgreSQL; the
// partition is served from then on. A claim that a newer one has fenced out
// already is deleted.
func (c *claims) serve(ctx context.Context, s *session, p int, tok int64) error {
	octx, cancel := context.WithTimeout(ctx, op)
	defer cancel()
	err := c.fence(octx, p, tok)
	if errors.Is(err, errFenced) {
		s.drained[p] = true // the next pass deletes the claim
		return fmt.Errorf("partition %d: claim %d fenced out already: %w", p, tok, err)
	}
	if err != nil {
		return fmt.Errorf("setting partition %d's fence: %w", p, err)
	}
	s.serving[p] = true
	return nil
}

// release starts the release of partition p: its requests are refused from
// now on, and once those in flight are answered (or after cfg.Request), a
// goroutine tells the loop, which deletes the claim.
func (c *claims) release(s *session, p int) {
	s.leaving[p] = true
	c.mu.Lock()
	pt := &c.parts[p]
	pt.releasing = true
	drained := make(chan struct{})
	if pt.inflight == 0 {
		close(drained)
	} else {
		pt.drained = drained
	}
	c.mu.Unlock()
	r := release{p, s.mine[p]}
	go func() {
		t := time.NewTimer(c.cfg.Request)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C: // the fence refuses what is still in flight
		case <-c.done:
			return
		}
		select {
		case c.released <- r:
		case <-c.done:
		}
	}()
}

// unclaim deletes this node's claim on p, if it still holds it.
func (c *claims) unclaim(ctx context.Context, s *session, p int) error {
	key := c.partKey(p)
	octx, cancel := context.WithTimeout(ctx, op)
	defer cancel()
	resp, err := c.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", s.mine[p])).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("releasing partition %d: %w", p, err)
	}
	c.forget(s, p)
	if resp.Succeeded { // else the claim had gone already: the watch says what holds p
		c.count.releases.Add(1)
		s.owners[p], s.revs[p] = claim{}, resp.Header.Revision
	}
	return nil
}

func (c *claims) partKey(p int) string { return c.cfg.Prefix + partsDir + strconv.Itoa(p) }

// publish updates the handlers' table from the session.
func (c *claims) publish(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.parts {
		pt := &c.parts[p]
		o := s.owners[p]
		pt.owner, pt.addr, pt.token = o.node, s.members[o.node], 0
		if s.serving[p] && !s.leaving[p] {
			pt.token = s.mine[p]
		}
		if !s.leaving[p] {
			pt.releasing = false
		}
	}
}

// dropAll stops serving every partition, as the session ended.
func (c *claims) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.parts {
		pt := &c.parts[p]
		pt.owner, pt.addr, pt.token, pt.releasing = "", "", 0, false
	}
}
