package redisstore

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/store"
)

// Merging by node. On a Redis Cluster, tenants' keys are spread over the
// 16,384 slots by their hash tags, so the batches that wait together for
// one slot are few: a call per decision. The batches waiting for one
// *node* are merged instead (lua/take_node.lua), the keys undeclared,
// which Redis allows for the slots the node serves. The store keeps its
// own copy of the slot map for that (CLUSTER SLOTS): read at the first
// merged call, and again, at most once a second, when a node answers that
// a batch is not its own. Correctness never rests on the copy: Redis
// refuses each key a node does not serve, and such a batch is sent again
// alone with declared keys, which the client routes and redirects (MOVED,
// ASK) as for any call. Nothing is polled: an idle store reads no map.

// nodeKeyBit marks a coalescer key that names a node (its index in the
// slot map) rather than a slot: slots are below 1<<14 (and settleKeyBit
// is above both).
const nodeKeyBit = 1 << 15

// nodeScripts hold take_node.lua per set of algorithms. Retried by the
// client on a fresh connection like take_multi.lua (see take1Scripts).
var nodeScripts = func() (m [allAlgorithms + 1]*rueidis.Lua) {
	for i := 1; i <= allAlgorithms; i++ {
		m[i] = rueidis.NewLuaScriptRetryable(script("take_node", uint8(i)))
	}
	return m
}()

// slotMap is a Redis Cluster's slot map as the store last read it.
type slotMap struct {
	owner  [1 << 14]uint16 // 1 + the index in nodes of each slot's master; 0: unknown
	nodes  []rueidis.Client
	addrs  []string
	probes []string // a key in a slot of each master (ProbeKeys)
}

// nodeMaps holds the store's slot map and its reads.
type nodeMaps struct {
	cur    atomic.Pointer[slotMap]
	last   atomic.Int64 // when the last read started, Unix ns
	reads  atomic.Int64 // map reads, for tests
	resent atomic.Int64 // batches a node refused and were sent again alone
}

// nodeOf returns the index of the node serving slot in the store's copy
// of the map, asking for the map when there is none yet.
func (s *Store) nodeOf(slot uint16) (uint16, bool) {
	m := s.nodes.cur.Load()
	if m == nil {
		s.readSlotMap()
		return 0, false
	}
	o := m.owner[slot]
	return o - 1, o != 0
}

// readSlotMap reads the slot map in the background, unless a read started
// less than a second ago. A map that cannot be read (an ACL user without
// CLUSTER SLOTS) leaves batches merged by slot only.
func (s *Store) readSlotMap() {
	n := &s.nodes
	now := time.Now().UnixNano()
	last := n.last.Load()
	if now-last < int64(time.Second) || !n.last.CompareAndSwap(last, now) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n.reads.Add(1)
		if m, err := s.loadSlotMap(ctx); err == nil {
			n.cur.Store(m)
		}
	}()
}

// loadSlotMap reads CLUSTER SLOTS and pairs each master with the client's
// connection to it. A master the client has no connection to is left
// unknown (its slots are not merged by node).
func (s *Store) loadSlotMap(ctx context.Context) (*slotMap, error) {
	ranges, err := s.c.Do(ctx, s.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	clients := s.c.Nodes()
	m := &slotMap{}
	index := map[string]uint16{}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS entry %v", store.ErrProtocol, err)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		master, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || lo < 0 || hi >= 1<<14 || lo > hi {
			return nil, fmt.Errorf("%w: CLUSTER SLOTS entry", store.ErrProtocol)
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		i, ok := index[addr]
		if !ok {
			c := clients[addr]
			if c == nil {
				continue
			}
			i = uint16(len(m.nodes))
			index[addr] = i
			m.nodes, m.addrs = append(m.nodes, c), append(m.addrs, addr)
		}
		for sl := lo; sl <= hi; sl++ {
			m.owner[sl] = i + 1
		}
		if int(i) == len(m.probes) {
			m.probes = append(m.probes, "fg:probe{"+slotTags()[lo]+"}")
		}
	}
	return m, nil
}

// ProbeKeys returns a key in a slot of each master of a Redis Cluster, as
// the store's slot map last read them (asking for the map when there is
// none yet), for the guard's idle probe to peek at every master; nil on
// standalone Redis. See [store.Prober].
func (s *Store) ProbeKeys() []string {
	if !s.cluster {
		return nil
	}
	m := s.nodes.cur.Load()
	if m == nil {
		s.readSlotMap()
		return nil
	}
	return m.probes
}

var _ store.Prober = (*Store)(nil)

// sendNode decides batch, whose parts are for several slots, in one call
// to the node that serves the first one's slot; batches the node does not
// serve are sent again alone. ok is false when there is no such node in
// the map: nothing was sent.
func (s *Store) sendNode(ctx context.Context, batch []*request, mask uint8, nkeys int) (ok bool) {
	m := s.nodes.cur.Load()
	if m == nil || m.owner[batch[0].p.slot] == 0 {
		return false
	}
	node := m.nodes[m.owner[batch[0].p.slot]-1]
	ps := make([]*part, len(batch))
	for i, r := range batch {
		ps[i] = r.p
	}
	args := mergedArgs(ps, false)
	for _, r := range batch {
		args = append(args, r.p.keys...)
	}
	args = append(args, strconv.Itoa(nkeys))
	msgs, err := nodeScripts[mask].Exec(ctx, node, nil, args).ToArray()
	var vals []int64
	if err == nil {
		vals, err = integers(nil, msgs, 1+len(batch)+takePer*nkeys)
	}
	if err != nil {
		if _, redisErr := rueidis.IsRedisErr(err); !redisErr {
			s.readSlotMap() // the node may be gone
		}
		err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		for _, r := range batch {
			r.err = err
		}
		return true
	}
	var again []*request
	o := 1
	for _, r := range batch {
		n := 1 + takePer*len(r.p.idx)
		if vals[o] < 0 { // not this node's: its slot moved
			again = append(again, r)
		} else {
			r.reply = make([]int64, 0, takeHead+takePer*len(r.p.idx))
			r.reply = append(append(r.reply, vals[0]), vals[o:o+n]...)
		}
		o += n
	}
	s.resendAlone(again)
	return true
}

// resendAlone sends each request a node refused (its slot moved, or is
// migrating) again on its own, with declared keys, from a goroutine of its
// own and within its caller's deadline, and answers it. The merged call's
// other callers are answered at once: a batch that waits out a migration
// (TRYAGAIN, up to its deadline) must not hold theirs, nor the node's
// queue behind the flusher.
func (s *Store) resendAlone(again []*request) {
	if len(again) == 0 {
		return
	}
	s.nodes.resent.Add(int64(len(again)))
	s.readSlotMap()
	for _, r := range again {
		r.alone = true
		go func() {
			defer close(r.done)
			ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
			defer cancel()
			if r.sp != nil {
				s.runSettleAlone(ctx, r)
				return
			}
			p := part{idx: r.p.idx, slot: r.p.slot, algos: r.p.algos, keys: r.p.keys, checks: r.p.checks}
			s.runPart(ctx, &p)
			r.reply, r.err = p.reply, p.err
		}()
	}
}

// settleNodeScripts hold settle_node.lua per set of algorithms, retried
// by the client on a fresh connection like settle.lua (see settleScripts).
var settleNodeScripts = func() (m [allAlgorithms + 1]*rueidis.Lua) {
	for i := 1; i <= allAlgorithms; i++ {
		m[i] = rueidis.NewLuaScriptRetryable(script("settle_node", uint8(i)))
	}
	return m
}()

// sendSettleNode applies the settlement parts ps of batch, for several
// slots, in one call to the node that serves the first one's slot, as
// sendNode decides takes; parts the node does not serve are sent again
// alone. ok is false when there is no such node in the map: nothing was
// sent.
func (s *Store) sendSettleNode(ctx context.Context, batch []*request, ps []*settlePart, mask uint8, nkeys int) (ok bool) {
	m := s.nodes.cur.Load()
	if m == nil || m.owner[ps[0].slot] == 0 {
		return false
	}
	node := m.nodes[m.owner[ps[0].slot]-1]
	args := settleArgs(ps)
	for _, p := range ps {
		args = append(args, p.keys...)
	}
	args = append(args, strconv.Itoa(nkeys))
	msgs, err := settleNodeScripts[mask].Exec(ctx, node, nil, args).ToArray()
	var vals []int64
	if err == nil {
		vals, err = integers(nil, msgs, 1+len(batch)+settlePer*(nkeys-len(batch)))
	}
	if err != nil {
		if _, redisErr := rueidis.IsRedisErr(err); !redisErr {
			s.readSlotMap() // the node may be gone
		}
		err = fmt.Errorf("%w: settle: %w", store.ErrUnavailable, err)
		for _, r := range batch {
			r.err = err
		}
		return true
	}
	s.resendAlone(splitSettles(batch, vals)) // not this node's: its slot moved
	return true
}
