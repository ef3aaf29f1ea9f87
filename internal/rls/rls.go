package rls

import (
	"encoding/base64"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// Unit is a rate limit unit of Envoy's protocol.
type Unit = rlspb.RateLimitResponse_RateLimit_Unit

// Period returns a unit's length, as envoyproxy/ratelimit counts it (a
// month is 30 days, a year 365).
func Period(u Unit) time.Duration {
	const day = 24 * time.Hour
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return day
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * day
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * day
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * day
	}
	return 0
}

// ParseUnit reads a unit name as the config format writes it (second,
// minute, hour, day, week, month, year; any case).
func ParseUnit(s string) (Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || v == 0 {
		return 0, false
	}
	return Unit(v), true
}

// RateLimit is a descriptor's rate_limit block.
type RateLimit struct {
	RequestsPerUnit uint32
	Unit            Unit
	Unlimited       bool
	Name            string
	Replaces        []string
}

// Descriptor is one node of a domain's descriptor tree, with every key of
// envoyproxy/ratelimit's format.
type Descriptor struct {
	Key, Value string
	Limit      *RateLimit // nil: no limit of its own
	Shadow     bool
	// QuotaMode: over its limit, this descriptor makes the request over
	// the limit only when every quota descriptor of the request is.
	QuotaMode bool
	// DetailedMetric names the descriptor's statistics by the request's
	// own values (bounded: see MaxStatKeys and MaxStatName).
	DetailedMetric bool
	// ValueToMetric puts the request's value in the statistics' name where
	// the rule matched by key alone or by a wildcard.
	ValueToMetric bool
	// ShareThreshold: every value a wildcard matches shares one counter.
	ShareThreshold bool
	// Metadata is added to the response's dynamic metadata when the
	// descriptor passes (and the setting is on).
	Metadata *structpb.Struct
	Children []*Descriptor
}

// Domain is one domain's configuration.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
	// Fail is the domain's fail mode when the store does not answer.
	Fail policy.FailMode
	// Algorithm and Atomic say how the domain's limits are decided.
	// FixedWindow without Atomic counts as envoyproxy/ratelimit does (the
	// default of parsed configs): windows aligned to the unit, every hit
	// counted, the hits of rejected requests too. Any other algorithm, or
	// Atomic, is fairgate's way: a rejected hit is not counted, and with
	// Atomic a request's descriptors are one all-or-nothing batch.
	Algorithm algo.Algorithm
	Atomic    bool
}

// counts reports whether the domain counts as envoyproxy/ratelimit does.
func (d *Domain) counts() bool { return d.Algorithm == algo.FixedWindow && !d.Atomic }

// FailClosedCode is what a fail-closed domain answers while the store is
// out.
type FailClosedCode int

// The codes a fail-closed domain can answer with.
const (
	// ClosedUnavailable answers the gRPC status UNAVAILABLE: Envoy then
	// applies its own failure_mode_deny.
	ClosedUnavailable FailClosedCode = iota
	// ClosedOverLimit answers OVER_LIMIT: the request is refused whatever
	// Envoy's failure_mode_deny says.
	ClosedOverLimit
)

// Headers are the response headers of envoyproxy/ratelimit's
// LIMIT_RESPONSE_HEADERS_ENABLED: off unless Enabled.
type Headers struct {
	Enabled                 bool
	Limit, Remaining, Reset string // header names; empty: the defaults
}

// Settings are envoyproxy/ratelimit's service-wide settings, each named by
// the environment variable that sets it there.
type Settings struct {
	// StopIncrementWhenOverLimit is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT.
	StopIncrementWhenOverLimit bool
	// NearLimitRatio is NEAR_LIMIT_RATIO (0 means 0.8).
	NearLimitRatio float64
	// Shadow is SHADOW_MODE: every answer is OK; statuses tell the truth.
	Shadow bool
	// Quota is QUOTA_MODE: every descriptor is in quota mode.
	Quota bool
	// DynamicMetadata is RESPONSE_DYNAMIC_METADATA.
	DynamicMetadata bool
	// LocalCacheEntries bounds the local cache of keys over their limit
	// (LOCAL_CACHE_SIZE_IN_BYTES, converted): 0 is off.
	LocalCacheEntries int
	// Headers are the response headers.
	Headers Headers
	// MaxOverrideUnit is the longest unit a descriptor's own limit
	// (Envoy's per-route override) may have in a configured domain: its
	// counter lives as long as its unit, so a longer one is refused with
	// InvalidArgument. Zero means DefaultMaxOverrideUnit.
	MaxOverrideUnit Unit
	// RequireDomains is HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: while the
	// config in force has no domain (a runtime directory that yielded
	// none, no xDS update yet), the service is unhealthy (Service.Ready,
	// gRPC health NOT_SERVING, /readyz 503). False, the default, is
	// healthy with no domain, as envoyproxy/ratelimit is.
	RequireDomains bool
}

// DefaultMaxOverrideUnit is the longest unit of a descriptor's own limit
// unless the settings say otherwise: a day, so that a counter a caller
// makes with its own limit lives at most a day.
const DefaultMaxOverrideUnit = rlspb.RateLimitResponse_RateLimit_DAY

// maxOverride is the longest unit of a descriptor's own limit.
func (s *Settings) maxOverride() Unit {
	if s.MaxOverrideUnit == 0 {
		return DefaultMaxOverrideUnit
	}
	return s.MaxOverrideUnit
}

// Config is the service's configuration.
type Config struct {
	Domains []Domain
	// TenantKey is the descriptor entry key that names the tenant (such
	// as "tenant"); a request's descriptors with it share the tenant's
	// Redis Cluster slot. Empty means none.
	TenantKey string
	// FailClosed is the answer of fail-closed domains during an outage.
	FailClosed FailClosedCode
	// Settings are envoyproxy/ratelimit's service-wide settings.
	Settings Settings
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
