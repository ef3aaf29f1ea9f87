package policy

import (
	"crypto/sha256"
	"encoding/base64"
	"net/netip"
	"strings"
)

// Keys. Every key of one tenant carries the hash tag {t:<id>}, so that a
// tenant's layers share a Redis Cluster slot and are decided by one script
// call; the ID is escaped so that no ID, however chosen, can end the tag
// early, move into another tenant's slot or collide with another ID:
//
//	rl:{t:<id>}:c:<class>:<rule>[:<window>]   tenant and route class
//	rl:{t:<id>}:all:<rule>[:<window>]         tenant overall
//	rl:{ip:<addr>}:a:<route>:<rule>           anonymous, per IPv4 address or IPv6 /64
//	rl:{cr:<hash>}:a:<route>:<rule>           anonymous, per credential
//
// <id> keeps the bytes [A-Za-z0-9._-] and writes every other byte as %XX, so
// the escaped ID holds no '{', '}' or ':' and two IDs escape alike only if
// they are equal. An ID whose escaped form would be longer than 64 bytes is
// replaced by '~' and the base64url SHA-256 of it ('~' never appears in an
// escaped ID), which keeps keys short whatever the ID. Credentials are
// always hashed, so that no secret reaches the store. Class, route and rule
// names are restricted to [a-z0-9_-] by validation.

// TakeKey returns the store key of a key a /v1/take caller names. Every
// such key lives under its own prefix "tk:" with the caller's key escaped
// as a tenant ID is (and hashed when long), inside a hash tag of its own:
// whatever a caller sends, it can never name a tenant, class, anonymous,
// outbound, queue, Envoy or control key, and never holds more than about
// 70 bytes of the store.
func TakeKey(key string) string { return "tk:{" + escapeID(key) + "}" }

// MaxTakeKey is the longest key /v1/take accepts, in bytes.
const MaxTakeKey = 4 << 10

// maxEscaped is the longest escaped tenant ID kept readable in keys.
const maxEscaped = 64

// TenantTag returns the hash tag content for tenant id: the part of every
// key of the tenant between the braces.
func TenantTag(id string) string { return "t:" + escapeID(id) }

func escapeID(id string) string {
	n := 0 // the escaped length, counted until it passes maxEscaped
	for i := 0; i < len(id) && n <= maxEscaped; i++ {
		n++
		if !plain(id[i]) {
			n += 2
		}
	}
	if n > maxEscaped {
		return "~" + hashB64(id)
	}
	if n == len(id) {
		return id
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(id) * 3)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if plain(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

func hashB64(s string) string {
	h := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// ClientPrefix is how a client address is told apart from others in
// limits per address: an IPv4 address, or an IPv6 address's /64 (what
// one subscriber is given), as a string.
func ClientPrefix(a netip.Addr) string { return clientPrefix(a) }

// RemoteAddr is the address in an http.Request's RemoteAddr ("ip:port",
// "[ipv6]:port", or a bare address), IPv4-mapped IPv6 unmapped; the zero
// Addr when it holds none.
func RemoteAddr(remote string) netip.Addr {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		return ap.Addr().Unmap()
	}
	a, _ := netip.ParseAddr(strings.Trim(remote, "[]"))
	return a.Unmap()
}

// clientPrefix returns what an anonymous rule by IP keys on: the address
// itself for IPv4 (and IPv4-mapped IPv6), its /64 for IPv6.
func clientPrefix(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// key builds a key: rl:{<tagKind><tag>}:<kind>[:<name>]:<rule>[:<window>],
// for a tenant (tagKind "t:", tag escapeID of its ID, as TenantTag; kind c
// or all) and for an anonymous route (tagKind "ip:" or "cr:"; kind a, name
// the route). The tag comes in two parts so that building it costs no
// string of its own.
func key(tagKind, tag, kind, name, rule string, window winLabel) string {
	var b strings.Builder
	b.Grow(12 + len(tagKind) + len(tag) + len(kind) + len(name) + len(rule) + int(window.n))
	b.WriteString("rl:{")
	b.WriteString(tagKind)
	b.WriteString(tag)
	b.WriteString("}:")
	b.WriteString(kind)
	if name != "" {
		b.WriteByte(':')
		b.WriteString(name)
	}
	b.WriteByte(':')
	b.WriteString(rule)
	if window.n > 0 {
		b.WriteByte(':')
		b.Write(window.b[:window.n])
	}
	return b.String()
}
