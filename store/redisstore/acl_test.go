package redisstore_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/fairq/redisq"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/apikeys/rediskeys"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

// aclPassword is the password the tests give the ACL user of docs/redis.md.
const aclPassword = "acl-test-password"

// docACL returns the ACL SETUSER line of docs/redis.md (between the
// `<!-- acl -->` markers), split into arguments with PASSWORD replaced.
func docACL(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "<!-- acl -->\n```\n")
	line, _, _ := strings.Cut(rest, "\n```")
	args := strings.Fields(strings.ReplaceAll(line, ">PASSWORD", ">"+aclPassword))
	if len(args) < 5 || args[0] != "ACL" {
		t.Fatalf("no ACL line in docs/redis.md: %q", line)
	}
	return args
}

// granted is the commands (and command|subcommand pairs) an ACL line
// allows one by one with +name, lower-case.
func granted(args []string) []string {
	var out []string
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "+"); ok && !strings.HasPrefix(name, "@") {
			out = append(out, strings.ToLower(name))
		}
	}
	return out
}

// allows reports whether the grants cover cmd ("hget", "xgroup|create").
func allows(grants []string, cmd string) bool {
	parent, _, _ := strings.Cut(cmd, "|")
	return slices.Contains(grants, cmd) || slices.Contains(grants, parent)
}

// tolerated are commands fairgate sends and carries on without when the
// user may not run them: INFO (to refuse a sentinel given as redis://) and
// CONFIG GET (to warn about an evicting maxmemory-policy). docs/redis.md
// says why they are left out.
var tolerated = []string{"info", "config|get"}

// unseen are grants these tests cannot count on seeing used: the client's
// keep-alive PING (sent on a connection idle for a while), and two needed
// in set-ups these tests do not run: ROLE (the client's check of a
// sentinel's master) and CLUSTER SHARDS (the client's topology read on
// Redis 8 or later, where it replaces CLUSTER SLOTS).
var unseen = []string{"ping", "role", "cluster|shards"}

// TestACLUser creates the ACL user of docs/redis.md, exactly as written
// there, on a standalone Redis (database 1, so that SELECT is used) and on
// a Redis Cluster of three masters, and runs every feature that touches
// Redis as that user (everyFeature). Each server's INFO commandstats then
// says which commands the user ran, scripts' commands included: the line
// must allow each (but the tolerated ones), and every command it allows
// must have been run (but the unseen ones), so that the line is complete
// and minimal. A key outside the prefix is refused.
func TestACLUser(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	args := docACL(t)
	grants := granted(args)
	var mu sync.Mutex
	used := map[string]bool{}
	run := func(t *testing.T, addrs []string, url string) {
		for _, a := range addrs {
			if _, err := redistest.Do(a, args...); err != nil {
				t.Fatalf("%s: %v", strings.Join(args, " "), err)
			}
			if _, err := redistest.Do(a, "CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
		}
		st, err := redisstore.New(redisstore.Config{URL: url})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		everyFeature(t, st, addrs)
		c := st.Client()
		if err := c.Do(context.Background(), c.B().Set().Key("other:key").Value("x").Build()).Error(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("a key outside the prefix: %v, want NOPERM", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, a := range addrs {
			for cmd := range commandStats(t, a) {
				used[cmd] = true
			}
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		t.Run("standalone", func(t *testing.T) {
			srv, err := redistest.Start()
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			run(t, []string{srv.Addr}, "redis://fairgate:"+aclPassword+"@"+srv.Addr+"/1")
		})
	})
	wg.Go(func() {
		t.Run("cluster", func(t *testing.T) {
			cl, err := redistest.StartCluster(3, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			run(t, cl.Addrs(), "redis-cluster://fairgate:"+aclPassword+"@"+strings.Join(cl.Addrs(), ","))
		})
	})
	wg.Wait()
	if t.Failed() {
		t.Logf("commands the user ran: %v", slices.Sorted(mapKeys(used)))
	}
	// The commands the test's own connections ran as the default user.
	for _, c := range []string{"acl|setuser", "config|resetstat"} {
		delete(used, c)
	}
	for _, cmd := range slices.Sorted(mapKeys(used)) {
		if !allows(grants, cmd) && !slices.Contains(tolerated, cmd) {
			t.Errorf("fairgate ran %s, which the ACL line of docs/redis.md does not allow: add +%s", strings.ToUpper(cmd), cmd)
		}
	}
	for _, g := range grants {
		if !used[g] && !slices.Contains(unseen, g) {
			t.Errorf("the ACL line of docs/redis.md allows +%s, which no feature ran: remove it (or grant only the subcommands run)", g)
		}
	}
}

// TestACLWithoutTracking: an ACL user with the line of docs/redis.md but
// for +client|tracking and +client|caching (the line before fairgate
// cached its polls) still connects and runs every feature: the store says
// it has no client tracking, and a cached read (the overlay's version)
// then goes to Redis each time, so that a change is seen at the next
// read.
func TestACLWithoutTracking(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	args := slices.DeleteFunc(docACL(t), func(a string) bool { return a == "+client|tracking" || a == "+client|caching" })
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := redistest.Do(srv.Addr, args...); err != nil {
		t.Fatal(err)
	}
	st, err := redisstore.New(redisstore.Config{URL: "redis://fairgate:" + aclPassword + "@" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if st.Tracking() {
		t.Fatal("Tracking() = true for a user that may not CLIENT TRACKING")
	}
	everyFeature(t, st, []string{srv.Addr})
	ctl := redisctl.New(st.Client(), st.Prefix())
	ctx := context.Background()
	v0, err := ctl.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ctl.PutTenant(ctx, "acme", policy.Tenant{Burst: 3}); err != nil {
		t.Fatal(err)
	}
	if v, err := ctl.Version(ctx); err != nil || v != v0+1 {
		t.Errorf("the version after a write, read at once: %d, %v; want %d", v, err, v0+1)
	}
}

// TestACLCoversScripts: every command a Lua script of the module can call,
// in any branch (some run only past a bound, such as the API keys' change
// log trimmed at apikeys.LogMax), is allowed by the ACL line of
// docs/redis.md.
func TestACLCoversScripts(t *testing.T) {
	grants := granted(docACL(t))
	// A command, and its second word when that is a literal (XGROUP
	// CREATE): an ACL line may allow only that subcommand.
	call := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'(?:\s*,\s*'([A-Za-z]+)')?`)
	n := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bench" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".lua") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			n++
			cmd := strings.ToLower(m[1])
			if !allows(grants, cmd) && (m[2] == "" || !allows(grants, cmd+"|"+strings.ToLower(m[2]))) {
				t.Errorf("%s calls %s, which the ACL line of docs/redis.md does not allow", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("found %d redis.call sites in the module's scripts: the walk missed them", n)
	}
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// commandStats returns the commands the server at addr ran (or refused)
// since its last CONFIG RESETSTAT, from INFO commandstats: lower-case,
// "command|subcommand" for a container command's.
func commandStats(t *testing.T, addr string) map[string]bool {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		total := 0
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k == "calls" || k == "rejected_calls" || k == "failed_calls" {
				n, _ := strconv.Atoi(v)
				total += n
			}
		}
		if total > 0 {
			out[name] = true
		}
	}
	return out
}

// everyFeature runs, on st, every feature of fairgate that touches Redis,
// taking each script branch that runs a command of its own: decisions
// under every algorithm (taken, peeked, batched, coalesced, over several
// cluster slots with a refund), holds and resets, concurrency slots
// (acquire, renew, release), the run-time overlay through
// limiter.Policies, stored API keys (create, update, list, look up, touch,
// revoke, sync, the change log's trim), a job queue's every path (ack,
// nack and retry, an expired lease claimed again, dead letters) and
// outbound quotas (pause, acquire). addrs are the servers, for the set-up
// the default user makes.
func everyFeature(t *testing.T, st *redisstore.Store, addrs []string) {
	ctx := context.Background()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// Decisions, straight on the store.
	var res store.Result
	var batch []store.Check
	for _, a := range algo.Algorithms {
		l := algo.Limit{Limit: 5, Period: time.Minute, Algorithm: a}
		c := store.Check{Key: "rl:{t:acme}:all:" + a.String(), Limit: l, Cost: 1}
		if err := st.Take(ctx, []store.Check{c}, &res); err != nil || !res.Allowed {
			t.Errorf("take under %v: %v %+v", a, err, res)
		}
		c.Cost = 0
		must("peek under "+a.String(), st.Take(ctx, []store.Check{c}, &res))
		c.Cost = 1
		batch = append(batch, c)
	}
	must("a batch of every algorithm", st.Take(ctx, batch, &res))
	// Concurrent batches on one slot are coalesced into one script call.
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			var r store.Result
			cs := batch
			if i%2 == 0 {
				cs = batch[i%len(batch) : i%len(batch)+1]
			}
			must("a coalesced take", st.Take(ctx, cs, &r))
		})
	}
	wg.Wait()
	// Over several hash tags (cluster slots): one part rejects, the
	// others are refunded.
	one := algo.Limit{Limit: 1, Period: time.Hour}
	spread := []store.Check{{Key: "rl:{t:a1}:x", Limit: one, Cost: 1}, {Key: "rl:{t:b2}:x", Limit: one, Cost: 1}, {Key: "rl:{t:c3}:x", Limit: one, Cost: 1}}
	must("take over three hash tags", st.Take(ctx, spread[2:], &res))
	if err := st.Take(ctx, spread, &res); err != nil || res.Allowed {
		t.Errorf("take over three hash tags, one full: %v %+v, want refused", err, res)
	}
	must("hold", st.Hold(ctx, "ob:{p:sms}:all", algo.PerSecond(10), time.Second))
	must("reset", st.Reset(ctx, "rl:{t:acme}:all:gcra"))

	// Decisions, slots and the overlay through the limiter.
	var rules []policy.Rule
	for _, a := range algo.Algorithms {
		rules = append(rules, policy.Rule{Name: a.String(), Limit: algo.Limit{Limit: 100, Period: time.Minute, Algorithm: a}})
	}
	lim, err := limiter.New(limiter.Config{
		Store: st, Control: redisctl.New(st.Client(), st.Prefix()), NoNearCache: true,
		Policy: policy.Policy{
			Plans:       map[string]policy.Plan{"pro": {Name: "pro", Rules: rules, Concurrency: 4}},
			DefaultPlan: "pro", Classes: map[string]policy.Class{"read": {Name: "read", Share: 1}}, DefaultClass: "read",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := lim.Decide(ctx, policy.Request{Tenant: "globex", Method: "GET", Path: "/x"})
	if err != nil || !d.Allowed || d.Slots == nil {
		t.Errorf("a decision under every algorithm with a concurrency slot: %v %+v", err, d)
	} else {
		must("slot renew", d.Slots.Renew(ctx))
		must("slot release", d.Slots.Release(ctx))
	}
	if d, err := lim.AcquireSlots(ctx, policy.Request{Tenant: "globex", Class: "read"}, time.Minute); err != nil || !d.Allowed {
		t.Errorf("a worker's slots: %v %+v", err, d)
	} else {
		must("a worker's slots released", lim.ReleaseSlots(ctx, policy.Request{Tenant: "globex", Class: "read"}, d.Slots.ID()))
	}
	must("overlay plan write", lim.PutPlan(ctx, policy.Plan{Name: "team", Rules: []policy.Rule{{Name: "1m", Limit: algo.PerMinute(10)}}}))
	must("overlay override write", lim.PutOverride(ctx, "acme", policy.Tenant{Plan: "team"}))
	must("overlay refresh", lim.Refresh(ctx))
	if ov := lim.Overlay(); ov.Tenants["acme"].Plan != "team" {
		t.Errorf("overlay read: %+v", ov)
	}
	must("overlay delete", lim.DeleteOverride(ctx, "acme"))

	// Stored API keys. The change log is filled to its bound first (by the
	// default user), so that the first write trims it.
	keys := rediskeys.New(st.Client(), st.Prefix())
	fill := []string{"ZADD", st.Prefix() + "{apikeys}:log"}
	for i := range apikeys.LogMax {
		fill = append(fill, strconv.Itoa(i+1), fmt.Sprintf("%016x", i))
	}
	for _, a := range addrs {
		if _, err := redistest.Do(a, fill...); err == nil {
			_, err = redistest.Do(a, "SET", st.Prefix()+"{apikeys}:version", strconv.Itoa(apikeys.LogMax))
			must("the API keys' version", err)
			break
		} else if !strings.HasPrefix(err.Error(), "MOVED") {
			t.Errorf("filling the API keys' change log: %v", err)
		}
	}
	set, err := apikeys.New(apikeys.Config{Backend: keys})
	if err != nil {
		t.Fatal(err)
	}
	must("API keys: first sync", set.Sync(ctx))
	must("API keys: a poll (the version, cached)", set.Poll(ctx))
	key, rec, err := set.Create(ctx, apikeys.Record{Tenant: "acme", Plan: "team"})
	must("API keys: create", err)
	if _, err := set.Lookup(apikeys.Sum(key)); err != nil {
		t.Errorf("API keys: the key made is not in force: %v", err)
	}
	_, err = set.Update(ctx, rec.ID, "ci", time.Time{})
	must("API keys: update", err)
	must("API keys: touch", keys.Touch(ctx, map[string]int64{rec.ID: time.Now().Unix()}))
	if ks, _, err := set.List(ctx, apikeys.ListOptions{Tenant: "acme"}); err != nil || len(ks) != 1 || ks[0].LastUsed.IsZero() {
		t.Errorf("API keys: list: %v %+v", err, ks)
	}
	other, err := apikeys.New(apikeys.Config{Backend: keys})
	if err != nil {
		t.Fatal(err)
	}
	must("API keys: a second instance's sync", other.Sync(ctx))
	must("API keys: revoke", set.Revoke(ctx, rec.ID))
	must("API keys: a second instance's sync of the revoke", other.Sync(ctx))
	if _, err := other.Lookup(apikeys.Sum(key)); err == nil {
		t.Errorf("API keys: a revoked key is still in force on the second instance")
	}

	// A job queue through every path.
	q, err := redisq.New(redisq.Config{Client: st.Client(), Prefix: st.Prefix(), Kinds: fairq.Kinds{
		"report": {Visibility: time.Minute, MaxAttempts: 2},
		"short":  {Visibility: 50 * time.Millisecond, MaxAttempts: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := q.Enqueue(ctx, "acme", "report", []byte("x"))
		must("enqueue", err)
	}
	lease := func(kind string) fairq.Lease {
		t.Helper()
		l, ok, err := q.Lease(ctx, kind)
		if err != nil || !ok {
			t.Errorf("lease of %s: %v %v", kind, ok, err)
		}
		return l
	}
	l := lease("report")
	must("ack", q.Ack(ctx, "report", l.ID, l.Token))
	l = lease("report")
	must("nack", q.Nack(ctx, "report", l.ID, l.Token, time.Millisecond))
	time.Sleep(5 * time.Millisecond)
	l = lease("report") // the retry, back in line
	must("nack to the dead letters", q.Nack(ctx, "report", l.ID, l.Token, 0))
	_, err = q.Get(ctx, "acme", l.ID)
	must("get", err)
	_, _, err = q.Depth(ctx, "report", "acme")
	must("depth", err)
	_, err = q.Enqueue(ctx, "acme", "short", []byte("x"))
	must("enqueue", err)
	lease("short")
	time.Sleep(100 * time.Millisecond)
	lease("short") // the expired lease, claimed again
	time.Sleep(100 * time.Millisecond)
	if _, ok, err := q.Lease(ctx, "short"); err != nil || ok { // out of attempts: a dead letter
		t.Errorf("lease of a job out of attempts: %v %v, want none", ok, err)
	}
	if dead, err := q.DeadLetters(ctx, "short"); err != nil || len(dead) != 1 {
		t.Errorf("dead letters: %v %v", dead, err)
	}

	// Outbound quotas.
	qs, err := quota.New(quota.Config{Store: st, Providers: map[string]quota.Provider{"sms": {Limit: algo.PerSecond(100)}}})
	if err != nil {
		t.Fatal(err)
	}
	must("pause", qs.Pause(ctx, "sms", time.Millisecond))
	time.Sleep(2 * time.Millisecond)
	must("acquire", qs.Acquire(ctx, "sms", "acme"))
}
