package app

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testwait"
)

// testAdminToken is the admin token of the daemons these tests run.
const testAdminToken = "admin-token-for-the-idle-tests-0123456789"

// testDaemon is one `fairgate serve` a test runs: its listeners.
type testDaemon struct{ public, internal, admin string }

// startDaemon runs `fairgate serve` with args, an admin API (and, with
// --upstream in args, an internal listener) on free ports, until the test
// ends, and waits until /readyz reports its store up.
func startDaemon(t *testing.T, args ...string) testDaemon {
	t.Helper()
	d := testDaemon{public: freeAddr(t), admin: freeAddr(t)}
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	if err := os.WriteFile(tokenFile, []byte(testAdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(args, "--listen", d.public, "--admin-listen", d.admin, "--admin-token-file", tokenFile, "--drain", "0")
	d.internal = d.public
	if slices.Contains(args, "--upstream") {
		d.internal = freeAddr(t)
		args = append(args, "--internal-listen", d.internal)
	}
	c, err := ParseServe(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	runServe(t, c, slog.New(slog.DiscardHandler))
	testwait.Eventually(t, 20*time.Second, "/readyz reports the store up", func() bool {
		var m struct{ Store string }
		code := getJSON(t, "http://"+d.internal+"/readyz", nil, &m)
		return code == http.StatusOK && m.Store == "up"
	})
	return d
}

var testClient = &http.Client{Timeout: 5 * time.Second}

// getJSON GETs url with the headers h, decodes the body into out, and
// returns the status (0 when the request failed).
func getJSON(t *testing.T, url string, h map[string]string, out any) int {
	t.Helper()
	return doJSON(t, http.MethodGet, url, h, "", out)
}

// doJSON sends method to url with the headers h and the body, decodes the
// answer into out (if not nil), and returns the status (0 when the
// request failed).
func doJSON(t *testing.T, method, url string, h map[string]string, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// TestIdleInstanceCost: an idle `fairgate serve` with every part that
// touches Redis on (the example config's stored API keys, run-time
// overlay, job queues whose depths the dashboard reads, outbound quotas
// and Envoy service with a per-second store; upstream capacity; the admin
// API) sends each Redis under one command a second, counted by Redis
// (INFO commandstats, the commands scripts call included) over 30 s (the
// period of the cached reads' safety net, so that every source but the
// once-a-minute one is in it), on a standalone Redis and on a Redis
// Cluster. What is left: the store
// probe once in 10 s (a script call, 3 commands), each cached read (the
// API keys' and the overlay's versions, the queues' depths) read again
// once in 30 s, the client's PING of a connection silent for 30 s, the
// eviction check once a minute. The API keys' change script is never run
// while nothing changes. Before, an idle instance polled: about 13
// commands a second to the store and 4 to the per-second store.
func TestIdleInstanceCost(t *testing.T) {
	redistest.Need(t)
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		st, ps := startRedis(t), startRedis(t)
		idleCost(t, "redis://"+st.Addr, []string{st.Addr}, "redis://"+ps.Addr, []string{ps.Addr})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl, err := redistest.StartCluster(3, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		idleCost(t, "redis-cluster://"+strings.Join(cl.Addrs(), ","), cl.Addrs(), "", nil)
	})
}

// startRedis starts a standalone Redis (with extra arguments) for the
// test.
func startRedis(t *testing.T, extra ...string) *redistest.Server {
	t.Helper()
	s, err := redistest.Start(extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// idleWindow is how long TestIdleInstanceCost counts an idle daemon's
// commands.
const idleWindow = 30 * time.Second

// idleCost runs a daemon with every Redis part on the store at url (the
// servers at addrs) and, if psURL is not empty, the per-second store at
// psURL (psAddrs), lets it settle, counts the commands each store is sent
// over idleWindow and fails t at one a second or more.
func idleCost(t *testing.T, url string, addrs []string, psURL string, psAddrs []string) {
	cfg := filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(cfg, append(examples.Config(), "\nupstream_capacity: {limit: 100}\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--config", cfg, "--store", url, "--upstream", "http://127.0.0.1:1", "--grpc-listen", freeAddr(t)}
	stores := map[string][]string{"store": addrs}
	if psURL != "" {
		args = append(args, "--per-second-store", psURL)
		stores["per-second store"] = psAddrs
	}
	startDaemon(t, args...)
	time.Sleep(3 * time.Second) // the start's loads and connections
	before := map[string]map[string]int{}
	for name, a := range stores {
		c, err := redistest.Commands(a...)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = c
	}
	time.Sleep(idleWindow)
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		after, err := redistest.Commands(stores[name]...)
		if err != nil {
			t.Fatal(err)
		}
		after["info"] -= len(stores[name]) // the count's own INFO
		total, by := 0, []string{}
		for _, cmd := range slices.Sorted(maps.Keys(after)) {
			if n := after[cmd] - before[name][cmd]; n != 0 {
				total += n
				by = append(by, fmt.Sprintf("%s %d", cmd, n))
			}
		}
		perSecond := float64(total) / idleWindow.Seconds()
		t.Logf("%s: %d commands in %v (%.2f a second): %s", name, total, idleWindow, perSecond, strings.Join(by, ", "))
		if perSecond >= 1 {
			t.Errorf("an idle instance sent the %s %.2f commands a second, want under 1", name, perSecond)
		}
		if n := after["evalsha_ro"] - before[name]["evalsha_ro"]; n > 0 {
			t.Errorf("an idle instance ran a read-only script (the API keys' change log) %d times, want none while nothing changes", n)
		}
	}
}

// changeBound is the bound docs/service.md gives for a change made on one
// instance to reach every other: a key within about 1 s (a poll every
// 500 ms), the run-time overlay within 2 s (a poll every second). Each
// poll reads a version cached by client tracking, read again only after
// 30 s: a change seen within changeBound came by Redis's invalidation.
const changeBound = 2 * time.Second

// TestChangesReachEveryInstance: two daemons, A and B, on one Redis; an
// API key made on A (through the admin API) is accepted by B, an override
// written on A is in force on B, and a key revoked on A is refused by B,
// each within the documented bound (well before the 30 s re-read of a
// cached version), on a standalone Redis, a Redis Cluster and a master
// under Redis Sentinels; and again after every client connection was
// killed (the change is written while B's connections are down, so Redis
// has no connection to send B's invalidation on), after a Redis restart
// (with its data on disk), after a cluster failover (each master's
// replica takes over) and after a Sentinel failover.
func TestChangesReachEveryInstance(t *testing.T) {
	redistest.Need(t)
	killClients := func(addrs ...string) func(t *testing.T) {
		return func(t *testing.T) {
			for _, a := range addrs {
				if _, err := redistest.Do(a, "CLIENT", "KILL", "TYPE", "normal"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := startRedis(t, "--appendonly", "yes", "--appendfsync", "always")
		changesReach(t, "redis://"+srv.Addr, []disruption{
			{"every connection killed", killClients(srv.Addr)},
			{"Redis restarted", func(t *testing.T) {
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
			}},
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		cl, err := redistest.StartCluster(3, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		changesReach(t, "redis-cluster://"+strings.Join(cl.Addrs(), ","), []disruption{
			{"every connection killed", killClients(cl.Addrs()...)},
			{"every master's replica took over", func(t *testing.T) {
				// A manual failover the old master does not agree to in
				// time (a loaded machine) is dropped: ask again.
				var asked time.Time
				testwait.Eventually(t, time.Minute, "the replicas promoted", func() bool {
					promoted := true
					for _, r := range cl.Nodes[3:] {
						if info, err := redistest.Do(r.Addr, "INFO", "replication"); err == nil && strings.Contains(info, "role:master") {
							continue
						}
						promoted = false
						if time.Since(asked) > 5*time.Second {
							redistest.Do(r.Addr, "CLUSTER", "FAILOVER")
						}
					}
					if !promoted && time.Since(asked) > 5*time.Second {
						asked = time.Now()
					}
					return promoted
				})
			}},
		})
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		ss, err := redistest.StartSentinels(2 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ss.Close)
		changesReach(t, "redis-sentinel://"+strings.Join(ss.Addrs(), ",")+"/"+redistest.MasterName, []disruption{
			{"a Sentinel failover", func(t *testing.T) {
				if _, err := redistest.Do(ss.Sentinels[0].Addr, "SENTINEL", "FAILOVER", redistest.MasterName); err != nil {
					t.Fatal(err)
				}
				// Until the old master replicates the new one, a write
				// sent to it is lost (Redis replicates asynchronously): a
				// fault of the failover, not of the propagation.
				testwait.Eventually(t, 30*time.Second, "the replica promoted, the old master replicating it", func() bool {
					p, err := ss.MasterPort()
					info, ierr := redistest.Do(ss.Master.Addr, "INFO", "replication")
					return err == nil && p == ss.Replica.Port && ierr == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
				})
			}},
		})
	})
}

// disruption is something a store goes through, done by do.
type disruption struct {
	name string
	do   func(t *testing.T)
}

// changesReach runs two daemons on the store at url and checks that
// changes made on one reach the other within changeBound, at first and
// after each disruption.
func changesReach(t *testing.T, url string, disruptions []disruption) {
	a, b := startDaemon(t, "--store", url), startDaemon(t, "--store", url)
	admin := map[string]string{"Authorization": "Bearer " + testAdminToken}
	// made is a key made on A, for tenant, once the store takes the write
	// (it may be coming back from a disruption).
	made := func(tenant string) (key, id string) {
		t.Helper()
		var k struct{ Key, ID string }
		testwait.Eventually(t, 20*time.Second, "a key made on A", func() bool {
			return doJSON(t, http.MethodPost, "http://"+a.admin+"/admin/keys", admin, fmt.Sprintf(`{"tenant":%q}`, tenant), &k) == http.StatusCreated
		})
		return k.Key, k.ID
	}
	// accepted is B's answer to the key: 200, or 401 for a key it does not
	// hold.
	accepted := func(key string) int {
		return getJSON(t, "http://"+b.public+"/v1/me/limits", map[string]string{"X-API-Key": key}, nil)
	}
	// overridden reports whether B has tenant's run-time entry with burst.
	overridden := func(tenant string, burst int) bool {
		var m struct {
			Override struct{ Burst int }
		}
		return getJSON(t, "http://"+b.admin+"/admin/tenants/"+tenant, admin, &m) == http.StatusOK && m.Override.Burst == burst
	}
	step := 0
	check := func(when string) {
		t.Helper()
		step++
		tenant := fmt.Sprintf("tenant-%d", step)
		key, id := made(tenant)
		took := testwait.Took(t, changeBound, when+": a key made on A accepted by B", func() bool { return accepted(key) == http.StatusOK })
		t.Logf("%s: a key made on A was accepted by B after %v", when, took.Round(time.Millisecond))
		burst := 40 + step
		testwait.Eventually(t, 10*time.Second, "an override written on A", func() bool {
			return doJSON(t, http.MethodPut, "http://"+a.admin+"/admin/tenants/"+tenant, admin, fmt.Sprintf(`{"plan":"team","burst":%d}`, burst), nil) == http.StatusOK
		})
		took = testwait.Took(t, changeBound, when+": an override written on A in force on B", func() bool { return overridden(tenant, burst) })
		t.Logf("%s: an override written on A was in force on B after %v", when, took.Round(time.Millisecond))
		if code := doJSON(t, http.MethodDelete, "http://"+a.admin+"/admin/keys/"+id, admin, "", nil); code != http.StatusOK {
			t.Fatalf("%s: revoking the key on A: %d", when, code)
		}
		took = testwait.Took(t, changeBound, when+": a key revoked on A refused by B", func() bool { return accepted(key) == http.StatusUnauthorized })
		t.Logf("%s: a key revoked on A was refused by B after %v", when, took.Round(time.Millisecond))
	}
	check("at first")
	for _, d := range disruptions {
		d.do(t)
		check("after " + d.name)
	}
}
