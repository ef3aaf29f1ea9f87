package auth

import (
	"net/http"
	"net/netip"
	"strings"

	"github.com/fairgate/fairgate/policy"
)

// ClientIP finds the client's address. The peer is the client unless it is
// one of Trusted; then the one header the trusted proxies set is read (by
// Header), from the right, skipping trusted proxies, and the first address
// that is not one is the client. A header from an untrusted peer is
// ignored, and no other header is ever read, so a client can choose its
// own address neither directly nor through a proxy that passes a header
// it does not set (today a client's X-Forwarded-For won over a trusted
// proxy's Forwarded).
type ClientIP struct {
	Trusted []netip.Prefix
	// Header is the header the trusted proxies set: "x-forwarded-for"
	// (also the meaning of ""), "forwarded" (its for= parameters) or
	// "x-real-ip" (one address, as nginx's realip sets it).
	Header string
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
	peer := PeerIP(r)
	if !peer.IsValid() || !c.trusted(peer) {
		return peer
	}
	hops := c.hops(r)
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

// hops lists the addresses of the configured header, in order.
func (c ClientIP) hops(r *http.Request) []string {
	var hops []string
	switch strings.ToLower(c.Header) {
	case "x-real-ip":
		if v := strings.TrimSpace(r.Header.Get("X-Real-IP")); v != "" {
			hops = append(hops, v)
		}
		return hops
	case "forwarded":
		return forwardedFor(r)
	}
	for _, x := range r.Header.Values("X-Forwarded-For") {
		for _, h := range strings.Split(x, ",") {
			hops = append(hops, strings.TrimSpace(h))
		}
	}
	return hops
}

// forwardedFor lists Forwarded's for= parameters, in order.
func forwardedFor(r *http.Request) []string {
	var hops []string
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

// PeerIP is the address of r's peer, from RemoteAddr.
func PeerIP(r *http.Request) netip.Addr { return policy.RemoteAddr(r.RemoteAddr) }
