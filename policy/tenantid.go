package policy

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// MaxStatedTenantID is the longest tenant ID that a credential (an API key
// in the file or made through the admin API, a JWT's tenant claim) or a
// tenant's entry (in the file or written at run time) may state: 256
// bytes. Decisions asked for directly (/v1/check) take up to MaxTenantID.
const MaxStatedTenantID = 256

// TenantIDRule says what CheckTenantID accepts, for docs and errors.
const TenantIDRule = "1 to 256 bytes of valid UTF-8, without white space at either end and without control characters (C0, DEL, C1), line or paragraph separators, invisible format characters (zero-width, bidi controls) or other characters that show as nothing (Unicode's default-ignorable code points: variation selectors, Hangul fillers, the combining grapheme joiner; and the braille blank)"

// CheckTenantID says what is wrong with id as a tenant ID stated by a
// credential or an entry, or nil: see TenantIDRule. It is the one rule
// every such source applies, for two reasons. The proxy passes the tenant
// to the upstream in a header, and HTTP trims a header value's surrounding
// white space (and cannot carry a control character at all): "acme " would
// have its own counters and plan here yet reach the upstream as "acme", and
// "acme\n" would be charged and then answered 502. And an ID that differs
// from another only by a character no one sees (U+200B, U+202E) would be
// two tenants that look like one in logs, the dashboard and the admin API.
func CheckTenantID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("empty: want %s", TenantIDRule)
	case len(id) > MaxStatedTenantID:
		return fmt.Errorf("%d bytes, at most %d", len(id), MaxStatedTenantID)
	case !utf8.ValidString(id):
		return fmt.Errorf("%q is not valid UTF-8", id)
	}
	for i, r := range id {
		switch {
		case unicode.IsControl(r):
			return fmt.Errorf("%q holds a control character (%U) at byte %d: want none", id, r, i)
		case unicode.In(r, unicode.Zl, unicode.Zp):
			return fmt.Errorf("%q holds a line or paragraph separator (%U) at byte %d: want none", id, r, i)
		case unicode.Is(unicode.Cf, r):
			return fmt.Errorf("%q holds an invisible format character (%U) at byte %d: want none, so that two tenants cannot look alike", id, r, i)
		case unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Variation_Selector) || r == '\u2800':
			return fmt.Errorf("%q holds a character that shows as nothing or as a blank (%U) at byte %d: want none, so that two tenants cannot look alike", id, r, i)
		}
	}
	first, _ := utf8.DecodeRuneInString(id)
	last, _ := utf8.DecodeLastRuneInString(id)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return fmt.Errorf("%q has white space at its start or end, which HTTP headers drop (the upstream would see another tenant): remove it", id)
	}
	return nil
}
