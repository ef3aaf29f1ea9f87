package problem

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"
)

func TestWrite(t *testing.T) {
	rec := httptest.NewRecorder()
	Write(rec, Details{Status: 503, Type: "urn:x", Detail: "down", Ext: map[string]any{"retry_after_seconds": 5, "status": "spoof"}})
	if ct := rec.Header().Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type = %q", ct)
	}
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if got["status"] != 503.0 || got["title"] != "Service Unavailable" || got["type"] != "urn:x" || got["retry_after_seconds"] != 5.0 {
		t.Errorf("body = %v", got)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{0: "1", time.Millisecond: "1", time.Second: "1", 1001 * time.Millisecond: "2", 59 * time.Second: "59"} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %s, want %s", d, got, want)
		}
	}
}
