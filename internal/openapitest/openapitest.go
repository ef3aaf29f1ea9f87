// Package openapitest checks real HTTP exchanges with fairgate against its
// OpenAPI description (docs/openapi.json), so that a handler that answers
// what the description does not say fails the tests that exercise it:
//
//   - a response must be one the description lists for its operation (its
//     status, or its class "4XX", or default; a Content-Type the status
//     lists; a JSON body of that media type's schema; its headers present
//     when required and of their schemas);
//   - a request the server accepted (2xx) must be one the description
//     allows: a server more lenient than its description drifts too (its
//     path, query, header and cookie parameters present when required and
//     of their schemas; the credential one of its security alternatives
//     names present; its body present when required, of a listed
//     Content-Type and, when JSON, of that media type's schema);
//   - a request to a path or method the description does not have must be
//     answered 404 or 405.
//
// A Checker also counts the operations and statuses seen, so that a test
// can require that every operation was exercised.
//
// Schemas are JSON Schema 2020-12, OpenAPI 3.1's dialect, compiled by
// santhosh-tekuri/jsonschema from the description itself (by JSON pointer,
// so their $refs resolve in place); keywords it does not know, such as
// example or discriminator, are annotations. The rest of the description
// is read with encoding/json; New refuses one that is not a valid OpenAPI
// 3.1 document, or has a $ref that resolves to nothing or a schema that
// does not compile. Formats are not asserted.
package openapitest

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/fairgate/fairgate/docs"
)

// Checker validates exchanges. It is safe for concurrent use.
type Checker struct {
	ops       map[string]map[string]*operation // path template -> method -> operation
	templates []string                         // sorted

	mu       sync.Mutex
	seen     map[string]map[int]int // "METHOD template" -> status -> count
	problems []string
	counted  map[string]int // how often each problem was seen
}

// New returns a Checker for docs/openapi.json, or what is wrong with it:
// it must be a valid OpenAPI 3.1 document (checked against the OpenAPI
// Initiative's schema of one), every $ref in it must resolve and every
// schema compile.
func New() (*Checker, error) { return NewFrom(docs.OpenAPI()) }

// NewFrom returns a Checker for the OpenAPI document raw.
func NewFrom(raw []byte) (*Checker, error) {
	ops, err := load(raw)
	if err != nil {
		return nil, err
	}
	return &Checker{ops: ops, templates: slices.Sorted(maps.Keys(ops)), seen: map[string]map[int]int{}, counted: map[string]int{}}, nil
}

// route returns the description's template for path: a literal match
// before a templated one, as the servers route.
func (c *Checker) route(path string) (string, bool) {
	if _, ok := c.ops[path]; ok {
		return path, true
	}
	segs := strings.Split(path, "/")
	for _, tmpl := range c.templates {
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

// pathValues returns the values of tmpl's parameters in path.
func pathValues(tmpl, path string) map[string]string {
	out := map[string]string{}
	segs := strings.Split(path, "/")
	for i, t := range strings.Split(tmpl, "/") {
		if strings.HasPrefix(t, "{") && strings.HasSuffix(t, "}") && i < len(segs) {
			out[t[1:len(t)-1]] = segs[i]
		}
	}
	return out
}

// responseFor returns what op documents for status: the status itself,
// else its class ("4XX"), else default.
func (op *operation) responseFor(status int) *response {
	for _, k := range []string{strconv.Itoa(status), strconv.Itoa(status/100) + "XX", "DEFAULT"} {
		if r := op.responses[k]; r != nil {
			return r
		}
	}
	return nil
}

// Check validates one exchange: r with its body, answered status, header
// and body.
func (c *Checker) Check(r *http.Request, reqBody []byte, status int, header http.Header, respBody []byte) {
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	tmpl, ok := c.route(r.URL.Path)
	var op *operation
	if ok {
		op = c.ops[tmpl][method]
	}
	if op == nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			c.fail("%s %s: answered %d, but the description has no such operation: document it in docs/openapi.json", r.Method, r.URL.Path, status)
		}
		return
	}
	c.mu.Lock()
	name := method + " " + tmpl
	if c.seen[name] == nil {
		c.seen[name] = map[int]int{}
	}
	c.seen[name][status]++
	c.mu.Unlock()
	resp := op.responseFor(status)
	if resp == nil {
		c.fail("%s %s: answered %d, which %s does not list: document it, or answer a listed status", r.Method, r.URL.Path, status, name)
		return
	}
	if r.Method == http.MethodHead {
		respBody = nil // HEAD: no body to check
	}
	if errs := resp.check(status, header, respBody); len(errs) > 0 {
		c.failErrs(fmt.Sprintf("%s %s → %d: the response is not what %s documents", r.Method, r.URL.Path, status, name), errs)
	}
	if status >= 200 && status < 300 {
		contentType := r.Header.Get("Content-Type")
		if len(reqBody) > 0 && contentType == "" {
			// The servers read a body as JSON whatever its Content-Type says
			// (the description's info says so): check it as JSON.
			contentType = "application/json"
		}
		if errs := op.checkRequest(r, pathValues(tmpl, r.URL.Path), contentType, reqBody); len(errs) > 0 {
			c.failErrs(fmt.Sprintf("%s %s → %d: the server accepted a request %s does not allow", r.Method, r.URL.Path, status, name), errs)
		}
	}
}

func (c *Checker) failErrs(what string, errs []string) {
	var b strings.Builder
	b.WriteString(what)
	for _, e := range errs {
		b.WriteString("\n    ")
		b.WriteString(e)
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
	for tmpl, ms := range c.ops {
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
