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
	"unsafe"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/internal/jsonwire"
)

// The HTTP room's bodies: every JSON request body is read by readJSON,
// into a struct whose json tags are the one list of the body's fields.
// An optional field is an opt, which tells a missing (or null) field from
// a zero one. readJSON checks what encoding/json lets pass (strictBody:
// names given twice or in the wrong case, unknown names, an empty body, a
// second value), then decodes with encoding/json, which names every other
// problem. /v1/take and /v1/check, the hot path, read the simple form of
// their bodies with a fastReader first (BenchmarkDecisionAPI, in
// bench/RESULTS.md); any body it does not take whole goes the same way as
// every other, so errors are the same whichever reader saw the body.

// MaxBody is the largest request body accepted; larger ones get 413.
const MaxBody = 64 << 10

// opt is an optional field of a request body: its value, and whether it
// was given. A null is not given, as a nil pointer field would be.
type opt[T any] struct {
	v  T
	ok bool
}

// UnmarshalJSON implements json.Unmarshaler: null leaves o not given.
func (o *opt[T]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if err := json.Unmarshal(b, &o.v); err != nil {
		return err
	}
	o.ok = true
	return nil
}

// optional is implemented by every opt: strictBody reads an opt's value
// as its element type.
type optional interface{ optional() }

func (opt[T]) optional() {}

var optionalType = reflect.TypeFor[optional]()

// readJSON reads one JSON object from r's body into *v: at most MaxBody
// bytes of uncompressed UTF-8, no unknown fields, nothing after it. fast,
// if not nil, reads the body first when it is in the simple form. It
// writes the error response itself and reports whether reading succeeded.
func readJSON[T any](w http.ResponseWriter, r *http.Request, v *T, fast *fastReader[T]) bool {
	buf, ok := readBody(w, r)
	if !ok {
		return false
	}
	defer putBody(buf)
	return decodeBody(w, buf.Bytes(), v, fast)
}

// decodeBody decodes body into *v as readJSON does.
func decodeBody[T any](w http.ResponseWriter, body []byte, v *T, fast *fastReader[T]) bool {
	if fast != nil && fast.read(body, v) {
		return true
	}
	if err := strictBody(body, reflect.TypeFor[T]()); err != nil {
		problem.BadRequest(w, err.Error())
		return false
	}
	// Into a value of its own, so that *v stays where its caller put it
	// (on the stack, for the fast path), whatever the fast reader left in
	// it.
	j := new(T)
	if err := json.Unmarshal(body, j); err != nil {
		problem.BadRequest(w, jsonError(err))
		return false
	}
	*v = *j
	return true
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

// bodyPool holds request body buffers: a request reads its body into one
// and gives it back, instead of a new slice per request.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putBody returns buf to the pool unless a large body grew it.
func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= 16<<10 {
		bodyPool.Put(buf)
	}
}

// fastReader reads the bodies of type T that are in jsonwire's simple form
// (strings without escapes, integers, each name once) into T's fields,
// which must all be opt[string] or opt[int64]. Their names, types and
// offsets come from T's json tags and reflect, once: a read uses neither
// reflection nor the heap (a reflect.Value of the body would move it
// there), only the strings it keeps.
type fastReader[T any] struct {
	fields []fastField
}

// fastField is one field of a fastReader's body.
type fastField struct {
	name   string
	kind   jsonwire.Kind
	offset uintptr // the field's, in T
}

// newFastReader returns the fast reader of T's bodies. It panics when a
// field of T is not an opt[string] or an opt[int64]: a programming error.
func newFastReader[T any]() *fastReader[T] {
	t := reflect.TypeFor[T]()
	f := &fastReader[T]{}
	for i := range t.NumField() {
		sf := t.Field(i)
		ff := fastField{offset: sf.Offset}
		ff.name, _, _ = strings.Cut(sf.Tag.Get("json"), ",")
		switch sf.Type {
		case reflect.TypeFor[opt[string]]():
			ff.kind = jsonwire.String
		case reflect.TypeFor[opt[int64]]():
			ff.kind = jsonwire.Int
		default:
			panic(fmt.Sprintf("server: %v.%s is a %v: a fast reader reads only opt[string] and opt[int64] fields", t, sf.Name, sf.Type))
		}
		f.fields = append(f.fields, ff)
	}
	return f
}

// read reads body into *v, reporting false for a body it leaves to
// encoding/json (*v is then partly filled: the caller resets it).
func (f *fastReader[T]) read(body []byte, v *T) bool {
	o := jsonwire.NewObject(body)
	for m, ok := o.Next(); ok; m, ok = o.Next() {
		i := slices.IndexFunc(f.fields, func(ff fastField) bool { return ff.name == string(m.Name) })
		if i < 0 || f.fields[i].kind != m.Kind {
			return false // an unknown name or another type: encoding/json names it
		}
		// The field of this name, of this kind (newFastReader checked).
		p := unsafe.Add(unsafe.Pointer(v), f.fields[i].offset)
		switch m.Kind {
		case jsonwire.String:
			fv := (*opt[string])(p)
			if fv.ok {
				return false // given twice
			}
			*fv = opt[string]{string(m.Str), true}
		case jsonwire.Int:
			fv := (*opt[int64])(p)
			if fv.ok {
				return false
			}
			*fv = opt[int64]{m.Int, true}
		}
	}
	return o.Simple()
}

// strictBody checks what encoding/json lets pass: every object member name
// is given once, and matches its field's name exactly (the decoder would
// match "Limit" to limit). t is the type decoded into. It scans the bytes
// once, allocating nothing for the common body; anything that is not
// well-formed JSON is left to the decoder, which names it better. It also
// refuses an empty body, a member a struct does not have (`unknown field
// "x"`, once the body is known to be well-formed JSON), and a second value
// after the first.
func strictBody(body []byte, t reflect.Type) error {
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

// value checks the value at sc.i, decoded into t (nil: not known; an opt
// is read as its value's type).
func (sc *nameScanner) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.Kind() == reflect.Struct && t.Implements(optionalType) {
		t = t.Field(0).Type // opt's v
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
	start := sc.i
	for sc.i < len(sc.b) && !strings.ContainsRune(",}] \t\n\r", rune(sc.b[sc.i])) {
		sc.i++
	}
	// A number, true, false or null; anything else (`not json`) is not
	// JSON, for the decoder to name with its byte, rather than a first
	// value with a second after it.
	if !json.Valid(sc.b[start:sc.i]) {
		return errNotJSON
	}
	return nil
}

// object checks the object at sc.i: names given once, and exactly as t's
// fields spell them.
func (sc *nameScanner) object(t reflect.Type) error {
	sc.i++
	var seenBuf [16][]byte
	seen := seenBuf[:0]
	var seenSet map[string]struct{} // seen, once it outgrows seenBuf
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
		if seenSet == nil {
			if slices.ContainsFunc(seen, func(s []byte) bool { return bytes.Equal(s, name) }) {
				return fmt.Errorf("field %s: given twice", sc.at(name))
			}
			if seen = append(seen, name); len(seen) > len(seenBuf) {
				// Past a struct's few names, a set: a 64 KiB body of
				// thousands of names costs linear time, not quadratic.
				seenSet = make(map[string]struct{}, 4*len(seenBuf))
				for _, s := range seen {
					seenSet[string(s)] = struct{}{}
				}
			}
		} else {
			if _, dup := seenSet[string(name)]; dup {
				return fmt.Errorf("field %s: given twice", sc.at(name))
			}
			seenSet[string(name)] = struct{}{}
		}
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
	case errors.As(err, &syn):
		return fmt.Sprintf("body is not valid JSON at byte %d: %v", syn.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "body is not valid JSON: " + err.Error()
	case errors.Is(err, io.EOF):
		return "body is empty: want a JSON object"
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
