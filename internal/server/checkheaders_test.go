package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/httplimit"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
)

// TestCheckHeadersNoRepeatedName: /v1/check's headers object never names
// a header twice, whatever the decision (allowed, limited, the store out
// with a fail-closed class, in every header form); a gateway copying it
// must not send Retry-After twice. The raw body is read token by token:
// a map would keep one of two repeated keys and hide the fault.
func TestCheckHeadersNoRepeatedName(t *testing.T) {
	for _, form := range []string{"draft", "structured", "x"} {
		for _, tc := range []struct {
			name       string
			down       bool
			body       string
			repeat     int
			wantStatus float64
		}{
			{"allowed", false, `{"tenant":"acme","class":"write"}`, 1, 200},
			{"limited", false, `{"tenant":"acme","class":"write","cost":1}`, 400, 429},
			{"store out, fail closed", true, `{"tenant":"acme","class":"write"}`, 1, 503},
			{"store out, fail open", true, `{"tenant":"acme","class":"read"}`, 1, 200},
		} {
			t.Run(form+"/"+tc.name, func(t *testing.T) {
				lim := testLimiter(t, memstore.New(memstore.Config{}), time.Second)
				if tc.down {
					lim = testLimiter(t, downStore{}, time.Second)
				}
				h, err := New(Config{Limiter: lim, Headers: httplimit.Form(form)})
				if err != nil {
					t.Fatal(err)
				}
				var raw []byte
				for range tc.repeat {
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(tc.body)))
					raw = w.Body.Bytes()
				}
				if err := noRepeatedKeys(raw); err != nil {
					t.Fatalf("%s: %v", raw, err)
				}
				var out struct {
					Status  float64           `json:"status"`
					Headers map[string]string `json:"headers"`
				}
				if err := json.Unmarshal(raw, &out); err != nil {
					t.Fatal(err)
				}
				if out.Status != tc.wantStatus {
					t.Fatalf("status %v, want %v: %s", out.Status, tc.wantStatus, raw)
				}
				if ra, refused := out.Headers["Retry-After"], out.Status != 200; refused != (ra != "") || tc.down && refused && ra != "5" {
					t.Fatalf("Retry-After %q for status %v: %s", ra, out.Status, raw)
				}
			})
		}
	}
}

// noRepeatedKeys reports the first object member name that comes twice in
// one object of the JSON document raw.
func noRepeatedKeys(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		object bool
		seen   map[string]bool
		key    bool // the next token of an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 && stack[len(stack)-1].object {
					stack[len(stack)-1].key = true
				}
				continue
			}
			k := tok.(string)
			if top.seen[k] {
				return errors.New("the name " + k + " comes twice in one object")
			}
			top.seen[k] = true
			top.key = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object's next token is a key.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}

func TestNoRepeatedKeys(t *testing.T) {
	for raw, bad := range map[string]bool{
		`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":1}]}`:   false,
		`{"a":1,"b":{"x":2,"x":3}}`:                   true,
		`{"h":{"Retry-After":"5","Retry-After":"5"}}`: true,
		`[{"a":[1,{"b":1}],"a":2}]`:                   true,
	} {
		if err := noRepeatedKeys([]byte(raw)); (err != nil) != bad {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// TestCheckNamesWhatDecided: /v1/check's policy names what decided: the
// tightest layer, or, when no layer was decided (the store out and the
// class failing closed, a free route), the class or anonymous route whose
// fail mode (or cost) decided, as fairgate_decisions_total counts it.
func TestCheckNamesWhatDecided(t *testing.T) {
	for _, tc := range []struct {
		name   string
		down   bool
		body   string
		reason string
		policy string
	}{
		{"store out, class fails closed", true, `{"tenant":"acme","class":"write"}`, "unavailable_closed", "write"},
		{"store out, route of a class failing closed", true, `{"tenant":"acme","route":"POST /v1/users"}`, "unavailable_closed", "write"},
		{"store out, anonymous route failing closed", true, `{"route":"POST /v1/login","ip":"192.0.2.7"}`, "unavailable_closed", "login"},
		{"free route", false, `{"tenant":"acme","route":"GET /healthz"}`, "free", "read"},
		{"allowed", false, `{"tenant":"acme","class":"write"}`, "allowed", "enterprise.write.1m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st store.Store = memstore.New(memstore.Config{})
			if tc.down {
				st = downStore{}
			}
			h, err := New(Config{Limiter: testLimiter(t, st, time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			checkedAPI(h).ServeHTTP(w, httptest.NewRequest("POST", "/v1/check", strings.NewReader(tc.body)))
			var out struct{ Reason, Policy string }
			if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if out.Reason != tc.reason || out.Policy != tc.policy {
				t.Errorf("reason %q policy %q, want %q %q: %s", out.Reason, out.Policy, tc.reason, tc.policy, w.Body)
			}
		})
	}
}
