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
// answers without panicking, names a tenant only for the real API key or
// a token signed with the real secret, and never when the bearer token and
// X-API-Key differ or one is a comma-separated list.
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
	f.Add("Basic dXNlcjpwYXNz", "the-real-key")
	f.Add("Bearer the-real-key", "other-key")
	f.Add("", "the-real-key,other-key")
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
		if bearer != "" && apiKey != "" && bearer != apiKey || strings.Contains(bearer+apiKey, ",") {
			t.Fatalf("tenant %q from two credentials %q / %q", id.Tenant, authz, apiKey)
		}
		// The one credential: the bearer token, else X-API-Key.
		cred := bearer
		if cred == "" {
			cred = apiKey
		}
		switch id.Tenant {
		case "acme":
			if cred != "the-real-key" {
				t.Fatalf("acme from %q / %q", authz, apiKey)
			}
		case "globex":
			if cred != good {
				tok, _, err := jwt.NewParser().ParseUnverified(cred, jwt.MapClaims{})
				if err != nil || tok.Method.Alg() != "HS256" {
					t.Fatalf("globex from %q / %q", authz, apiKey)
				}
			}
		default:
			t.Fatalf("tenant %q from %q / %q", id.Tenant, authz, apiKey)
		}
	})
}
