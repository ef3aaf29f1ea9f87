package auth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func sum(key string) string { s := sha256.Sum256([]byte(key)); return hex.EncodeToString(s[:]) }

func bearer(tok string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	return r
}

func TestAPIKeys(t *testing.T) {
	a, err := New(context.Background(), Config{APIKeys: []APIKey{{SHA256: sum("k-acme"), Tenant: "acme"}, {SHA256: sum("k-globex"), Tenant: "globex", Plan: "team"}}})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.Authenticate(bearer("k-globex")); err != nil || id != (Identity{"globex", "team"}) {
		t.Errorf("known key: %+v, %v", id, err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-API-Key", "k-acme")
	r.Header.Set("X-Tenant", "globex") // ignored
	if id, err := a.Authenticate(r); err != nil || id.Tenant != "acme" {
		t.Errorf("X-API-Key: %+v, %v", id, err)
	}
	if _, err := a.Authenticate(bearer("k-nobody")); !errors.Is(err, ErrBadCredential) {
		t.Errorf("unknown key: %v", err)
	}
	if _, err := a.Authenticate(httptest.NewRequest("GET", "/", nil)); !errors.Is(err, ErrNoCredential) {
		t.Errorf("no key: %v", err)
	}
	if _, err := New(context.Background(), Config{APIKeys: []APIKey{{SHA256: "abc", Tenant: "x"}}}); err == nil {
		t.Error("a malformed hash was accepted")
	}
}

// TestOneCredential: a request's credential is read one way only. A
// credential header twice, a comma-joined list, an Authorization of any
// scheme beside a different X-API-Key (an upstream reading "Token k" or a
// key in Basic's user name would serve another tenant), a malformed
// scheme ("Bearer<TAB>k"), or a look-alike (X_API_KEY, X.API.KEY) is
// ErrAmbiguousCredential; the same key in both is one credential; an
// Authorization of another scheme alone is not fairgate's; and an
// operator token counts only from a single Authorization.
func TestOneCredential(t *testing.T) {
	a, err := New(context.Background(), Config{APIKeys: []APIKey{{SHA256: sum("k-acme"), Tenant: "acme"}, {SHA256: sum("k-globex"), Tenant: "globex"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		kv     []string // header name, value, …
		tenant string
		err    error
	}{
		{"X-API-Key", []string{"X-API-Key", "k-acme"}, "acme", nil},
		{"bearer", []string{"Authorization", "Bearer k-acme"}, "acme", nil},
		{"the same key in both", []string{"Authorization", "Bearer k-acme", "X-API-Key", "k-acme"}, "acme", nil},
		{"Basic and X-API-Key", []string{"Authorization", "Basic dXNlcjpwYXNz", "X-API-Key", "k-globex"}, "", ErrAmbiguousCredential},
		{"Token and X-API-Key", []string{"Authorization", "Token k-globex", "X-API-Key", "k-acme"}, "", ErrAmbiguousCredential},
		{"a bare key and X-API-Key", []string{"Authorization", "k-globex", "X-API-Key", "k-acme"}, "", ErrAmbiguousCredential},
		{"an empty bearer and X-API-Key", []string{"Authorization", "Bearer ", "X-API-Key", "k-globex"}, "", ErrAmbiguousCredential},
		{"a tab after Bearer beside X-API-Key", []string{"Authorization", "Bearer\tk-globex", "X-API-Key", "k-acme"}, "", ErrAmbiguousCredential},
		{"a tab after Bearer alone", []string{"Authorization", "Bearer\tk-globex"}, "", ErrAmbiguousCredential},
		{"a dotted look-alike", []string{"X-API-Key", "k-acme", "X.API.KEY", "k-globex"}, "", ErrAmbiguousCredential},
		{"a mixed look-alike", []string{"X-API-Key", "k-acme", "X_API.KEY", "k-globex"}, "", ErrAmbiguousCredential},
		{"Basic alone", []string{"Authorization", "Basic dXNlcjpwYXNz"}, "", ErrNoCredential},
		{"X-API-Key twice", []string{"X-API-Key", "k-acme", "X-API-Key", "k-globex"}, "", ErrAmbiguousCredential},
		{"X-API-Key twice, the same", []string{"X-API-Key", "k-acme", "X-API-Key", "k-acme"}, "", ErrAmbiguousCredential},
		{"an empty X-API-Key first", []string{"X-API-Key", "", "X-API-Key", "k-acme"}, "", ErrAmbiguousCredential},
		{"X-API-Key list", []string{"X-API-Key", "k-acme,k-globex"}, "", ErrAmbiguousCredential},
		{"Authorization twice", []string{"Authorization", "Bearer k-acme", "Authorization", "Bearer k-globex"}, "", ErrAmbiguousCredential},
		{"Basic then a bearer", []string{"Authorization", "Basic dXNlcjpwYXNz", "Authorization", "Bearer k-globex"}, "", ErrAmbiguousCredential},
		{"Authorization list", []string{"Authorization", "Bearer k-acme, Bearer k-globex"}, "", ErrAmbiguousCredential},
		{"bearer and another X-API-Key", []string{"Authorization", "Bearer k-acme", "X-API-Key", "k-globex"}, "", ErrAmbiguousCredential},
		{"X_API_KEY", []string{"X_API_KEY", "k-acme"}, "", ErrAmbiguousCredential},
		{"x_api-key beside X-API-Key", []string{"X-API-Key", "k-acme", "x_api-key", "k-globex"}, "", ErrAmbiguousCredential},
		{"AUTHORIZATION_", []string{"X-API-Key", "k-acme", "Authorization_", "Bearer k-globex"}, "acme", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			for i := 0; i+1 < len(tc.kv); i += 2 {
				r.Header.Add(tc.kv[i], tc.kv[i+1])
			}
			id, err := a.Authenticate(r)
			if id.Tenant != tc.tenant || !errors.Is(err, tc.err) {
				t.Fatalf("Authenticate = %+v, %v; want tenant %q, %v", id, err, tc.tenant, tc.err)
			}
		})
	}
	op := sha256.Sum256([]byte("op-token"))
	r := bearer("op-token")
	if !BearerMatches(r, op) {
		t.Fatal("the operator token did not match")
	}
	r.Header.Add("Authorization", "Bearer other")
	if BearerMatches(r, op) {
		t.Error("the operator token matched in one of two Authorization headers")
	}
}

func rsaKey(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func sign(t *testing.T, k *rsa.PrivateKey, kid string, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claims(mod func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{"tenant": "acme", "plan": "enterprise", "aud": "api", "iss": "https://id.example", "exp": now.Add(time.Hour).Unix()}
	if mod != nil {
		mod(c)
	}
	return c
}

func testJWT(t *testing.T, a *Authenticator, good, other *rsa.PrivateKey) {
	t.Helper()
	for _, tc := range []struct {
		name string
		tok  string
		want error
	}{
		{"good", sign(t, good, "k1", claims(nil)), nil},
		{"expired", sign(t, good, "k1", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Hour).Unix() })), ErrBadCredential},
		{"no expiry", sign(t, good, "k1", claims(func(c jwt.MapClaims) { delete(c, "exp") })), ErrBadCredential},
		{"wrong audience", sign(t, good, "k1", claims(func(c jwt.MapClaims) { c["aud"] = "billing" })), ErrBadCredential},
		{"wrong issuer", sign(t, good, "k1", claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), ErrBadCredential},
		{"wrong key", sign(t, other, "k1", claims(nil)), ErrBadCredential},
		{"no tenant claim", sign(t, good, "k1", claims(func(c jwt.MapClaims) { delete(c, "tenant") })), ErrBadCredential},
		{"alg none", func() string {
			s, _ := jwt.NewWithClaims(jwt.SigningMethodNone, claims(nil)).SignedString(jwt.UnsafeAllowNoneSignatureType)
			return s
		}(), ErrBadCredential},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := a.Authenticate(bearer(tc.tok))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Authenticate = %+v, %v; want %v", id, err, tc.want)
			}
			if tc.want == nil && id != (Identity{"acme", "enterprise"}) {
				t.Errorf("identity %+v", id)
			}
		})
	}
}

func TestJWTWithStaticKey(t *testing.T) {
	good, other := rsaKey(t), rsaKey(t)
	a, err := New(context.Background(), Config{Now: func() time.Time { return now }, JWT: &JWTConfig{
		Issuer: "https://id.example", Audience: "api", Keys: []any{&good.PublicKey},
	}})
	if err != nil {
		t.Fatal(err)
	}
	testJWT(t, a, good, other)
}

func TestJWTWithJWKS(t *testing.T) {
	good, other := rsaKey(t), rsaKey(t)
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	jwks := fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"k1","alg":"RS256","use":"sig","n":%q,"e":%q}]}`,
		b64(good.N.Bytes()), b64(big.NewInt(int64(good.E)).Bytes()))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(jwks))
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := New(ctx, Config{Now: func() time.Time { return now }, JWT: &JWTConfig{Issuer: "https://id.example", Audience: "api", JWKSURL: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	testJWT(t, a, good, other)
}

// TestJWKSHangIsBounded: a JWKS URL that hangs fails New within
// JWKSTimeout with a message naming the URL (today start-up and reloads
// blocked 60 s), and a reload with the same URL reuses the key set already
// fetched without waiting on the URL.
func TestJWKSHangIsBounded(t *testing.T) {
	good, other := rsaKey(t), rsaKey(t)
	b64 := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	jwks := fmt.Sprintf(`{"keys":[{"kty":"RSA","kid":"k1","alg":"RS256","use":"sig","n":%q,"e":%q}]}`,
		b64(good.N.Bytes()), b64(big.NewInt(int64(good.E)).Bytes()))
	var hang atomic.Bool
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(jwks))
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := Config{Now: func() time.Time { return now }, JWKSTimeout: 200 * time.Millisecond, JWT: &JWTConfig{Issuer: "https://id.example", Audience: "api", JWKSURL: srv.URL}}
	first, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	hang.Store(true)
	start := time.Now()
	cfg.Previous = first
	again, err := New(ctx, cfg)
	if err != nil { // a fetch would fail: the URL hangs
		t.Fatalf("reload with the same URL: %v after %v, want the fetched keys reused", err, time.Since(start))
	}
	testJWT(t, again, good, other)
	cfg.Previous = nil
	start = time.Now()
	_, err = New(ctx, cfg)
	if took := time.Since(start); err == nil || took > 2*time.Second || !strings.Contains(err.Error(), srv.URL) || !strings.Contains(err.Error(), "no key set within 200ms") {
		t.Fatalf("a hanging JWKS URL: %v after %v, want an error naming it within the timeout", err, took)
	}
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		header, peer, xff, fwd, realIP, want string
	}{
		{"", "203.0.113.9:4000", "", "", "", "203.0.113.9"},
		{"", "203.0.113.9:4000", "198.51.100.1", "", "", "203.0.113.9"},                  // untrusted peer: header ignored
		{"", "10.0.0.5:4000", "198.51.100.1", "", "", "198.51.100.1"},                    // trusted proxy
		{"", "10.0.0.5:4000", "6.6.6.6, 198.51.100.1, 10.0.0.7", "", "", "198.51.100.1"}, // spoofed leftmost entry skipped
		{"forwarded", "10.0.0.5:4000", "", `for=198.51.100.2;proto=https, for="10.1.1.1"`, "", "198.51.100.2"},
		{"forwarded", "10.0.0.5:4000", "", `for="[2001:db8::7]:443"`, "", "2001:db8::7"},
		{"", "[fd00::1]:4000", "2001:db8:1:2::9", "", "", "2001:db8:1:2::9"},
		{"", "10.0.0.5:4000", "not-an-ip", "", "", "10.0.0.5"},
		{"", "10.0.0.5:4000", "", "", "", "10.0.0.5"},
		// One header chain, never a mix: the trusted proxy sets Forwarded and
		// passes the client's own X-Forwarded-For; today the latter won.
		{"forwarded", "10.0.0.5:4000", "7.7.7.7", "for=5.5.5.7", "", "5.5.5.7"},
		{"", "10.0.0.5:4000", "", "for=5.5.5.7", "", "10.0.0.5"}, // X-Forwarded-For configured: Forwarded is not read
		// X-Real-IP, opt-in, from a trusted proxy only.
		{"x-real-ip", "10.0.0.5:4000", "7.7.7.7", "", "198.51.100.3", "198.51.100.3"},
		{"x-real-ip", "203.0.113.9:4000", "", "", "198.51.100.3", "203.0.113.9"},
		{"", "10.0.0.5:4000", "", "", "198.51.100.3", "10.0.0.5"}, // not configured: not read
	} {
		c := ClientIP{Trusted: trusted, Header: tc.header}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.peer
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		if tc.fwd != "" {
			r.Header.Set("Forwarded", tc.fwd)
		}
		if tc.realIP != "" {
			r.Header.Set("X-Real-IP", tc.realIP)
		}
		if got := c.Of(r); got != netip.MustParseAddr(tc.want) {
			t.Errorf("header %q peer %s xff %q fwd %q x-real-ip %q: %v, want %s", tc.header, tc.peer, tc.xff, tc.fwd, tc.realIP, got, tc.want)
		}
	}
}

// TestBearerSchemeIsCaseInsensitive: "bearer", "BEARER" and "Bearer" all
// carry a credential (RFC 9110 §11.1); today lower case was no credential.
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	a, err := New(context.Background(), Config{APIKeys: []APIKey{{SHA256: sum("k-acme"), Tenant: "acme"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", scheme+" k-acme")
		if id, err := a.Authenticate(r); err != nil || id.Tenant != "acme" {
			t.Errorf("%s: %+v %v", scheme, id, err)
		}
	}
}

// TestJWTMissingIssuerIsNamed: a token without iss is refused as lacking
// iss (today it was reported as lacking exp).
func TestJWTMissingIssuerIsNamed(t *testing.T) {
	k := rsaKey(t)
	a, err := New(context.Background(), Config{Now: func() time.Time { return now }, JWT: &JWTConfig{Issuer: "https://id.example", Audience: "api", Keys: []any{&k.PublicKey}}})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"tenant": "acme", "aud": "api", "exp": now.Add(time.Hour).Unix()}).SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	if _, err := a.Authenticate(r); err == nil || !strings.Contains(err.Error(), "lacks the required iss claim") {
		t.Fatalf("token without iss: %v, want it named", err)
	}
}

// TestDuplicateKey: the same key listed for two tenants is refused, since
// which tenant it names would be a guess.
func TestDuplicateKey(t *testing.T) {
	sum := fmt.Sprintf("%x", sha256.Sum256([]byte("k")))
	_, err := New(context.Background(), Config{APIKeys: []APIKey{{SHA256: sum, Tenant: "a"}, {SHA256: sum, Tenant: "b"}}})
	if err == nil || !strings.Contains(err.Error(), "api_keys[1].sha256: the same key as api_keys[0]") {
		t.Fatalf("duplicate keys: %v", err)
	}
}

// TestJWTLeeway: Leeway is the tolerance past exp (and before nbf), and
// only that: with none a token 10 s past its exp is refused; with 30 s it
// is accepted, and one 31 s past is not. A negative leeway or one over
// MaxLeeway is refused by name. (The 30 s leeway was built in and
// undocumented; jwt.leeway sets it.)
func TestJWTLeeway(t *testing.T) {
	k := rsaKey(t)
	expiredBy := func(d time.Duration) string {
		return sign(t, k, "k1", claims(func(c jwt.MapClaims) { c["exp"] = now.Add(-d).Unix() }))
	}
	notYet := sign(t, k, "k1", claims(func(c jwt.MapClaims) { c["nbf"] = now.Add(10 * time.Second).Unix() }))
	for _, tc := range []struct {
		leeway time.Duration
		tok    string
		ok     bool
	}{
		{0, expiredBy(10 * time.Second), false},
		{0, notYet, false},
		{DefaultLeeway, expiredBy(10 * time.Second), true},
		{DefaultLeeway, notYet, true},
		{DefaultLeeway, expiredBy(31 * time.Second), false},
		{5 * time.Second, expiredBy(10 * time.Second), false},
	} {
		a, err := New(context.Background(), Config{Now: func() time.Time { return now }, JWT: &JWTConfig{
			Issuer: "https://id.example", Audience: "api", Keys: []any{&k.PublicKey}, Leeway: tc.leeway,
		}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Authenticate(bearer(tc.tok))
		if (err == nil) != tc.ok {
			t.Errorf("leeway %v: Authenticate = %v, want accepted %v", tc.leeway, err, tc.ok)
		}
	}
	for _, l := range []time.Duration{-time.Second, MaxLeeway + time.Second, time.Hour} {
		_, err := New(context.Background(), Config{JWT: &JWTConfig{Audience: "api", Keys: []any{&k.PublicKey}, Leeway: l}})
		if err == nil || !strings.Contains(err.Error(), "jwt.leeway: "+l.String()) {
			t.Errorf("leeway %v: New = %v, want an error naming jwt.leeway", l, err)
		}
	}
}

// TestTenantIDRule: every source of a tenant ID here applies
// policy.CheckTenantID: a JWT whose tenant claim breaks it is a bad
// credential (401, with the reason), and a configured API key whose tenant
// breaks it is refused at New, naming the key.
func TestTenantIDRule(t *testing.T) {
	k := rsaKey(t)
	a, err := New(context.Background(), Config{Now: func() time.Time { return now }, JWT: &JWTConfig{
		Issuer: "https://id.example", Audience: "api", Keys: []any{&k.PublicKey},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme ", " acme", "acme\t", "ac\nme", "ac\u200bme", strings.Repeat("x", 257)} {
		tok := sign(t, k, "k1", claims(func(c jwt.MapClaims) { c["tenant"] = tenant }))
		id, err := a.Authenticate(bearer(tok))
		if !errors.Is(err, ErrBadCredential) || !strings.Contains(err.Error(), `token's "tenant" claim: `) {
			t.Errorf("tenant claim %q: %+v, %v; want ErrBadCredential naming the claim", tenant, id, err)
		}
	}
	if id, err := a.Authenticate(bearer(sign(t, k, "k1", claims(func(c jwt.MapClaims) { c["tenant"] = "acme corp" })))); err != nil || id.Tenant != "acme corp" {
		t.Errorf("tenant claim \"acme corp\": %+v, %v; want accepted", id, err)
	}
	for _, tenant := range []string{"acme ", "acme\n", ""} {
		_, err := New(context.Background(), Config{APIKeys: []APIKey{{SHA256: sum("k"), Tenant: tenant}}})
		if err == nil || !strings.Contains(err.Error(), "auth: api_keys[0].tenant: ") {
			t.Errorf("API key of tenant %q: New = %v, want an error naming api_keys[0].tenant", tenant, err)
		}
	}
}

// TestJWTAlgorithmsRefused: New refuses jwt.algorithms that name an
// unknown algorithm (case-sensitive), none, or one no configured key can
// verify, naming the item.
func TestJWTAlgorithmsRefused(t *testing.T) {
	k := rsaKey(t)
	secret := []byte(strings.Repeat("s", 32))
	for _, tc := range []struct {
		keys    []any
		jwks    string
		methods []string
		want    string // "" for accepted
	}{
		{[]any{&k.PublicKey}, "", []string{"none", "RS256"}, `jwt.algorithms[0]: "none" accepts unsigned tokens`},
		{[]any{&k.PublicKey}, "", []string{"rs256"}, `jwt.algorithms[0]: unknown algorithm "rs256" (did you mean RS256?)`},
		{[]any{&k.PublicKey}, "", []string{"RS256", "HS256"}, "jwt.algorithms[1]: HS256: no configured key can verify it"},
		{[]any{&k.PublicKey}, "", []string{"RS256", "ES256"}, "jwt.algorithms[1]: ES256: no configured key can verify it"},
		{[]any{secret}, "", []string{"HS256", "PS256"}, "jwt.algorithms[1]: PS256: no configured key"},
		{[]any{&k.PublicKey, secret}, "", []string{"RS256", "PS384", "HS512"}, ""},
	} {
		_, err := New(context.Background(), Config{JWT: &JWTConfig{Audience: "api", Keys: tc.keys, JWKSURL: tc.jwks, Methods: tc.methods}})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: New = %v, want accepted", tc.methods, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "auth: "+tc.want)):
			t.Errorf("%v: New = %v, want an error containing %q", tc.methods, err, tc.want)
		}
	}
}

// TestJWTCritRefused: a token whose header has crit is refused (RFC 7515
// §4.1.11: this verifier understands no extension), signed well or not;
// the same token without crit is accepted.
func TestJWTCritRefused(t *testing.T) {
	k := rsaKey(t)
	a, err := New(context.Background(), Config{Now: func() time.Time { return now }, JWT: &JWTConfig{
		Issuer: "https://id.example", Audience: "api", Keys: []any{&k.PublicKey},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, crit := range []any{nil, []string{"b64"}, []string{"exp2"}, []string{}} {
		tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims(nil))
		tok.Header["kid"] = "k1"
		if crit != nil {
			tok.Header["crit"] = crit
			tok.Header["b64"] = false
		}
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Authenticate(bearer(s))
		switch {
		case crit == nil && err != nil:
			t.Errorf("no crit: %v, want accepted", err)
		case crit != nil && (err == nil || !strings.Contains(err.Error(), "crit")):
			t.Errorf("crit %v: %v, want refused naming crit", crit, err)
		}
	}
}
