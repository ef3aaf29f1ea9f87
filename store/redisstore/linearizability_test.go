package redisstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/store"
)

// linOut is one take's answer: the decision and the Redis time it was
// made at.
type linOut struct {
	o   algo.Outcome
	now int64 // µs, Redis TIME as the script read it
}

// linState is the sequential model's state: the key's algorithm state and
// the time of the last decision (Redis TIME never goes back between
// scripts, which Redis runs one at a time).
type linState struct {
	s    algo.State
	last int64
}

// linModel is the sequential specification of one key under lim: a take
// of cost c answered o at time t is legal in state s when t is not before
// the last decision and Eval(s, t, c) gives o; its next state is Eval's.
func linModel(lim algo.Limit) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return linState{} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			st, cost, out := state.(linState), input.(int64), output.(linOut)
			if out.now < st.last {
				return false, state
			}
			o, next := lim.Eval(st.s, out.now, cost)
			if o != out.o {
				return false, state
			}
			// The log's backing array may be shared: copy it, since the
			// checker keeps old states.
			next.Log = append([]int64(nil), next.Log...)
			return true, linState{next, out.now}
		},
		Equal: func(a, b interface{}) bool {
			x, y := a.(linState), b.(linState)
			if x.last != y.last || x.s.A != y.s.A || x.s.B != y.s.B || x.s.C != y.s.C || len(x.s.Log) != len(y.s.Log) {
				return false
			}
			for i := range x.s.Log {
				if x.s.Log[i] != y.s.Log[i] {
					return false
				}
			}
			return true
		},
		DescribeOperation: func(input, output interface{}) string {
			out := output.(linOut)
			return fmt.Sprintf("take %d at %d -> %+v", input.(int64), out.now, out.o)
		},
	}
}

// delayProxy forwards TCP connections to target, holding each chunk for a
// random 0–2 ms in both directions: slow, jittery links under which many
// clients' calls interleave in Redis. With resetEvery > 0, about one chunk
// in resetEvery instead resets both connections (RST), dropping what was
// in flight.
func delayProxy(t *testing.T, target string, resetEvery int) (string, *atomic.Int64) {
	t.Helper()
	resets := &atomic.Int64{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	pipe := func(dst, src net.Conn, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 7))
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && resetEvery > 0 && r.IntN(resetEvery) == 0 {
				resets.Add(1)
				for _, c := range []net.Conn{src, dst} {
					if tc, ok := c.(*net.TCPConn); ok {
						tc.SetLinger(0)
					}
					c.Close()
				}
				return
			}
			if n > 0 {
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go func() {
		for i := uint64(0); ; i++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go pipe(up, c, 2*i)
			go pipe(c, up, 2*i+1)
		}
	}()
	return ln.Addr().String(), resets
}

// TestLinearizable records concurrent histories of many clients taking
// from one key on standalone Redis, through a proxy that delays traffic,
// and checks each against the algorithm's sequential model with porcupine:
// there must be an order of the takes, consistent with when each was
// called and answered, in which every answer is what the algorithm gives
// at the Redis time the script read. A failure prints the history and
// writes porcupine's visualisation.
func TestLinearizable(t *testing.T) {
	proxy, _ := delayProxy(t, redistest.Shared(t).Addr, 0)
	for _, a := range algo.Algorithms {
		t.Run(a.String(), func(t *testing.T) {
			lim := algo.Limit{Limit: 4, Period: 40 * time.Millisecond, Algorithm: a}
			if !a.Windowed() {
				lim.Burst = 3
			}
			// Two store instances (two fairgate processes), 6 clients each.
			prefix := fmt.Sprintf("lin%d:", rand.Uint32())
			var stores []*Store
			for range 2 {
				s, err := New(Config{URL: "redis://" + proxy, Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				stores = append(stores, s)
			}
			key := fmt.Sprintf("lin-%d", rand.Uint64())
			ops := takeHistory(t, stores, key, lim, 12, 50, 3*time.Millisecond)
			checkLinearizable(t, lim, ops, "12 clients on 2 instances")
		})
	}
}

// checkLinearizable checks the history ops of takes on one key against
// lim's sequential model, after checking that the checker refuses the
// history with one answer forged. A failure prints the history and writes
// porcupine's visualisation.
func checkLinearizable(t *testing.T, lim algo.Limit, ops []porcupine.Operation, who string) {
	t.Helper()
	model := linModel(lim)
	// The checker is not vacuous: the same history with one
	// admitted take's remaining count changed is refused.
	for i, op := range ops {
		if out := op.Output.(linOut); out.o.Allowed && op.Input.(int64) > 0 {
			bad := append([]porcupine.Operation(nil), ops...)
			out.o.Remaining++
			bad[i].Output = out
			if porcupine.CheckOperationsTimeout(model, bad, 30*time.Second) != porcupine.Illegal {
				t.Fatal("a forged answer passed the linearizability check")
			}
			break
		}
	}
	res, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
	switch res {
	case porcupine.Ok:
		admitted := 0
		for _, op := range ops {
			if op.Output.(linOut).o.Allowed && op.Input.(int64) > 0 {
				admitted++
			}
		}
		t.Logf("%d operations from %s: linearizable (%d admitted takes)", len(ops), who, admitted)
	case porcupine.Unknown:
		t.Fatalf("the checker timed out on %d operations", len(ops))
	default:
		file := filepath.Join(os.TempDir(), "fairgate-linearizability-"+lim.Algorithm.String()+".html")
		if f, err := os.Create(file); err == nil {
			porcupine.Visualize(model, info, f)
			f.Close()
		}
		for _, op := range ops {
			t.Logf("client %2d [%d, %d] %s", op.ClientId, op.Call, op.Return, model.DescribeOperation(op.Input, op.Output))
		}
		t.Fatalf("not linearizable: %d operations (history above; visualisation in %s)", len(ops), file)
	}
}

// TestLinearizableSixteenInstances: the history of one key taken by 32
// clients through 16 store instances (16 fairgate processes' clients) is
// linearizable, on standalone Redis and on a Cluster. On the Cluster, the
// other clients' takes land on keys of other slots of the same node, so
// the key's takes travel merged by node (take_node.lua) with theirs.
func TestLinearizableSixteenInstances(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"standalone", standaloneURL(t)},
		{"cluster", clusterURL(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := algo.Limit{Limit: 4, Period: 40 * time.Millisecond, Burst: 3}
			prefix := fmt.Sprintf("lin16%d:", rand.Uint32())
			stores := make([]*Store, 16)
			for i := range stores {
				stores[i] = openPrefix(t, tc.url, prefix)
			}
			key := fmt.Sprintf("{lin-%d}", rand.Uint64())
			// Keys of other slots on the key's node (standalone: any).
			var others []string
			if s := stores[0]; s.cluster {
				m, err := s.loadSlotMap(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				own := m.owner[slot(prefix+"g:"+key)]
				for i := 0; len(others) < 64; i++ {
					k := fmt.Sprintf("{other-%d}", i)
					if sl := slot(prefix + "g:" + k); m.owner[sl] == own && sl != slot(prefix+"g:"+key) {
						others = append(others, k)
					}
				}
			} else {
				for i := range 64 {
					others = append(others, fmt.Sprintf("{other-%d}", i))
				}
			}
			stop := make(chan struct{})
			var noise sync.WaitGroup
			for c := range 32 { // the other clients: keep every node coalescer busy
				noise.Go(func() {
					st := stores[c%16]
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						var res store.Result
						k := others[(c*7+i)%len(others)]
						if err := st.Take(context.Background(), []store.Check{{Key: k, Limit: algo.Limit{Limit: 1e9, Period: time.Hour}, Cost: 1}}, &res); err != nil {
							t.Errorf("other client %d: %v", c, err)
							return
						}
					}
				})
			}
			ops := takeHistory(t, stores, key, lim, 16, 30, 6*time.Millisecond)
			close(stop)
			noise.Wait()
			if stores[0].cluster {
				var reads int64
				for _, s := range stores {
					reads += s.nodes.reads.Load()
				}
				if reads == 0 {
					t.Error("no instance read the slot map: the takes were never merged by node")
				}
			}
			checkLinearizable(t, lim, ops, "16 clients on 16 instances")
		})
	}
}

// takeHistory runs clients clients, client c on stores[c % len(stores)],
// each taking n times from key (cost 1 or 2, a peek one time in six,
// with a random pause of up to pause after each), and returns the history
// for porcupine.
func takeHistory(t *testing.T, stores []*Store, key string, lim algo.Limit, clients, n int, pause time.Duration) []porcupine.Operation {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var ops []porcupine.Operation
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(c), uint64(clients)))
			st := stores[c%len(stores)]
			for range n {
				cost := int64(r.IntN(2) + 1)
				if r.IntN(6) == 0 {
					cost = 0
				}
				call := time.Since(start).Nanoseconds()
				var res store.Result
				err := st.Take(context.Background(), []store.Check{{Key: key, Limit: lim, Cost: cost}}, &res)
				ret := time.Since(start).Nanoseconds()
				if err != nil {
					t.Errorf("client %d: %v", c, err)
					return
				}
				d := res.Decisions[0]
				out := linOut{algo.Outcome{Allowed: d.Allowed, Remaining: d.Remaining, RetryUs: int64(d.RetryAfter / time.Microsecond), ResetUs: int64(d.ResetAfter / time.Microsecond)}, res.Now.UnixMicro()}
				mu.Lock()
				ops = append(ops, porcupine.Operation{ClientId: c, Input: cost, Call: call, Output: out, Return: ret})
				mu.Unlock()
				time.Sleep(time.Duration(r.Int64N(int64(pause))))
			}
		})
	}
	wg.Wait()
	return ops
}
