package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// FuzzAuthenticate: whatever credential a client sends, the authenticator
// answers without panicking, and names a tenant only for the real API key
// or a token signed with the real secret.
func FuzzAuthenticate(f *testing.F) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	sum := sha256.Sum256([]byte("the-real-key"))
	a, err := New(context.Background(), Config{
		APIKeys: []APIKey{{SHA256: hex.EncodeToString(sum[:]), Tenant: "acme"}},
		JWT:     &JWTConfig{Audience: "api", Keys: []any{secret}},
	})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"tenant": "globex", "aud": "api", "exp": time.Now().Add(time.Hour).Unix()}).SignedString(secret)
	f.Add("Bearer "+good, "")
	f.Add("", "the-real-key")
	f.Add("Bearer the-real-key", "")
	f.Add("Bearer eyJhbGciOiJub25lIn0.eyJ0ZW5hbnQiOiJ4In0.", "")
	f.Add("Basic dXNlcjpwYXNz", "x")
	f.Add("BeAreR the-real-key", "\xd0l\x97\x97\xf0\xa7\xa1`") // the scheme is case-insensitive (found by CI's fuzzing)
	f.Fuzz(func(t *testing.T, authz, apiKey string) {
		r := httptest.NewRequest("GET", "/", nil)
		if authz != "" {
			r.Header["Authorization"] = []string{authz}
		}
		if apiKey != "" {
			r.Header["X-Api-Key"] = []string{apiKey}
		}
		id, err := a.Authenticate(r)
		if err != nil {
			return
		}
		// The bearer token, as RFC 9110 reads it: the scheme in any case.
		scheme, bearer, _ := strings.Cut(authz, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			bearer = ""
		}
		bearer = strings.TrimSpace(bearer)
		switch id.Tenant {
		case "acme":
			if bearer != "the-real-key" && (authz != "" || apiKey != "the-real-key") {
				t.Fatalf("acme from %q / %q", authz, apiKey)
			}
		case "globex":
			if bearer != good {
				tok, _, err := jwt.NewParser().ParseUnverified(bearer, jwt.MapClaims{})
				if err != nil || tok.Method.Alg() != "HS256" {
					t.Fatalf("globex from %q", authz)
				}
			}
		default:
			t.Fatalf("tenant %q from %q / %q", id.Tenant, authz, apiKey)
		}
	})
}
