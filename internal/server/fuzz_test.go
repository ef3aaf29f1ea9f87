package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/httplimit/problem"
	"github.com/fairgate/fairgate/store/memstore"
)

// FuzzTake sends arbitrary bodies to POST /v1/take: the server answers 200
// with a decision or a 4xx problem+json, never panics, never 5xx.
func FuzzTake(f *testing.F) {
	for _, s := range []string{
		`{"key":"k","limit":10,"period_ms":1000}`,
		`{"key":"k","limit":5,"period_ms":1000,"burst":5,"cost":0,"algorithm":"sliding_log","fail":"open"}`,
		`{"key":"{x}","limit":1000000000,"period_ms":31622400000,"burst":1}`,
		`{"key":"k","limit":1,"period_ms":1,"cost":2}`,
		`[]`, `null`, `{"key":null}`, `{"limit":1e400}`, "\x00\xff",
	} {
		f.Add(s)
	}
	h, err := New(Config{Limiter: testLimiter(f, memstore.New(memstore.Config{MaxKeys: 10_000}), -1)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/take", strings.NewReader(body)))
		switch {
		case rec.Code == http.StatusOK:
			var r takeResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
				t.Fatalf("200 with a body that is not a decision: %q", rec.Body.String())
			}
			if r.Remaining < 0 || r.RetryAfterMs < 0 || r.ResetAfterMs < 0 || r.Allowed != (r.RetryAfterMs == 0) {
				t.Fatalf("inconsistent decision %+v for %q", r, body)
			}
		case rec.Code == http.StatusBadRequest || rec.Code == http.StatusRequestEntityTooLarge:
			if rec.Header().Get("Content-Type") != problem.ContentType {
				t.Fatalf("%d without problem+json for %q", rec.Code, body)
			}
		default:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.String())
		}
	})
}

// FuzzJSONAPIs sends arbitrary bodies to the other JSON endpoints
// (/v1/check, the outbound quotas, the jobs API): a 2xx, a 4xx
// problem+json, or (a full queue) a 503 problem+json; never a panic, never
// another 5xx.
func FuzzJSONAPIs(f *testing.F) {
	seeds := []string{
		`{"tenant":"acme","route":"GET /v1/search"}`, `{"tenant":"acme","class":"write","cost":3}`, `{"ip":"::1","route":"POST /v1/login"}`,
		`{"provider":"sms","tenant":"acme","max_wait_ms":0}`, `{"provider":"sms","retry_after_ms":5}`,
		`{"n":1}`, `{"lease":"report.x","retry_after_ms":1}`, `[]`, "\x00",
	}
	for i, s := range seeds {
		f.Add(uint8(i), s)
	}
	st := memstore.New(memstore.Config{MaxKeys: 10_000})
	s := outboundServerFor(f, st)
	paths := []string{"/v1/check", "/v1/outbound/acquire", "/v1/outbound/pause", "/v1/jobs/report", "/v1/jobs/01JD0000000000000000000000/ack", "/v1/jobs/01JD0000000000000000000000/nack", "/v1/jobs/report/lease"}
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := paths[int(which)%len(paths)]
		r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		r.Header.Set("X-API-Key", "key-acme")
		r.Header.Set("Authorization", "Bearer "+workerTok)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, r)
		switch {
		case rec.Code < 300:
		case rec.Code >= 400 && rec.Code < 500, rec.Code == http.StatusServiceUnavailable:
			if rec.Header().Get("Content-Type") != problem.ContentType {
				t.Fatalf("%s: %d without problem+json for %q: %s", path, rec.Code, body, rec.Body)
			}
		default:
			t.Fatalf("%s: status %d for %q: %s", path, rec.Code, body, rec.Body)
		}
	})
}
