package costmeter

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"

	"github.com/fairgate/fairgate/policy"
)

// MaxBody is how many bytes of a JSON answer a meter holds to parse it
// when the answer ends: 1 MiB. A longer body (compressed, and again
// decompressed) is not measured.
const MaxBody = 1 << 20

// DecodePath decodes from the JSON text data only the members along path
// (dotted member names), nested as in data: {"usage": {"total_tokens":
// 9}} for path usage.total_tokens, whatever else the objects hold. It
// returns nil when data is not a JSON object, lacks a member on the way,
// or does not hold the path's last name as a quoted string at all (the
// check that spares parsing a body or event that cannot carry it). Give
// the result to [policy.JSONCount] or [policy.Estimate.From], which read
// the count at path. Members off the path are scanned, never decoded.
func DecodePath(data []byte, path string) any {
	last := path[strings.LastIndexByte(path, '.')+1:]
	var kb [72]byte
	key := append(append(append(kb[:0], '"'), last...), '"')
	if !bytes.Contains(data, key) {
		return nil
	}
	return decodePath(data, path)
}

func decodePath(data []byte, path string) any {
	name, rest, more := strings.Cut(path, ".")
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return nil
	}
	raw, ok := obj[name]
	if !ok {
		return nil
	}
	var v any
	if more {
		if v = decodePath(raw, rest); v == nil {
			return nil
		}
	} else if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return map[string]any{name: v}
}

// appendBounded appends p to buf when the result holds at most limit
// bytes, growing buf to at most limit; ok is false (buf unchanged) when
// it would hold more.
func appendBounded(buf, p []byte, limit int) (_ []byte, ok bool) {
	n := len(buf) + len(p)
	if n > limit {
		return buf, false
	}
	if n > cap(buf) {
		nb := make([]byte, len(buf), min(max(2*cap(buf), n, 512), limit))
		copy(nb, buf)
		buf = nb
	}
	return append(buf, p...), true
}

// jsonBody holds a JSON answer's bytes, up to its bound, to parse them
// when the answer ends.
type jsonBody struct {
	path  string
	limit int
	gzip  bool  // the bytes are gzip-encoded
	size  int64 // the declared length, at most limit; 0: not known
	buf   []byte
	over  bool // the body passed the bound: nothing to parse
}

func (b *jsonBody) write(p []byte) {
	if b.over {
		return
	}
	if b.buf == nil && b.size > 0 {
		b.buf = make([]byte, 0, b.size) // one buffer, not one per doubling
	}
	var ok bool
	if b.buf, ok = appendBounded(b.buf, p, b.limit); !ok {
		b.over, b.buf = true, nil
	}
}

// held is how many bytes b holds (its buffer's capacity).
func (b *jsonBody) held() int { return cap(b.buf) }

// end parses the body and returns the count at its path.
func (b *jsonBody) end() (int64, bool) {
	if b.over || len(b.buf) == 0 {
		return 0, false
	}
	data := b.buf
	if b.gzip {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return 0, false
		}
		data, err = io.ReadAll(io.LimitReader(zr, int64(b.limit)+1))
		if err != nil || len(data) > b.limit {
			return 0, false
		}
	}
	b.buf = nil
	return policy.JSONCount(DecodePath(data, b.path), b.path)
}
