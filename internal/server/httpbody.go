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
	"unicode/utf8"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/jsonwire"
)

// MaxBody is the largest request body accepted; larger ones get 413.
const MaxBody = 64 << 10

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

// opt is a field of a request body: its value, and whether it was given.
type opt[T any] struct {
	v  T
	ok bool
}

// optOf is *p, given when p is not nil.
func optOf[T any](p *T) opt[T] {
	if p == nil {
		return opt[T]{}
	}
	return opt[T]{*p, true}
}

// setStr sets o from m, reporting false (leave it to encoding/json) when
// m is not a string or o was given already.
func setStr(o *opt[string], m jsonwire.Member) bool {
	if o.ok || m.Kind != jsonwire.String {
		return false
	}
	*o = opt[string]{string(m.Str), true}
	return true
}

// setInt sets o from m as setStr does, for an integer.
func setInt(o *opt[int64], m jsonwire.Member) bool {
	if o.ok || m.Kind != jsonwire.Int {
		return false
	}
	*o = opt[int64]{m.Int, true}
	return true
}

// readFast reads r's body with fast, the request's fast reader, and
// when that leaves it, through encoding/json into a J handed to slow. It
// writes the error response itself when the body cannot be read.
func readFast[J any](w http.ResponseWriter, r *http.Request, fast func([]byte) bool, slow func(*J)) bool {
	buf, ok := readBody(w, r)
	if !ok {
		return false
	}
	defer putBody(buf)
	if fast(buf.Bytes()) {
		return true
	}
	var j J
	if !decodeBody(w, buf.Bytes(), &j) {
		return false
	}
	slow(&j)
	return true
}
