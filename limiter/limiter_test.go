package limiter

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
	_ "time/tzdata" // calendar tests need zones whatever the machine has

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

func perMin(n, burst int64) algo.Limit {
	return algo.Limit{Limit: n, Period: time.Minute, Burst: burst}
}

// testPolicy mirrors examples/fairgate.yaml in Go.
func testPolicy() Policy {
	return Policy{
		DefaultPlan:  "free",
		DefaultClass: "read",
		Plans: map[string]Plan{
			"free": {Rules: []Rule{
				{Limit: perMin(120, 30)},
				{Name: "daily", Limit: algo.Limit{Limit: 10_000}, Calendar: Day},
			}},
			"team":       {Rules: []Rule{{Limit: perMin(1200, 200)}}},
			"enterprise": {Rules: []Rule{{Limit: perMin(6000, 600)}}},
		},
		Classes: map[string]Class{
			"read":   {Share: 1},
			"write":  {Share: 0.5, Fail: FailClosed},
			"search": {Share: 0.25},
			"export": {Share: 0.1, Fail: FailClosed, Shadow: true},
		},
		Routes: []Route{
			{Pattern: "GET /healthz", Class: "read", Cost: 0},
			{Pattern: "GET /v1/users/{id}", Class: "read", Cost: 1},
			{Pattern: "POST /v1/users", Class: "write", Cost: 1},
			{Pattern: "GET /v1/search", Class: "search", Cost: 1},
			{Pattern: "POST /v1/reports", Class: "export", Cost: 3},
		},
		Anonymous: []AnonRoute{{
			Name: "login", Pattern: "POST /v1/login", Cost: 1, Fail: FailClosed,
			Rules: []AnonRule{
				{Rule: Rule{Limit: perMin(10, 0)}, By: ByIP},
				{Rule: Rule{Name: "per-user", Limit: algo.Limit{Limit: 5, Period: 15 * time.Minute}}, By: ByCredential},
			},
		}},
		Tenants: map[string]Tenant{
			"acme":   {Plan: "enterprise"},
			"globex": {Plan: "team", Burst: 400, Shares: map[string]float64{"search": 0.5}},
		},
	}
}

// layerRow is what the resolution table compares.
type layerRow struct {
	Policy, Key  string
	Limit, Burst int64
	Period       time.Duration
	Offset       time.Duration
	Shadow       bool
}

func rows(ls []Layer) []layerRow {
	var out []layerRow
	for _, l := range ls {
		out = append(out, layerRow{l.Policy, l.Key, l.Limit.Limit, l.Limit.Capacity(), l.Limit.Period, l.Limit.Offset, l.Shadow})
	}
	return out
}

var noon = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestResolve(t *testing.T) {
	snap, err := Compile(testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	free := []layerRow{
		{"free.tenant.1m", "rl:{t:newco}:all:1m", 120, 30, time.Minute, 0, false},
		{"free.tenant.daily", "rl:{t:newco}:all:daily:d20261202", 10_000, 10_000, day, 0, false},
	}
	for _, tc := range []struct {
		name   string
		req    Request
		cost   int64
		class  string
		layers []layerRow
		err    error
	}{
		{"unlisted tenant, read route: default plan, no class layer (share 1)",
			Request{Tenant: "newco", Method: "GET", Path: "/v1/users/7"}, 1, "read", free, nil},
		{"unknown route: default class",
			Request{Tenant: "newco", Method: "DELETE", Path: "/nowhere"}, 1, "read", free, nil},
		{"search: class layer at a quarter, quotas only overall",
			Request{Tenant: "newco", Method: "GET", Path: "/v1/search"}, 1, "search", append([]layerRow{
				{"free.search.1m", "rl:{t:newco}:c:search:1m", 30, 8, time.Minute, 0, false},
			}, free...), nil},
		{"enterprise tenant",
			Request{Tenant: "acme", Method: "POST", Path: "/v1/users"}, 1, "write", []layerRow{
				{"enterprise.write.1m", "rl:{t:acme}:c:write:1m", 3000, 300, time.Minute, 0, false},
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"override: burst and share",
			Request{Tenant: "globex", Method: "GET", Path: "/v1/search"}, 1, "search", []layerRow{
				{"team.search.1m", "rl:{t:globex}:c:search:1m", 600, 200, time.Minute, 0, false},
				{"team.tenant.1m", "rl:{t:globex}:all:1m", 1200, 400, time.Minute, 0, false},
			}, nil},
		{"shadow class: its own layer shadow, the overall enforced; route cost",
			Request{Tenant: "acme", Method: "POST", Path: "/v1/reports"}, 3, "export", []layerRow{
				{"enterprise.export.1m", "rl:{t:acme}:c:export:1m", 600, 60, time.Minute, 0, true},
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"explicit class and cost",
			Request{Tenant: "acme", Class: "search", Cost: 5, HasCost: true}, 5, "search", []layerRow{
				{"enterprise.search.1m", "rl:{t:acme}:c:search:1m", 1500, 150, time.Minute, 0, false},
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"free route",
			Request{Tenant: "acme", Method: "GET", Path: "/healthz"}, 0, "read", []layerRow{
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"anonymous by IPv4 and credential",
			Request{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("192.0.2.7"), Credential: "ann@example.com"}, 1, "login", []layerRow{
				{"anonymous.login.1m", "rl:{ip:192.0.2.7}:a:login:1m", 10, 10, time.Minute, 0, false},
				{"anonymous.login.per-user", "rl:{cr:" + hashB64("ann@example.com") + "}:a:login:per-user", 5, 5, 15 * time.Minute, 0, false},
			}, nil},
		{"anonymous IPv6 per /64, no credential: by IP",
			Request{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("2001:db8:1:2:3:4:5:6")}, 1, "login", []layerRow{
				{"anonymous.login.1m", "rl:{ip:2001:db8:1:2::/64}:a:login:1m", 10, 10, time.Minute, 0, false},
				{"anonymous.login.per-user", "rl:{ip:2001:db8:1:2::/64}:a:login:per-user", 5, 5, 15 * time.Minute, 0, false},
			}, nil},
		{"IPv4-mapped IPv6 is the IPv4 address",
			Request{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("::ffff:192.0.2.7")}, 1, "login", []layerRow{
				{"anonymous.login.1m", "rl:{ip:192.0.2.7}:a:login:1m", 10, 10, time.Minute, 0, false},
				{"anonymous.login.per-user", "rl:{ip:192.0.2.7}:a:login:per-user", 5, 5, 15 * time.Minute, 0, false},
			}, nil},
		{"plan from the credential, for an unlisted tenant",
			Request{Tenant: "newco", Plan: "team", Class: "read"}, 1, "read", []layerRow{
				{"team.tenant.1m", "rl:{t:newco}:all:1m", 1200, 200, time.Minute, 0, false},
			}, nil},
		{"the policy's entry wins over the credential's plan",
			Request{Tenant: "acme", Plan: "free", Class: "read"}, 1, "read", []layerRow{
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"no tenant on a tenant route", Request{Method: "GET", Path: "/v1/users/1"}, 0, "", nil, ErrNoTenant},
		{"unknown class", Request{Tenant: "acme", Class: "bulk"}, 0, "", nil, ErrUnknownClass},
		{"cost over a layer's burst", Request{Tenant: "newco", Class: "search", Cost: 9, HasCost: true}, 9, "search", nil, ErrBadCost},
		{"negative cost", Request{Tenant: "newco", Class: "read", Cost: -1, HasCost: true}, -1, "read", nil, ErrBadCost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := snap.Resolve(tc.req, noon)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Resolve error = %v, want %v", err, tc.err)
			}
			if tc.err != nil {
				return
			}
			if res.Cost != tc.cost || res.Class != tc.class {
				t.Errorf("cost, class = %d, %q; want %d, %q", res.Cost, res.Class, tc.cost, tc.class)
			}
			if diff := cmp.Diff(tc.layers, rows(res.Layers)); diff != "" {
				t.Errorf("layers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCalendarWindows(t *testing.T) {
	p := testPolicy()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err) // time/tzdata is linked in below: this never needs the system's
	}
	p.Location = berlin
	p.Plans["free"] = Plan{Rules: []Rule{{Limit: perMin(120, 30)}, {Name: "monthly", Limit: algo.Limit{Limit: 100}, Calendar: Month}, {Name: "daily", Limit: algo.Limit{Limit: 10}, Calendar: Day}}}
	snap, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at                   time.Time
		monthKey, dayKey     string
		monthStart, monthEnd time.Time
		dayStart, dayEnd     time.Time
	}{
		{ // 23:30 UTC on 31 Dec is already 1 Jan in Berlin
			time.Date(2026, 12, 31, 23, 30, 0, 0, time.UTC), "m202701", "d20270101",
			time.Date(2027, 1, 1, 0, 0, 0, 0, berlin), time.Date(2027, 2, 1, 0, 0, 0, 0, berlin),
			time.Date(2027, 1, 1, 0, 0, 0, 0, berlin), time.Date(2027, 1, 2, 0, 0, 0, 0, berlin)},
		{ // the day the clocks go forward has 23 hours
			time.Date(2027, 3, 28, 12, 0, 0, 0, berlin), "m202703", "d20270328",
			time.Date(2027, 3, 1, 0, 0, 0, 0, berlin), time.Date(2027, 4, 1, 0, 0, 0, 0, berlin),
			time.Date(2027, 3, 28, 0, 0, 0, 0, berlin), time.Date(2027, 3, 29, 0, 0, 0, 0, berlin)},
	} {
		res, err := snap.Resolve(Request{Tenant: "x", Class: "read"}, tc.at)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []struct {
			key        string
			start, end time.Time
		}{{tc.monthKey, tc.monthStart, tc.monthEnd}, {tc.dayKey, tc.dayStart, tc.dayEnd}} {
			l := res.Layers[i+1]
			if got := l.Key[len(l.Key)-len(want.key):]; got != want.key {
				t.Errorf("%v: key %q, want suffix %q", tc.at, l.Key, want.key)
			}
			if l.Limit.Period != want.end.Sub(want.start) {
				t.Errorf("%v %s: period %v, want %v", tc.at, want.key, l.Limit.Period, want.end.Sub(want.start))
			}
			// The fixed window that holds now must start at the calendar start.
			now := tc.at.UnixMicro()
			per, off := int64(l.Limit.Period/time.Microsecond), int64(l.Limit.Offset/time.Microsecond)
			if ws := now - ((now-off)%per+per)%per; ws != want.start.UnixMicro() {
				t.Errorf("%v %s: window starts %v, want %v", tc.at, want.key, time.UnixMicro(ws).In(berlin), want.start)
			}
			if err := l.Limit.Validate(); err != nil {
				t.Error(err)
			}
		}
	}
}

func newLimiter(t *testing.T, st store.Store, mod func(*Config)) *Limiter {
	t.Helper()
	c := Config{Store: st, Policy: testPolicy(), Now: func() time.Time { return noon }}
	if mod != nil {
		mod(&c)
	}
	l, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestDecideIsAllOrNothing(t *testing.T) {
	ms := memstore.New(memstore.Config{})
	l := newLimiter(t, ms, nil)
	ctx := context.Background()
	search := Request{Tenant: "newco", Method: "GET", Path: "/v1/search"}
	for i := range 8 { // the search class's burst
		if d, _ := l.Decide(ctx, search); !d.Allowed {
			t.Fatalf("search %d rejected: %+v", i, d)
		}
	}
	d, err := l.Decide(ctx, search)
	if err != nil || d.Allowed || d.Reason != ReasonLimited || d.Policy != "free.search.1m" || d.RetryAfter <= 0 {
		t.Fatalf("9th search = %+v, %v; want limited by free.search.1m", d, err)
	}
	// The tenant's overall layer was charged 8, not 9.
	tl, err := l.Effective(ctx, "newco")
	if err != nil {
		t.Fatal(err)
	}
	for _, ly := range tl.Layers {
		if ly.Policy == "free.tenant.1m" && ly.Remaining != 30-8 {
			t.Errorf("overall remaining %d, want %d: a rejected batch charged the wide layer", ly.Remaining, 30-8)
		}
	}
	// Other classes still pass, and the overall limit binds them.
	if d, _ := l.Decide(ctx, Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}); !d.Allowed {
		t.Errorf("read after search limit rejected: %+v", d)
	}
}

func TestShadowCountsAndEnforcesNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	ms := memstore.New(memstore.Config{})
	l := newLimiter(t, ms, func(c *Config) { c.Registerer = reg })
	ctx := context.Background()
	export := Request{Tenant: "newco", Method: "POST", Path: "/v1/reports"} // cost 3, class burst 3 (share 0.1 of 30)
	var shadowed int
	for range 5 {
		d, err := l.Decide(ctx, export)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			t.Fatalf("shadow class rejected: %+v", d)
		}
		if d.Reason == ReasonShadowLimited {
			shadowed++
		}
	}
	if shadowed != 4 {
		t.Errorf("%d shadow-limited decisions, want 4 (the class burst admits one cost-3 export)", shadowed)
	}
	if got := counter(t, reg, "fairgate_shadow_rejections_total", "policy", "free.export.1m"); got != 4 {
		t.Errorf("fairgate_shadow_rejections_total{policy=free.export.1m} = %v, want 4", got)
	}
	// The class is shadowed, not the tenant: the five exports (cost 15)
	// still count against the enforced overall limit (burst 30), which now
	// admits 15 reads and no more.
	for i := range 16 {
		d, _ := l.Decide(ctx, Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"})
		if want := i < 15; d.Allowed != want {
			t.Fatalf("read %d allowed=%v, want %v", i, d.Allowed, want)
		}
	}
}

func TestShadowRuleInEnforcedClass(t *testing.T) {
	p := testPolicy()
	p.Plans["free"] = Plan{Rules: []Rule{{Limit: perMin(120, 30)}, {Name: "trial", Limit: perMin(2, 2), Shadow: true}}}
	p.Routes = p.Routes[:4] // the export route costs more than the trial rule's share
	l, err := New(Config{Store: memstore.New(memstore.Config{}), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}
	for i := range 5 {
		d, _ := l.Decide(ctx, req)
		if !d.Allowed {
			t.Fatalf("request %d rejected by a shadow rule: %+v", i, d)
		}
		if wantShadow := i >= 2; (d.Reason == ReasonShadowLimited) != wantShadow {
			t.Errorf("request %d: reason %v", i, d.Reason)
		}
	}
	tl, _ := l.Effective(ctx, "newco")
	for _, ly := range tl.Layers {
		if ly.Policy == "free.tenant.1m" && ly.Remaining != 25 {
			t.Errorf("enforced layer remaining %d after 5 requests, want 25", ly.Remaining)
		}
	}
}

// downStore is a store that is out: every call fails as Redis would.
type downStore struct{}

func (downStore) Take(context.Context, []store.Check, *store.Result) error {
	return store.ErrUnavailable
}
func (downStore) Close() error { return nil }

func TestFailModes(t *testing.T) {
	ctx := context.Background()
	fb := memstore.New(memstore.Config{})
	l := newLimiter(t, downStore{}, func(c *Config) { c.Fallback = fb })
	// read fails open: the fallback limits it per instance.
	read := Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}
	for i := range 31 {
		d, err := l.Decide(ctx, read)
		if err != nil || d.Reason != ReasonDegradedOpen {
			t.Fatalf("read %d: %+v, %v; want degraded_open", i, d, err)
		}
		if d.Allowed != (i < 30) {
			t.Fatalf("read %d allowed=%v: the fallback should admit the burst of 30, then limit", i, d.Allowed)
		}
	}
	// write fails closed.
	d, err := l.Decide(ctx, Request{Tenant: "newco", Method: "POST", Path: "/v1/users"})
	if err != nil || d.Allowed || d.Reason != ReasonUnavailable || d.RetryAfter != UnavailableRetryAfter {
		t.Errorf("write with the store out = %+v, %v; want unavailable_closed, retry 5s", d, err)
	}
}

func TestOverrideExpiresByItself(t *testing.T) {
	now := noon
	l := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Now = func() time.Time { return now } })
	ctx := context.Background()
	if err := l.PutOverride(ctx, "newco", Tenant{Plan: "team", Burst: 999, Expires: noon.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	burst := func() int64 {
		res, err := l.Snapshot().Resolve(Request{Tenant: "newco", Class: "read"}, now)
		if err != nil {
			t.Fatal(err)
		}
		return res.Layers[0].Limit.Capacity()
	}
	if b := burst(); b != 999 {
		t.Errorf("burst with override = %d, want 999", b)
	}
	now = noon.Add(time.Hour)
	if b := burst(); b != 30 {
		t.Errorf("burst after the override expired = %d, want the free plan's 30", b)
	}
	if err := l.PutOverride(ctx, "newco", Tenant{Plan: "team", Expires: noon}); err == nil {
		t.Error("an override that has already expired was accepted")
	}
	// An override that does not fit the policy is refused and changes nothing.
	err := l.PutOverride(ctx, "newco", Tenant{Plan: "gold"})
	var ps Problems
	if !errors.As(err, &ps) {
		t.Errorf("PutOverride(unknown plan) = %v, want Problems", err)
	}
}

// counter reads one counter from reg by name and one label.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestSetPolicyKeepsRunningPolicyOnError(t *testing.T) {
	l := newLimiter(t, memstore.New(memstore.Config{}), nil)
	before := l.Snapshot()
	bad := testPolicy()
	bad.Classes["search"] = Class{Share: 2}
	var ps Problems
	if err := l.SetPolicy(bad); !errors.As(err, &ps) || ps[0].Path != "classes.search.share" {
		t.Fatalf("SetPolicy(bad) = %v, want a Problems naming classes.search.share", err)
	}
	if l.Snapshot() != before {
		t.Error("a policy that does not compile replaced the running one")
	}
	good := testPolicy()
	good.Plans["free"] = Plan{Rules: []Rule{{Limit: perMin(60, 40)}}}
	if err := l.SetPolicy(good); err != nil {
		t.Fatal(err)
	}
	if res, _ := l.Snapshot().Resolve(Request{Tenant: "newco", Class: "read"}, noon); res.Layers[0].Limit.Capacity() != 40 {
		t.Errorf("good policy not applied: %+v", res.Layers)
	}
}

func TestFallbackIsSizedPerInstance(t *testing.T) {
	fb := memstore.New(memstore.Config{})
	l := newLimiter(t, downStore{}, func(c *Config) { c.Fallback = fb; c.Instances = 4 })
	// free: burst 30; each of 4 instances gets 30 × 1.2 / 4 = 9.
	var d Decision
	admitted := 0
	for range 20 {
		d, _ = l.Decide(context.Background(), Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"})
		if d.Allowed {
			admitted++
		}
	}
	if admitted != 9 || d.Reason != ReasonDegradedOpen {
		t.Errorf("fallback admitted %d of 20 (reason %v), want 9: the burst of 30 × 1.2 / 4 instances", admitted, d.Reason)
	}
}

func TestLimitersShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Registerer = reg })
	b := newLimiter(t, memstore.New(memstore.Config{}), func(c *Config) { c.Registerer = reg })
	for _, l := range []*Limiter{a, b} {
		if _, err := l.Decide(context.Background(), Request{Tenant: "newco", Method: "GET", Path: "/v1/users/1"}); err != nil {
			t.Fatal(err)
		}
	}
	if got := counter(t, reg, "fairgate_decisions_total", "policy", "free.tenant.1m"); got != 2 {
		t.Errorf("decisions counted %v, want 2: the second limiter's metrics were lost", got)
	}
}
