package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/guard"
)

// takeJSON is the body of POST /v1/take as encoding/json reads it: the
// slow path, for any body the fast reader (takeRequest.read) leaves, with
// encoding/json's errors. Pointers tell a missing field from a zero one.
type takeJSON struct {
	Key       *string `json:"key"`
	Limit     *int64  `json:"limit"`
	PeriodMs  *int64  `json:"period_ms"`
	Burst     *int64  `json:"burst"`
	Cost      *int64  `json:"cost"`
	Algorithm *string `json:"algorithm"`
	Fail      *string `json:"fail"`
}

// takeResponse is the answer of POST /v1/take, allowed or not.
type takeResponse struct {
	Allowed      bool  `json:"allowed"`
	Limit        int64 `json:"limit"`
	Remaining    int64 `json:"remaining"`
	RetryAfterMs int64 `json:"retry_after_ms"`
	ResetAfterMs int64 `json:"reset_after_ms"`
	Degraded     bool  `json:"degraded,omitempty"`
}

// maxPeriodMs is algo.MaxPeriod in milliseconds.
const maxPeriodMs = int64(algo.MaxPeriod / time.Millisecond)

// decodeJSON reads one JSON object from r's body into v, strictly: no
// unknown fields, nothing after it, at most MaxBody bytes. It writes the
// error response itself and reports whether decoding succeeded.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	buf, ok := readBody(w, r)
	if !ok {
		return false
	}
	defer putBody(buf)
	return decodeBody(w, buf.Bytes(), v)
}

// readBody reads r's body into a pooled buffer (the caller gives it back
// with putBody): at most MaxBody bytes of uncompressed UTF-8. It writes
// the error response itself and reports whether reading succeeded.
func readBody(w http.ResponseWriter, r *http.Request) (*bytes.Buffer, bool) {
	if ce := r.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		problem.Write(w, problem.Details{Status: http.StatusUnsupportedMediaType, Detail: fmt.Sprintf("Content-Encoding %s is not accepted: send the JSON body uncompressed", ce)})
		return nil, false
	}
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	ok := false
	defer func() {
		if !ok {
			putBody(buf)
		}
	}()
	if err := readUpTo(buf, r.Body, MaxBody+1); err != nil {
		problem.BadRequest(w, "reading body: "+err.Error())
		return nil, false
	}
	if buf.Len() > MaxBody {
		w.Header().Set("Connection", "close") // the rest of the body is not read
		problem.Write(w, problem.Details{Status: http.StatusRequestEntityTooLarge, Detail: fmt.Sprintf("body is over %d bytes", MaxBody)})
		return nil, false
	}
	body := buf.Bytes()
	if len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b {
		problem.Write(w, problem.Details{Status: http.StatusUnsupportedMediaType, Detail: "the body is gzip-compressed: send the JSON uncompressed"})
		return nil, false
	}
	if !utf8.Valid(body) {
		problem.BadRequest(w, "body is not valid UTF-8: JSON strings must be UTF-8")
		return nil, false
	}
	ok = true
	return buf, true
}

// decodeBody decodes body into v as decodeJSON does.
func decodeBody(w http.ResponseWriter, body []byte, v any) bool {
	if err := checkBody(body, reflect.TypeOf(v)); err != nil {
		problem.BadRequest(w, err.Error())
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		problem.BadRequest(w, jsonError(err))
		return false
	}
	return true
}

// readUpTo reads r into buf until EOF or until buf holds n bytes (what
// io.LimitReader does, without one per request).
func readUpTo(buf *bytes.Buffer, r io.Reader, n int) error {
	for buf.Len() < n {
		buf.Grow(min(512, n-buf.Len()))
		free := buf.AvailableBuffer()
		m, err := r.Read(free[:min(cap(free), n-buf.Len())])
		buf.Write(free[:m])
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// bodyPool holds request body buffers: a decision reads its body into one
// and gives it back, instead of a new slice per request.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBody returns buf to the pool unless a large body grew it.
func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= 16<<10 {
		bodyPool.Put(buf)
	}
}

// checkBody checks what encoding/json lets pass: every object member name
// is given once, and matches its field's name exactly (the decoder would
// match "Limit" to limit). t is the type decoded into. It scans the bytes
// once, allocating nothing for the common body (it runs on every /v1/take
// and /v1/check); anything that is not well-formed JSON is left to the
// decoder, which names it better. It also refuses what encoding/json's
// Decoder refused for decodeJSON before it used Unmarshal: an empty body, a member
// a struct does not have (`unknown field "x"`, once the body is known to
// be well-formed JSON), and a second value after the first.
func checkBody(body []byte, t reflect.Type) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("body is empty: want a JSON object")
	}
	sc, ok, err := scanBody(body, t)
	if err != nil || !ok {
		return err
	}
	if sc.ws(); sc.i < len(sc.b) {
		return errors.New("body holds more than one JSON value")
	}
	return sc.unknown
}

// scanBody scans body as a value of t: the scanner, done, and false for a
// body that is not well-formed JSON (the decoder names that better); the
// error is a name given twice or in the wrong case.
func scanBody(body []byte, t reflect.Type) (nameScanner, bool, error) {
	sc := nameScanner{b: body}
	switch err := sc.value(t); {
	case err == errNotJSON:
		return sc, false, nil
	case err != nil:
		return sc, false, err
	}
	return sc, true, nil
}

// errNotJSON stops a nameScanner at malformed input.
var errNotJSON = errors.New("not JSON")

// nameScanner walks JSON bytes, checking object member names.
type nameScanner struct {
	b       []byte
	i       int
	path    [][]byte // the names leading to the value being read; "[]" for an element
	unknown error    // the first member no struct field takes
}

// at names the member name under the current path, as in "limits.1m.Limit"
// (an element adds "[]": "rules.[]limit").
func (sc *nameScanner) at(name []byte) string {
	var b strings.Builder
	for _, p := range sc.path {
		b.Write(p)
		if string(p) != "[]" {
			b.WriteByte('.')
		}
	}
	b.Write(name)
	return b.String()
}

func (sc *nameScanner) ws() {
	for sc.i < len(sc.b) && (sc.b[sc.i] == ' ' || sc.b[sc.i] == '\t' || sc.b[sc.i] == '\n' || sc.b[sc.i] == '\r') {
		sc.i++
	}
}

// str reads a string literal at sc.i and returns its raw bytes, quotes
// included.
func (sc *nameScanner) str() ([]byte, error) {
	start := sc.i
	if sc.i >= len(sc.b) || sc.b[sc.i] != '"' {
		return nil, errNotJSON
	}
	for sc.i++; sc.i < len(sc.b); sc.i++ {
		switch sc.b[sc.i] {
		case '\\':
			sc.i++
		case '"':
			sc.i++
			return sc.b[start:sc.i], nil
		}
	}
	return nil, errNotJSON
}

// value checks the value at sc.i, decoded into t (nil: not known).
func (sc *nameScanner) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	sc.ws()
	if sc.i >= len(sc.b) {
		return errNotJSON
	}
	switch sc.b[sc.i] {
	case '"':
		_, err := sc.str()
		return err
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		sc.i++
		if sc.ws(); sc.i < len(sc.b) && sc.b[sc.i] == ']' {
			sc.i++
			return nil
		}
		sc.path = append(sc.path, []byte("[]"))
		defer func() { sc.path = sc.path[:len(sc.path)-1] }()
		for {
			if err := sc.value(elem); err != nil {
				return err
			}
			if sc.ws(); sc.i >= len(sc.b) {
				return errNotJSON
			}
			sc.i++
			switch sc.b[sc.i-1] {
			case ']':
				return nil
			case ',':
			default:
				return errNotJSON
			}
		}
	case '{':
		return sc.object(t)
	}
	for sc.i < len(sc.b) && !strings.ContainsRune(",}] \t\n\r", rune(sc.b[sc.i])) {
		sc.i++
	}
	return nil
}

// object checks the object at sc.i: names given once, and exactly as t's
// fields spell them.
func (sc *nameScanner) object(t reflect.Type) error {
	sc.i++
	var seenBuf [16][]byte
	seen := seenBuf[:0]
	if sc.ws(); sc.i < len(sc.b) && sc.b[sc.i] == '}' {
		sc.i++
		return nil
	}
	for {
		sc.ws()
		raw, err := sc.str()
		if err != nil {
			return err
		}
		name := raw[1 : len(raw)-1]
		if bytes.IndexByte(raw, '\\') >= 0 {
			var unq string
			if json.Unmarshal(raw, &unq) != nil {
				return errNotJSON
			}
			name = []byte(unq)
		}
		if slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, name) }) {
			return fmt.Errorf("field %s: given twice", sc.at(name))
		}
		seen = append(seen, name)
		var ft reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			ft = t.Elem()
		case t.Kind() == reflect.Struct:
			known := false
			for f := range t.NumField() {
				tag, _, _ := strings.Cut(t.Field(f).Tag.Get("json"), ",")
				if tag == string(name) {
					ft, known = t.Field(f).Type, true
					break
				}
				if bytes.EqualFold([]byte(tag), name) {
					return fmt.Errorf("field %s: unknown field; names are case-sensitive: did you mean %q?", sc.at(name), tag)
				}
			}
			if !known && sc.unknown == nil {
				sc.unknown = fmt.Errorf("unknown field %q", name)
			}
		}
		if sc.ws(); sc.i >= len(sc.b) || sc.b[sc.i] != ':' {
			return errNotJSON
		}
		sc.i++
		sc.path = append(sc.path, name)
		err = sc.value(ft)
		sc.path = sc.path[:len(sc.path)-1]
		if err != nil {
			return err
		}
		if sc.ws(); sc.i >= len(sc.b) {
			return errNotJSON
		}
		sc.i++
		switch sc.b[sc.i-1] {
		case '}':
			return nil
		case ',':
		default:
			return errNotJSON
		}
	}
}

// jsonError turns a decoding error into a detail that names the field.
func jsonError(err error) string {
	var typ *json.UnmarshalTypeError
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &typ) && typ.Field == "":
		return "body must be a JSON object, not " + typ.Value
	case errors.As(err, &typ):
		return fmt.Sprintf("field %s: want %s, got %s", typ.Field, jsonType(typ.Type.String()), typ.Value)
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		return "body is not valid JSON: " + err.Error()
	case errors.Is(err, io.EOF):
		return "body is empty: want a JSON object"
	}
	// The decoder's unknown-field error: `json: unknown field "x"`.
	if msg := err.Error(); len(msg) > 6 && msg[:6] == "json: " {
		return msg[6:]
	}
	return err.Error()
}

func jsonType(goType string) string {
	switch goType {
	case "int64":
		return "an integer"
	case "string":
		return "a string"
	}
	return goType
}

// parseTake validates a request and returns the check and fail mode, or a
// detail naming the field at fault.
func parseTake(req *takeRequest) (c store.Check, failOpen bool, detail string) {
	switch {
	case !req.key.ok || req.key.v == "":
		return c, false, "key: required, a non-empty string"
	case len(req.key.v) > policy.MaxTakeKey:
		return c, false, fmt.Sprintf("key: %d bytes, at most %d", len(req.key.v), policy.MaxTakeKey)
	case !req.limit.ok:
		return c, false, "limit: required"
	case req.limit.v < 1 || req.limit.v > algo.MaxCount:
		return c, false, fmt.Sprintf("limit: %d is outside 1..%d", req.limit.v, algo.MaxCount)
	case !req.periodMs.ok:
		return c, false, "period_ms: required"
	case req.periodMs.v < 1 || req.periodMs.v > maxPeriodMs:
		return c, false, fmt.Sprintf("period_ms: %d is outside 1..%d (366 days)", req.periodMs.v, maxPeriodMs)
	case req.periodMs.v*1000 < req.limit.v:
		return c, false, fmt.Sprintf("period_ms: %d ms for limit %d is under 1µs per unit: lengthen the period or lower the limit", req.periodMs.v, req.limit.v)
	}
	c.Key = policy.TakeKey(req.key.v)
	c.Limit = algo.Limit{Limit: req.limit.v, Period: time.Duration(req.periodMs.v) * time.Millisecond}
	if req.algorithm.ok {
		a, err := algo.ParseAlgorithm(req.algorithm.v)
		if err != nil {
			return c, false, fmt.Sprintf("algorithm: unknown %q: want %s", req.algorithm.v, algo.AlgorithmNames())
		}
		c.Limit.Algorithm = a
	}
	if req.burst.ok {
		switch b := req.burst.v; {
		case b < 1 || b > algo.MaxCount:
			return c, false, fmt.Sprintf("burst: %d is outside 1..%d", b, algo.MaxCount)
		case c.Limit.Algorithm.Windowed() && b != req.limit.v:
			return c, false, fmt.Sprintf("burst: %d must equal limit %d for %v, or be omitted", b, req.limit.v, c.Limit.Algorithm)
		}
		c.Limit.Burst = req.burst.v
	}
	if err := c.Limit.Validate(); err != nil {
		return c, false, "limit: " + err.Error()
	}
	c.Cost = 1
	if req.cost.ok {
		c.Cost = req.cost.v
		switch {
		case c.Cost < 0:
			return c, false, fmt.Sprintf("cost: %d is negative: use 0 to peek", c.Cost)
		case c.Cost > c.Limit.Capacity():
			return c, false, fmt.Sprintf("cost: %d exceeds burst %d: such a request could never pass", c.Cost, c.Limit.Capacity())
		}
	}
	if req.fail.ok {
		switch req.fail.v {
		case "open":
			failOpen = true
		case "closed":
		default:
			return c, false, fmt.Sprintf("fail: unknown mode %q: want open or closed", req.fail.v)
		}
	}
	return c, failOpen, ""
}

// takeScratch is what one /v1/take decision needs beyond its request,
// pooled: the store reads the check and writes the result in place.
type takeScratch struct {
	checks    [1]store.Check
	res       store.Result
	decisions [1]algo.Decision
}

var takePool = sync.Pool{New: func() any { return new(takeScratch) }}

func (s *Server) handleTake(w http.ResponseWriter, r *http.Request) {
	var req takeRequest
	if !readFast(w, r, req.read, func(j *takeJSON) { req = j.request() }) {
		return
	}
	c, failOpen, detail := parseTake(&req)
	if detail != "" {
		problem.BadRequest(w, detail)
		return
	}
	sc := takePool.Get().(*takeScratch)
	defer takePool.Put(sc)
	sc.checks[0] = c
	res := &sc.res
	*res = store.Result{Decisions: sc.decisions[:0]}
	fail := policy.FailClosed
	if failOpen {
		fail = policy.FailOpen
	}
	outcome, err := s.lim.Guard().Take(r.Context(), sc.checks[:], fail, res)
	if err != nil {
		problem.BadRequest(w, err.Error())
		return
	}
	if outcome == guard.Unavailable {
		httplimit.WriteRejection(w, s.form, limiter.Decision{Reason: limiter.ReasonUnavailable, RetryAfter: guard.UnavailableRetryAfter, Tightest: -1})
		return
	}
	d := res.Decisions[0]
	resp := takeResponse{
		Allowed:      d.Allowed,
		Limit:        d.Limit,
		Remaining:    d.Remaining,
		RetryAfterMs: algo.CeilMillis(d.RetryAfter),
		ResetAfterMs: algo.CeilMillis(d.ResetAfter),
		Degraded:     outcome == guard.Degraded,
	}
	out := outPool.Get().(*[]byte)
	*out = resp.appendJSON(*out)
	writeAppended(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	e := encPool.Get().(*encoder)
	e.buf.Reset()
	e.enc.Encode(v) // the value and a newline
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	w.Write(e.buf.Bytes())
	if e.buf.Cap() <= 64<<10 {
		encPool.Put(e)
	}
}

// jsonContentType is the Content-Type of every JSON answer, shared: set
// by map assignment, it costs no slice per response (nothing changes it).
var jsonContentType = []string{"application/json"}

// encoder is a pooled buffer and the JSON encoder writing to it.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encPool = sync.Pool{New: func() any {
	e := new(encoder)
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(true)
	return e
}}
