package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/docs"
	"github.com/fairgate/fairgate/internal/openapitest"
)

// TestServeOpenAPI drives the real daemon (proxy, internal and admin
// listeners, the example config) over sockets through a client that checks
// every exchange against docs/openapi.json: answers and errors alike, on
// each listener. The proxied path is the upstream's and is exempt.
func TestServeOpenAPI(t *testing.T) {
	c, err := openapitest.New()
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	const admin, worker = "admin-token-for-the-test-0001", "worker-token-for-the-test-01"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", admin)
	t.Setenv("FAIRGATE_WORKER_TOKEN", worker)
	adminAddr, internalAddr := freeAddr(t), freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr, "--internal-listen", internalAddr, "--upstream", up.URL)
	defer sv.stop()
	pub, in, adm := "http://"+sv.addr, "http://"+internalAddr, "http://"+adminAddr
	client := &http.Client{Transport: c.Transport(nil, func(r *http.Request) bool { return r.URL.Path == "/v1/users/1" })}
	do := func(method, url, token, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, b := do("POST", adm+"/admin/keys", admin, `{"tenant":"newco","plan":"team"}`)
	var made struct{ Key, ID string }
	if json.Unmarshal(b, &made); status != 201 || made.Key == "" {
		t.Fatalf("create key: %d %s", status, b)
	}
	for _, x := range []struct {
		method, url, token, body string
		want                     int
	}{
		{"GET", in + "/openapi.json", "", "", 200},
		{"GET", in + "/readyz", "", "", 200},
		{"GET", pub + "/healthz", "", "", 200},
		{"POST", in + "/v1/check", "", `{"tenant":"acme","route":"GET /v1/users/1"}`, 200},
		{"POST", in + "/v1/check", "", `{"tenant":"acme"}`, 400},
		{"POST", in + "/v1/take", "", `{"key":"k","limit":5,"period_ms":1000}`, 200},
		{"GET", in + "/v1/take", "", "", 405},
		{"GET", in + "/metrics", "", "", 200},
		{"GET", pub + "/v1/me/limits", made.Key, "", 200},
		{"GET", pub + "/v1/me/limits", "fgk_not-a-key", "", 401},
		{"GET", pub + "/v1/users/1", made.Key, "", 200},
		{"POST", pub + "/v1/jobs/report", made.Key, `{"month":"2026-11"}`, 202},
		{"POST", pub + "/v1/jobs/nosuchkind", made.Key, `{}`, 404},
		{"POST", in + "/v1/jobs/report/lease", worker, "", 200},
		{"POST", in + "/v1/outbound/acquire", worker, `{"provider":"sms","tenant":"acme"}`, 200},
		{"POST", in + "/v1/outbound/acquire", "", `{"provider":"sms","tenant":"acme"}`, 401},
		{"GET", adm + "/admin/config", admin, "", 200},
		{"GET", adm + "/admin/keys?tenant=acme", admin, "", 200},
		{"GET", adm + "/admin/keys/" + made.ID, admin, "", 200},
		{"PUT", adm + "/admin/tenants/acme", admin, `{"plan":"nosuch"}`, 400},
		{"GET", adm + "/admin/config", "", "", 401},
		{"DELETE", adm + "/admin/keys/" + made.ID, admin, "", 200},
	} {
		if status, b := do(x.method, x.url, x.token, x.body); status != x.want {
			t.Errorf("%s %s: %d %s, want %d", x.method, x.url, status, b, x.want)
		} else if x.url == in+"/openapi.json" && !bytes.Equal(b, docs.OpenAPI()) {
			t.Error("GET /openapi.json is not docs/openapi.json")
		}
	}
	for _, p := range c.Problems() {
		t.Error(p)
	}
	if n, _, _ := c.Checked(); n != 21 { // all but the proxied one and the 405 (no such operation)
		t.Errorf("%d exchanges checked, want 21", n)
	}
}
