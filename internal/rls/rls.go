package rls

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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

// Descriptor is one node of a domain's descriptor tree.
type Descriptor struct {
	Key, Value     string
	Limit          *RateLimit // nil: no limit of its own
	Shadow         bool
	DetailedMetric bool // accepted; fairgate's metrics never carry descriptor values
	Children       []*Descriptor
}

// Domain is one domain's configuration.
type Domain struct {
	Name        string
	Descriptors []*Descriptor
	// Fail is the domain's fail mode when the store does not answer.
	Fail policy.FailMode
}

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

// Config is the service's configuration.
type Config struct {
	Domains []Domain
	// TenantKey is the descriptor entry key that names the tenant (such
	// as "tenant"); a request's descriptors with it share the tenant's
	// Redis Cluster slot. Empty means none.
	TenantKey string
	// Algorithm decides every limit. The zero value is GCRA.
	Algorithm algo.Algorithm
	// FailClosed is the answer of fail-closed domains during an outage.
	FailClosed FailClosedCode
}

// node is a compiled descriptor.
type node struct {
	d        *Descriptor
	exact    map[[2]string]*node // by key and value
	byKey    map[string]*node    // descriptors without a value
	wildcard []wildcard          // values ending in '*', in file order
	path     string              // for the key: domain.key_value.key…
}

type wildcard struct {
	key, prefix string
	n           *node
}

// compiled is a Config ready to match.
type compiled struct {
	cfg     Config
	domains map[string]*node
	fail    map[string]policy.FailMode
}

// compile builds the matching trees. The config was validated when parsed.
func compile(c Config) *compiled {
	out := &compiled{cfg: c, domains: map[string]*node{}, fail: map[string]policy.FailMode{}}
	for _, d := range c.Domains {
		root := &node{path: d.Name}
		root.add(d.Descriptors)
		out.domains[d.Name] = root
		out.fail[d.Name] = d.Fail
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
		case strings.HasSuffix(d.Value, "*"):
			n.wildcard = append(n.wildcard, wildcard{d.Key, strings.TrimSuffix(d.Value, "*"), c})
			n.exact[[2]string{d.Key, d.Value}] = c
		default:
			n.exact[[2]string{d.Key, d.Value}] = c
		}
	}
}

// Entry is one key and value of a request descriptor.
type Entry struct{ Key, Value string }

// match returns the node whose limit applies to a request descriptor, or
// nil: the most specific match at each level, and a limit only when the
// descriptor's last entry lands on a node that has one.
func (root *node) match(entries []Entry) *node {
	cur := root
	for i, e := range entries {
		next := cur.exact[[2]string{e.Key, e.Value}]
		if next == nil {
			for _, w := range cur.wildcard {
				if w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = cur.byKey[e.Key]
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			if next.d.Limit == nil {
				return nil
			}
			return next
		}
		cur = next
	}
	return nil
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
	h := sha256.New()
	fmt.Fprintf(h, "%d:%s", len(domain), domain)
	if override != "" {
		fmt.Fprintf(h, "|override:%s", override)
	}
	tenant, hasTenant := "", false
	for _, e := range entries {
		fmt.Fprintf(h, "|%d:%s=%d:%s", len(e.Key), e.Key, len(e.Value), e.Value)
		if tenantKey != "" && e.Key == tenantKey && !hasTenant {
			tenant, hasTenant = e.Value, true
		}
	}
	sum := base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:18])
	if hasTenant && tenant != "" {
		return "rls:{" + policy.TenantTag(tenant) + "}:" + sum
	}
	return "rls:{d:" + sum + "}"
}
