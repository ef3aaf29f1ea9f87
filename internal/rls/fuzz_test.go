package rls

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// FuzzDescriptorMapping: any request descriptor (entries as k=v separated
// by '|') matches at most one rule, never panics, and gets a store key of
// bounded length that differs from any other descriptor's.
func FuzzDescriptorMapping(f *testing.F) {
	sec := rlspb.RateLimitResponse_RateLimit_SECOND
	root := compile(Config{TenantKey: "tenant", Domains: []Domain{{Name: "d", Descriptors: []*Descriptor{
		{Key: "tenant", Limit: &RateLimit{RequestsPerUnit: 5, Unit: sec}, Children: []*Descriptor{
			{Key: "path", Value: "/v1/*", Limit: &RateLimit{RequestsPerUnit: 2, Unit: sec}},
			{Key: "path", Limit: &RateLimit{RequestsPerUnit: 3, Unit: sec}},
		}},
		{Key: "ip", Value: "1.2.3.4", Limit: &RateLimit{RequestsPerUnit: 0, Unit: sec}},
		{Key: "ip"},
	}}}}).domains["d"]
	f.Add("tenant=acme|path=/v1/x", "tenant=acme|path=/v2")
	f.Add("ip=1.2.3.4", "ip=1.2.3.5")
	f.Add("tenant=a=b|path=", "tenant=a|=b|path=")
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := entries(a), entries(b)
		root.match(ea)
		root.match(eb)
		ka, kb := storeKey("d", ea, "tenant", ""), storeKey("d", eb, "tenant", "")
		if len(ka) > 200 {
			t.Fatalf("a key of %d bytes", len(ka))
		}
		if ka == kb && !same(ea, eb) {
			t.Fatalf("%q and %q share the key %s", a, b, ka)
		}
	})
}

func entries(s string) []Entry {
	var out []Entry
	for _, kv := range strings.Split(s, "|") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, Entry{k, v})
	}
	return out
}

func same(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzWildcard: a value with '*' anywhere matches exactly what the same
// pattern as a regular expression (each star any run of characters, the
// rest literal, anchored at both ends) matches.
func FuzzWildcard(f *testing.F) {
	f.Add("bar*b", "barab")
	f.Add("foo*bar*baz", "foobarbaz")
	f.Add("a*a", "a")
	f.Add("*", "")
	f.Add("x**y", "xy")
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if !strings.Contains(pattern, "*") || !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			return
		}
		parts := strings.Split(pattern, "*")
		quoted := make([]string, len(parts))
		for i, p := range parts {
			quoted[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile(`(?s)\A` + strings.Join(quoted, ".*") + `\z`)
		if got, want := wildcardMatch(parts, value), re.MatchString(value); got != want {
			t.Fatalf("%q against %q: %v, want %v", pattern, value, got, want)
		}
	})
}
