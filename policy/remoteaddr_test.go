package policy_test

import (
	"net/netip"
	"testing"

	"github.com/fairgate/fairgate/policy"
)

func TestRemoteAddr(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"192.0.2.1:443", "192.0.2.1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"},
		{"192.0.2.7", "192.0.2.7"},
		{"2001:db8::2", "2001:db8::2"},
		{"[2001:db8::3]", "2001:db8::3"},
		{"@", "invalid IP"},
		{"", "invalid IP"},
	} {
		if got := policy.RemoteAddr(c.in); got.String() != c.want {
			t.Errorf("RemoteAddr(%q) = %v, want %s", c.in, got, c.want)
		}
	}
	var zero netip.Addr
	if policy.RemoteAddr("unix-socket") != zero {
		t.Error("a RemoteAddr without an address is not the zero Addr")
	}
}
