package server

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestNotJSONBody: a body that is not JSON (`curl -d 'not json'`) is
// reported as such, with the byte where it goes wrong, by every kind of
// body a handler reads (the fast readers of /v1/take and /v1/check
// included), not as a first value with a second after it.
func TestNotJSONBody(t *testing.T) {
	kinds := map[string]func(body string) *httptest.ResponseRecorder{
		"take":      decodeAs[takeBody](takeFast),
		"check":     decodeAs[checkBody](checkFast),
		"plan":      decodeAs[planBody](nil),
		"tenant":    decodeAs[tenantBody](nil),
		"key":       decodeAs[keyBody](nil),
		"key patch": decodeAs[keyPatchBody](nil),
		"slot":      decodeAs[slotBody](nil),
		"job ack":   decodeAs[finishBody](nil),
		"acquire":   decodeAs[acquireBody](nil),
		"pause":     decodeAs[pauseBody](nil),
	}
	for _, c := range []struct{ body, detail string }{
		{`not json`, "body is not valid JSON at byte 2: invalid character 'o' in literal null"},
		{`hello`, "body is not valid JSON at byte 1: invalid character 'h'"},
		{`nul`, "body is not valid JSON"},
		{`{"key":nope}`, "body is not valid JSON at byte 9"},
		{`{} {}`, "body holds more than one JSON value"},
		{`1 2`, "body holds more than one JSON value"},
	} {
		for name, decode := range kinds {
			rec := decode(c.body)
			var p struct{ Detail string }
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || rec.Code != 400 || !strings.Contains(p.Detail, c.detail) {
				t.Errorf("%s body %q: %d %q, want 400 with %q", name, c.body, rec.Code, rec.Body.String(), c.detail)
			}
		}
	}
}

// decodeAs returns a function decoding a body as a T, as its handler does.
func decodeAs[T any](fast *fastReader[T]) func(string) *httptest.ResponseRecorder {
	return func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		var v T
		decodeBody(rec, []byte(body), &v, fast)
		return rec
	}
}
