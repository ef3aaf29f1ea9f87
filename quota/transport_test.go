package quota

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store/memstore"
)

// fakeProvider is a local provider that answers each request with the next
// of its scripted answers (200 once they run out) and records when each
// request arrived.
type fakeProvider struct {
	mu       sync.Mutex
	answers  []func(http.ResponseWriter)
	arrivals []time.Time
	answered []time.Time
}

func (p *fakeProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.arrivals = append(p.arrivals, time.Now())
	var answer func(http.ResponseWriter)
	if len(p.answers) > 0 {
		answer, p.answers = p.answers[0], p.answers[1:]
	}
	p.mu.Unlock()
	if answer == nil {
		io.WriteString(w, "ok")
	} else {
		answer(w)
	}
	p.mu.Lock()
	p.answered = append(p.answered, time.Now())
	p.mu.Unlock()
}

func status(code int, retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
	}
}

// transportClient returns a client for a fake provider behind a Transport
// on the memory store, with a budget roomy enough that only pauses hold
// requests back.
func transportClient(t *testing.T, p *fakeProvider) (*http.Client, string, *Quotas) {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	q, err := New(Config{
		Store:     memstore.New(memstore.Config{}),
		Providers: map[string]Provider{"sms": {Limit: algo.Limit{Limit: 1000, Period: time.Second, Burst: 100}}},
		MaxWait:   5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: &Transport{Quotas: q, Provider: "sms", Tenant: func(*http.Request) string { return "acme" }}}, srv.URL, q
}

func TestTransportPausesOnRetryAfter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer func() func(http.ResponseWriter)
		// minGap is the least time between the scripted answer and the
		// next request's arrival.
		minGap time.Duration
	}{
		{"429 seconds", func() func(http.ResponseWriter) { return status(429, "1") }, time.Second},
		{"503 seconds", func() func(http.ResponseWriter) { return status(503, "1") }, time.Second},
		// An HTTP date is whole seconds: now+2s truncated is 1 to 2 s away.
		{"429 http date", func() func(http.ResponseWriter) {
			return status(429, time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
		}, time.Second},
		{"429 without retry-after", func() func(http.ResponseWriter) { return status(429, "") }, 0},
		{"500 with retry-after", func() func(http.ResponseWriter) { return status(500, "1") }, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := &fakeProvider{}
			p.answers = []func(http.ResponseWriter){func(w http.ResponseWriter) { c.answer()(w) }}
			client, url, _ := transportClient(t, p)
			resp, err := client.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Fatalf("first answer %d, want the scripted one returned as it came", resp.StatusCode)
			}
			resp, err = client.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			p.mu.Lock()
			gap := p.arrivals[1].Sub(p.answered[0])
			p.mu.Unlock()
			if gap < c.minGap-20*time.Millisecond {
				t.Fatalf("second request arrived %v after the first answer, want at least %v", gap, c.minGap)
			}
			if c.minGap == 0 && gap > 500*time.Millisecond {
				t.Fatalf("second request arrived %v after an answer that asked for no pause", gap)
			}
		})
	}
}

func TestTransportRefusesWithoutSending(t *testing.T) {
	t.Parallel()
	p := &fakeProvider{}
	client, url, q := transportClient(t, p)
	if err := q.SetProviders(map[string]Provider{"sms": {Limit: algo.Limit{Limit: 1, Period: time.Minute, Burst: 1}}}); err != nil {
		t.Fatal(err)
	}
	client.Transport.(*Transport).Quotas.maxWait = 0
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	body := &closeRecorder{Reader: strings.NewReader("hello")}
	req, _ := http.NewRequest("POST", url, body)
	_, err = client.Do(req)
	var de *DeadlineError
	if !errors.As(err, &de) || de.RetryAfter <= 0 {
		t.Fatalf("over the budget: %v, want a DeadlineError", err)
	}
	if !body.closed {
		t.Error("the refused request's body was not closed")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.arrivals) != 1 {
		t.Fatalf("the provider saw %d requests, want only the admitted one", len(p.arrivals))
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		in     string
		want   time.Duration
		wantOK bool
	}{
		{"120", 120 * time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"0", 0, true},
		{"", 0, false},
		{"soon", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"99999999999999999999", 1<<63 - 1, true},
		{"Thu, 03 Dec 2026 10:00:30 GMT", 30 * time.Second, true},
		{"Thursday, 03-Dec-26 10:01:00 GMT", time.Minute, true},
		{"Thu, 03 Dec 2026 09:00:00 GMT", 0, true},
		{"Thu, 32 Dec 2026 09:00:00 GMT", 0, false},
	}
	for _, c := range cases {
		got, ok := ParseRetryAfter(c.in, now)
		if got != c.want || ok != c.wantOK {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.wantOK)
		}
	}
}
