package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/fairq/redisq"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/redisstore"
)

const workerTok = "worker-token-0123456789"

var jobKinds = fairq.Kinds{
	"report": {Visibility: time.Minute},
	"small":  {Warn: 1, Refuse: 2},
}

// jobServer is a server with the fair job queue on st's backend (Redis
// Streams for a Redis store), API keys, and a worker token.
func jobServer(t *testing.T, st store.Store) *Server {
	t.Helper()
	var q fairq.Queue
	var err error
	if rs, ok := st.(*redisstore.Store); ok {
		q, err = redisq.New(redisq.Config{Client: rs.Client(), Prefix: fmt.Sprintf("jobs%d:", time.Now().UnixNano()), Kinds: jobKinds})
	} else {
		q, err = fairq.NewMemory(fairq.MemoryConfig{Kinds: jobKinds})
	}
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: testLimiter(t, st, time.Second), Auth: testAuth(t), Jobs: q, JobKinds: jobKinds, WorkerToken: workerTok})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func asTenant(key string) map[string]string { return map[string]string{"X-API-Key": key} }

var asWorker = map[string]string{"Authorization": "Bearer " + workerTok}

func TestJobsHTTP(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := jobServer(t, st)
			if rec := (call{method: "POST", path: "/v1/jobs/report", body: `{}`}).do(s); rec.Code != 401 {
				t.Fatalf("enqueue without a credential: %d, want 401", rec.Code)
			}
			rec := call{method: "POST", path: "/v1/jobs/report", body: `{"n":1}`, headers: asTenant("key-acme")}.do(s)
			m := decodeMap(t, rec)
			id, _ := m["job_id"].(string)
			if rec.Code != 202 || id == "" || m["status"] != "queued" || rec.Header().Get("Location") != "/v1/jobs/"+id {
				t.Fatalf("enqueue: %d %v", rec.Code, m)
			}
			if rec := (call{method: "GET", path: "/v1/jobs/" + id, headers: asTenant("key-acme")}).do(s); rec.Code != 200 || decodeMap(t, rec)["status"] != "queued" {
				t.Fatalf("own job: %d %s", rec.Code, rec.Body)
			}
			if rec := (call{method: "GET", path: "/v1/jobs/" + id, headers: asTenant("key-newco")}).do(s); rec.Code != 404 {
				t.Fatalf("another tenant's job: %d, want 404", rec.Code)
			}
			if rec := (call{method: "POST", path: "/v1/jobs/report/lease"}).do(s); rec.Code != 401 {
				t.Fatalf("lease without the worker token: %d, want 401", rec.Code)
			}
			rec = call{method: "POST", path: "/v1/jobs/report/lease", headers: asWorker}.do(s)
			var l struct {
				JobID         string `json:"job_id"`
				Tenant, Lease string
				Attempt       int
				Payload       json.RawMessage
			}
			json.Unmarshal(rec.Body.Bytes(), &l)
			if rec.Code != 200 || l.JobID != id || l.Tenant != "acme" || string(l.Payload) != `{"n":1}` || l.Attempt != 1 {
				t.Fatalf("lease: %d %s", rec.Code, rec.Body)
			}
			if rec := (call{method: "POST", path: "/v1/jobs/report/lease", headers: asWorker}).do(s); rec.Code != 204 {
				t.Fatalf("lease with nothing ready: %d, want 204", rec.Code)
			}
			if rec := (call{method: "POST", path: "/v1/jobs/" + id + "/ack", body: `{"lease":"report.bogus"}`, headers: asWorker}).do(s); rec.Code != 409 {
				t.Fatalf("ack with a wrong lease: %d, want 409", rec.Code)
			}
			if rec := (call{method: "POST", path: "/v1/jobs/" + id + "/nack", body: `{"lease":"` + l.Lease + `","retry_after_ms":0}`, headers: asWorker}).do(s); rec.Code != 200 {
				t.Fatalf("nack: %d %s", rec.Code, rec.Body)
			}
			rec = call{method: "POST", path: "/v1/jobs/report/lease", headers: asWorker}.do(s)
			json.Unmarshal(rec.Body.Bytes(), &l)
			if rec.Code != 200 || l.JobID != id || l.Attempt != 2 {
				t.Fatalf("lease after a nack: %d %s", rec.Code, rec.Body)
			}
			if rec := (call{method: "POST", path: "/v1/jobs/" + id + "/ack", body: `{"lease":"` + l.Lease + `"}`, headers: asWorker}).do(s); rec.Code != 200 {
				t.Fatalf("ack: %d %s", rec.Code, rec.Body)
			}
			if rec := (call{method: "GET", path: "/v1/jobs/" + id, headers: asTenant("key-acme")}).do(s); decodeMap(t, rec)["status"] != "done" {
				t.Fatalf("after ack: %s", rec.Body)
			}
		})
	}
}

func TestJobsDepthThresholds(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s := jobServer(t, st)
			enqueue := func() *httptest.ResponseRecorder {
				return call{method: "POST", path: "/v1/jobs/small", body: `{}`, headers: asTenant("key-acme")}.do(s)
			}
			if rec := enqueue(); rec.Code != 202 || decodeMap(t, rec)["queue_state"] != "warn" {
				t.Fatalf("first job (at warn 1): %d %s", rec.Code, rec.Body)
			}
			enqueue()
			rec := enqueue()
			if rec.Code != 503 || rec.Header().Get("Retry-After") != "30" || decodeMap(t, rec)["code"] != "queue_full" {
				t.Fatalf("over refuse: %d %v %s, want 503 with Retry-After: 30", rec.Code, rec.Header(), rec.Body)
			}
			rec = call{method: "GET", path: "/v1/me/limits", headers: asTenant("key-acme")}.do(s)
			var me struct {
				Queues map[string]struct {
					Depth int64
					State string
				}
			}
			json.Unmarshal(rec.Body.Bytes(), &me)
			if q := me.Queues["small"]; q.State != "refusing" || q.Depth != 2 {
				t.Fatalf("/v1/me/limits queues: %s", rec.Body)
			}
		})
	}
}

func TestJobsInvalidInput(t *testing.T) {
	t.Parallel()
	s := jobServer(t, stores(t)["memory"])
	cases := []struct {
		method, path, body string
		headers            map[string]string
		code               int
		says               string
	}{
		{"POST", "/v1/jobs/fax", `{}`, asTenant("key-acme"), 404, `unknown kind "fax": configured are report, small`},
		{"POST", "/v1/jobs/report", `not json`, asTenant("key-acme"), 400, "must be JSON"},
		{"POST", "/v1/jobs/report", strings.Repeat(" ", fairq.MaxPayload+1), asTenant("key-acme"), 413, "at most"},
		{"GET", "/v1/jobs/nonsense", "", asTenant("key-acme"), 404, "no such job"},
		{"POST", "/v1/jobs/fax/lease", "", asWorker, 404, "unknown kind"},
		{"POST", "/v1/jobs/01JD0000000000000000000000/ack", `{}`, asWorker, 400, "lease: required"},
		{"POST", "/v1/jobs/01JD0000000000000000000000/ack", `{"lease":"x"}`, asWorker, 400, "not a lease token"},
		{"POST", "/v1/jobs/01JD0000000000000000000000/ack", `{"lease":"report.x"}`, asWorker, 404, "no such job"},
		{"POST", "/v1/jobs/01JD0000000000000000000000/nack", `{"lease":"report.x","retry_after_ms":-1}`, asWorker, 400, "retry_after_ms: -1"},
	}
	for _, c := range cases {
		rec := call{method: c.method, path: c.path, body: c.body, headers: c.headers}.do(s)
		var m map[string]any
		json.Unmarshal(rec.Body.Bytes(), &m)
		if detail, _ := m["detail"].(string); rec.Code != c.code || !strings.Contains(detail, c.says) {
			t.Errorf("%s %s: %d %q, want %d saying %q", c.method, c.path, rec.Code, detail, c.code, c.says)
		}
	}
}

// TestProxyBreaker: the upstream failing the requests of several tenants
// (503s) opens its shared breaker: the proxy then answers 503 with
// Retry-After without calling it, and /readyz shows the breaker open. One
// tenant's failures open only its own breaker (TestOneTenantCannotOpenTheUpstream).
func TestProxyBreaker(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	b, err := breaker.New(map[string]breaker.Settings{UpstreamDependency: {ConsecutiveFailures: 3, Cooldown: time.Minute}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st := stores(t)["memory"]
	s, err := New(Config{Limiter: testLimiter(t, st, time.Second), Auth: testAuth(t), Upstream: u, Breakers: b})
	if err != nil {
		t.Fatal(err)
	}
	get := func(key string) *httptest.ResponseRecorder {
		return call{method: "GET", path: "/v1/users/1", headers: asTenant(key)}.do(s)
	}
	for _, key := range []string{"key-acme", "key-newco"} {
		for range 3 {
			if rec := get(key); rec.Code != 503 || rec.Body.Len() != 0 {
				t.Fatalf("failing upstream: %d %s, want its 503 passed on", rec.Code, rec.Body)
			}
		}
	}
	rec := call{method: "POST", path: "/v1/login"}.do(s) // a newcomer, anonymous
	if m := decodeMap(t, rec); rec.Code != 503 || rec.Header().Get("Retry-After") == "" || m["dependency"] != "upstream" || m["scope"] != "all" || hits.Load() != 6 {
		t.Fatalf("open breaker: %d %v %s (upstream hit %d times), want 503 with Retry-After and no call", rec.Code, rec.Header(), rec.Body, hits.Load())
	}
	rec = call{method: "GET", path: "/readyz"}.do(s.Internal())
	if m := decodeMap(t, rec); fmt.Sprint(m["breakers"]) != "map[upstream:open]" {
		t.Fatalf("/readyz: %s", rec.Body)
	}
}
