package httplimit

import (
	"net/http"
	"time"

	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
)

// Form is a response header form: [limitheader.Form], named here so that
// a [Config] reads Headers: httplimit.Structured.
type Form = limitheader.Form

// The header forms (see package limitheader).
const (
	Draft      = limitheader.Draft
	Structured = limitheader.Structured
	X          = limitheader.X
)

// ParseForm is [limitheader.ParseForm]: the form named s; "" is Draft.
func ParseForm(s string) (Form, error) { return limitheader.ParseForm(s) }

// RetryAfter is [limitheader.RetryAfter]: d as a Retry-After value.
func RetryAfter(d time.Duration) string { return limitheader.RetryAfter(d) }

// SetHeaders is [limitheader.Set]: d's rate-limit headers (and
// Retry-After when d rejects) into h in form f.
func SetHeaders(h http.Header, f Form, d limiter.Decision) { limitheader.Set(h, f, d) }

// AppendHeaders is [limitheader.Append]: d's headers appended to dst as
// name, value pairs.
func AppendHeaders(dst []string, f Form, d limiter.Decision) []string {
	return limitheader.Append(dst, f, d)
}

// HeaderMap is [limitheader.Map]: d's headers in a map, named as the
// drafts spell them.
func HeaderMap(f Form, d limiter.Decision) map[string]string { return limitheader.Map(f, d) }
