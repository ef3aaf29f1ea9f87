package policy_test

import (
	"strings"
	"testing"

	"github.com/fairgate/fairgate/policy"
)

// TestCheckTenantID: the one rule for tenant IDs that credentials and
// entries state.
func TestCheckTenantID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want string // "" for accepted, else a part of the error
	}{
		{"acme", ""},
		{"acme corp", ""},
		{"team-7/eu_west.1", ""},
		{"société", ""},
		{"日本", ""},
		{strings.Repeat("x", 256), ""},
		{"", "empty"},
		{strings.Repeat("x", 257), "257 bytes, at most 256"},
		{"acme ", "white space"},
		{" acme", "white space"},
		{"acme\t", "control character (U+0009)"},
		{"acme\u00a0", "white space"},
		{"ac\nme", "control character (U+000A)"},
		{"ac\rme", "control character (U+000D)"},
		{"ac\x00me", "control character (U+0000)"},
		{"ac\x7fme", "control character (U+007F)"},
		{"ac\u0085me", "control character (U+0085)"},
		{"ac\u2028me", "line or paragraph separator"},
		{"ac\u200bme", "format character (U+200B)"},
		{"acme\u202e", "format character (U+202E)"},
		{"\ufeffacme", "format character (U+FEFF)"},
		{"ac\xffme", "not valid UTF-8"},
		// The second attacker review's: characters that show as nothing.
		{"acme\u3164", "shows as nothing or as a blank (U+3164)"},
		{"acme\u034f", "(U+034F)"},
		{"acme\ufe0f", "(U+FE0F)"},
		{"acme\U000e0100", "(U+E0100)"},
		{"acme\u180b", "(U+180B)"},
		{"acme\u17b4", "(U+17B4)"},
		{"\u115facme", "(U+115F)"},
		{"ac\u1160me", "(U+1160)"},
		{"acme\uffa0", "(U+FFA0)"},
		{"acme\u2800", "(U+2800)"},
	} {
		err := policy.CheckTenantID(tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckTenantID(%q) = %v, want nil", tc.id, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("CheckTenantID(%q) = %v, want an error naming %q", tc.id, err, tc.want)
		}
	}
}
