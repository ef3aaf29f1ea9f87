package policy_test

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/netip"
	"testing"
	"time"
	_ "time/tzdata" // calendar tests need zones whatever the machine has

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/testpolicy"
	"github.com/fairgate/fairgate/policy"
)

var testPolicy, perMin = testpolicy.Policy, testpolicy.PerMin

func hashB64(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// layerRow is what the resolution table compares.
type layerRow struct {
	Policy, Key  string
	Limit, Burst int64
	Period       time.Duration
	Offset       time.Duration
	Shadow       bool
}

func rows(ls []policy.Layer) []layerRow {
	var out []layerRow
	for _, l := range ls {
		out = append(out, layerRow{l.Policy, l.Key, l.Limit.Limit, l.Limit.Capacity(), l.Limit.Period, l.Limit.Offset, l.Shadow})
	}
	return out
}

var noon = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func TestResolve(t *testing.T) {
	snap, err := policy.Compile(testPolicy())
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
		req    policy.Request
		cost   int64
		class  string
		layers []layerRow
		err    error
	}{
		{"unlisted tenant, read route: default plan, no class layer (share 1)",
			policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/users/7"}, 1, "read", free, nil},
		{"unknown route: default class",
			policy.Request{Tenant: "newco", Method: "DELETE", Path: "/nowhere"}, 1, "read", free, nil},
		{"search: class layer at a quarter, quotas only overall",
			policy.Request{Tenant: "newco", Method: "GET", Path: "/v1/search"}, 1, "search", append([]layerRow{
				{"free.search.1m", "rl:{t:newco}:c:search:1m", 30, 8, time.Minute, 0, false},
			}, free...), nil},
		{"enterprise tenant",
			policy.Request{Tenant: "acme", Method: "POST", Path: "/v1/users"}, 1, "write", []layerRow{
				{"enterprise.write.1m", "rl:{t:acme}:c:write:1m", 3000, 300, time.Minute, 0, false},
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"override: burst and share",
			policy.Request{Tenant: "globex", Method: "GET", Path: "/v1/search"}, 1, "search", []layerRow{
				{"team.search.1m", "rl:{t:globex}:c:search:1m", 600, 200, time.Minute, 0, false},
				{"team.tenant.1m", "rl:{t:globex}:all:1m", 1200, 400, time.Minute, 0, false},
			}, nil},
		{"shadow class: its own layer shadow, the overall enforced; route cost",
			policy.Request{Tenant: "acme", Method: "POST", Path: "/v1/reports"}, 3, "export", []layerRow{
				{"enterprise.export.1m", "rl:{t:acme}:c:export:1m", 600, 60, time.Minute, 0, true},
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"explicit class and cost",
			policy.Request{Tenant: "acme", Class: "search", Cost: 5, HasCost: true}, 5, "search", []layerRow{
				{"enterprise.search.1m", "rl:{t:acme}:c:search:1m", 1500, 150, time.Minute, 0, false},
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"free route",
			policy.Request{Tenant: "acme", Method: "GET", Path: "/healthz"}, 0, "read", []layerRow{
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"anonymous by IPv4 and credential",
			policy.Request{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("192.0.2.7"), Credential: "ann@example.com"}, 1, "login", []layerRow{
				{"anonymous.login.1m", "rl:{ip:192.0.2.7}:a:login:1m", 10, 10, time.Minute, 0, false},
				{"anonymous.login.per-user", "rl:{cr:" + hashB64("ann@example.com") + "}:a:login:per-user", 5, 5, 15 * time.Minute, 0, false},
			}, nil},
		{"anonymous IPv6 per /64, no credential: by IP",
			policy.Request{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("2001:db8:1:2:3:4:5:6")}, 1, "login", []layerRow{
				{"anonymous.login.1m", "rl:{ip:2001:db8:1:2::/64}:a:login:1m", 10, 10, time.Minute, 0, false},
				{"anonymous.login.per-user", "rl:{ip:2001:db8:1:2::/64}:a:login:per-user", 5, 5, 15 * time.Minute, 0, false},
			}, nil},
		{"IPv4-mapped IPv6 is the IPv4 address",
			policy.Request{Method: "POST", Path: "/v1/login", IP: netip.MustParseAddr("::ffff:192.0.2.7")}, 1, "login", []layerRow{
				{"anonymous.login.1m", "rl:{ip:192.0.2.7}:a:login:1m", 10, 10, time.Minute, 0, false},
				{"anonymous.login.per-user", "rl:{ip:192.0.2.7}:a:login:per-user", 5, 5, 15 * time.Minute, 0, false},
			}, nil},
		{"plan from the credential, for an unlisted tenant",
			policy.Request{Tenant: "newco", Plan: "team", Class: "read"}, 1, "read", []layerRow{
				{"team.tenant.1m", "rl:{t:newco}:all:1m", 1200, 200, time.Minute, 0, false},
			}, nil},
		{"the policy's entry wins over the credential's plan",
			policy.Request{Tenant: "acme", Plan: "free", Class: "read"}, 1, "read", []layerRow{
				{"enterprise.tenant.1m", "rl:{t:acme}:all:1m", 6000, 600, time.Minute, 0, false},
			}, nil},
		{"no tenant on a tenant route", policy.Request{Method: "GET", Path: "/v1/users/1"}, 0, "", nil, policy.ErrNoTenant},
		{"unknown class", policy.Request{Tenant: "acme", Class: "bulk"}, 0, "", nil, policy.ErrUnknownClass},
		{"cost over a layer's burst", policy.Request{Tenant: "newco", Class: "search", Cost: 9, HasCost: true}, 9, "search", nil, policy.ErrBadCost},
		{"negative cost", policy.Request{Tenant: "newco", Class: "read", Cost: -1, HasCost: true}, -1, "read", nil, policy.ErrBadCost},
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
	p.Plans["free"] = policy.Plan{Rules: []policy.Rule{{Limit: perMin(120, 30)}, {Name: "monthly", Limit: algo.Limit{Limit: 100}, Calendar: policy.Month}, {Name: "daily", Limit: algo.Limit{Limit: 10}, Calendar: policy.Day}}}
	snap, err := policy.Compile(p)
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
		res, err := snap.Resolve(policy.Request{Tenant: "x", Class: "read"}, tc.at)
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
