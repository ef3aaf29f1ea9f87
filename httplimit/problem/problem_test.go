package problem

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
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
