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

// writeJSON writes status and v as JSON, with a newline after it. It
// serves the admin, worker and slot answers, none on the decision path,
// where a pooled encoder measured no saving worth a pool
// (bench/RESULTS.md, the six sync.Pools).
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(v) // the value and a newline, HTML escaped
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// jsonContentType is the Content-Type of every JSON answer, shared: set
// by map assignment, it costs no slice per response (nothing changes it).
var jsonContentType = []string{"application/json"}

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
