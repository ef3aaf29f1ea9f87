package server

import (
	"github.com/fairgate/fairgate/internal/jsonwire"
)

// The decision API's hot path reads its bodies with jsonwire and writes
// its answers by appending, with no reflection; encoding/json remains the
// authority for every body the fast reader leaves (escapes, nulls,
// unknown or repeated names, anything malformed), so errors and edge
// cases are encoding/json's. FuzzFastBodies holds the two readers to
// the same result.

// takeRequest is a /v1/take body read.
type takeRequest struct {
	key, algorithm, fail         opt[string]
	limit, periodMs, burst, cost opt[int64]
}

// read reads body on the fast path, reporting false for a body it leaves
// to encoding/json (req is then partly filled: discard it).
func (req *takeRequest) read(body []byte) bool {
	o := jsonwire.NewObject(body)
	for m, ok := o.Next(); ok; m, ok = o.Next() {
		var good bool
		switch string(m.Name) {
		case "key":
			good = setStr(&req.key, m)
		case "limit":
			good = setInt(&req.limit, m)
		case "period_ms":
			good = setInt(&req.periodMs, m)
		case "burst":
			good = setInt(&req.burst, m)
		case "cost":
			good = setInt(&req.cost, m)
		case "algorithm":
			good = setStr(&req.algorithm, m)
		case "fail":
			good = setStr(&req.fail, m)
		}
		if !good {
			return false
		}
	}
	return o.Simple()
}

// request is what j holds, as a takeRequest.
func (j *takeJSON) request() takeRequest {
	return takeRequest{
		key: optOf(j.Key), algorithm: optOf(j.Algorithm), fail: optOf(j.Fail),
		limit: optOf(j.Limit), periodMs: optOf(j.PeriodMs), burst: optOf(j.Burst), cost: optOf(j.Cost),
	}
}

// checkRequest is a /v1/check body read.
type checkRequest struct {
	tenant, route, class, ip opt[string]
	cost                     opt[int64]
}

// read reads body on the fast path, as takeRequest.read does.
func (req *checkRequest) read(body []byte) bool {
	o := jsonwire.NewObject(body)
	for m, ok := o.Next(); ok; m, ok = o.Next() {
		var good bool
		switch string(m.Name) {
		case "tenant":
			good = setStr(&req.tenant, m)
		case "route":
			good = setStr(&req.route, m)
		case "class":
			good = setStr(&req.class, m)
		case "ip":
			good = setStr(&req.ip, m)
		case "cost":
			good = setInt(&req.cost, m)
		}
		if !good {
			return false
		}
	}
	return o.Simple()
}

// request is what j holds, as a checkRequest.
func (j *checkJSON) request() checkRequest {
	return checkRequest{tenant: optOf(j.Tenant), route: optOf(j.Route), class: optOf(j.Class), ip: optOf(j.IP), cost: optOf(j.Cost)}
}

// appendJSON appends t as encoding/json encodes it.
func (t *takeResponse) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = jsonwire.AppendBool(jsonwire.AppendMember(b, "allowed"), t.Allowed)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "limit"), t.Limit)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "remaining"), t.Remaining)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "retry_after_ms"), t.RetryAfterMs)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "reset_after_ms"), t.ResetAfterMs)
	if t.Degraded {
		b = jsonwire.AppendBool(jsonwire.AppendMember(b, "degraded"), true)
	}
	return append(b, '}')
}

// appendJSON appends c as encoding/json encodes it.
func (c *checkResponse) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = jsonwire.AppendBool(jsonwire.AppendMember(b, "allowed"), c.Allowed)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "status"), int64(c.Status))
	b = jsonwire.AppendString(jsonwire.AppendMember(b, "reason"), c.Reason)
	b = jsonwire.AppendString(jsonwire.AppendMember(b, "policy"), c.Policy)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "retry_after_ms"), c.RetryAfterMs)
	b = c.Headers.appendJSON(jsonwire.AppendMember(b, "headers"))
	b = append(jsonwire.AppendMember(b, "decisions"), '[')
	for i := range c.Decisions {
		if i > 0 {
			b = append(b, ',')
		}
		b = c.Decisions[i].appendJSON(b)
	}
	return append(b, ']', '}')
}

// appendJSON appends l as encoding/json encodes it.
func (l *layerJSON) appendJSON(b []byte) []byte {
	b = append(b, '{')
	b = jsonwire.AppendString(jsonwire.AppendMember(b, "policy"), l.Policy)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "limit"), l.Limit)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "remaining"), l.Remaining)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "reset_after_ms"), l.ResetAfterMs)
	b = jsonwire.AppendInt(jsonwire.AppendMember(b, "retry_after_ms"), l.RetryAfterMs)
	b = jsonwire.AppendBool(jsonwire.AppendMember(b, "allowed"), l.Allowed)
	if l.Shadow {
		b = jsonwire.AppendBool(jsonwire.AppendMember(b, "shadow"), true)
	}
	return append(b, '}')
}

// appendJSON appends the fields as one JSON object.
func (h headerFields) appendJSON(b []byte) []byte {
	b = append(b, '{')
	for i := 0; i+1 < len(h); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonwire.AppendString(append(jsonwire.AppendString(b, h[i]), ':'), h[i+1])
	}
	return append(b, '}')
}
