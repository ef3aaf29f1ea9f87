package limiter

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// isoRequest is one request of the isolation property: a tenant, a class
// and a time.
type isoRequest struct {
	tenant, class string
	at            time.Time
}

// isoOutcome is what a tenant sees of one decision.
type isoOutcome struct {
	Allowed bool
	Layers  []string // policy, limit, allowed, remaining, retry
}

// decideAll runs reqs against the policy (with the overlay) on a fresh
// memory store and returns each request's outcome.
func decideAll(t *testing.T, p policy.Policy, ov policy.Overlay, reqs []isoRequest) []isoOutcome {
	t.Helper()
	snap, err := policy.CompileWith(p, ov)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	st := memstore.New(memstore.Config{})
	out := make([]isoOutcome, len(reqs))
	for i, r := range reqs {
		res, err := snap.Resolve(policy.Request{Tenant: r.tenant, Class: r.class}, r.at)
		if err != nil {
			t.Fatalf("resolve %+v: %v", r, err)
		}
		var sr store.Result
		if err := st.TakeAt(context.Background(), r.at, checksOf(res), &sr); err != nil {
			t.Fatalf("take %+v: %v", r, err)
		}
		o := isoOutcome{Allowed: sr.Allowed}
		for k, l := range res.Layers {
			d := sr.Decisions[k]
			o.Layers = append(o.Layers, fmt.Sprintf("%s %v %v %d %v", l.Policy, l.Limit, d.Allowed, d.Remaining, d.RetryAfter))
		}
		out[i] = o
	}
	return out
}

// TestTenantIsolation is the property that one tenant's settings never
// reach another: over random policies (plans with rolling and calendar
// rules, tenants with overrides in the file and written at run time) and
// random orders of requests, each tenant's decisions equal those of its
// own requests against a policy compiled for that tenant alone. Today's
// finding: tenants shared their plan's cached calendar window, which
// remembered the limit of whichever tenant computed it first.
func TestTenantIsolation(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	tenants := []string{"initech", "bystander-co", "nobody", "acme", "globex"}
	for run := range 60 {
		p := policy.Policy{
			DefaultPlan:  "free",
			DefaultClass: "read",
			Plans:        map[string]policy.Plan{},
			Classes:      map[string]policy.Class{"read": {Share: 1}, "search": {Share: 0.5}},
			Tenants:      map[string]policy.Tenant{},
		}
		for _, plan := range []string{"free", "team"} {
			rules := []policy.Rule{{Name: "1m", Limit: algo.Limit{Limit: 5 + rng.Int64N(50), Period: time.Minute}}}
			if rng.IntN(4) > 0 {
				rules = append(rules, policy.Rule{Name: "daily", Limit: algo.Limit{Limit: 3 + rng.Int64N(30)}, Calendar: policy.Day})
			}
			if rng.IntN(2) == 0 {
				rules = append(rules, policy.Rule{Name: "monthly", Limit: algo.Limit{Limit: 3 + rng.Int64N(60)}, Calendar: policy.Month})
			}
			p.Plans[plan] = policy.Plan{Rules: rules}
		}
		override := func() policy.Tenant {
			tn := policy.Tenant{}
			if rng.IntN(2) == 0 {
				tn.Plan = "team"
			}
			rules := p.Plans[map[bool]string{true: "team", false: "free"}[tn.Plan == "team"]].Rules
			switch rng.IntN(3) {
			case 0:
				tn.Limit = 1 + rng.Int64N(40)
			case 1:
				r := rules[rng.IntN(len(rules))]
				tn.Rules = map[string]policy.RuleOverride{r.Name: {Limit: 1 + rng.Int64N(40)}}
			}
			return tn
		}
		var ov policy.Overlay
		for _, id := range tenants {
			switch rng.IntN(3) {
			case 0:
				p.Tenants[id] = override()
			case 1:
				if ov.Tenants == nil {
					ov.Tenants = map[string]policy.Tenant{}
				}
				ov.Tenants[id] = override()
			}
		}
		// Requests near the end of a UTC day and month, so that calendar
		// windows turn over during the run.
		at := time.Date(2026, 11, 30, 23, 58, 0, 0, time.UTC)
		var reqs []isoRequest
		for range 150 {
			at = at.Add(time.Duration(rng.Int64N(int64(3 * time.Second))))
			reqs = append(reqs, isoRequest{tenant: tenants[rng.IntN(len(tenants))], class: []string{"read", "search"}[rng.IntN(2)], at: at})
		}
		all := decideAll(t, p, ov, reqs)
		for _, id := range tenants {
			var mine []isoRequest
			var want []isoOutcome
			for i, r := range reqs {
				if r.tenant == id {
					mine, want = append(mine, r), append(want, all[i])
				}
			}
			alone := p
			alone.Tenants = map[string]policy.Tenant{}
			if tn, ok := p.Tenants[id]; ok {
				alone.Tenants[id] = tn
			}
			aloneOv := policy.Overlay{}
			if tn, ok := ov.Tenants[id]; ok {
				aloneOv.Tenants = map[string]policy.Tenant{id: tn}
			}
			if diff := cmp.Diff(decideAll(t, alone, aloneOv, mine), want); diff != "" {
				t.Fatalf("run %d (seed %d): tenant %s decided with others differs from alone (-alone +with others):\n%s\npolicy %+v\noverlay %+v", run, seed, id, diff, p, ov)
			}
		}
	}
}

// TestLogsSayMilliseconds: a rejection's log line gives the wait in
// milliseconds with the unit in the name (today "retry_after":19912556000,
// nanoseconds).
func TestLogsSayMilliseconds(t *testing.T) {
	var buf strings.Builder
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: testPolicy(), Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 40 {
		if _, err := l.Decide(context.Background(), policy.Request{Tenant: "newco", Class: "read"}); err != nil {
			t.Fatal(err)
		}
	}
	line := buf.String()
	m := regexp.MustCompile(`"retry_after_ms":(\d+)[,}]`).FindStringSubmatch(line)
	if !strings.Contains(line, `"msg":"limited"`) || m == nil || strings.Contains(line, `"retry_after":`) {
		t.Fatalf("log %s, want retry_after_ms", line)
	}
	if ms, _ := strconv.Atoi(m[1]); ms < 1 || ms > 500 {
		t.Fatalf("retry_after_ms %d, want at most 500 (120 per minute)", ms)
	}
}
