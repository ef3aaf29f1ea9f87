package redisstore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/fairq/redisq"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/limiter/redisctl"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/quota"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

// TestACLUser creates the ACL user of docs/redis.md, exactly as written
// there, and runs every feature that touches Redis as that user: decisions
// under every algorithm (alone and batched), a hold, a reset, the run-time
// overlay, a job queue's whole cycle and an outbound quota. A key outside
// the prefix is refused.
func TestACLUser(t *testing.T) {
	t.Parallel()
	redistest.Need(t)
	doc, err := os.ReadFile("../../docs/redis.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(doc), "<!-- acl -->\n```\n")
	line, _, _ := strings.Cut(rest, "\n```")
	args := strings.Fields(strings.ReplaceAll(line, ">PASSWORD", ">acl-test-password"))
	if len(args) < 5 || args[0] != "ACL" {
		t.Fatalf("no ACL line in docs/redis.md: %q", line)
	}
	srv, err := redistest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := redistest.Do(srv.Addr, args...); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	st, err := redisstore.New(redisstore.Config{URL: "redis://fairgate:acl-test-password@" + srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	var res store.Result
	var batch []store.Check
	for _, a := range algo.Algorithms {
		l := algo.Limit{Limit: 5, Period: time.Minute, Algorithm: a}
		c := store.Check{Key: "rl:{t:acme}:all:" + a.String(), Limit: l, Cost: 1}
		if err := st.Take(ctx, []store.Check{c}, &res); err != nil || !res.Allowed {
			t.Fatalf("take under %v: %v %+v", a, err, res)
		}
		batch = append(batch, c)
	}
	if err := st.Take(ctx, batch, &res); err != nil {
		t.Fatalf("a batch of every algorithm: %v", err)
	}
	if err := st.Hold(ctx, "ob:{p:sms}:all", algo.PerSecond(10), time.Second); err != nil {
		t.Fatalf("hold: %v", err)
	}
	if err := st.Reset(ctx, "rl:{t:acme}:all:gcra"); err != nil {
		t.Fatalf("reset: %v", err)
	}
	if r, err := store.AcquireSlot(ctx, st, "rl:{t:acme}:conc", "lease-1", 2, time.Minute); err != nil || !r.Acquired {
		t.Fatalf("concurrency slot: %v %+v", err, r)
	}
	if err := st.ReleaseSlots(ctx, "lease-1", []string{"rl:{t:acme}:conc"}); err != nil {
		t.Fatalf("slot release: %v", err)
	}
	ctl := redisctl.New(st.Client(), st.Prefix())
	if err := ctl.PutTenant(ctx, "acme", policy.Tenant{Plan: "team"}); err != nil {
		t.Fatalf("overlay write: %v", err)
	}
	if err := ctl.PutPlan(ctx, policy.Plan{Name: "team", Rules: []policy.Rule{{Limit: algo.PerMinute(10)}}}); err != nil {
		t.Fatalf("overlay plan write: %v", err)
	}
	if ov, err := ctl.Load(ctx); err != nil || ov.Tenants["acme"].Plan != "team" {
		t.Fatalf("overlay read: %v %+v", err, ov)
	}
	if err := ctl.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatalf("overlay delete: %v", err)
	}
	q, err := redisq.New(redisq.Config{Client: st.Client(), Prefix: st.Prefix(), Kinds: fairq.Kinds{"report": {Visibility: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := q.Enqueue(ctx, "acme", "report", []byte("x")); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
	l, ok, err := q.Lease(ctx, "report")
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	if err := q.Ack(ctx, "report", l.ID, l.Token); err != nil {
		t.Fatalf("ack: %v", err)
	}
	if l, ok, err = q.Lease(ctx, "report"); err != nil || !ok {
		t.Fatalf("second lease: %v %v", ok, err)
	}
	if err := q.Nack(ctx, "report", l.ID, l.Token, time.Second); err != nil {
		t.Fatalf("nack: %v", err)
	}
	if _, err := q.Get(ctx, "acme", l.ID); err != nil {
		t.Fatalf("get: %v", err)
	}
	if _, _, err := q.Depth(ctx, "report", "acme"); err != nil {
		t.Fatalf("depth: %v", err)
	}
	qs, err := quota.New(quota.Config{Store: st, Providers: map[string]quota.Provider{"sms": {Limit: algo.PerSecond(100)}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.Pause(ctx, "sms", time.Millisecond); err != nil {
		t.Fatalf("pause: %v", err)
	}
	time.Sleep(2 * time.Millisecond)
	if err := qs.Acquire(ctx, "sms", "acme"); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	c := st.Client()
	if err := c.Do(ctx, c.B().Set().Key("other:key").Value("x").Build()).Error(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a key outside the prefix: %v, want NOPERM", err)
	}
}
