package server

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzFastBodies: every /v1/take and /v1/check body the fast reader takes,
// encoding/json and the strict checks take too, with the same values; the
// fast reader never decides a body differently, it only leaves some.
func FuzzFastBodies(f *testing.F) {
	for _, s := range []string{
		`{"key":"k1","limit":10,"period_ms":1000}`, `{"key":"k","key":"j"}`, `{"Key":"k"}`, `{"limit":-0,"cost":5}`,
		`{"tenant":"acme","route":"GET /v1/search"}`, `{"tenant":"t","class":"write","cost":3,"ip":"::1"}`,
		`{"tenant":"a\u0062"}`, `{"tenant":null}`, `{"cost":1e2}`, `{} `, `{"x":1}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		if !utf8.ValidString(body) {
			return // readBody refuses it first
		}
		var tf, tj takeBody
		if takeFast.read([]byte(body), &tf) {
			if !decodeBody(httptest.NewRecorder(), []byte(body), &tj, nil) {
				t.Fatalf("take %q: fast reader took it, encoding/json did not", body)
			}
			if got, want := tf, tj; got != want {
				t.Fatalf("take %q: fast %+v, encoding/json %+v", body, got, want)
			}
		}
		var cf, cj checkBody
		if checkFast.read([]byte(body), &cf) {
			if !decodeBody(httptest.NewRecorder(), []byte(body), &cj, nil) {
				t.Fatalf("check %q: fast reader took it, encoding/json did not", body)
			}
			if got, want := cf, cj; got != want {
				t.Fatalf("check %q: fast %+v, encoding/json %+v", body, got, want)
			}
		}
	})
}

// TestAppendedAnswers: the appended answers are byte for byte what
// encoding/json writes for the same structs.
func TestAppendedAnswers(t *testing.T) {
	odd := "a\"b\\c<d>&e\x01é\u2028\xff"
	for i, v := range []any{
		&takeResponse{Allowed: true, Limit: 10, Remaining: 9, ResetAfterMs: 100},
		&takeResponse{Limit: 1, RetryAfterMs: 250, ResetAfterMs: -1, Degraded: true},
		&checkResponse{Allowed: true, Status: 200, Reason: "allowed", Headers: headerFields{}, Decisions: []layerJSON{}},
		&checkResponse{Allowed: true, Status: 200, Reason: "allowed", Headers: headerFields{}, Decisions: []layerJSON{}, Settlement: "fg1.e30.bWFj"},
		&checkResponse{Status: 429, Reason: "limited", Policy: "free.search.hourly", RetryAfterMs: 3,
			Headers:   headerFields{"RateLimit", `"free";r=0;t=3`, "X-" + odd, odd},
			Decisions: []layerJSON{{Policy: odd, Limit: 5, Remaining: 0, ResetAfterMs: 9, RetryAfterMs: 3}, {Policy: "p", Allowed: true, Shadow: true}}},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		switch v := v.(type) {
		case *takeResponse:
			got = v.appendJSON(nil)
		case *checkResponse:
			got = v.appendJSON(nil)
		}
		if string(got) != string(want) {
			t.Errorf("%d: appended\n%s\nencoding/json\n%s", i, got, want)
		}
	}
	if reflect.TypeOf(takeResponse{}).NumField() != 6 || reflect.TypeOf(checkResponse{}).NumField() != 8 || reflect.TypeOf(layerJSON{}).NumField() != 7 {
		t.Error("a response struct gained or lost a field: update its appendJSON and this test")
	}
}
