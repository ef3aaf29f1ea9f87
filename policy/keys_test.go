package policy_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/policy"
)

// adversarialIDs returns tenant IDs chosen to break key schemes: braces,
// colons, escapes and hash forms of other IDs, control and non-UTF-8
// bytes, and lengths around and far past the hashing threshold.
func adversarialIDs(r *rand.Rand, n int) []string {
	ids := []string{
		"a", "A", "a}", "{a", "{a}", "a:b", "a%3Ab", "a%3ab", "%", "%%", "~", "~" + hashB64(strings.Repeat("x", 65)),
		"}{", "{}", "t:a", "rl:{t:a}", "a\x00", "\x00", "\xff\xfe", "é", "a b", strings.Repeat("x", 64),
		strings.Repeat("x", 65), strings.Repeat("{", 100), strings.Repeat("x", 10<<10), strings.Repeat("y", 10<<10),
		// around the hashing threshold once escaped (3 bytes per %XX)
		strings.Repeat("é", 10), strings.Repeat("é", 11), strings.Repeat("\xe9", 21), strings.Repeat("\xe9", 22),
		"aaaaaa" + strings.Repeat("\xe9", 54),
	}
	alphabet := []byte("ab{}:%~.\x00\xff -_Z9")
	for len(ids) < n {
		b := make([]byte, 1+r.IntN(80))
		for i := range b {
			if r.IntN(4) == 0 {
				b[i] = byte(r.IntN(256))
			} else {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
		}
		ids = append(ids, string(b))
	}
	return ids
}

func TestTenantKeysNeverCollideAndStayInTheirSlot(t *testing.T) {
	seed := rand.Uint64()
	r := rand.New(rand.NewPCG(seed, 3))
	snap, err := policy.Compile(testPolicy())
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]string{} // tag -> id
	keyOwner := map[string]string{}
	for _, id := range adversarialIDs(r, 5000) {
		tag := policy.TenantTag(id)
		if prev, ok := owner[tag]; ok && prev != id {
			t.Fatalf("seed %d: IDs %q and %q share the tag %q", seed, prev, id, tag)
		}
		owner[tag] = id
		if strings.ContainsAny(tag, "{}") || len(tag) > 2+policy.MaxEscaped {
			t.Fatalf("tag %q of %q holds a brace or is too long", tag, id)
		}
		for _, class := range []string{"read", "write", "search", "export"} {
			res, err := snap.Resolve(policy.Request{Tenant: id, Class: class}, noon)
			if err != nil {
				t.Fatalf("Resolve(%q, %s): %v", id, class, err)
			}
			for _, l := range res.Layers {
				open := strings.IndexByte(l.Key, '{')
				close := strings.IndexByte(l.Key[open+1:], '}') + open + 1
				if got := l.Key[open+1 : close]; got != tag {
					t.Fatalf("key %q of %q: hash tag %q, want %q", l.Key, id, got, tag)
				}
				if prev, ok := keyOwner[l.Key]; ok && prev != id {
					t.Fatalf("key %q shared by %q and %q", l.Key, prev, id)
				}
				keyOwner[l.Key] = id
			}
		}
	}
}

func TestLongTenantIDsAreRefused(t *testing.T) {
	snap, _ := policy.Compile(testPolicy())
	if _, err := snap.Resolve(policy.Request{Tenant: strings.Repeat("x", policy.MaxTenantID+1), Class: "read"}, time.Now()); err == nil {
		t.Error("a tenant ID over policy.MaxTenantID was resolved")
	}
}
