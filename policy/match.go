package policy

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"unicode"
)

// RouteMatch says how a request's method and path are matched to routes.
// A request is classified as the upstream will most likely read it, so
// that no spelling of a path escapes its class into a cheaper one: the
// method is upper-cased; the path is cleaned (".." and "." resolved,
// repeated slashes collapsed) and loses its ";" path parameters
// ("/v1/search;x" is "/v1/search"). The zero value also ignores case and
// a trailing slash, which most frameworks do; the fields switch that off
// for upstreams that tell them apart.
type RouteMatch struct {
	// CaseSensitive matches paths as they are spelled. False (the
	// default) matches "/v1/Search" as "/v1/search".
	CaseSensitive bool `json:"case_sensitive,omitempty"`
	// ExactTrailingSlash tells "/v1/search/" from "/v1/search". False (the
	// default) matches them alike.
	ExactTrailingSlash bool `json:"exact_trailing_slash,omitempty"`
}

// CleanRoute returns method and path as m matches them to routes.
func (m RouteMatch) CleanRoute(method, p string) (string, string) {
	method = strings.ToUpper(method)
	if strings.IndexByte(p, ';') >= 0 {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		p = strings.Join(segs, "/")
	}
	slash := strings.HasSuffix(p, "/")
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	p = path.Clean(p) // no copy when p is clean already
	if slash && p != "/" && m.ExactTrailingSlash {
		p += "/"
	}
	if !m.CaseSensitive {
		p = strings.ToLower(p)
	}
	return method, p
}

// register adds a route pattern to the snapshot's mux, reporting a bad or
// duplicate pattern. The mux holds it as RouteMatch reads requests (the
// method upper-cased, the path lower-cased unless case-sensitive); match
// maps it back.
func (s *Snapshot) register(ps *problems, path, pattern string) (ok bool) {
	method, rest, found := strings.Cut(pattern, " ")
	if !found || method == "" || !strings.HasPrefix(strings.TrimLeft(rest, " "), "/") {
		ps.add(path, "pattern %q: want a method and a path, such as \"GET /v1/users/{id}\"", pattern)
		return false
	}
	muxPattern := strings.ToUpper(method) + " " + strings.TrimLeft(rest, " ")
	if !s.policy.RouteMatch.CaseSensitive {
		muxPattern = strings.ToUpper(method) + " " + lowerOutsideWildcards(strings.TrimLeft(rest, " "))
	}
	if _, dup := s.routes[pattern]; dup {
		ps.add(path, "duplicate route %q", pattern)
		return false
	}
	if _, dup := s.anon[pattern]; dup {
		ps.add(path, "duplicate route %q", pattern)
		return false
	}
	defer func() {
		if v := recover(); v != nil {
			msg := fmt.Sprint(v)
			if strings.Contains(msg, "conflicts with") {
				msg = "duplicate route: " + msg
			}
			ps.add(path, "pattern %q: %s", pattern, strings.TrimPrefix(msg, "http: "))
			ok = false
		}
	}()
	s.mux.Handle(muxPattern, http.NotFoundHandler())
	s.patterns[muxPattern] = pattern
	return true
}

// lowerOutsideWildcards lower-cases a pattern's path but for its wildcard
// names ({userID} stays as written).
func lowerOutsideWildcards(p string) string {
	var b strings.Builder
	depth := 0
	for _, r := range p {
		switch {
		case r == '{':
			depth++
		case r == '}':
			depth--
		case depth == 0:
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// match returns the pattern of the route or anonymous route that method and
// path match, or "".
func (s *Snapshot) match(method, path string) string {
	method, path = s.policy.RouteMatch.CleanRoute(method, path)
	r := matchRequests.Get().(*http.Request)
	r.Method, r.URL.Path = method, path
	_, pattern := s.mux.Handler(r)
	r.Method, r.URL.Path = "", ""
	matchRequests.Put(r)
	return s.patterns[pattern]
}

// matchRequests are the requests match asks the mux about (it reads only
// their method and path), pooled: one allocation (about 160 B) a decision
// less (bench/RESULTS.md, "The six sync.Pools").
var matchRequests = sync.Pool{New: func() any { return &http.Request{URL: new(url.URL)} }}
