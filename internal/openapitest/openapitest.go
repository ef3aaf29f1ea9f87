// Package openapitest checks real HTTP exchanges with fairgate against its
// OpenAPI description (docs/openapi.json), so that a handler that answers
// what the description does not say fails the tests that exercise it:
//
//   - a response must be one the description lists for its operation (its
//     status, and a body and headers of that status's schema);
//   - a request the server accepted (2xx) must be one the description
//     allows: a server more lenient than its description drifts too;
//   - a request to a path or method the description does not have must be
//     answered 404 or 405.
//
// A Checker also counts the operations and statuses seen, so that a test
// can require that every operation was exercised.
package openapitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	verrors "github.com/pb33f/libopenapi-validator/errors"

	"github.com/fairgate/fairgate/docs"
)

// Checker validates exchanges. It is safe for concurrent use.
type Checker struct {
	v     validator.Validator
	paths map[string]map[string]map[string]bool // path template -> method -> documented statuses

	mu       sync.Mutex
	seen     map[string]map[int]int // "METHOD template" -> status -> count
	problems []string
	counted  map[string]int // how often each problem was seen
}

// New returns a Checker for docs/openapi.json, or what is wrong with it:
// it must be a valid OpenAPI 3.1 document.
func New() (*Checker, error) { return NewFrom(docs.OpenAPI()) }

// NewFrom returns a Checker for the OpenAPI document raw.
func NewFrom(raw []byte) (*Checker, error) {
	doc, err := libopenapi.NewDocument(raw)
	if err != nil {
		return nil, fmt.Errorf("openapitest: docs/openapi.json: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("openapitest: docs/openapi.json: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		var b strings.Builder
		for _, e := range verrs {
			fmt.Fprintf(&b, "\n  %s: %s", e.Message, e.Reason)
		}
		return nil, fmt.Errorf("openapitest: docs/openapi.json is not a valid OpenAPI document:%s", b.String())
	}
	var plain struct {
		Paths map[string]map[string]json.RawMessage
	}
	if err := json.Unmarshal(raw, &plain); err != nil {
		return nil, err
	}
	c := &Checker{v: v, paths: map[string]map[string]map[string]bool{}, seen: map[string]map[int]int{}, counted: map[string]int{}}
	for p, item := range plain.Paths {
		c.paths[p] = map[string]map[string]bool{}
		for m, op := range item {
			var o struct{ Responses map[string]json.RawMessage }
			if m == "parameters" || json.Unmarshal(op, &o) != nil {
				continue
			}
			c.paths[p][strings.ToUpper(m)] = map[string]bool{}
			for s := range o.Responses {
				c.paths[p][strings.ToUpper(m)][s] = true
			}
		}
	}
	return c, nil
}

// route returns the description's template for path: a literal match
// before a templated one, as the servers route.
func (c *Checker) route(path string) (string, bool) {
	if _, ok := c.paths[path]; ok {
		return path, true
	}
	segs := strings.Split(path, "/")
	for _, tmpl := range slices.Sorted(maps.Keys(c.paths)) {
		ts := strings.Split(tmpl, "/")
		if len(ts) != len(segs) {
			continue
		}
		match := true
		for i := range ts {
			if !(strings.HasPrefix(ts[i], "{") && segs[i] != "") && ts[i] != segs[i] {
				match = false
				break
			}
		}
		if match {
			return tmpl, true
		}
	}
	return "", false
}

// Check validates one exchange: r with its body, answered status, header
// and body.
func (c *Checker) Check(r *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) {
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	tmpl, ok := c.route(r.URL.Path)
	if !ok || c.paths[tmpl][method] == nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			c.fail("%s %s: answered %d, but the description has no such operation: document it in docs/openapi.json", r.Method, r.URL.Path, status)
		}
		return
	}
	c.mu.Lock()
	op := method + " " + tmpl
	if c.seen[op] == nil {
		c.seen[op] = map[int]int{}
	}
	c.seen[op][status]++
	c.mu.Unlock()
	if !c.paths[tmpl][method][strconv.Itoa(status)] {
		c.fail("%s %s: answered %d, which %s does not list: document it, or answer a listed status", r.Method, r.URL.Path, status, op)
		return
	}
	req := r.Clone(r.Context())
	req.Body = io.NopCloser(bytes.NewReader(reqBody))
	if len(reqBody) > 0 && req.Header.Get("Content-Type") == "" {
		// The servers read a body as JSON whatever its Content-Type says
		// (the description's info says so): check it as JSON.
		req.Header.Set("Content-Type", "application/json")
	}
	if method != r.Method {
		req.Method = method
	}
	resp := &http.Response{StatusCode: status, Header: header, Body: io.NopCloser(bytes.NewReader(respBody)), Request: req}
	if method != r.Method {
		resp.Body = io.NopCloser(strings.NewReader("")) // HEAD: no body to check
	}
	if ok, errs := c.v.ValidateHttpResponse(req, resp); !ok {
		c.failErrs(fmt.Sprintf("%s %s → %d: the response is not what %s documents", r.Method, r.URL.Path, status, op), errs)
	}
	if status >= 200 && status < 300 {
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		if ok, errs := c.v.ValidateHttpRequestSync(req); !ok {
			c.failErrs(fmt.Sprintf("%s %s → %d: the server accepted a request %s does not allow", r.Method, r.URL.Path, status, op), errs)
		}
	}
}

func (c *Checker) failErrs(what string, errs []*verrors.ValidationError) {
	var b strings.Builder
	b.WriteString(what)
	for _, e := range errs {
		fmt.Fprintf(&b, "\n    %s: %s", e.Message, e.Reason)
		for _, se := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, "\n      %s: %s", se.FieldPath, se.Reason)
		}
	}
	c.fail("%s", b.String())
}

func (c *Checker) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if c.counted[msg]++; c.counted[msg] == 1 && len(c.problems) < 200 {
		c.problems = append(c.problems, msg)
	}
}

// Problems returns what failed, in order, each once (with how often it
// was seen, when more than once).
func (c *Checker) Problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.problems))
	for i, p := range c.problems {
		out[i] = p
		if n := c.counted[p]; n > 1 {
			out[i] = fmt.Sprintf("(%d times) %s", n, p)
		}
	}
	return out
}

// Checked returns how many exchanges were checked, and how many of the
// description's operations and (operation, status) pairs they reached.
func (c *Checker) Checked() (exchanges, operations, statuses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.seen {
		operations++
		for _, n := range st {
			statuses++
			exchanges += n
		}
	}
	return exchanges, operations, statuses
}

// Unexercised returns the operations ("METHOD /path") no checked exchange
// reached with a 2xx answer.
func (c *Checker) Unexercised() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for tmpl, ms := range c.paths {
		for m := range ms {
			ok := false
			for s := range c.seen[m+" "+tmpl] {
				ok = ok || s >= 200 && s < 300
			}
			if !ok {
				out = append(out, m+" "+tmpl)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Handler wraps h so that every exchange it serves is checked; skip, if
// not nil, exempts requests that are not fairgate's own (proxied ones).
func (c *Checker) Handler(h http.Handler, skip func(*http.Request) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if skip != nil && skip(r) {
			h.ServeHTTP(w, r)
			return
		}
		var reqBody []byte
		if r.Body != nil {
			reqBody, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		c.Check(r, reqBody, cmpStatus(rec.code), rec.Header(), rec.body.Bytes())
	})
}

// Transport returns a RoundTripper over base (nil: http.DefaultTransport)
// that checks every exchange a client makes with a running server; skip,
// if not nil, exempts requests that are not fairgate's own.
func (c *Checker) Transport(base http.RoundTripper, skip func(*http.Request) bool) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTrip(func(r *http.Request) (*http.Response, error) {
		if skip != nil && skip(r) {
			return base.RoundTrip(r)
		}
		var reqBody []byte
		if r.Body != nil {
			reqBody, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(reqBody))
		}
		resp, err := base.RoundTrip(r)
		if err != nil {
			return resp, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err == nil {
			c.Check(r, reqBody, resp.StatusCode, resp.Header, body)
		}
		return resp, err
	})
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Recorded checks an exchange a test made with httptest.NewRecorder.
func (c *Checker) Recorded(r *http.Request, reqBody []byte, rec *httptest.ResponseRecorder) {
	c.Check(r, reqBody, rec.Code, rec.Header(), rec.Body.Bytes())
}

func cmpStatus(code int) int {
	if code == 0 {
		return http.StatusOK
	}
	return code
}

// recorder keeps a copy of what a handler writes, passing it on.
type recorder struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	if w.body.Len() < 1<<20 {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }
