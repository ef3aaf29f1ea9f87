package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrBadTarget means a request target (a request line's path, or a
// gateway's copy of it) is spelled in a way that upstreams read
// differently: fairgate cannot know which route the upstream will run, so
// it refuses the request instead of guessing (and charging the cheaper
// guess).
var ErrBadTarget = errors.New("request target")

// TargetPath returns the path of a request target, percent-decoded and
// ready for [RouteMatch.CleanRoute], or an error wrapping [ErrBadTarget]
// that names what is wrong. It takes what a request line carries (an
// origin-form "/p?q" or an absolute-form "http://host/p?q") and refuses
// every spelling on which common upstreams (Go's net/http, Node and the
// WHATWG URL parser, nginx, Tomcat) disagree about where the path ends or
// which segments it has:
//
//   - a '#' anywhere: no client sends a fragment, and the WHATWG parser
//     ends the path there while Go and nginx keep it in the path (so
//     "/v1/search#/../../healthz" was charged as /healthz and served as
//     /v1/search);
//
//   - a backslash, raw or encoded (%5C): WHATWG reads it as '/';
//
//   - an encoded slash (%2F): nginx decodes it into a separator, Go's
//     ServeMux and Node keep it inside a segment;
//
//   - an encoded dot segment ("%2e%2e"): WHATWG resolves it, Express and
//     Go's ServeMux do not;
//
//   - control characters and spaces, raw or encoded: WHATWG strips tabs
//     and newlines, others keep them;
//
//   - a malformed percent-encoding.
//
//   - a path that begins with "//": WHATWG reads "//x/v1/search" as the
//     host x and the path /v1/search, Go as the path //x/v1/search;
//
//   - an absolute URL whose host is not a host name and port (a gateway's
//     X-Original-URL built from a client's "Host: x?").
//
// The query is dropped.
func TargetPath(target string) (string, error) {
	if target == "" {
		return "", targetErr("it is empty")
	}
	if i := strings.IndexByte(target, '#'); i >= 0 {
		return "", targetErr("it holds '#': a fragment is never sent in a request, and upstreams disagree on where such a path ends")
	}
	if target[0] != '/' {
		rest, ok := cutScheme(target)
		if !ok {
			return "", targetErr("want a path that begins with '/' (or an http:// or https:// URL)")
		}
		// The path begins at the first '/' after the host: a gateway
		// builds such a URL from the client's Host header and the request
		// line (ingress-nginx's X-Original-URL is
		// $scheme://$http_host$request_uri), so a host with '?' in it
		// ("Host: x?") would otherwise turn the path into a query.
		host, path, _ := strings.Cut(rest, "/")
		if !isHost(host) {
			return "", targetErr("the URL's host is not a host name and port")
		}
		target = "/" + path
	}
	if strings.HasPrefix(target, "//") {
		return "", targetErr("it begins with '//', which a WHATWG parser (Node) reads as a host and the rest as the path")
	}
	p, _, _ := strings.Cut(target, "?")
	if !strings.ContainsAny(p, "%\\") && clean7(p) {
		return p, checkDots(p) // the common case: nothing to decode
	}
	var b strings.Builder
	b.Grow(len(p))
	segStart, encodedInSeg := 0, false // where the decoded segment began; whether it holds an escape
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\':
			return "", targetErr("it holds a backslash, which some upstreams read as '/': send '/' instead")
		case c < 0x21 || c == 0x7f:
			return "", targetErr("it holds a control character or a space: percent-encode it")
		case c == '%':
			if i+2 >= len(p) || !ishex(p[i+1]) || !ishex(p[i+2]) {
				return "", targetErr("it holds a malformed percent-encoding")
			}
			d := unhex(p[i+1])<<4 | unhex(p[i+2])
			switch {
			case d == '/' || d == '\\':
				return "", targetErr("it holds an encoded slash (%2F or %5C): upstreams disagree on whether it separates segments")
			case d < 0x20 || d == 0x7f:
				return "", targetErr("it holds an encoded control character")
			}
			b.WriteByte(d)
			encodedInSeg = true
			i += 2
			continue
		case c == '/':
			if encodedInSeg && isDots(b.String()[segStart:]) {
				return "", targetErr("it holds a dot segment with an escape in it (%2e, or %3B making '..;'): upstreams disagree on whether it climbs a level")
			}
			b.WriteByte(c)
			segStart, encodedInSeg = b.Len(), false
			continue
		}
		b.WriteByte(c)
	}
	out := b.String()
	if encodedInSeg && isDots(out[segStart:]) {
		return "", targetErr("it holds a dot segment with an escape in it (%2e, or %3B making '..;'): upstreams disagree on whether it climbs a level")
	}
	return out, checkDots(out)
}

// checkDots refuses the dot segments of a decoded path that upstreams
// resolve differently: one with ";" parameters ("..;": Tomcat strips them
// and climbs a level, Node and Go do not), and a ".." after an empty
// segment ("/v1/search//..": Go's path.Clean drops the empty segment
// first and lands on /v1, WHATWG removes it and serves /v1/search).
func checkDots(p string) error {
	if !strings.Contains(p, ".") {
		return nil
	}
	segs := strings.Split(p, "/")
	empty := false
	for i, seg := range segs[1:] {
		base, _, params := strings.Cut(seg, ";")
		switch {
		case (base == "." || base == "..") && params:
			return targetErr("it holds a dot segment with ';' parameters ('..;'): upstreams disagree on whether it climbs a level")
		case base == ".." && empty:
			return targetErr("it holds '..' after an empty segment ('//'): upstreams disagree on which segment it removes")
		case base == "" && i+2 < len(segs):
			empty = true
		}
	}
	return nil
}

// targetErr wraps ErrBadTarget with what is wrong.
func targetErr(what string) error {
	return fmt.Errorf("%w: %s", ErrBadTarget, what)
}

// cutScheme returns what follows "http://" or "https://" (any case).
func cutScheme(s string) (string, bool) {
	for _, scheme := range []string{"http://", "https://"} {
		if len(s) >= len(scheme) && strings.EqualFold(s[:len(scheme)], scheme) {
			return s[len(scheme):], true
		}
	}
	return "", false
}

// isHost reports whether s is a host and optional port: a name, an IPv4
// address or a bracketed IPv6 one. No userinfo, query or escape.
func isHost(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(".-_:[]", c) >= 0) {
			return false
		}
	}
	return true
}

// clean7 reports whether s holds no control character or space.
func clean7(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] == 0x7f {
			return false
		}
	}
	return true
}

// isDots reports whether seg is "." or "..", its ";" parameters dropped
// (as CleanRoute drops them).
func isDots(seg string) bool {
	seg, _, _ = strings.Cut(seg, ";")
	return seg == "." || seg == ".."
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// LookAlike reports whether header name is not canonical but reads as it
// where '_', '.' and other punctuation stand for '-', as CGI, WSGI, Rack
// and PHP servers read header names (X_Api_Key, X.API.KEY for X-API-Key).
func LookAlike(name, canonical string) bool {
	if strings.EqualFold(name, canonical) || len(name) != len(canonical) {
		return false
	}
	for i := 0; i < len(name); i++ {
		if fold(name[i]) != fold(canonical[i]) {
			return false
		}
	}
	return true
}

// fold is c lower-cased, with every byte but a letter or a digit read as
// '-'.
func fold(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		return c
	}
	return '-'
}
