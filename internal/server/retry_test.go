package server

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestRetryAfterIsHonest: a real client that honours Retry-After
// (hashicorp/go-retryablehttp) gets every request through the proxy, and
// no request is rejected twice: waiting the Retry-After fairgate sent
// always suffices.
func TestRetryAfterIsHonest(t *testing.T) {
	l, err := limiter.New(limiter.Config{
		Store: memstore.New(memstore.Config{}),
		Policy: policy.Policy{
			DefaultPlan: "p", DefaultClass: "c",
			Plans:   map[string]policy.Plan{"p": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 4, Period: time.Second, Burst: 2}}}}},
			Classes: map[string]policy.Class{"c": {Share: 1}},
		},
		Timeout: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Limiter: l, Auth: testAuth(t), Upstream: upstreamEcho(t)})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	defer ts.Close()

	var mu sync.Mutex
	attempts := map[string]int{}
	rejected := 0
	c := retryablehttp.NewClient()
	c.Logger = nil
	c.RetryMax = 5
	c.RetryWaitMin, c.RetryWaitMax = 10*time.Millisecond, 3*time.Second
	c.ResponseLogHook = func(_ retryablehttp.Logger, resp *http.Response) {
		mu.Lock()
		defer mu.Unlock()
		attempts[resp.Request.URL.Path]++
		if resp.StatusCode == 429 {
			rejected++
		}
	}
	const n = 8
	for i := range n {
		req, _ := retryablehttp.NewRequest("GET", ts.URL+"/v1/items/"+string(rune('a'+i)), nil)
		req.Header.Set("X-API-Key", "key-acme")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	for path, a := range attempts {
		if a > 2 {
			t.Errorf("%s took %d attempts: a wait of Retry-After did not suffice", path, a)
		}
	}
	if rejected == 0 {
		t.Error("no request was ever limited: the test did not exercise Retry-After")
	}
	t.Logf("%d requests, %d rejections, each followed by one successful retry", n, rejected)
}
