package rls

import (
	"encoding/base64"
	"strings"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/rlsconfig"
	"github.com/fairgate/fairgate/policy"
)

// The service's configuration is package rlsconfig's, so that the config
// loader decodes it without importing the service; the service names its
// types as its own.
type (
	// Unit is a rate limit unit of Envoy's protocol.
	Unit = rlsconfig.Unit
	// RateLimit is a descriptor's rate_limit block.
	RateLimit = rlsconfig.RateLimit
	// Descriptor is one node of a domain's descriptor tree.
	Descriptor = rlsconfig.Descriptor
	// Domain is one domain's configuration.
	Domain = rlsconfig.Domain
	// FailClosedCode is what a fail-closed domain answers while the store
	// is out.
	FailClosedCode = rlsconfig.FailClosedCode
	// Headers are the response headers of LIMIT_RESPONSE_HEADERS_ENABLED.
	Headers = rlsconfig.Headers
	// Settings are envoyproxy/ratelimit's service-wide settings.
	Settings = rlsconfig.Settings
	// Config is the service's configuration.
	Config = rlsconfig.Config
)

// The codes a fail-closed domain can answer with, and the longest unit of
// a descriptor's own limit by default (see package rlsconfig).
const (
	ClosedUnavailable      = rlsconfig.ClosedUnavailable
	ClosedOverLimit        = rlsconfig.ClosedOverLimit
	DefaultMaxOverrideUnit = rlsconfig.DefaultMaxOverrideUnit
)

// Period is [rlsconfig.Period]: a unit's length.
func Period(u Unit) time.Duration { return rlsconfig.Period(u) }

// ParseUnit is [rlsconfig.ParseUnit]: a unit by its name in the config.
func ParseUnit(s string) (Unit, bool) { return rlsconfig.ParseUnit(s) }

// LocalCacheEntries is [rlsconfig.LocalCacheEntries]:
// LOCAL_CACHE_SIZE_IN_BYTES in entries.
func LocalCacheEntries(bytes int) int { return rlsconfig.LocalCacheEntries(bytes) }

// counts reports whether domain d counts as envoyproxy/ratelimit does.
func counts(d *Domain) bool { return d.Algorithm == algo.FixedWindow && !d.Atomic }

// maxOverride is the longest unit of a descriptor's own limit.
func maxOverride(s *Settings) Unit {
	if s.MaxOverrideUnit == 0 {
		return DefaultMaxOverrideUnit
	}
	return s.MaxOverrideUnit
}

// node is a compiled descriptor.
type node struct {
	d        *Descriptor
	exact    map[[2]string]*node // by key and value
	byKey    map[string]*node    // descriptors without a value
	wildcard []wildcard          // values with a '*', in file order
	path     string              // the statistics' key: domain.key_value.key…
}

// wildcard is a value with '*' in it, split at the stars.
type wildcard struct {
	key   string
	parts []string
	value string
	n     *node
}

// compiled is a Config ready to match.
type compiled struct {
	cfg     Config
	domains map[string]*node
	dom     map[string]*Domain
}

// compile builds the matching trees. The config was validated when parsed.
func compile(c Config) *compiled {
	out := &compiled{cfg: c, domains: map[string]*node{}, dom: map[string]*Domain{}}
	for i := range c.Domains {
		d := &c.Domains[i]
		root := &node{path: d.Name}
		root.add(d.Descriptors)
		out.domains[d.Name] = root
		out.dom[d.Name] = d
	}
	return out
}

func (n *node) add(ds []*Descriptor) {
	n.exact, n.byKey = map[[2]string]*node{}, map[string]*node{}
	for _, d := range ds {
		c := &node{d: d, path: n.path + "." + d.Key}
		if d.Value != "" {
			c.path += "_" + d.Value
		}
		c.add(d.Children)
		switch {
		case d.Value == "":
			n.byKey[d.Key] = c
		case strings.Contains(d.Value, "*"):
			n.wildcard = append(n.wildcard, wildcard{d.Key, strings.Split(d.Value, "*"), d.Value, c})
			n.exact[[2]string{d.Key, d.Value}] = c
		default:
			n.exact[[2]string{d.Key, d.Value}] = c
		}
	}
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

// hit is what a request descriptor matched.
type hit struct {
	n *node
	// share holds, per entry, the wildcard value whose matches share one
	// counter (share_threshold), or "".
	share []string
	// stat names the descriptor's statistics (after the domain).
	stat string
}

// match returns the rule that applies to a request descriptor, with
// envoyproxy/ratelimit's lookup at each level: key and value, then the
// wildcards in file order ('*' anywhere in the value matches any run of
// characters), then the key alone; a rule applies when the descriptor's
// last entry lands on a node with a rate_limit. n is nil when none does.
func (root *node) match(entries []Entry) hit {
	cur := root
	var share []string
	var buf [MaxStatName]byte
	stat := prefixHash{head: buf[:]}
	stat.str(root.path)
	for i, e := range entries {
		next, pattern := cur.exact[[2]string{e.Key, e.Value}], ""
		used := e.Value
		if next == nil {
			for _, w := range cur.wildcard {
				if w.key == e.Key && wildcardMatch(w.parts, e.Value) {
					next, pattern, used = w.n, w.value, w.value
					break
				}
			}
		}
		if next == nil {
			if next = cur.byKey[e.Key]; next == nil {
				return hit{}
			}
			used = ""
		}
		switch {
		case pattern != "" && next.d.ShareThreshold:
			if share == nil {
				share = make([]string, len(entries))
			}
			share[i] = pattern
		case next.d.ValueToMetric:
			used = e.Value
		}
		stat.char('.')
		stat.str(e.Key)
		if used != "" {
			stat.char('_')
			stat.str(used)
		}
		if i == len(entries)-1 {
			if next.d.Limit == nil {
				return hit{}
			}
			h := hit{n: next, share: share, stat: stat.statName()}
			if next.d.DetailedMetric {
				h.stat = detailedStat(root.path, entries, share)
			}
			return h
		}
		cur = next
	}
	return hit{}
}

// detailedStat names a detailed_metric descriptor's statistics by the
// request's own keys and values (a shared wildcard's by its pattern),
// bounded as statName bounds it.
func detailedStat(domain string, entries []Entry, share []string) string {
	var buf [MaxStatName]byte
	b := prefixHash{head: buf[:]}
	b.str(domain)
	for i, e := range entries {
		b.char('.')
		b.str(e.Key)
		v := e.Value
		if i < len(share) && share[i] != "" {
			v = share[i]
		}
		if v != "" || share == nil {
			b.char('_')
			b.str(v)
		}
	}
	return b.statName()
}

// wildcardMatch reports whether value matches a pattern split at its
// stars: the first part a prefix, the last a suffix, the ones between in
// order, each star any run of characters (none included).
func wildcardMatch(parts []string, value string) bool {
	first, last := parts[0], parts[len(parts)-1]
	if !strings.HasPrefix(value, first) {
		return false
	}
	rest := value[len(first):]
	if !strings.HasSuffix(rest, last) {
		return false
	}
	rest = rest[:len(rest)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// key is the store key of a matched descriptor: its full entries (values
// included, so that a key without a configured value counts each value
// apart) hashed, under the tenant's hash tag when the descriptor names a
// tenant, else under its own. Hashing bounds the key's length whatever the
// client sends, and no two descriptors share a key.
//
// override is empty for a configured limit. A request's own limit (Envoy's
// per-route override) passes its numbers, such as "1/HOUR": it is then
// counted in a key space of its own, so that a caller's override can never
// change the state of the configured limit, nor one override another's.
func storeKey(domain string, entries []Entry, tenantKey, override string) string {
	// The bytes hashed: "<len>:<domain>", "|override:<numbers>" for an
	// override, then "|<len>:<key>=<len>:<value>" per entry.
	var stack [256]byte
	b := prefixHash{head: stack[:]}
	b.lenPrefixed(domain)
	if override != "" {
		b.str("|override:")
		b.str(override)
	}
	tenant, hasTenant := "", false
	for _, e := range entries {
		b.char('|')
		b.lenPrefixed(e.Key)
		b.char('=')
		b.lenPrefixed(e.Value)
		if tenantKey != "" && e.Key == tenantKey && !hasTenant {
			tenant, hasTenant = e.Value, true
		}
	}
	h := b.sum()
	var out [24]byte
	base64.RawURLEncoding.Encode(out[:], h[:18])
	if hasTenant && tenant != "" {
		return "rls:{" + policy.TenantTag(tenant) + "}:" + string(out[:])
	}
	return "rls:{d:" + string(out[:]) + "}"
}
