package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/policy"
)

// The admin API's request bodies, each with what turns it into the
// policy's or the key store's values.

// maxTTLSeconds is the longest ttl_seconds a run-time override takes.
const maxTTLSeconds = 366 * 24 * 3600

// tenantBody is the body of PUT /admin/tenants/{id}.
type tenantBody struct {
	Plan        string                         `json:"plan"`
	Limit       int64                          `json:"limit"`
	Burst       int64                          `json:"burst"`
	Limits      map[string]policy.RuleOverride `json:"limits"`
	Shares      map[string]float64             `json:"shares"`
	Concurrency int64                          `json:"concurrency"`
	ExpiresAt   opt[string]                    `json:"expires_at"`
	TTLSeconds  opt[int64]                     `json:"ttl_seconds"`
}

// expiry is the time an expires_at or ttl_seconds field names (at most
// maxTTL seconds ahead), zero for neither, or an error naming the field.
func expiry(at opt[string], ttl opt[int64], maxTTL int64) (time.Time, error) {
	switch {
	case at.ok && ttl.ok:
		return time.Time{}, errors.New("expires_at, ttl_seconds: give one, not both")
	case at.ok:
		t, err := time.Parse(time.RFC3339Nano, at.v)
		if err != nil {
			return time.Time{}, fmt.Errorf("expires_at: %q is not an RFC 3339 time such as 2026-12-31T23:00:00Z", at.v)
		}
		return t, nil
	case ttl.ok:
		if ttl.v < 1 || ttl.v > maxTTL {
			return time.Time{}, fmt.Errorf("ttl_seconds: %d is outside 1..%d (%d days)", ttl.v, maxTTL, maxTTL/86400)
		}
		return time.Now().Add(time.Duration(ttl.v) * time.Second), nil
	}
	return time.Time{}, nil
}

// planBody is the body of PUT /admin/plans/{name}.
type planBody struct {
	Rules       []ruleBody `json:"rules"`
	Concurrency int64      `json:"concurrency"`
}

// ruleBody is one rule of a planBody.
type ruleBody struct {
	Name      opt[string] `json:"name"`
	Limit     opt[int64]  `json:"limit"`
	PeriodMs  opt[int64]  `json:"period_ms"`
	Burst     opt[int64]  `json:"burst"`
	Algorithm opt[string] `json:"algorithm"`
	Calendar  opt[string] `json:"calendar"`
	Shadow    opt[bool]   `json:"shadow"`
}

// plan turns a plan body into a plan, naming the field at fault.
func (b planBody) plan(name string) (policy.Plan, string) {
	p := policy.Plan{Name: name, Concurrency: b.Concurrency}
	if b.Concurrency < 0 || b.Concurrency > policy.MaxConcurrency {
		return p, fmt.Sprintf("concurrency: %d is outside 0..%d (0: no limit)", b.Concurrency, policy.MaxConcurrency)
	}
	if len(b.Rules) == 0 {
		return p, "rules: required, at least one rule"
	}
	for i, rb := range b.Rules {
		at := fmt.Sprintf("rules[%d].", i)
		var r policy.Rule
		if rb.Name.ok {
			r.Name = rb.Name.v
		}
		if !rb.Limit.ok {
			return p, at + "limit: required"
		}
		r.Limit.Limit = rb.Limit.v
		switch {
		case rb.Calendar.ok:
			switch rb.Calendar.v {
			case "day":
				r.Calendar = policy.Day
			case "month":
				r.Calendar = policy.Month
			default:
				return p, fmt.Sprintf("%scalendar: %q: want day or month", at, rb.Calendar.v)
			}
			if rb.PeriodMs.ok || rb.Burst.ok || rb.Algorithm.ok {
				return p, at + "calendar: a calendar rule takes only limit (and name, shadow)"
			}
		case !rb.PeriodMs.ok:
			return p, at + "period_ms: required (or calendar: day or month)"
		default:
			if rb.PeriodMs.v < 1 || rb.PeriodMs.v > int64(algo.MaxPeriod/time.Millisecond) {
				return p, fmt.Sprintf("%speriod_ms: %d is outside 1..%d", at, rb.PeriodMs.v, int64(algo.MaxPeriod/time.Millisecond))
			}
			r.Limit.Period = time.Duration(rb.PeriodMs.v) * time.Millisecond
		}
		if rb.Burst.ok {
			r.Limit.Burst = rb.Burst.v
		}
		if rb.Algorithm.ok {
			a, err := algo.ParseAlgorithm(rb.Algorithm.v)
			if err != nil {
				return p, fmt.Sprintf("%salgorithm: unknown %q: want %s", at, rb.Algorithm.v, algo.AlgorithmNames())
			}
			r.Limit.Algorithm = a
		}
		if rb.Shadow.ok {
			r.Shadow = rb.Shadow.v
		}
		p.Rules = append(p.Rules, r)
	}
	return p, ""
}

// maxKeyTTLSeconds is the longest ttl_seconds a stored key takes: 10 years.
const maxKeyTTLSeconds = 10 * 366 * 24 * 3600

// keyBody is the body of POST /admin/keys.
type keyBody struct {
	Tenant     string      `json:"tenant"`
	Plan       string      `json:"plan"`
	Label      opt[string] `json:"label"`
	ExpiresAt  opt[string] `json:"expires_at"`
	TTLSeconds opt[int64]  `json:"ttl_seconds"`
}

// keyPatchBody is the body of PATCH /admin/keys/{id}.
type keyPatchBody struct {
	Label      opt[string] `json:"label"`
	ExpiresAt  opt[string] `json:"expires_at"`
	TTLSeconds opt[int64]  `json:"ttl_seconds"`
	ExpireNow  bool        `json:"expire_now"`
	NoExpiry   bool        `json:"no_expiry"`
}

// patched returns the label and expiry cur gets from b.
func patched(cur apikeys.Record, b keyPatchBody) (string, time.Time, error) {
	label, exp := cur.Label, cur.Expires
	if b.Label.ok {
		label = b.Label.v
	}
	n := 0
	for _, set := range []bool{b.ExpiresAt.ok, b.TTLSeconds.ok, b.ExpireNow, b.NoExpiry} {
		if set {
			n++
		}
	}
	if n > 1 {
		return "", time.Time{}, errors.New("expires_at, ttl_seconds, expire_now, no_expiry: give one")
	}
	switch {
	case b.ExpireNow:
		exp = time.Now()
	case b.NoExpiry:
		exp = time.Time{}
	case n == 1:
		t, err := expiry(b.ExpiresAt, b.TTLSeconds, maxKeyTTLSeconds)
		if err != nil {
			return "", time.Time{}, err
		}
		exp = t
	}
	return label, exp.UTC(), nil
}
