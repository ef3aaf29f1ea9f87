package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/testpolicy"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// tokenConfig is a policy with plan pro at 10,000 tokens per 30 days (no
// refill while a test runs) and class llm, half of it, measured in
// tokens (testpolicy.Tokens).
var tokenConfig = testpolicy.Tokens(10_000, "720h")

var settleTestKey = []byte("a-settle-key-shared-by-every-instance")

// settleServer is a server on st with tokenConfig, signing handles with
// key.
func settleServer(t *testing.T, st store.Store, key []byte) (*httptest.Server, *Server) {
	t.Helper()
	cfg, err := config.Parse("tokens.yaml", []byte(tokenConfig))
	if err != nil {
		t.Fatal(err)
	}
	l, err := limiter.New(limiter.Config{Store: st, Policy: cfg.Policy})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Limiter: l, SettleKey: key})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(checkedAPI(h))
	t.Cleanup(ts.Close)
	return ts, h
}

// settleCall posts body to url+path and returns the status and decoded answer.
func settleCall(t *testing.T, url, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s: body %q is not JSON: %v", path, raw, err)
	}
	return resp.StatusCode, m
}

// settleCheck asks url for a decision of tenant's llm request with estimate
// cost and returns its handle and its layers' remaining.
func settleCheck(t *testing.T, url, tenant string, cost int64) (string, map[string]float64) {
	t.Helper()
	status, m := settleCall(t, url, "/v1/check", fmt.Sprintf(`{"tenant": %q, "class": "llm", "cost": %d}`, tenant, cost))
	if status != 200 || m["allowed"] != true {
		t.Fatalf("check: %d %v", status, m)
	}
	rem := map[string]float64{}
	for _, d := range m["decisions"].([]any) {
		d := d.(map[string]any)
		rem[d["policy"].(string)] = d["remaining"].(float64)
	}
	h, _ := m["settlement"].(string)
	return h, rem
}

// TestSettleAcrossInstances: a request decided on one instance and
// settled on another, both on one Redis and one settle key, is charged its
// true cost exactly once: a replay on either moves nothing and says so,
// and another tenant's layers are untouched. A fixed-cost decision
// carries no handle.
func TestSettleAcrossInstances(t *testing.T) {
	redistest.Need(t)
	prefix := fmt.Sprintf("settle%d:", time.Now().UnixNano())
	open := func() store.Store {
		st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	a, _ := settleServer(t, open(), settleTestKey)
	b, _ := settleServer(t, open(), settleTestKey)

	handle, rem := settleCheck(t, a.URL, "acme", 1000)
	if handle == "" || rem["pro.llm.30d"] != 5000-1000 {
		t.Fatalf("check: handle %q, remaining %v", handle, rem)
	}
	status, m := settleCall(t, b.URL, "/v1/settle", fmt.Sprintf(`{"handle": %q, "cost": 2500}`, handle))
	if status != 200 || m["repeated"] != false || m["delta"] != 1500.0 {
		t.Fatalf("settle on b: %d %v", status, m)
	}
	for _, d := range m["decisions"].([]any) {
		if d := d.(map[string]any); d["applied"] != 1500.0 {
			t.Errorf("settle on b: %v applied %v, want 1500", d["policy"], d["applied"])
		}
	}
	for _, srv := range []string{a.URL, b.URL} {
		status, m = settleCall(t, srv, "/v1/settle", fmt.Sprintf(`{"handle": %q, "cost": 9000}`, handle))
		if status != 200 || m["repeated"] != true || m["decisions"].([]any)[0].(map[string]any)["applied"] != 0.0 {
			t.Errorf("replay: %d %v; want 200, repeated, nothing applied", status, m)
		}
	}
	_, rem = settleCheck(t, b.URL, "acme", 1)
	if rem["pro.llm.30d"] != 5000-2500-1 || rem["pro.tenant.30d"] != 10_000-2500-1 {
		t.Errorf("after settling: remaining %v; want the true cost 2500 charged once (and 1)", rem)
	}
	_, rem = settleCheck(t, a.URL, "globex", 1)
	if rem["pro.llm.30d"] != 5000-1 {
		t.Errorf("another tenant's remaining %v: acme's handle moved it", rem)
	}
	status, m = settleCall(t, a.URL, "/v1/check", `{"tenant": "acme", "class": "read"}`)
	if _, ok := m["settlement"]; status != 200 || ok {
		t.Errorf("fixed-cost check: %d %v; want no settlement", status, m)
	}
}

// TestSettleRefusesBadHandles: a handle changed, forged with another key,
// made by an instance with a key of its own, or expired, and a cost out of
// range, are refused with a problem naming the field, counted, and move
// nothing.
func TestSettleRefusesBadHandles(t *testing.T) {
	a, h := settleServer(t, memstoreFor(t), settleTestKey)
	handle, _ := settleCheck(t, a.URL, "acme", 1000)
	st, err := openHandle(settleTestKey, handle, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The payload with another tenant's key in it, signed with the wrong key.
	st2 := limiter.Settlement{ID: st.ID, Cost: st.Cost, TakenAt: st.TakenAt, Layers: append([]limiter.SettleLayer(nil), st.Layers...)}
	st2.Layers[0].Key = strings.Replace(st2.Layers[0].Key, "acme", "globex", 1)
	forged := sealHandle([]byte("an-attacker-guessed-this-key-wrong"), &st2, time.Now().Add(time.Minute))
	// One byte of the payload changed, the MAC kept.
	i := len(handleVersion) + 5
	flip := byte('A')
	if handle[i] == 'A' {
		flip = 'B'
	}
	tampered := handle[:i] + string(flip) + handle[i+1:]
	expired := sealHandle(settleTestKey, st, time.Now().Add(-time.Second))
	_, lone := settleServer(t, memstoreFor(t), nil)
	otherInstance := sealHandle(lone.settleKey, st, time.Now().Add(time.Minute))

	for _, tc := range []struct {
		name, body string
		status     int
		detail     string
	}{
		{"tampered", fmt.Sprintf(`{"handle": %q, "cost": 1}`, tampered), 400, "handle: not a settlement handle"},
		{"forged", fmt.Sprintf(`{"handle": %q, "cost": 1}`, forged), 400, "handle: not a settlement handle"},
		{"another instance's own key", fmt.Sprintf(`{"handle": %q, "cost": 1}`, otherInstance), 400, "handle: not a settlement handle"},
		{"garbage", `{"handle": "fg1.!!!", "cost": 1}`, 400, "handle: not a settlement handle"},
		{"expired", fmt.Sprintf(`{"handle": %q, "cost": 1}`, expired), 410, "handle: the handle has expired"},
		{"negative cost", fmt.Sprintf(`{"handle": %q, "cost": -5}`, handle), 400, "cost: -5 is outside 0..1000000000"},
		{"huge cost", fmt.Sprintf(`{"handle": %q, "cost": 1000000000000}`, handle), 400, "cost: 1000000000000 is outside"},
		{"no cost", fmt.Sprintf(`{"handle": %q}`, handle), 400, "cost: required"},
		{"no handle", `{"cost": 3}`, 400, "handle: required"},
	} {
		status, m := settleCall(t, a.URL, "/v1/settle", tc.body)
		if status != tc.status || !strings.HasPrefix(fmt.Sprint(m["detail"]), tc.detail) {
			t.Errorf("%s: %d %v; want %d with detail %q", tc.name, status, m, tc.status, tc.detail)
		}
	}
	if n := testutil.ToFloat64(h.metrics.settleRefused.WithLabelValues("invalid")); n != 4 {
		t.Errorf("refused invalid: %v, want 4", n)
	}
	if n := testutil.ToFloat64(h.metrics.settleRefused.WithLabelValues("expired")); n != 1 {
		t.Errorf("refused expired: %v, want 1", n)
	}
	// Nothing moved: the good handle still settles, and applies.
	status, m := settleCall(t, a.URL, "/v1/settle", fmt.Sprintf(`{"handle": %q, "cost": 0}`, handle))
	if status != 200 || m["repeated"] != false || m["delta"] != -1000.0 {
		t.Errorf("the good handle after the refusals: %d %v", status, m)
	}
	if _, rem := settleCheck(t, a.URL, "acme", 1); rem["pro.llm.30d"] != 5000-1 {
		t.Errorf("after a refund at 0: remaining %v, want 4999", rem)
	}
}

// TestSettleKeyTooShort: a settle key under MinSettleKey bytes is refused.
func TestSettleKeyTooShort(t *testing.T) {
	l, err := limiter.New(limiter.Config{Store: memstoreFor(t), Policy: mustPolicy(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Limiter: l, SettleKey: []byte("short")}); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("New with a 5-byte settle key: %v", err)
	}
}

func memstoreFor(*testing.T) store.Store { return memstore.New(memstore.Config{}) }

func mustPolicy(t *testing.T) policy.Policy {
	t.Helper()
	cfg, err := config.Parse("tokens.yaml", []byte(tokenConfig))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Policy
}

// TestHandleOneSpelling: a handle has one spelling. The mac's last
// base64 character carries unused bits, which a lenient decoder ignores:
// four spellings of it were accepted (the attacker review); now only the
// handle as sealed opens.
func TestHandleOneSpelling(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	h := sealHandle(key, &limiter.Settlement{ID: "id-1", Cost: 5, TakenAt: now}, now.Add(time.Minute))
	if _, err := openHandle(key, h, now); err != nil {
		t.Fatalf("the handle as sealed: %v", err)
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := h[len(h)-1]
	for _, c := range []byte(alphabet) {
		if c == last {
			continue
		}
		if _, err := openHandle(key, h[:len(h)-1]+string(c), now); err == nil {
			t.Errorf("the mac's last character %q for %q: opened, want refused", c, last)
		}
	}
	// Line breaks, which base64's decoders skip even when strict.
	mac := strings.LastIndexByte(h, '.') + 1
	for _, other := range []string{h + "\n", h + "\r\n", h[:mac+4] + "\r\n" + h[mac+4:], h[:mac+4] + "\n" + h[mac+4:], h + " "} {
		if _, err := openHandle(key, other, now); err == nil {
			t.Errorf("%q: opened, want refused (one spelling)", other)
		}
	}
}
