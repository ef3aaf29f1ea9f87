package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPlanWireFormsAgree: a plan written in the config file (YAML), read
// back from the admin API (GET /admin/plans/{name}) and written through it
// (PUT, the same body) is one plan: the view says what the YAML says, in
// the API's vocabulary (docs/config.md, "A plan's three forms"), and
// putting the view back changes nothing.
func TestPlanWireFormsAgree(t *testing.T) {
	const token = "admin-token-for-the-test-0001"
	t.Setenv("FAIRGATE_ADMIN_TOKEN", token)
	cfg := filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(cfg, []byte(`default_plan: free
default_class: read
classes: {read: {}}
plans:
  free:
    - {limit: 120, period: 1m, burst: 30}
    - {name: tb, limit: 10, period: 1s, algorithm: token_bucket, shadow: true}
    - {name: daily, limit: 10000, period: day}
    - {concurrency: 5}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	adminAddr := freeAddr(t)
	sv := startServe(t, "--listen", "127.0.0.1:0", "--admin-listen", adminAddr, "--config", cfg)
	defer sv.stop()
	do := func(method, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+adminAddr+"/admin/plans/free", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s /admin/plans/free: %d %s", method, resp.StatusCode, b)
		}
		return resp.StatusCode, v
	}
	status, fromYAML := do("GET", "")
	if status != 200 {
		t.Fatalf("GET: %d %v", status, fromYAML)
	}
	var want map[string]any
	json.Unmarshal([]byte(`{"name":"free","concurrency":5,"rules":[
		{"name":"","limit":120,"period_ms":60000,"burst":30,"algorithm":"gcra"},
		{"name":"tb","limit":10,"period_ms":1000,"burst":10,"algorithm":"token_bucket","shadow":true},
		{"name":"daily","limit":10000,"calendar":"day"}]}`), &want)
	if fromYAML["runtime"] != false {
		t.Errorf("GET: runtime %v, want false (the file's plan)", fromYAML["runtime"])
	}
	if diff := cmp.Diff(want, pick(fromYAML, want)); diff != "" {
		t.Fatalf("the YAML plan as the admin API shows it (-want +got):\n%s\n%v", diff, fromYAML)
	}
	body, _ := json.Marshal(map[string]any{"rules": fromYAML["rules"], "concurrency": fromYAML["concurrency"]})
	if status, put := do("PUT", string(body)); status != 200 {
		t.Fatalf("PUT the view back: %d %v", status, put)
	}
	_, again := do("GET", "")
	if again["runtime"] != true {
		t.Errorf("GET after PUT: runtime %v, want true", again["runtime"])
	}
	if diff := cmp.Diff(want, pick(again, want)); diff != "" {
		t.Errorf("the plan after PUTting its view back (-want +got):\n%s", diff)
	}
}

// pick returns the fields of got that want names.
func pick(got, want map[string]any) map[string]any {
	out := map[string]any{}
	for k := range want {
		if v, ok := got[k]; ok {
			out[k] = v
		}
	}
	return out
}
