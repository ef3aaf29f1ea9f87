package server

import "github.com/fairgate/fairgate/internal/jsonwire"

// The decision API's answers, appended without reflection: byte for byte
// what encoding/json writes for the same structs (TestAppendedAnswers;
// jsonwire.AppendString is held to encoding/json by FuzzAppendString).

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
	b = append(b, ']')
	if c.Settlement != "" {
		b = jsonwire.AppendString(jsonwire.AppendMember(b, "settlement"), c.Settlement)
	}
	return append(b, '}')
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
