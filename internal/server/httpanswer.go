package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
)

// The HTTP room's answers: every JSON answer is written by writeJSON
// (encoding/json) or, on the decision API's hot path, appended by the
// answer's own appendJSON (wire.go) and written by writeAppended. Problems
// are httplimit/problem's; rate-limit headers are limitheader's.

// writeJSON writes status and v as JSON, with a newline after it.
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

// outPool holds the buffers answers are appended to.
var outPool = sync.Pool{New: func() any { return new([]byte) }}

// writeAppended writes status and the JSON in *b, a buffer of outPool
// (with a newline after it, as json.Encoder writes), and gives the buffer
// back.
func writeAppended(w http.ResponseWriter, status int, b *[]byte) {
	*b = append(*b, '\n')
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	w.Write(*b)
	if cap(*b) <= 64<<10 {
		*b = (*b)[:0]
		outPool.Put(b)
	}
}
