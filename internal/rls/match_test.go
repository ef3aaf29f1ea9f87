package rls

import (
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// loadRef reads a reference config with the bare YAML (this package
// cannot import the config parser, which imports it).
func loadRef(t *testing.T, file string) *node {
	t.Helper()
	var raw struct {
		Domain      string
		Descriptors []rawDescriptor
	}
	data, err := os.ReadFile(filepath.Join("testdata/reference", file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	return compile(Config{Domains: []Domain{{Name: raw.Domain, Descriptors: convert(raw.Descriptors)}}}).domains[raw.Domain]
}

// TestMatch: envoyproxy/ratelimit's lookup (test/config/config_test.go's
// wildcard and share_threshold cases): which rule a descriptor matches,
// the statistics' name it is counted under, and which values share a
// counter.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		file    string
		entries string // k=v|k=v
		limit   uint32 // 0: no rule
		stat    string
	}{
		{"wildcard.yaml", "wild=foo", 20, "test-domain.wild_foo*"},
		{"wildcard.yaml", "wild=foobar", 20, "test-domain.wild_foo*"},
		{"wildcard.yaml", "wild=fo", 0, ""},
		{"wildcard.yaml", "noWild=foo", 20, "test-domain.noWild_foo"},
		{"wildcard.yaml", "noWild=foobar", 0, ""},
		{"wildcard.yaml", "noVal=foo", 20, "test-domain.noVal"},
		{"wildcard.yaml", "midWild=barb", 20, "test-domain.midWild_bar*b"},
		{"wildcard.yaml", "midWild=bar123b", 20, "test-domain.midWild_bar*b"},
		{"wildcard.yaml", "midWild=bar123", 0, ""},
		{"wildcard.yaml", "midWild=bab", 0, ""},
		{"wildcard.yaml", "multiWild=foo1bar2baz", 10, "test-domain.multiWild_foo*bar*baz"},
		{"wildcard.yaml", "multiWild=foobarbaz", 10, "test-domain.multiWild_foo*bar*baz"},
		{"wildcard.yaml", "multiWild=foobaz", 0, ""},
		{"wildcard.yaml", "multiWild=foobazbar", 0, ""},
		{"wildcard.yaml", "nestedWild=val1|wild=goo2", 20, "test-domain.nestedWild_val1.wild_goo*"},
		{"wildcard.yaml", "nestedWild=val1|wild=foo", 0, ""},
		{"share.yaml", "files=files/a.csv", 10, "share-threshold-test.files_files/*"},
		{"share.yaml", "route=api/v1|method=GET", 60, "share-threshold-test.route_api/*.method"},
		{"share.yaml", "service=svc/a|endpoint=x", 80, "share-threshold-test.service_svc/*.endpoint_x"},
		{"share.yaml", "user=alice|action=read", 5, "share-threshold-test.user_alice.action_read"},
		{"share.yaml", "files_no_share=files_no_share/1", 10, "share-threshold-test.files_no_share_files_no_share/*"},
	} {
		h := loadRef(t, tc.file).match(entriesOf(tc.entries))
		switch {
		case tc.limit == 0 && h.n != nil:
			t.Errorf("%s: matched %s, want no rule", tc.entries, h.n.path)
		case tc.limit != 0 && (h.n == nil || h.n.d.Limit.RequestsPerUnit != tc.limit):
			t.Errorf("%s: matched %+v, want the rule of %d", tc.entries, h.n, tc.limit)
		case h.stat != tc.stat:
			t.Errorf("%s: statistics %q, want %q", tc.entries, h.stat, tc.stat)
		}
	}
}

// TestShareThresholdKeys: every value a share_threshold wildcard matches
// has one store counter; without it, each value has its own.
func TestShareThresholdKeys(t *testing.T) {
	root := loadRef(t, "share.yaml")
	key := func(s string) string {
		e := entriesOf(s)
		h := root.match(e)
		for i, p := range h.share {
			if p != "" {
				e[i].Value = p
			}
		}
		return storeKey("share-threshold-test", e, "", "")
	}
	if key("files=files/a.csv") != key("files=files/b.csv") {
		t.Error("files/a.csv and files/b.csv have two counters under share_threshold")
	}
	if key("files_no_share=files_no_share/a") == key("files_no_share=files_no_share/b") {
		t.Error("two values share a counter without share_threshold")
	}
	if key("route=api/a|method=GET") != key("route=api/b|method=GET") || key("route=api/a|method=GET") == key("route=api/a|method=POST") {
		t.Error("a shared wildcard above a key-only rule: the wildcard's values share, the method's do not")
	}
}

func entriesOf(s string) []Entry { return entries(s) }

// rawDescriptor is the YAML of a descriptor, as far as matching needs it.
type rawDescriptor struct {
	Key, Value     string
	ShareThreshold bool `yaml:"share_threshold"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	DetailedMetric bool `yaml:"detailed_metric"`
	RateLimit      *struct {
		RequestsPerUnit uint32 `yaml:"requests_per_unit"`
		Unit            string
	} `yaml:"rate_limit"`
	Descriptors []rawDescriptor
}

func convert(rs []rawDescriptor) []*Descriptor {
	var out []*Descriptor
	for _, r := range rs {
		d := &Descriptor{Key: r.Key, Value: r.Value, ShareThreshold: r.ShareThreshold, ValueToMetric: r.ValueToMetric, DetailedMetric: r.DetailedMetric, Children: convert(r.Descriptors)}
		if r.RateLimit != nil {
			u, _ := ParseUnit(r.RateLimit.Unit)
			d.Limit = &RateLimit{RequestsPerUnit: r.RateLimit.RequestsPerUnit, Unit: u}
		}
		out = append(out, d)
	}
	return out
}
