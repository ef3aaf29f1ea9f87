package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata"

	"github.com/fairgate/fairgate/fairshare"
	"github.com/fairgate/fairgate/policy"
)

// base is a valid file; each case below replaces one of its lines (1-based)
// and expects a problem on that line naming the field.
var base = []string{
	"default_plan: free",  // 1
	"default_class: read", // 2
	"plans:",              // 3
	"  free:",             // 4
	"    - {limit: 120, period: 1m, burst: 30}", // 5
	"  team:", // 6
	"    - {limit: 1200, period: 1m, burst: 200}", // 7
	"classes:",                // 8
	"  read: {share: 1}",      // 9
	"  search: {share: 0.25}", // 10
	"routes:",                 // 11
	"  - {route: \"GET /v1/users/{id}\", class: read}", // 12
	"  - {route: \"GET /v1/search\", class: search}",   // 13
	"tenants:",                      // 14
	"  acme: {plan: team}",          // 15
	"anonymous:",                    // 16
	"  - name: login",               // 17
	"    route: \"POST /v1/login\"", // 18
	"    limits: [{limit: 5, period: 1m, by: ip}]", // 19
	"timezone: UTC", // 20
}

func with(line int, text string) []byte {
	lines := append([]string(nil), base...)
	lines[line-1] = text
	return []byte(strings.Join(lines, "\n") + "\n")
}

func TestBaseIsValid(t *testing.T) {
	if _, err := Parse("base.yaml", with(1, base[0])); err != nil {
		t.Fatal(err)
	}
}

func TestValidationErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		line int
		text string
		want string // in the message, after "base.yaml:<line>: "
	}{
		{"unknown field", 9, "  read: {share: 1, colour: red}", "classes.read.colour: unknown field \"colour\""},
		{"unknown top-level field", 20, "timezon: UTC", "timezon: unknown field"},
		{"limit below 1", 5, "    - {limit: 0, period: 1m, burst: 30}", "plans.free[0].limit: limit 0 is outside 1..1000000000"},
		{"burst below 1", 5, "    - {limit: 120, period: 1m, burst: -1}", "plans.free[0].burst: burst -1 is outside"},
		{"period does not parse", 5, "    - {limit: 120, period: 1 minute, burst: 30}", "plans.free[0].period: period \"1 minute\" does not parse: want a positive duration such as"},
		{"period missing", 5, "    - {limit: 120, burst: 30}", "plans.free[0].period: period is required"},
		{"share above 1", 10, "  search: {share: 1.5}", "classes.search.share: share 1.5 is outside (0, 1]"},
		{"share zero", 10, "  search: {share: 0}", "classes.search.share: share 0 is outside (0, 1]"},
		{"slow_down does not parse", 10, "  search: {share: 0.5, slow_down: fast}", "classes.search.slow_down: slow_down \"fast\": want off, or a positive duration such as 100ms"},
		{"slow_down too long", 10, "  search: {share: 0.5, slow_down: 1m}", "classes.search.slow_down: slow_down 1m0s is over 10s"},
		{"cost over class burst", 13, "  - {route: \"GET /v1/search\", class: search, cost: 9}", "routes[1].cost: cost 9 exceeds the burst 8 of class \"search\" under plan \"free\""},
		{"unknown plan", 15, "  acme: {plan: platinum}", "tenants.acme.plan: unknown plan \"platinum\": want one of free, team"},
		{"unknown default plan", 1, "default_plan: gold", "default_plan: unknown plan \"gold\""},
		{"unknown class", 13, "  - {route: \"GET /v1/search\", class: find}", "routes[1].class: unknown class \"find\": want one of read, search"},
		{"duplicate route", 13, "  - {route: \"GET /v1/users/{id}\", class: search}", "routes[1].route: duplicate route \"GET /v1/users/{id}\""},
		{"conflicting route", 13, "  - {route: \"GET /v1/users/{name}\", class: search}", "routes[1].route: pattern \"GET /v1/users/{name}\": duplicate route"},
		{"route without method", 13, "  - {route: \"/v1/search\", class: search}", "routes[1].route: pattern \"/v1/search\": want a method and a path"},
		{"unknown algorithm", 7, "    - {limit: 1200, period: 1m, burst: 200, algorithm: leaky}", "plans.team[0].algorithm: unknown algorithm \"leaky\""},
		{"window burst", 7, "    - {limit: 1200, period: 1m, burst: 200, algorithm: fixed_window}", "plans.team[0].burst: burst 200 must equal limit 1200 for fixed_window"},
		{"not an integer", 7, "    - {limit: lots, period: 1m}", "plans.team[0].limit: \"lots\" is not an integer"},
		{"bad fail mode", 9, "  read: {share: 1, fail: maybe}", "classes.read.fail: fail mode \"maybe\": want open or closed"},
		{"bad by", 19, "    limits: [{limit: 5, period: 1m, by: mac}]", "anonymous[0].limits[0].by: by \"mac\": want ip or credential"},
		{"anonymous cost over burst", 19, "    limits: [{limit: 5, period: 1m, burst: 5}]\n    cost: 6", "anonymous[0].limits[0].burst: cost 6 exceeds the burst 5"},
		{"bad time zone", 20, "timezone: Mars/Olympus", "timezone: unknown time zone \"Mars/Olympus\""},
		{"bad plan name", 6, "  Team Plan:", "plans.Team Plan: plan name \"Team Plan\""},
		{"tenant share unknown class", 15, "  acme: {plan: team, shares: {export: 0.5}}", "tenants.acme.shares.export: unknown class \"export\""},
		{"tenant override burst", 15, "  acme: {plan: team, burst: 0.5}", "tenants.acme.burst: \"0.5\" is not an integer"},
		{"tenant override limits unknown rule", 15, "  acme: {plan: team, limits: {daily: {limit: 5}}}", "tenants.acme.limits.daily: plan \"team\" has no rule \"daily\""},
		{"queue weight unknown plan", 20, "queues: {weights: {gold: 2}}", "queues.weights.gold: unknown plan \"gold\": want one of free, team"},
		{"queue weight out of range", 20, "queues: {weights: {free: 0}}", "queues.weights.free: weight 0 is outside 1..1000"},
		{"queue kind name", 20, "queues: {kinds: {Report: {}}}", "queues.kinds.Report: kind name \"Report\""},
		{"queue warn over refuse", 20, "queues: {kinds: {report: {warn: 10, refuse: 5}}}", "queues.kinds.report: warn 10 is over refuse 5"},
		{"queue negative threshold", 20, "queues: {kinds: {report: {refuse: -5}}}", "queues.kinds.report.refuse: -5 is negative"},
		{"queue visibility", 20, "queues: {kinds: {report: {visibility: soon}}}", "queues.kinds.report.visibility: duration \"soon\" does not parse"},
		{"queue unknown field", 20, "queues: {kinds: {report: {depth: 5}}}", "queues.kinds.report.depth: unknown field \"depth\""},
		{"forward auth unknown gateway", 20, "forward_auth: {gateway: haproxy}", "forward_auth: gateway \"haproxy\": want one of nginx, ingress-nginx, caddy, traefik, envoy, custom"},
		{"forward auth tenant header without gateway", 20, "forward_auth: {tenant_header: X-Tenant}", "forward_auth: gateway is required with tenant_header"},
		{"forward auth tenant header is the gateway's", 20, "forward_auth: {gateway: caddy, tenant_header: X-Forwarded-Uri}", "forward_auth: tenant_header X-Forwarded-Uri: X-Forwarded-Uri is where caddy puts the original request"},
		{"forward auth tenant header is a credential", 20, "forward_auth: {gateway: nginx, tenant_header: X-API-Key}", "forward_auth: tenant_header X-Api-Key: X-Api-Key carries the client's own credential"},
		{"forward auth custom without headers", 20, "forward_auth: {gateway: custom, uri_header: X-Uri}", "forward_auth: a custom gateway needs method_header and uri_header"},
		{"forward auth headers of a known gateway", 20, "forward_auth: {gateway: traefik, uri_header: X-Uri}", "forward_auth: method_header and uri_header describe a custom gateway"},
		{"forward auth settles", 20, "forward_auth: {gateway: nginx, settles: sometimes}", "forward_auth.settles: \"sometimes\": want on or off"},
		{"preflight limit zero", 20, "preflight: {limits: [{limit: 0, period: 1m}]}", "preflight.limits[0].limit: limit 0 is outside"},
		{"preflight by", 20, "preflight: {limits: [{limit: 5, period: 1m, by: credential}]}", "preflight.limits[0].by: unknown field \"by\""},
		{"preflight without limits", 20, "preflight: {fail: closed}", "preflight.limits: at least one limit is required"},
		{"anonymous route named preflight", 17, "  - name: preflight", "anonymous[0].name: name \"preflight\" is the CORS preflights' own"},
		{"breaker status", 20, "dependencies: {upstream: {failure_statuses: [503, 700]}}", "dependencies.upstream.failure_statuses[1]: 700 is not an HTTP status"},
		{"breaker one party", 20, "dependencies: {upstream: {min_parties: 1}}", "dependencies.upstream.min_parties: 1 is outside 2..1000"},
		{"breaker ratio", 20, "dependencies: {billing: {failure_ratio: 2}}", "dependencies.billing.failure_ratio: failure ratio 2 is outside (0, 1]"},
		{"breaker cooldown", 20, "dependencies: {billing: {cooldown: -1s}}", "dependencies.billing.cooldown: duration \"-1s\" does not parse"},
		{"capacity limit zero", 20, "upstream_capacity: {limit: 0}", "upstream_capacity.limit: 0 requests in flight: want 1 to 100000"},
		{"capacity fixed and learned", 20, "upstream_capacity: {limit: 8, ceiling: 20}", "upstream_capacity: limit fixes the limit: floor, ceiling, initial and tolerance are for a learned one"},
		{"capacity floor over ceiling", 20, "upstream_capacity: {floor: 30, ceiling: 20}", "upstream_capacity: floor 30 is over ceiling 20"},
		{"capacity initial outside", 20, "upstream_capacity: {floor: 4, ceiling: 20, initial: 40}", "upstream_capacity: initial 40 is outside floor 4 and ceiling 20"},
		{"capacity tolerance", 20, "upstream_capacity: {tolerance: 1}", "upstream_capacity.tolerance: tolerance 1: want over 1 and at most 10"},
		{"capacity wait", 20, "upstream_capacity: {max_wait: 1m}", "upstream_capacity.max_wait: max_wait 1m0s: want over 0 and at most 30s"},
		{"capacity waiting", 20, "upstream_capacity: {max_waiting: 0}", "upstream_capacity.max_waiting: max_waiting 0: want 1 to 100000"},
		{"capacity margin", 20, "upstream_capacity: {margin: 9}", "upstream_capacity.margin: margin 9: want 0.5 to 6 standard deviations"},
		{"capacity queue", 20, "upstream_capacity: {max_queue: 0}", "upstream_capacity.max_queue: max_queue 0: want 1 to 100000"},
		{"capacity reserve", 20, "upstream_capacity: {reserve: 0.95, critical: [read]}", "upstream_capacity.reserve: reserve 0.95: want 0 to 0.9"},
		{"capacity reserve unused", 20, "upstream_capacity: {reserve: 0.2}", "upstream_capacity: reserve 0.2 keeps room that no class may use: name the critical classes"},
		{"capacity unknown class", 20, "upstream_capacity: {reserve: 0.2, critical: [checkout]}", "upstream_capacity.critical[0]: unknown class \"checkout\": want one of read, search"},
		{"capacity unknown plan", 20, "upstream_capacity: {weights: {gold: 2}}", "upstream_capacity.weights.gold: unknown plan \"gold\": want one of free, team"},
		{"capacity weight", 20, "upstream_capacity: {weights: {team: 0}}", "upstream_capacity.weights.team: weight 0: want 0.01 to 1000"},
		{"capacity unknown field", 20, "upstream_capacity: {limt: 4}", "upstream_capacity.limt: unknown field \"limt\""},
		{"jwt leeway negative", 20, "auth: {jwt: {audience: api, jwks_url: \"https://id.example/jwks\", leeway: -1s}}", "auth.jwt.leeway: -1s is negative: want 0 (none) to 5m0s"},
		{"jwt leeway absurd", 20, "auth: {jwt: {audience: api, jwks_url: \"https://id.example/jwks\", leeway: 1h}}", "auth.jwt.leeway: 1h0m0s is over 5m0s"},
		{"jwt leeway does not parse", 20, "auth: {jwt: {audience: api, jwks_url: \"https://id.example/jwks\", leeway: soon}}", "auth.jwt.leeway: duration \"soon\" does not parse"},
		{"jwt hmac secret missing", 20, "auth: {jwt: {audience: api, hmac_secret_file: /nonexistent/secret}}", "auth.jwt.hmac_secret_file: open /nonexistent/secret: no such file or directory: want a readable file"},
		{"api key plan under a tenant entry", 20, "auth: {api_keys: [{sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, tenant: acme, plan: free}]}", "auth.api_keys[0].plan: plan \"free\" would never apply: tenants.acme puts tenant \"acme\" on plan \"team\""},
		{"tenant ID with a trailing space", 15, "  \"acme \": {plan: team}", "tenants.acme : tenant ID: \"acme \" has white space at its start or end"},
		{"tenant ID with a tab", 15, "  \"\\tacme\": {plan: team}", "tenants.\tacme: tenant ID: \"\\tacme\" holds a control character (U+0009)"},
		{"tenant ID with a zero-width space", 15, "  \"ac\\u200bme\": {plan: team}", "tenants.ac\u200bme: tenant ID: \"ac\\u200bme\" holds an invisible format character (U+200B)"},
		{"api key tenant with a newline", 20, "auth: {api_keys: [{sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, tenant: \"acme\\n\"}]}", "auth.api_keys[0].tenant: tenant ID: \"acme\\n\" holds a control character (U+000A)"},
		{"api key tenant with a leading space", 20, "auth: {api_keys: [{sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, tenant: \" acme\"}]}", "auth.api_keys[0].tenant: tenant ID: \" acme\" has white space"},
		{"not yaml", 9, "  read: {share: 1", "(file): not valid YAML"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("base.yaml", with(tc.line, tc.text))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			want := "base.yaml:" + strconv.Itoa(tc.line) + ": " + tc.want
			if tc.name == "not yaml" {
				want = tc.want // the parser reports the line where it gave up
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error:\n%v\nwant a line containing:\n%s", err, want)
			}
		})
	}
}

// TestOneProblemPerMistake: a mistake is reported once, with what to
// write, and not again by the checks that follow from it: a missing
// section is required (the names that would be in it are not also
// unknown), a value that does not parse is not also out of range.
func TestOneProblemPerMistake(t *testing.T) {
	without := func(from, to int) []byte { // base without lines from..to
		lines := append(append([]string(nil), base[:from-1]...), base[to:]...)
		return []byte(strings.Join(lines, "\n") + "\n")
	}
	for _, tc := range []struct {
		name string
		doc  []byte
		want string // the one problem
	}{
		{"no classes", without(8, 10), "base.yaml: classes: classes is required: define at least one class"},
		{"no plans", without(3, 7), "base.yaml: plans: plans is required: define at least one plan"},
		{"share as a percentage", with(10, "  search: {share: 25%}"), `base.yaml:10: classes.search.share: "25%" is not a number: for 25% write 0.25`},
		{"share not a number", with(10, "  search: {share: lots}"), `base.yaml:10: classes.search.share: "lots" is not a number`},
		{"share zero", with(10, "  search: {share: 0}"), "base.yaml:10: classes.search.share: share 0 is outside (0, 1]"},
		{"tolerance as a percentage", with(20, "upstream_capacity: {tolerance: 150%}"), `base.yaml:20: upstream_capacity.tolerance: "150%" is not a number: for 150% write 1.5`},
		{"failure ratio not a number", with(20, "dependencies: {upstream: {failure_ratio: half}}"), `base.yaml:20: dependencies.upstream.failure_ratio: "half" is not a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("base.yaml", tc.doc)
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse = %v, want a *config.Error", err)
			}
			if len(ce.Problems) != 1 || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant one problem starting:\n%s", err, tc.want)
			}
		})
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	doc := with(5, "    - {limit: 0, period: 1m, burst: 30}")
	doc = []byte(strings.Replace(string(doc), "  search: {share: 0.25}", "  search: {share: 7}", 1))
	_, err := Parse("base.yaml", doc)
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) < 2 {
		t.Fatalf("Parse = %v, want both problems", err)
	}
}

// TestUpstreamCapacity: the section's values reach the gate's config, a
// fixed limit included.
func TestUpstreamCapacity(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       UpstreamCapacity
	}{
		{"learned", "upstream_capacity: {floor: 4, ceiling: 64, initial: 16, tolerance: 1.5, margin: 3, max_wait: 100ms, max_queue: 32, max_waiting: 500, reserve: 0.25, critical: [read], weights: {team: 4}}",
			UpstreamCapacity{Gate: fairshare.Config{Floor: 4, Ceiling: 64, Initial: 16, Tolerance: 1.5, Margin: 3, MaxWait: 100 * time.Millisecond, MaxQueue: 32, MaxWaiting: 500, Reserve: 0.25},
				Critical: []string{"read"}, Weights: map[string]float64{"team": 4}}},
		{"fixed", "upstream_capacity: {limit: 12}",
			UpstreamCapacity{Gate: fairshare.Config{Initial: 12, Fixed: true}, Weights: map[string]float64{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("base.yaml", with(20, tc.text))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*c.UpstreamCapacity, tc.want) {
				t.Fatalf("%+v\nwant %+v", *c.UpstreamCapacity, tc.want)
			}
		})
	}
	if c, err := Parse("base.yaml", with(1, base[0])); err != nil || c.UpstreamCapacity != nil {
		t.Fatalf("without the section: %+v, %v; want no gate", c.UpstreamCapacity, err)
	}
}

func TestCalendarAndOverrides(t *testing.T) {
	doc := strings.Replace(string(with(20, "timezone: Europe/Berlin")), "    - {limit: 120, period: 1m, burst: 30}",
		"    - {limit: 120, period: 1m, burst: 30}\n    - {name: monthly, limit: 100000, period: month}", 1)
	doc = strings.Replace(doc, "  acme: {plan: team}", "  acme: {plan: free, burst: 60, limits: {monthly: {limit: 200000}}, shares: {search: 0.5}}", 1)
	c, err := Parse("c.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy
	if p.Location.String() != "Europe/Berlin" {
		t.Errorf("location %v", p.Location)
	}
	r := p.Plans["free"].Rules[1]
	if r.Calendar != policy.Month || r.Name != "monthly" || r.Limit.Limit != 100000 {
		t.Errorf("monthly rule = %+v", r)
	}
	a := p.Tenants["acme"]
	if a.Burst != 60 || a.Rules["monthly"].Limit != 200000 || a.Shares["search"] != 0.5 {
		t.Errorf("acme = %+v", a)
	}
	if d := p.Plans["free"].Rules[0].Limit.Period; d != time.Minute {
		t.Errorf("period %v", d)
	}
}

// TestSlowDownValues: slow_down is off, on (the default) or a duration.
func TestSlowDownValues(t *testing.T) {
	for _, tc := range []struct {
		text string
		want time.Duration
	}{
		{"  search: {share: 0.25}", 0},
		{"  search: {share: 0.25, slow_down: on}", 0},
		{"  search: {share: 0.25, slow_down: off}", -1},
		{"  search: {share: 0.25, slow_down: 250ms}", 250 * time.Millisecond},
	} {
		c, err := Parse("base.yaml", with(10, tc.text))
		if err != nil {
			t.Fatalf("%s: %v", tc.text, err)
		}
		if got := c.Policy.Classes["search"].SlowDown; got != tc.want {
			t.Errorf("%s: SlowDown %v, want %v", tc.text, got, tc.want)
		}
	}
}

// TestJWTSettings: jwt.leeway defaults to 30 s (auth.DefaultLeeway) and may
// be 0; hmac_secret_file's secret is the file's bytes less the white space
// around them, and needs 32 of them; an API key's plan that agrees with
// its tenant's entry, or names a tenant without one, is taken.
func TestJWTSettings(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("  "+strings.Repeat("s", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte(strings.Repeat("s", 31)+"\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := "  api_keys: [{sha256: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, tenant: acme, plan: team}, {sha256: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb, tenant: newco, plan: free}]\n"
	for _, tc := range []struct {
		jwt        string
		wantLeeway time.Duration
	}{
		{"{audience: api, hmac_secret_file: " + secret + "}", 30 * time.Second},
		{"{audience: api, hmac_secret_file: " + secret + ", leeway: 0}", 0},
		{"{audience: api, hmac_secret_file: " + secret + ", leeway: 5m}", 5 * time.Minute},
	} {
		c, err := Parse("base.yaml", []byte(strings.Join(base, "\n")+"\nauth:\n"+keys+"  jwt: "+tc.jwt+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.jwt, err)
		}
		j := c.Auth.JWT
		if j.Leeway != tc.wantLeeway || len(j.Keys) != 1 || string(j.Keys[0].([]byte)) != strings.Repeat("s", 32) {
			t.Errorf("%s: leeway %v, keys %q; want %v and the secret trimmed", tc.jwt, j.Leeway, j.Keys, tc.wantLeeway)
		}
	}
	_, err := Parse("base.yaml", []byte(strings.Join(base, "\n")+"\nauth: {jwt: {audience: api, hmac_secret_file: "+short+"}}\n"))
	if err == nil || !strings.Contains(err.Error(), "auth.jwt.hmac_secret_file: the secret is 31 bytes once the white space around it is trimmed: want at least 32") {
		t.Errorf("a 31-byte secret: %v", err)
	}
}

// TestJWTAlgorithms: jwt.algorithms names only algorithms golang-jwt knows
// (case-sensitive), never none, and only ones a configured key can verify;
// each refusal names the item. A key source that was given but failed is
// its own problem, without a second line asking for a key source.
func TestJWTAlgorithms(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tooshort"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	ec := filepath.Join(dir, "ec.pem")
	if err := os.WriteFile(ec, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	const giveKeys = "give public_keys, hmac_secret_file or jwks_url"
	for _, tc := range []struct {
		jwt     string
		want    []string // problems, "" for none
		notWant []string
	}{
		{"public_keys: [" + ec + "], algorithms: [none, ES256]", []string{`auth.jwt.algorithms[0]: "none" accepts unsigned tokens`}, []string{"algorithms[1]"}},
		{"public_keys: [" + ec + "], algorithms: [es256]", []string{`auth.jwt.algorithms[0]: unknown algorithm "es256" (did you mean ES256?): want one of HS256, HS384, HS512, RS256`}, nil},
		{"public_keys: [" + ec + "], algorithms: [ES256, HS256]", []string{"auth.jwt.algorithms[1]: HS256: no configured key can verify it (it needs hmac_secret_file)"}, []string{"algorithms[0]"}},
		{"public_keys: [" + ec + "], algorithms: [RS256]", []string{"auth.jwt.algorithms[0]: RS256: no configured key can verify it (it needs an RSA key in public_keys, or jwks_url)"}, nil},
		{"hmac_secret_file: " + secret + ", algorithms: [HS256, EdDSA]", []string{"auth.jwt.algorithms[1]: EdDSA: no configured key"}, []string{"algorithms[0]"}},
		{"jwks_url: \"https://id.example/jwks\", algorithms: [RS256, ES384, HS512]", []string{"auth.jwt.algorithms[2]: HS512: no configured key"}, []string{"algorithms[0]", "algorithms[1]"}},
		{"public_keys: [" + ec + "], hmac_secret_file: " + secret + ", algorithms: [ES256, HS384]", nil, nil},
		{"jwks_url: \"https://id.example/jwks\", algorithms: [RS256, PS512, EdDSA]", nil, nil},
		{"hmac_secret_file: " + short + ", algorithms: [HS256]", []string{"auth.jwt.hmac_secret_file: the secret is 8 bytes"}, []string{giveKeys, "algorithms[0]"}},
		{"hmac_secret_file: " + filepath.Join(dir, "missing"), []string{"auth.jwt.hmac_secret_file: open "}, []string{giveKeys}},
		{"public_keys: [" + filepath.Join(dir, "missing.pem") + "], algorithms: [none]", []string{"auth.jwt.public_keys[0]: public key: open", `auth.jwt.algorithms[0]: "none"`}, []string{giveKeys}},
		{"issuer: x", []string{"auth.jwt: " + giveKeys}, nil},
	} {
		_, err := Parse("base.yaml", []byte(strings.Join(base, "\n")+"\nauth: {jwt: {audience: api, "+tc.jwt+"}}\n"))
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("%s: %v, want it accepted", tc.jwt, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted, want %q", tc.jwt, tc.want)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), "base.yaml:21: "+w) {
				t.Errorf("%s:\n%v\nwant a line containing:\nbase.yaml:21: %s", tc.jwt, err, w)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%s:\n%v\nwant no line containing %q", tc.jwt, err, w)
			}
		}
	}
}
