package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/policy"
)

// TestRLSFileErrors: every rule envoyproxy/ratelimit enforces on its files,
// and unknown keys, are problems with their line.
func TestRLSFileErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown key", "domain: d\ndescriptors:\n  - key: a\n    colour: red\n", ":4: descriptors[0].colour: unknown field \"colour\""},
		{"empty domain", "descriptors:\n  - key: a\n", ":1: domain: a config needs a non-empty domain"},
		{"empty key", "domain: d\ndescriptors:\n  - value: a\n", ":3: descriptors[0]: descriptor has an empty key"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n", ":4: descriptors[1]: duplicate descriptor: key \"a\""},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n", ":4: descriptors[0].rate_limit.unit: unit \"fortnight\""},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 5}\n", "descriptors[0].rate_limit.unit: unit \"\""},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "an unlimited rate_limit takes no unit"},
		{"no requests", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n", "requests_per_unit is required"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: x, replaces: [{name: x}]}\n", "cannot replace itself"},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", "a replaces entry needs a name"},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n", ":3: descriptors[0]: share_threshold is only for a wildcard value"},
		{"metadata not a map", "domain: d\ndescriptors:\n  - key: a\n    metadata: [1, 2]\n", ":4: descriptors[0].metadata: metadata must be a map"},
		{"nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: hours, requests_per_unit: 1}\n", ":6: descriptors[0].descriptors[0].rate_limit.unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "rl.yaml")
			os.WriteFile(f, []byte(tc.yaml), 0o600)
			_, err := ParseRLSFile(f)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRLSFile:\n%v\nwant a problem containing %q", err, tc.want)
			}
		})
	}
}

// TestRLSSection: files are read relative to the config, a domain given
// twice and an override of an unknown domain are problems, and limits are
// checked against the algorithm's bounds.
func TestRLSSection(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o600)
	good := "rls:\n  files: [a.yaml]\n  tenant_key: tenant\n  fail: closed\n  fail_closed_code: over_limit\n  domains: {a: {fail: open}}\n  config:\n    - domain: b\n      descriptors: [{key: x, rate_limit: {unit: minute, requests_per_unit: 1}}]\n"
	c, err := Parse(filepath.Join(dir, "f.yaml"), []byte(strings.Join(base, "\n")+"\n"+good))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.RLS.Domains) != 2 || c.RLS.TenantKey != "tenant" || c.RLS.Domains[0].Fail != policy.FailOpen {
		t.Fatalf("rls: %+v", c.RLS)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"rls:\n  files: [a.yaml, a.yaml]\n", `domain "a" is configured twice`},
		{"rls:\n  files: [missing.yaml]\n", "missing.yaml: no such file"},
		{"rls:\n  domains: {zzz: {fail: open}}\n", `rls.domains.zzz: no domain "zzz" is configured`},
		{"rls:\n  fail_closed_code: teapot\n", `"teapot": want unavailable`},
		{"rls:\n  algorithm: leaky\n", `unknown algorithm "leaky": want fixed_window`},
		{"rls:\n  near_limit_ratio: 1.5\n", "near_limit_ratio 1.5: want a ratio above 0"},
		{"rls:\n  max_override_unit: fortnight\n", `max_override_unit "fortnight": want second, minute, hour, day (the default)`},
		{"rls:\n  response_headers: {limit: \"X Limit\"}\n", `"X Limit" is not an HTTP header name`},
		{"rls:\n  files: [a.yaml]\n  domains: {a: {algorithm: sliding_log}}\n  config:\n    - domain: c\n      descriptors: [{key: x, rate_limit: {unit: hour, requests_per_unit: 20000}}]\n", ""},
		{"rls:\n  files: [a.yaml]\n  domains: {a: {algorithm: sliding_log}}\n  config:\n    - domain: c\n      descriptors: [{key: x, rate_limit: {unit: second, requests_per_unit: 2000000}}]\n", "2000000 per second"},
		{"rls:\n  config:\n    - domain: c\n      descriptors: [{key: x, rate_limit: {unit: second, requests_per_unit: 4000000000}}]\n", "4000000000 per second"},
		{"rls:\n  hits_addend: bill\n", `hits_addend "bill": want take`},
		{"rls:\n  hits_addend: charge\n  algorithm: sliding_window\n", "rls.hits_addend: hits_addend: charge needs algorithm gcra or token_bucket"},
		{"rls:\n  hits_addend: charge\n  algorithm: gcra\n  atomic: true\n", "rls.hits_addend: hits_addend: charge does not go with atomic"},
		{"rls:\n  files: [a.yaml]\n  hits_addend: charge\n  algorithm: gcra\n  domains: {a: {atomic: true}}\n", "rls.domains.a: hits_addend: charge does not go with atomic"},
		{"rls:\n  files: [a.yaml]\n  algorithm: sliding_log\n  domains: {a: {hits_addend: charge}}\n", "rls.domains.a: hits_addend: charge needs algorithm gcra or token_bucket"},
		{"rls:\n  files: [a.yaml]\n  hits_addend: charge\n  domains: {a: {algorithm: token_bucket}}\n", ""},
	} {
		_, err := Parse(filepath.Join(dir, "f.yaml"), []byte(strings.Join(base, "\n")+"\n"+tc.yaml))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%q: %v", tc.yaml, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n%v\nwant a problem containing %q", tc.yaml, err, tc.want)
		}
	}
}

// TestRLSOnlyFile: a file with only the rls section parses without a
// policy; a file with neither a policy nor rls domains still names what is
// missing.
func TestRLSOnlyFile(t *testing.T) {
	c, err := Parse("rls.yaml", []byte("rls:\n  config:\n    - domain: a\n      descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"))
	if err != nil || !c.NoPolicy || len(c.RLS.Domains) != 1 {
		t.Fatalf("rls only: %v %+v", err, c)
	}
	if _, err := Parse("none.yaml", []byte("headers: x\n")); err == nil || !strings.Contains(err.Error(), "plans is required") {
		t.Fatalf("neither a policy nor rls: %v, want the policy's problems", err)
	}
	if c, err := Parse("both.yaml", []byte(strings.Join(base, "\n"))); err != nil || c.NoPolicy {
		t.Fatalf("a policy: %v, NoPolicy %v", err, c != nil && c.NoPolicy)
	}
}

// TestRLSSettings: the defaults count as envoyproxy/ratelimit does (fixed
// window, not atomic); the section's settings, and a domain's own
// algorithm and atomic, are read; descriptors keep every key of that
// format.
func TestRLSSettings(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    value: x*y\n    share_threshold: true\n    quota_mode: true\n    value_to_metric: true\n    metadata: {team: {name: core}, n: 3}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o600)
	c, err := Parse(filepath.Join(dir, "f.yaml"), []byte("rls:\n  files: [a.yaml, b.yaml]\n  domains: {b: {algorithm: gcra, atomic: true}}\n  stop_increment_when_over_limit: true\n  near_limit_ratio: 0.9\n  shadow_mode: true\n  quota_mode: true\n  dynamic_metadata: true\n  local_cache_bytes: 12800\n  response_headers: {enabled: true, reset: X-Reset}\n  max_override_unit: Week\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, b, set := c.RLS.Domains[0], c.RLS.Domains[1], c.RLS.Settings
	if a.Algorithm.String() != "fixed_window" || a.Atomic || a.Charge || b.Algorithm.String() != "gcra" || !b.Atomic || b.Charge {
		t.Errorf("domains: a %v atomic %v charge %v, b %v atomic %v charge %v", a.Algorithm, a.Atomic, a.Charge, b.Algorithm, b.Atomic, b.Charge)
	}
	d := a.Descriptors[0]
	if !d.ShareThreshold || !d.QuotaMode || !d.ValueToMetric || d.Metadata.GetFields()["team"].GetStructValue().GetFields()["name"].GetStringValue() != "core" {
		t.Errorf("descriptor: %+v", d)
	}
	if !set.StopIncrementWhenOverLimit || set.NearLimitRatio != 0.9 || !set.Shadow || !set.Quota || !set.DynamicMetadata || set.LocalCacheEntries != 100 || !set.Headers.Enabled || set.Headers.Reset != "X-Reset" || set.MaxOverrideUnit != rlspb.RateLimitResponse_RateLimit_WEEK {
		t.Errorf("settings: %+v", set)
	}
}

// TestRLSXDSDefaults: with xds, the section's domains may name domains
// that only xDS brings; those take the section's defaults and their own.
func TestRLSXDSDefaults(t *testing.T) {
	c, err := Parse("x.yaml", []byte("rls:\n  xds: {address: \"127.0.0.1:18000\"}\n  fail: closed\n  domains: {x: {algorithm: gcra, atomic: true}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	ds := []rls.Domain{{Name: "x"}, {Name: "y"}}
	c.RLSDomainDefaults(ds)
	if ds[0].Algorithm.String() != "gcra" || !ds[0].Atomic || ds[0].Fail != policy.FailClosed || ds[1].Algorithm.String() != "fixed_window" || ds[1].Atomic || ds[1].Fail != policy.FailClosed {
		t.Fatalf("%+v", ds)
	}
	// hits_addend: charge reaches xDS domains, the section's and a
	// domain's own.
	c, err = Parse("x.yaml", []byte("rls:\n  xds: {address: \"127.0.0.1:18000\"}\n  algorithm: gcra\n  hits_addend: charge\n  domains: {x: {hits_addend: take}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.RLSDomainDefaults(ds)
	if ds[0].Charge || !ds[1].Charge || ds[1].Algorithm.String() != "gcra" {
		t.Fatalf("hits_addend: %+v", ds)
	}
	if c.RLSXDS.NodeID != "default" {
		t.Errorf("node id %q, want default", c.RLSXDS.NodeID)
	}
	if _, err := Parse("x.yaml", []byte("rls:\n  xds: {node_id: n}\n")); err == nil || !strings.Contains(err.Error(), "xds needs the management server's address") {
		t.Errorf("xds without an address: %v", err)
	}
}

// TestRLSStatsd: the statsd block's protocol, tags, DogStatsD and
// mogrifiers; what is wrong in it is named.
func TestRLSStatsd(t *testing.T) {
	const head = "rls:\n  config:\n    - domain: a\n      descriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n  statsd:\n"
	c, err := Parse("s.yaml", []byte(head+"    address: s:8125\n    protocol: tcp\n    tags: {env: prod}\n    dogstatsd: true\n    mogrifiers: [{pattern: '^a\\.(.*)$', name: a, tags: {x: $1}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := c.Statsd
	if s.Address != "s:8125" || s.Protocol != "tcp" || s.Tags["env"] != "prod" || !s.DogStatsD || len(s.Mogrifiers) != 1 || s.Mogrifiers[0].Pattern.String() != `^a\.(.*)$` || s.Mogrifiers[0].Tags["x"] != "$1" {
		t.Errorf("statsd: %+v", s)
	}
	for _, tc := range []struct{ body, want string }{
		{"    address: s:8125\n    protocol: sctp\n", `statsd protocol "sctp"`},
		{"    address: s:8125\n    tags: {'a#b': c}\n", `tag key "a#b"`},
		{"    address: s:8125\n    mogrifiers: [{pattern: a, name: b}]\n", "go with dogstatsd: true"},
		{"    address: s:8125\n    dogstatsd: true\n    mogrifiers: [{pattern: '(', name: b}]\n", "mogrifier pattern"},
		{"    address: s:8125\n    dogstatsd: true\n    mogrifiers: [{pattern: a}]\n", "needs a pattern and a name"},
	} {
		if _, err := Parse("s.yaml", []byte(head+tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.body, err, tc.want)
		}
	}
}
