package server

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/httplimit/costmeter"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/testwait"
)

// proxyTokenConfig: plan pro at 100,000 tokens per 30 days (nothing
// refills while a test runs), class llm on POST /v1/chat/{kind}, measured
// in tokens from every place an answer can say it.
const proxyTokenConfig = `default_plan: pro
default_class: read
plans:
  pro: {limit: 100000, period: 720h}
classes:
  read: {}
  llm:
    cost:
      unit: tokens
      estimate: {header: X-Max-Tokens, json: max_tokens, default: 500, cap: 4000}
      measure: {header: X-Usage-Tokens, trailer: X-Usage-Final, json: usage.total_tokens, sse: usage.total_tokens}
routes:
  - {route: "POST /v1/chat/{kind}", class: llm}
`

// hugeJSON is an answer four times the meter's bound, its usage at the
// end; hugeEvent an event's data four times the event bound.
var (
	hugeJSON  = `{"choices": [{"text": "` + strings.Repeat("a", 4*costmeter.MaxBody) + `"}], "usage": {"total_tokens": 999}}`
	hugeEvent = "data: {\"usage\": {\"total_tokens\": 9999}, \"pad\": \"" + strings.Repeat("b", 4*costmeter.MaxEvent) + "\"}\n\n"
)

// llmUpstream answers POST /v1/chat/{kind} as a completion API: each
// kind says its cost in another place, or fails. The sse kind sends its
// first event, then waits on step before the rest; cut sends one event
// and waits for the proxy to go away. Every request's body arrives on
// bodies.
type llmUpstream struct {
	*httptest.Server
	step   chan struct{}
	bodies chan string
}

func newLLMUpstream(t *testing.T) *llmUpstream {
	u := &llmUpstream{step: make(chan struct{}), bodies: make(chan string, 64)}
	event := func(w http.ResponseWriter, data string) {
		io.WriteString(w, "data: "+data+"\n\n")
		http.NewResponseController(w).Flush()
	}
	chunk := `{"choices":[{"delta":{"content":"word"}}],"usage":null}`
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/{kind}", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.bodies <- string(b)
		switch r.PathValue("kind") {
		case "header":
			w.Header().Set("X-Usage-Tokens", "1234")
			io.WriteString(w, `{"choices": []}`)
		case "trailer":
			w.Header().Set("Trailer", "X-Usage-Final")
			io.WriteString(w, `{"choices": []}`)
			w.Header().Set("X-Usage-Final", "2345")
		case "trailer-late": // not announced: sent with http.TrailerPrefix
			io.WriteString(w, `{"choices": []}`)
			http.NewResponseController(w).Flush()
			w.Header().Set(http.TrailerPrefix+"X-Usage-Final", "2346")
		case "json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 5, "total_tokens": 345}}`)
		case "sse":
			w.Header().Set("Content-Type", "text/event-stream")
			event(w, chunk)
			select {
			case <-u.step:
			case <-r.Context().Done():
				return
			}
			event(w, chunk)
			event(w, `{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":6000,"total_tokens":6100}}`)
			event(w, "[DONE]")
		case "random":
			w.Header().Set("Content-Type", "text/event-stream")
			n, _ := strconv.Atoi(r.URL.Query().Get("events"))
			for range n {
				event(w, chunk)
			}
			event(w, `{"choices":[],"usage":{"total_tokens":`+r.URL.Query().Get("usage")+`}}`)
			event(w, "[DONE]")
		case "bad":
			http.Error(w, "the model is overloaded", http.StatusBadGateway)
		case "cut":
			w.Header().Set("Content-Type", "text/event-stream")
			event(w, chunk)
			<-r.Context().Done()
		case "broken": // the upstream dies mid-stream
			w.Header().Set("Content-Type", "text/event-stream")
			event(w, chunk)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		case "huge-json":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, hugeJSON)
		case "huge-event":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, hugeEvent)
			event(w, `{"usage": {"total_tokens": 77}}`)
		}
	})
	u.Server = httptest.NewServer(mux)
	t.Cleanup(u.Close)
	return u
}

// settlingProxy is the proxy with proxyTokenConfig in front of a new
// llmUpstream.
func settlingProxy(t *testing.T) (*httptest.Server, *Server, *llmUpstream) {
	t.Helper()
	cfg, err := config.Parse("tokens.yaml", []byte(proxyTokenConfig))
	if err != nil {
		t.Fatal(err)
	}
	up := newLLMUpstream(t)
	ts, s, _ := proxyWith(t, up.Server, cfg, Config{Registerer: prometheus.NewRegistry()})
	return ts, s, up
}

// tenantToken is a JWT for tenant.
func tenantToken(t *testing.T, tenant string) string {
	return token(t, jwtKey, func(c jwt.MapClaims) { c["tenant"] = tenant })
}

// charged returns what tenant has been charged of its 100,000 tokens, as
// GET /v1/me/limits shows it.
func charged(t *testing.T, base, tok string) int64 {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/me/limits", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Layers []struct {
			Policy    string `json:"policy"`
			Remaining int64  `json:"remaining"`
		} `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Layers) != 1 {
		t.Fatalf("/v1/me/limits: %d %+v %v", resp.StatusCode, out, err)
	}
	return 100_000 - out.Layers[0].Remaining
}

// settledCount is how many llm requests the proxy settled by rule.
func settledCount(s *Server, rule httplimit.SettleRule) float64 {
	return testutil.ToFloat64(s.metrics.settled.WithLabelValues("llm", string(rule)))
}

// TestProxySettles: through the proxy, a request of a measured class is
// charged exactly its true cost, wherever the upstream's answer says it
// (header, trailer announced or not, JSON body, the last server-sent
// event), 0 for an upstream error, the estimate for an answer without its
// cost or one too large to read (whose bytes all reach the client all
// the same); the upstream gets the request's body whole after the proxy
// read its estimate.
func TestProxySettles(t *testing.T) {
	ts, s, up := settlingProxy(t)
	for _, tc := range []struct {
		kind, body string
		header     http.Header
		want       int64
		rule       httplimit.SettleRule
		answer     string // the body the client gets; "" for any
	}{
		{kind: "header", body: `{"max_tokens": 900}`, want: 1234, rule: httplimit.RuleMeasured},
		{kind: "trailer", header: http.Header{"X-Max-Tokens": {"3000"}}, want: 2345, rule: httplimit.RuleMeasured},
		{kind: "trailer-late", body: `{"max_tokens": 900}`, want: 2346, rule: httplimit.RuleMeasured},
		{kind: "json", body: `{"model": "m", "max_tokens": 2000, "messages": [{"role": "user", "content": "hi"}]}`, want: 345, rule: httplimit.RuleMeasured},
		{kind: "bad", body: `{"max_tokens": 900}`, want: 1, rule: httplimit.RuleError},
		{kind: "huge-json", body: `{"max_tokens": 900}`, want: 4000, rule: httplimit.RuleUnmeasured, answer: hugeJSON}, // not measured: the cap
		{kind: "huge-event", body: `{"max_tokens": 900}`, want: 77, rule: httplimit.RuleMeasured, answer: hugeEvent + "data: {\"usage\": {\"total_tokens\": 77}}\n\n"},
		{kind: "json", body: `{"max_tokens": 900, "pad": "` + strings.Repeat("p", httplimit.MaxEstimateBody) + `"}`, want: 345, rule: httplimit.RuleMeasured},
	} {
		tenant := "t-" + tc.kind + strconv.Itoa(len(tc.body))
		tok := tenantToken(t, tenant)
		before := settledCount(s, tc.rule)
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/"+tc.kind, strings.NewReader(tc.body))
		for k, vs := range tc.header {
			req.Header[k] = vs
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || tc.answer != "" && string(got) != tc.answer {
			t.Errorf("%s: the client got %d bytes (%v), want the upstream's %d unchanged", tc.kind, len(got), err, len(tc.answer))
		}
		if b := <-up.bodies; b != tc.body {
			t.Errorf("%s: the upstream got %d bytes of the body, want %d", tc.kind, len(b), len(tc.body))
		}
		testwait.Eventually(t, 10*time.Second, tc.kind+" settled", func() bool { return settledCount(s, tc.rule) == before+1 })
		if c := charged(t, ts.URL, tok); c != tc.want {
			t.Errorf("%s: %s charged %d, want %d (%s)", tc.kind, tenant, c, tc.want, tc.rule)
		}
	}
}

// TestProxySettlesStream: a streamed completion's events reach the client
// as the upstream sends them (the first before the upstream has sent the
// rest), and the tenant is charged the usage of the last event: 6,100,
// over its estimate of 2,000.
func TestProxySettlesStream(t *testing.T) {
	ts, s, up := settlingProxy(t)
	tok := tenantToken(t, "streamer")
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/sse", strings.NewReader(`{"max_tokens": 2000, "stream": true}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req) // a proxy that held the stream back fails here
	if err != nil {
		t.Fatal(err)
	}
	<-up.bodies
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: {") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	close(up.step) // the upstream goes on only now that the client has the first event
	rest, err := io.ReadAll(br)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the rest of the stream: %q, %v", rest, err)
	}
	testwait.Eventually(t, 10*time.Second, "the stream settled", func() bool { return settledCount(s, httplimit.RuleMeasured) == 1 })
	if c := charged(t, ts.URL, tok); c != 6100 {
		t.Errorf("charged %d, want the last event's 6100", c)
	}
}

// TestProxySettlesCut: an answer cut short by the client going away
// mid-stream is charged the class's cap, not the client's own estimate
// (a client that declared 1 and left before the usage event would else
// pay 1); one the upstream broke off, which reaches the client cut too,
// is charged the cap as well: a client can make the upstream break it
// off, by reading slowly until the upstream's write timeout fires.
func TestProxySettlesCut(t *testing.T) {
	ts, s, up := settlingProxy(t)
	for _, tc := range []struct {
		kind     string
		estimate int64
		leave    bool // the client goes away after the first event
		rule     httplimit.SettleRule
		want     int64
	}{
		{kind: "cut", estimate: 1500, leave: true, rule: httplimit.RuleClientGone, want: 4000},
		{kind: "broken", estimate: 1700, rule: httplimit.RuleCut, want: 4000},
	} {
		tok := tenantToken(t, "cut-"+tc.kind)
		req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/"+tc.kind, strings.NewReader(fmt.Sprintf(`{"max_tokens": %d}`, tc.estimate)))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		<-up.bodies
		br := bufio.NewReader(resp.Body)
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if !tc.leave {
			if _, err := io.ReadAll(br); err == nil {
				t.Errorf("%s: the client read the broken stream to a clean end", tc.kind)
			}
		}
		resp.Body.Close() // mid-stream, when leaving: the connection closes
		testwait.Eventually(t, 10*time.Second, tc.kind+" settled", func() bool { return settledCount(s, tc.rule) == 1 })
		if c := charged(t, ts.URL, tok); c != tc.want {
			t.Errorf("%s: charged %d, want %d (estimate %d)", tc.kind, c, tc.want, tc.estimate)
		}
	}
}

// TestProxySettlesRandomStreams: streams of random lengths and usages,
// one after another: the tenant's charged total is the sum of their
// usages exactly, whatever the estimates.
func TestProxySettlesRandomStreams(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	ts, s, up := settlingProxy(t)
	tok := tenantToken(t, "random")
	var sum int64
	const n = 8
	for i := range n {
		usage := 1 + rng.Int64N(10_000)
		sum += usage
		url := fmt.Sprintf("%s/v1/chat/random?events=%d&usage=%d", ts.URL, rng.IntN(40), usage)
		req, _ := http.NewRequest("POST", url, strings.NewReader(fmt.Sprintf(`{"max_tokens": %d}`, 1+rng.IntN(4000))))
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		<-up.bodies
		testwait.Eventually(t, 10*time.Second, "stream settled", func() bool { return settledCount(s, httplimit.RuleMeasured) == float64(i+1) })
	}
	if c := charged(t, ts.URL, tok); c != sum {
		t.Errorf("seed %d: charged %d, want the sum of the usages %d", seed, c, sum)
	}
}

// TestProxyDropsClientHandles: a settlement handle a client sends (or a
// look-alike of its header) never reaches the upstream through the proxy,
// which settles itself: an upstream written for a gateway, which settles
// the handle it is given, must not be handed the client's.
func TestProxyDropsClientHandles(t *testing.T) {
	cfg, err := config.Parse("tokens.yaml", []byte(proxyTokenConfig))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		w.Header().Set("X-Usage-Tokens", "10")
	}))
	defer up.Close()
	ts, _, _ := proxyWith(t, up, cfg, Config{Registerer: prometheus.NewRegistry()})
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/x", strings.NewReader(`{"max_tokens": 10}`))
	req.Header.Set("Authorization", "Bearer "+tenantToken(t, "acme"))
	req.Header.Set("X-Fairgate-Settlement", "fg1.client.chosen")
	req.Header["X_Fairgate_Settlement"] = []string{"fg1.client.chosen"}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	h := <-got
	for k, v := range h {
		if strings.Contains(strings.Join(v, ","), "client.chosen") {
			t.Errorf("the upstream got the client's handle in %s: %q", k, v)
		}
	}
}

// TestProxyTimeoutChargesTheCap: an upstream slower than the upstream
// timeout had the request and may have done its work: the 502 is settled
// at the class's cap, not the error's 1, or a tenant could make its long
// generations free (the attacker review: a 3 s answer behind a 2 s
// timeout, 8,000 tokens served, charged nothing).
func TestProxyTimeoutChargesTheCap(t *testing.T) {
	cfg, err := config.Parse("tokens.yaml", []byte(proxyTokenConfig))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // generating, past the timeout
		w.Header().Set("X-Usage-Tokens", "8000")
	}))
	defer up.Close()
	defer close(release)
	ts, s, _ := proxyWith(t, up, cfg, Config{Registerer: prometheus.NewRegistry(), UpstreamTimeout: 100 * time.Millisecond})
	tok := tenantToken(t, "slow")
	req, _ := http.NewRequest("POST", ts.URL+"/v1/chat/x", strings.NewReader(`{"max_tokens": 1000}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502 (the upstream timed out)", resp.StatusCode)
	}
	testwait.Eventually(t, 10*time.Second, "the timeout settled", func() bool { return settledCount(s, httplimit.RuleHandler) == 1 })
	if c := charged(t, ts.URL, tok); c != 4000 {
		t.Errorf("charged %d, want the cap 4000", c)
	}
}
