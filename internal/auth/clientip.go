package auth

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/fairgate/fairgate/httplimit"
)

// ClientIP finds the client's address. The peer is the client unless it is
// one of trusted; then X-Forwarded-For (or, without it, Forwarded) is read
// from the right, skipping trusted proxies, and the first address that is
// not one is the client. A header from an untrusted peer is ignored, so a
// client cannot choose its own address.
type ClientIP struct {
	Trusted []netip.Prefix
}

// Trusts reports whether a is a trusted proxy.
func (c ClientIP) Trusts(a netip.Addr) bool { return c.trusted(a) }

func (c ClientIP) trusted(a netip.Addr) bool {
	for _, p := range c.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Of returns r's client address.
func (c ClientIP) Of(r *http.Request) netip.Addr {
	peer := httplimit.PeerIP(r)
	if !peer.IsValid() || !c.trusted(peer) {
		return peer
	}
	hops := forwardedFor(r)
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := parseHop(hops[i])
		if err != nil {
			return client // garbage: stop at the last address we could trust
		}
		client = a
		if !c.trusted(a) {
			return a
		}
	}
	return client
}

// forwardedFor lists the hops of X-Forwarded-For, or of Forwarded's for=
// parameters, in order.
func forwardedFor(r *http.Request) []string {
	var hops []string
	if xs := r.Header.Values("X-Forwarded-For"); len(xs) > 0 {
		for _, x := range xs {
			for _, h := range strings.Split(x, ",") {
				hops = append(hops, strings.TrimSpace(h))
			}
		}
		return hops
	}
	for _, f := range r.Header.Values("Forwarded") {
		for _, elem := range strings.Split(f, ",") {
			for _, pair := range strings.Split(elem, ";") {
				k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
				if ok && strings.EqualFold(k, "for") {
					hops = append(hops, strings.Trim(v, `"`))
				}
			}
		}
	}
	return hops
}

// parseHop parses "1.2.3.4", "1.2.3.4:80", "[2001:db8::1]:80" or
// "2001:db8::1".
func parseHop(h string) (netip.Addr, error) {
	if ap, err := netip.ParseAddrPort(h); err == nil {
		return ap.Addr().Unmap(), nil
	}
	a, err := netip.ParseAddr(strings.Trim(h, "[]"))
	return a.Unmap(), err
}
