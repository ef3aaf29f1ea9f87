// Package gateway knows what each gateway in front of fairgate's
// forward-auth endpoint (/v1/authz) tells it about the client's request,
// and in which headers. A gateway forwards the client's own headers to
// the auth endpoint too, so fairgate believes only the headers the named
// gateway sets itself, replacing any copy the client sent; it never
// guesses between spellings (X-Original-URI, X-Forwarded-Uri, …) that a
// client could add.
package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
)

// Gateway says where one gateway puts the original request's method and
// target when it asks /v1/authz.
type Gateway struct {
	// Name is the gateway's name in the config (forward_auth.gateway).
	Name string
	// Method is the header holding the original method; "" means the
	// auth request's own method (Envoy's ext_authz keeps it).
	Method string
	// URI is the header holding the original request target (path and
	// query, or a whole URL); "" means the auth request's own path, after
	// PathPrefix (Envoy's ext_authz appends the original path to its
	// path_prefix).
	URI string
	// PathPrefix is the path the gateway is told to call, in front of
	// the original path when URI is "".
	PathPrefix string
	// DenyStatus is the status a rejection is answered with by default:
	// 403 for the gateways that turn anything but 2xx, 401 and 403 into
	// 500 (the real status goes in X-Fairgate-Status), else 429.
	DenyStatus int
	// Sets lists what the gateway sets on the auth request from the
	// client's, for the docs and errors.
	Sets string
}

// AuthzPath is where the forward-auth endpoint is served.
const AuthzPath = "/v1/authz"

// Custom is the name of a gateway described by its headers in the config
// (forward_auth.method_header and uri_header).
const Custom = "custom"

// known are the gateways fairgate knows, as their example files set them
// up (examples/gateways).
var known = []Gateway{
	{Name: "nginx", Method: "X-Original-Method", URI: "X-Original-URI", DenyStatus: http.StatusForbidden,
		Sets: "proxy_set_header X-Original-URI $request_uri and X-Original-Method $request_method in the auth_request location"},
	{Name: "ingress-nginx", Method: "X-Original-Method", URI: "X-Original-URL", DenyStatus: http.StatusForbidden,
		Sets: "X-Original-URL ($scheme://$http_host$request_uri) and X-Original-Method, always"},
	{Name: "caddy", Method: "X-Forwarded-Method", URI: "X-Forwarded-Uri", DenyStatus: http.StatusTooManyRequests,
		Sets: "header_up X-Forwarded-Method {method} and X-Forwarded-Uri {uri}, always (forward_auth)"},
	{Name: "traefik", Method: "X-Forwarded-Method", URI: "X-Forwarded-Uri", DenyStatus: http.StatusTooManyRequests,
		Sets: "X-Forwarded-Method and X-Forwarded-Uri, always (forwardAuth)"},
	{Name: "envoy", PathPrefix: AuthzPath, DenyStatus: http.StatusTooManyRequests,
		Sets: "the original method, and the original path after http_service.path_prefix /v1/authz (ext_authz)"},
}

// Names lists the gateways fairgate knows, and "custom".
func Names() []string {
	out := make([]string, 0, len(known)+1)
	for _, g := range known {
		out = append(out, g.Name)
	}
	return append(out, Custom)
}

// Lookup returns the gateway called name (case as written).
func Lookup(name string) (Gateway, bool) {
	i := slices.IndexFunc(known, func(g Gateway) bool { return g.Name == name })
	if i < 0 {
		return Gateway{}, false
	}
	return known[i], true
}

// NewCustom returns a gateway that sets method and uri (both required).
func NewCustom(method, uri string) (Gateway, error) {
	if method == "" || uri == "" {
		return Gateway{}, errors.New("a custom gateway needs method_header and uri_header: the headers your gateway sets, replacing the client's, to the original method and request target")
	}
	if strings.EqualFold(method, uri) {
		return Gateway{}, fmt.Errorf("method_header and uri_header are both %q: name two headers", method)
	}
	return Gateway{Name: Custom, Method: http.CanonicalHeaderKey(method), URI: http.CanonicalHeaderKey(uri), DenyStatus: http.StatusTooManyRequests,
		Sets: method + " and " + uri}, nil
}

// Resolve returns the gateway called name (nil for ""), a custom one
// with the method and uri headers, or an error naming what is wrong; a
// tenant header must not be one the gateway or the client's credential
// uses.
func Resolve(name, method, uri, tenantHeader string) (*Gateway, error) {
	var g Gateway
	switch name {
	case "":
		if tenantHeader != "" || method != "" || uri != "" {
			return nil, errors.New("gateway is required with tenant_header, method_header or uri_header: fairgate believes a gateway only for the headers it sets, so name it")
		}
		return nil, nil
	case Custom:
		var err error
		if g, err = NewCustom(method, uri); err != nil {
			return nil, err
		}
	default:
		var ok bool
		if g, ok = Lookup(name); !ok {
			return nil, fmt.Errorf("gateway %q: want one of %s", name, strings.Join(Names(), ", "))
		}
		if method != "" || uri != "" {
			return nil, fmt.Errorf("method_header and uri_header describe a custom gateway; %s's are known (%s)", g.Name, strings.Join(g.Reads(), ", "))
		}
	}
	if tenantHeader != "" {
		if why := g.Reserved(tenantHeader); why != "" {
			return nil, fmt.Errorf("tenant_header %s: %s", http.CanonicalHeaderKey(tenantHeader), why)
		}
	}
	return &g, nil
}

// Reads lists the request headers g is believed for.
func (g Gateway) Reads() []string {
	var out []string
	for _, h := range []string{g.Method, g.URI} {
		if h != "" {
			out = append(out, h)
		}
	}
	return out
}

// Reserved says why a tenant header may not be name: it is a header the
// gateway or the client's credential already uses. "" means it may.
func (g Gateway) Reserved(name string) string {
	name = http.CanonicalHeaderKey(name)
	switch {
	case slices.ContainsFunc(g.Reads(), func(h string) bool { return strings.EqualFold(h, name) }):
		return fmt.Sprintf("%s is where %s puts the original request", name, g.Name)
	case name == "Authorization" || name == "X-Api-Key":
		return name + " carries the client's own credential"
	case name == "X-Forwarded-For" || name == "Forwarded" || name == "X-Real-Ip":
		return name + " carries the client's address"
	}
	return ""
}

// Original returns the method and the request target of the request a
// gateway asks about in r. A header it reads must come exactly once: a
// gateway that appended its value to a client's copy instead of
// replacing it is refused, never guessed between.
func (g Gateway) Original(r *http.Request) (method, target string, err error) {
	method = r.Method
	if g.Method != "" {
		if method, err = Once(r.Header, g.Method, g.Name); err != nil {
			return "", "", err
		}
	}
	if method == "" || strings.ContainsAny(method, " \t\r\n") {
		return "", "", fmt.Errorf("the original method in %s is not a token", cmpOr(g.Method, "the request line"))
	}
	if g.URI == "" {
		target, ok := strings.CutPrefix(r.RequestURI, g.PathPrefix)
		if !ok || target == "" || target[0] != '/' {
			return "", "", fmt.Errorf("%s sends the original path after %s: this request's is %q", g.Name, g.PathPrefix, r.RequestURI)
		}
		return method, target, nil
	}
	if target, err = Once(r.Header, g.URI, g.Name); err != nil {
		return "", "", err
	}
	return method, target, nil
}

// Once returns the one value of header name in h, or an error when it is
// missing or repeated.
func Once(h http.Header, name, gateway string) (string, error) {
	switch vs := h.Values(name); {
	case len(vs) == 0 || vs[0] == "":
		return "", fmt.Errorf("no %s: forward_auth.gateway is %s, which sets it on every auth request; is the gateway set up as examples/gateways shows?", name, gateway)
	case len(vs) > 1:
		return "", fmt.Errorf("%s came %d times: the gateway must set it, replacing the client's copy, not add to it", name, len(vs))
	default:
		return vs[0], nil
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
