package rlsconfig

import (
	"fmt"
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
	// Charge: the hits Envoy is told to add (a descriptor's own
	// hits_addend, or the request's when it is not 0) are charged in
	// full, past the limit into a debt of at most one burst, as a charge
	// sent when a stream ends must be (its answer is ignored); a
	// hits_addend of 0 admits while the counter is not in debt. The
	// default one hit of a descriptor without either stays a take. It
	// applies to GCRA and the token bucket without Atomic (see
	// [ChargeProblem]); a domain counted as envoyproxy/ratelimit counts
	// charges every hit already.
	Charge bool
}

// ChargeProblem says why a domain decided by algorithm a, atomic or not,
// cannot take Charge, or "" when it can: GCRA and the token bucket carry
// a debt and tell it apart from a counter at its limit, and a charge is
// applied whatever the other descriptors answer, which an all-or-nothing
// batch cannot be. A fixed window without Atomic counts every hit as
// envoyproxy/ratelimit does, so Charge changes nothing there.
func ChargeProblem(a algo.Algorithm, atomic bool) string {
	switch {
	case atomic:
		return "hits_addend: charge does not go with atomic: a charge is applied whatever the request's other descriptors answer, so the batch would not be all-or-nothing"
	case a == algo.GCRA || a == algo.TokenBucket || a == algo.FixedWindow:
		return ""
	}
	return fmt.Sprintf("hits_addend: charge needs algorithm gcra or token_bucket (or the default fixed_window, which counts every hit as envoyproxy/ratelimit does), not %v: a window's count past its limit reads as one at its limit, so a check could not tell a debt", a)
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

// localEntryBytes is what one entry of the service's local cache is taken
// to cost when a size in bytes is converted to entries: a key (about 40
// bytes), its time and the map's overhead.
const localEntryBytes = 128

// LocalCacheEntries converts LOCAL_CACHE_SIZE_IN_BYTES to entries of the
// local cache ([Settings].LocalCacheEntries).
func LocalCacheEntries(bytes int) int { return max(bytes, 0) / localEntryBytes }
