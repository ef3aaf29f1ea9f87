package quota

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

type tenantKey struct{}

// WithTenant returns a context that carries the tenant an outbound call is
// made for, for [Transport].
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// TenantFrom returns the tenant WithTenant put in ctx, or "".
func TenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

type operatorKey struct{}

// ForOperator returns a context saying its calls with no tenant are the
// operator's own (an account check, a message for no tenant): they draw
// on the provider's budget alone, and the provider's Retry-After to them
// pauses the provider for every tenant. Without it a call with no tenant
// is an error, so that a call that forgot its tenant can neither skip the
// tenant's share nor pause the provider.
func ForOperator(ctx context.Context) context.Context {
	return context.WithValue(ctx, operatorKey{}, true)
}

// isOperator reports whether ctx is from ForOperator.
func isOperator(ctx context.Context) bool { v, _ := ctx.Value(operatorKey{}).(bool); return v }

// Transport is an http.RoundTripper for the calls to one provider. Before
// each request it acquires a call for the request's tenant (see
// [WithTenant]). When the provider answers 429 or 503 with a Retry-After
// (seconds or an HTTP date, at most MaxPause) it pauses that tenant's
// calls for that long ([Quotas.PauseTenant], which pauses the provider
// only on a quorum of tenants), or, for the operator's own call
// ([ForOperator]), the provider ([Quotas.Pause]); the response is
// returned as it came. A failed acquire is the request's error: a
// *DeadlineError says when to re-queue the job.
type Transport struct {
	// Quotas decides the calls. Required.
	Quotas *Quotas
	// Provider is the provider's name in the config. Required.
	Provider string
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Tenant returns the tenant of a request. Nil means TenantFrom of the
	// request's context.
	Tenant func(*http.Request) string
	// OnPauseError, if not nil, is told when a pause the provider asked
	// for could not be stored (the response is returned all the same).
	OnPauseError func(error)
}

// pauseTimeout bounds the store call of a pause, which outlives the
// request's own context.
const pauseTimeout = 2 * time.Second

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	tenant := ""
	if t.Tenant != nil {
		tenant = t.Tenant(req)
	} else {
		tenant = TenantFrom(req.Context())
	}
	if err := t.Quotas.Acquire(req.Context(), t.Provider, tenant); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), t.Quotas.now()); ok && d > 0 {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), pauseTimeout)
			d = min(d, t.Quotas.MaxPause())
			var err error
			if tenant == "" {
				err = t.Quotas.Pause(ctx, t.Provider, d)
			} else {
				_, err = t.Quotas.PauseTenant(ctx, t.Provider, tenant, d)
			}
			cancel()
			if err != nil && t.OnPauseError != nil {
				t.OnPauseError(err)
			}
		}
	}
	return resp, nil
}

// ParseRetryAfter reads a Retry-After value (RFC 9110 §10.2.3): a number
// of seconds, or an HTTP date, taken relative to now (a date in the past
// is 0). ok is false for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			var ne *strconv.NumError
			if errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange) {
				return time.Duration(1<<63 - 1), true
			}
			return 0, false
		}
		if n > int64((1<<63-1)/time.Second) {
			return time.Duration(1<<63 - 1), true
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, at.Sub(now)), true
}
