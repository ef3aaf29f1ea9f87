package rls_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestJSON: envoyproxy/ratelimit's /json: a request in proto3 JSON, the
// response back, 200 or 429; what is not a request is 400, and so is a
// body past MaxMessage, which is not read to its end.
func TestJSON(t *testing.T) {
	svc, err := rls.New(examplesConfig(t), testGuard(t, memstore.New(memstore.Config{})), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		svc.ServeJSON(rec, httptest.NewRequest("POST", "/json", strings.NewReader(body)))
		return rec
	}
	req := `{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.9"}]}],"hitsAddend":10}`
	if rec := post(req); rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(rec.Body.String(), `"overallCode":"OK"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if rec := post(req); rec.Code != 429 || !strings.Contains(rec.Body.String(), `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("over the limit: %d %s", rec.Code, rec.Body)
	}
	for _, bad := range []string{`{"domain":`, `{"domain":"d"}`, `{"domain":"d","descriptors":[{"entries":[]}]}`, `{"domian":"d"}`, `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"` + strings.Repeat("x", rls.MaxMessage) + `"}]}]}`} {
		if rec := post(bad); rec.Code != 400 {
			t.Errorf("%.60q: %d, want 400", bad, rec.Code)
		}
	}
	rec := httptest.NewRecorder()
	svc.ServeJSON(rec, httptest.NewRequest("GET", "/json", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d", rec.Code)
	}
}
