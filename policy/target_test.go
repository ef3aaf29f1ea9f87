package policy

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestTargetPath: the path of a request target as the route is matched
// on, and every spelling upstreams read differently refused by name.
func TestTargetPath(t *testing.T) {
	for _, tc := range []struct {
		target, want, err string
	}{
		{target: "/v1/search", want: "/v1/search"},
		{target: "/v1/search?q=a/../b", want: "/v1/search"},
		{target: "/v1/%73earch", want: "/v1/search"},
		{target: "/v1/x/../search", want: "/v1/x/../search"}, // raw dots: every upstream resolves them
		{target: "/v1/users/caf%C3%A9", want: "/v1/users/caf\u00e9"},
		{target: "/v1/a%3Fb", want: "/v1/a?b"},
		{target: "/v1/a%23b", want: "/v1/a#b"}, // an encoded '#' is a character of the segment everywhere
		{target: "/v1/.../x", want: "/v1/.../x"},
		{target: "/v1/%2e%2e%2e/x", want: "/v1/.../x"},
		{target: "http://api.example/v1/search?x", want: "/v1/search"},
		{target: "HTTPS://api.example", want: "/"},
		{target: "http://[2001:db8::1]:8080/v1/search", want: "/v1/search"},
		{target: "/", want: "/"},
		{target: "/v1//search/", want: "/v1//search/"},
		{target: "/v1/search/../x//", want: "/v1/search/../x//"},

		{target: "", err: "empty"},
		{target: "/v1/search#/../../healthz", err: "'#'"},
		{target: "/v1/search?q=1#x", err: "'#'"},
		{target: "http://a#b/v1/search", err: "'#'"},
		{target: `/v1/search\..\..\healthz`, err: "backslash"},
		{target: "/v1/search%5C..%5Chealthz", err: "encoded slash"},
		{target: "/v1/search%2F..%2F..%2Fhealthz", err: "encoded slash"},
		{target: "/v1/search%2f", err: "encoded slash"},
		{target: "/v1/search/%2e%2e/%2e%2e/healthz", err: "dot segment with an escape"},
		{target: "/v1/search/.%2e/x", err: "dot segment with an escape"},
		{target: "/v1/search/%2E", err: "dot segment with an escape"},
		{target: "/v1/search/%2e%2e;x/y", err: "dot segment with an escape"},
		{target: "/v1/sea\trch", err: "control character"},
		{target: "/v1/sea%09rch", err: "encoded control"},
		{target: "/v1/sea%0arch", err: "encoded control"},
		{target: "/v1/%zz", err: "malformed"},
		{target: "/v1/%4", err: "malformed"},
		{target: "/v1/search//..", err: "after an empty segment"},
		{target: "/v1/search/;/..", err: "after an empty segment"},
		{target: "/v1/a/..;/b", err: "';' parameters"},
		{target: "/v1/a/.;x/b", err: "';' parameters"},
		{target: "/v1//search/x/..", err: "after an empty segment"},
		{target: "//x/v1/search", err: "begins with '//'"},
		{target: "///h/v1/search", err: "begins with '//'"},
		{target: "http://api.example//x/v1/search", err: "begins with '//'"},
		{target: "http://x?/v1/search", err: "host"},
		{target: "https://api.example?x=/v1", err: "host"},
		{target: "http://user@api.example/v1", err: "host"},
		{target: "http:///v1/search", err: "host"},
		{target: "*", err: "begins with '/'"},
		{target: "api.example:443", err: "begins with '/'"},
		{target: "ftp://x/y", err: "begins with '/'"},
	} {
		got, err := TargetPath(tc.target)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("TargetPath(%q) = %q, %v; want %q", tc.target, got, err, tc.want)
		case tc.err != "" && (err == nil || !errors.Is(err, ErrBadTarget) || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("TargetPath(%q) = %q, %v; want an error about %s", tc.target, got, err, tc.err)
		}
	}
}

// FuzzTargetPathAgrees: whenever TargetPath accepts a request target, the
// route fairgate matches on is the one each common upstream routes:
// Go's net/http (the decoded path, dots resolved) and a WHATWG URL
// parser, as Node and browsers read it (tabs and newlines dropped, '\'
// read as '/', the path ending at '#' or '?', "%2e" read as a dot in a dot
// segment, then decoded). The seeds are the spellings that escaped their
// class.
func FuzzTargetPathAgrees(f *testing.F) {
	for _, s := range []string{
		"/v1/search", "/v1/search#/../../healthz", "/v1/search%23/../../healthz", `/v1/search\..\..\healthz`,
		"/v1/search%2F..%2F..%2Fhealthz", "/v1/search/%2e%2e/%2e%2e/healthz", "/v1/search/.%2E/x", "/v1/x/../search",
		"//v1//search/", "/v1/search;x", "/v1/search;/../../healthz", "/v1/sea%09rch", "/v1/%73earch?q=#", "/v1/a%3B/../b",
		"/v1/caf%C3%A9/..", "/v1/\x00/x", "/%zz/..", "//x/v1/search", "/\t/x/v1/search", "///h/v1/search",
	} {
		f.Add(s)
	}
	var m RouteMatch
	f.Fuzz(func(t *testing.T, target string) {
		if !strings.HasPrefix(target, "/") {
			return
		}
		p, err := TargetPath(target)
		if err != nil {
			return
		}
		_, ours := m.CleanRoute("GET", p)
		if u, err := url.ParseRequestURI(target); err == nil {
			if _, goes := m.CleanRoute("GET", u.Path); goes != ours {
				t.Fatalf("%q: fairgate matches %q, Go's net/http routes %q", target, ours, goes)
			}
		}
		if _, whatwg := m.CleanRoute("GET", whatwgPath(target)); whatwg != ours {
			t.Fatalf("%q: fairgate matches %q, a WHATWG parser (Node) routes %q", target, ours, whatwg)
		}
	})
}

// whatwgPath is the decoded path of an origin-form target as the WHATWG
// URL standard parses it (what Node's new URL(req.url, base) gives),
// decoded for routing.
func whatwgPath(target string) string {
	target = strings.NewReplacer("\t", "", "\n", "", "\r", "").Replace(target)
	target = strings.ReplaceAll(target, `\`, "/")
	if rest, ok := strings.CutPrefix(target, "//"); ok { // a network-path reference: a host, then the path
		_, path, _ := strings.Cut(rest, "/")
		target = "/" + path
	}
	target, _, _ = strings.Cut(target, "#")
	target, _, _ = strings.Cut(target, "?")
	var out []string
	for _, seg := range strings.Split(target, "/")[1:] {
		switch strings.ToLower(seg) {
		case ".", "%2e":
			seg = "."
		case "..", ".%2e", "%2e.", "%2e%2e":
			seg = ".."
		}
		switch seg {
		case ".":
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		default:
			out = append(out, seg)
		}
	}
	p := "/" + strings.Join(out, "/")
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}
