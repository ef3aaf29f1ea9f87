// Package problem writes RFC 9457 problem details (application/problem+json).
package problem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ContentType is the media type of a problem details body.
const ContentType = "application/problem+json"

// Details is an RFC 9457 problem details object. Extra members go in Ext.
type Details struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// Ext holds extension members, written beside the standard ones.
	Ext map[string]any `json:"-"`
}

// MarshalJSON writes the standard members and the extensions in one object.
func (d Details) MarshalJSON() ([]byte, error) {
	m := make(map[string]any, 4+len(d.Ext))
	for k, v := range d.Ext {
		m[k] = v
	}
	m["type"], m["title"], m["status"] = d.Type, d.Title, d.Status
	if d.Detail != "" {
		m["detail"] = d.Detail
	}
	return json.Marshal(m)
}

// Write sends d with its status. A zero Type is "about:blank" and a zero
// Title the status text, as RFC 9457 asks.
func Write(w http.ResponseWriter, d Details) {
	if d.Type == "" {
		d.Type = "about:blank"
	}
	if d.Title == "" {
		d.Title = http.StatusText(d.Status)
	}
	body, _ := json.Marshal(d)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(d.Status)
	w.Write(append(body, '\n'))
}

// BadRequest sends a 400 whose detail says what is wrong.
func BadRequest(w http.ResponseWriter, detail string) {
	Write(w, Details{Status: http.StatusBadRequest, Detail: detail})
}
