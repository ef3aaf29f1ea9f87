// Package auth finds who a proxied request is from: the tenant (and plan)
// from a verified credential, and the client's address from the peer or,
// only behind trusted proxies, from X-Forwarded-For or Forwarded. Nothing
// here trusts a header the client controls to name a tenant.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/policy"
)

// APIKey is one configured API key: the SHA-256 of the key (never the key
// itself) and the tenant it belongs to.
type APIKey struct {
	SHA256 string // hex
	Tenant string
	Plan   string // optional
}

// JWTConfig verifies bearer JWTs.
type JWTConfig struct {
	// Issuer, if set, must equal the token's iss.
	Issuer string
	// Audience must be among the token's aud. Required.
	Audience string
	// TenantClaim and PlanClaim name the claims that carry the tenant ID
	// (required in every token) and the plan (optional). Empty means
	// "tenant" and "plan".
	TenantClaim, PlanClaim string
	// Keys verify signatures: []byte for HMAC, or crypto public keys
	// (*rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey).
	Keys []any
	// JWKSURL, if set, is fetched (and refreshed) for the keys.
	JWKSURL string
	// Methods are the accepted signing algorithms, each one of Algorithms
	// that a configured key can verify (CheckAlgorithm). Empty means RS256,
	// RS384, RS512, PS256, ES256, ES384, EdDSA and, with an HMAC key, HS256.
	Methods []string
	// Leeway tolerates clock skew on exp and nbf: a token is accepted up
	// to Leeway past its exp (and before its nbf). Zero means none; at
	// most MaxLeeway. The config file's jwt.leeway defaults to
	// DefaultLeeway.
	Leeway time.Duration
}

// DefaultLeeway is jwt.leeway when the config file does not set it: 30 s,
// room for the clock skew of hosts that keep time by NTP (well under a
// second) with a wide margin, and short against tokens that live for
// minutes or hours.
const DefaultLeeway = 30 * time.Second

// MaxLeeway is the longest leeway New accepts: 5 minutes. Past that a
// revoked or leaked short-lived token stays good for longer than clock
// skew explains: fix the clocks instead.
const MaxLeeway = 5 * time.Minute

// MinHMACSecret is the fewest bytes an HMAC secret (hmac_secret_file, after
// its surrounding white space is trimmed) may have: 32, HS256's output
// size (RFC 7518 §3.2).
const MinHMACSecret = 32

// Config configures an Authenticator.
type Config struct {
	APIKeys []APIKey
	JWT     *JWTConfig
	// Now is the clock for token expiry. Nil means time.Now.
	Now func() time.Time
	// JWKSTimeout bounds each fetch of the JWKS URL, the first (which New
	// waits for) included. Zero means DefaultJWKSTimeout.
	JWKSTimeout time.Duration
	// Previous, if not nil, is the Authenticator this one replaces (a
	// config reload): its key set, kept fresh in the background, is reused
	// when the JWKS URL is the same, so a reload never waits on the URL.
	Previous *Authenticator
	// Logger receives the key set's refresh failures. Nil means silent.
	Logger *slog.Logger
	// Stored, if not nil, holds the API keys made through the admin API
	// (package apikeys); they are checked after APIKeys.
	Stored *apikeys.Set
}

// DefaultJWKSTimeout is how long a JWKS fetch may take: 5 s.
const DefaultJWKSTimeout = 5 * time.Second

// Identity is who a request is from.
type Identity struct {
	Tenant string
	Plan   string
}

// Errors of Authenticate. Their texts are safe to show the client.
var (
	// ErrNoCredential means the request carries no credential.
	ErrNoCredential = errors.New("auth: no credential: send Authorization: Bearer <API key or JWT>")
	// ErrBadCredential means the credential is unknown, expired or not
	// valid for this API.
	ErrBadCredential = errors.New("auth: credential not accepted")
	// ErrAmbiguousCredential means the request carries a credential header
	// more than once (or a list in one), two credentials that differ, or a
	// header that some upstreams read as a credential header: fairgate
	// could charge one tenant while the upstream serves another, so it
	// believes none.
	ErrAmbiguousCredential = errors.New("auth: more than one credential")
)

// Authenticator verifies credentials. It is safe for concurrent use.
type Authenticator struct {
	keys    map[[sha256.Size]byte]apiKey
	stored  *apikeys.Set
	parser  *jwt.Parser
	keyfunc jwt.Keyfunc
	tenant  string
	plan    string
	jwks    string          // the JWKS URL, if any
	remote  keyfunc.Keyfunc // its key set
}

type apiKey struct {
	tenant string
	plan   string
}

// New returns an Authenticator for c. With a JWKS URL it fetches the set
// once under ctx and refreshes it in the background until ctx ends.
func New(ctx context.Context, c Config) (*Authenticator, error) {
	a := &Authenticator{keys: make(map[[sha256.Size]byte]apiKey, len(c.APIKeys)), stored: c.Stored}
	first := map[[sha256.Size]byte]int{}
	for i, k := range c.APIKeys {
		b, err := hex.DecodeString(k.SHA256)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("auth: api_keys[%d].sha256: want 64 hex digits (sha256sum of the key)", i)
		}
		if err := policy.CheckTenantID(k.Tenant); err != nil {
			return nil, fmt.Errorf("auth: api_keys[%d].tenant: %w", i, err)
		}
		sum := [sha256.Size]byte(b)
		if j, dup := first[sum]; dup {
			return nil, fmt.Errorf("auth: api_keys[%d].sha256: the same key as api_keys[%d]; a key belongs to one tenant, so remove one", i, j)
		}
		first[sum] = i
		a.keys[sum] = apiKey{tenant: k.Tenant, plan: k.Plan}
	}
	if c.JWT != nil {
		if err := a.setJWT(ctx, c, c.JWT); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// setJWT makes a verify bearer tokens as j says: the parser (algorithms,
// audience, issuer, leeway), the claims and the keys, static or from a
// JWKS (fetched once, and reused from c.Previous when its URL is the same).
func (a *Authenticator) setJWT(ctx context.Context, c Config, j *JWTConfig) error {
	if j.Audience == "" {
		return errors.New("auth: jwt.audience: required, so that tokens for other services are refused")
	}
	if len(j.Keys) == 0 && j.JWKSURL == "" {
		return errors.New("auth: jwt: give keys or jwks_url")
	}
	a.tenant, a.plan = j.TenantClaim, j.PlanClaim
	if a.tenant == "" {
		a.tenant = "tenant"
	}
	if a.plan == "" {
		a.plan = "plan"
	}
	for i, m := range j.Methods {
		if err := CheckAlgorithm(m, j.Keys, j.JWKSURL != ""); err != nil {
			return fmt.Errorf("auth: jwt.algorithms[%d]: %w", i, err)
		}
	}
	methods := j.Methods
	hmac := false
	for _, k := range j.Keys {
		if _, ok := k.([]byte); ok {
			hmac = true
		}
	}
	if len(methods) == 0 {
		methods = []string{"RS256", "RS384", "RS512", "PS256", "ES256", "ES384", "EdDSA"}
		if hmac {
			methods = append(methods, "HS256")
		}
	}
	if err := CheckLeeway(j.Leeway); err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithAudience(j.Audience), jwt.WithExpirationRequired(), jwt.WithLeeway(j.Leeway)}
	if j.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(j.Issuer))
	}
	if c.Now != nil {
		opts = append(opts, jwt.WithTimeFunc(c.Now))
	}
	a.parser = jwt.NewParser(opts...)
	static := jwt.VerificationKeySet{}
	for _, k := range j.Keys {
		static.Keys = append(static.Keys, k)
	}
	var remote keyfunc.Keyfunc
	if j.JWKSURL != "" {
		if p := c.Previous; p != nil && p.jwks == j.JWKSURL && p.remote != nil {
			remote = p.remote
		} else {
			var err error
			if remote, err = fetchJWKS(ctx, j.JWKSURL, c); err != nil {
				return err
			}
		}
		a.jwks, a.remote = j.JWKSURL, remote
	}
	a.keyfunc = func(t *jwt.Token) (any, error) {
		if _, ok := t.Header["crit"]; ok {
			// RFC 7515 §4.1.11: a token whose crit names extensions the
			// verifier does not understand must be refused, and this one
			// understands none (another verifier reading the token
			// otherwise is how parser differentials start).
			return nil, errCrit
		}
		if remote != nil {
			if k, err := remote.Keyfunc(t); err == nil {
				return k, nil
			} else if len(static.Keys) == 0 {
				return nil, err
			}
		}
		return static, nil
	}
	return nil
}

// errCrit refuses a token with a crit header.
var errCrit = errors.New("the token's header has crit: no extension is understood here (RFC 7515 §4.1.11)")

// CheckLeeway says what is wrong with d as jwt.leeway, or nil: it must be
// 0 to MaxLeeway.
func CheckLeeway(d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("jwt.leeway: %v is negative: want 0 (none) to %v", d, MaxLeeway)
	case d > MaxLeeway:
		return fmt.Errorf("jwt.leeway: %v is over %v: a token would stay good that long past its exp; fix the clocks' skew instead", d, MaxLeeway)
	}
	return nil
}

// fetchJWKS fetches the key set at url within c.JWKSTimeout and keeps it
// fresh hourly in the background (until ctx ends), logging failures; a
// token with a key ID the set lacks refetches it at most every five
// minutes, without ever holding the request for it.
func fetchJWKS(ctx context.Context, url string, c Config) (keyfunc.Keyfunc, error) {
	timeout := c.JWKSTimeout
	if timeout <= 0 {
		timeout = DefaultJWKSTimeout
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	firstFails := false
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{url}, keyfunc.Override{
		HTTPTimeout:               timeout,
		NoErrorReturnFirstHTTPReq: &firstFails,
		RateLimitWaitMax:          time.Millisecond,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) {
				log.Warn("jwks_url refresh failed; keeping the keys already fetched", slog.String("url", u), slog.String("error", err.Error()))
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: jwks_url %s: no key set within %v: %w (fix the URL or the network, or give public_keys)", url, timeout, err)
	}
	return kf, nil
}

// Enabled reports whether any credential is configured.
// Stored keys count once the first is made.
func (a *Authenticator) Enabled() bool {
	return len(a.keys) > 0 || a.parser != nil || a.stored != nil && a.stored.Len() > 0
}

// credential is the one credential of r: the token of its Authorization
// if that is a bearer token, else its X-API-Key. Authorization of another
// scheme (Basic, Digest) is not fairgate's and is left to the upstream, but
// only alone: beside an X-API-Key, Authorization must be the same key as a
// bearer token, since an upstream reading the other header ("Token k",
// "Basic" with a key as its user name) would serve another tenant than the
// one charged. A credential header that comes twice, holds a
// comma-separated list, is malformed (a tab or a control character
// where the scheme ends), or has a look-alike that upstreams take for it
// (X_API_KEY or X.API.KEY: CGI, WSGI, Rack and PHP read '_' and '.' as
// '-') is an error wrapping ErrAmbiguousCredential.
func credential(r *http.Request) (string, error) {
	authz, key := r.Header.Values("Authorization"), r.Header.Values("X-Api-Key")
	for _, h := range []struct {
		name string
		vs   []string
	}{{"Authorization", authz}, {"X-API-Key", key}} {
		if len(h.vs) > 1 {
			return "", fmt.Errorf("%w: %s came %d times; send it once", ErrAmbiguousCredential, h.name, len(h.vs))
		}
	}
	for name := range r.Header {
		for _, cred := range []string{"Authorization", "X-API-Key"} {
			if policy.LookAlike(name, cred) {
				return "", fmt.Errorf("%w: a header %s, which some upstreams read as %s; send only %s", ErrAmbiguousCredential, name, cred, cred)
			}
		}
	}
	var bearer, apiKey string
	if len(authz) == 1 {
		var err error
		if bearer, err = bearerToken(authz[0]); err != nil {
			return "", err
		}
	}
	if len(key) == 1 {
		apiKey = key[0]
	}
	switch {
	case strings.Contains(bearer, ","):
		return "", fmt.Errorf("%w: Authorization holds a comma-separated list; send one bearer token", ErrAmbiguousCredential)
	case strings.Contains(apiKey, ","):
		return "", fmt.Errorf("%w: X-API-Key holds a comma-separated list; send one key", ErrAmbiguousCredential)
	case apiKey != "" && len(authz) == 1 && bearer != apiKey:
		return "", fmt.Errorf("%w: Authorization and X-API-Key are both present and differ; send one credential", ErrAmbiguousCredential)
	case bearer != "":
		return bearer, nil
	}
	return apiKey, nil
}

// bearerToken returns the token of an Authorization value "Bearer
// <token>"; the scheme is case-insensitive (RFC 9110 §11.1), so "bearer"
// works too; "" for another scheme. A value whose scheme does not end at
// one space (a tab, a control character) is malformed: upstreams split it
// differently.
func bearerToken(h string) (string, error) {
	if i := strings.IndexFunc(h, func(r rune) bool { return r < ' ' || r == 0x7f }); i >= 0 {
		return "", fmt.Errorf("%w: Authorization holds a control character (a tab?): separate the scheme with one space", ErrAmbiguousCredential)
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", nil
	}
	return strings.TrimSpace(tok), nil
}

// Authenticate returns the identity of r's credential, ErrNoCredential when
// it has none, an error wrapping ErrAmbiguousCredential when it has more
// than one (see credential), or an error wrapping ErrBadCredential.
func (a *Authenticator) Authenticate(r *http.Request) (Identity, error) {
	tok, err := credential(r)
	if err != nil {
		return Identity{}, err
	}
	if tok == "" {
		return Identity{}, ErrNoCredential
	}
	if a.parser != nil && strings.Count(tok, ".") == 2 {
		return a.verifyJWT(tok)
	}
	// The maps are probed with the key's SHA-256, never the key: what the
	// probe's time depends on is the digest, and learning that a guess's
	// digest shares leading bytes with a held one is no step towards a key
	// (it would take a SHA-256 preimage). One probe, however many keys.
	sum := sha256.Sum256([]byte(tok))
	if k, ok := a.keys[sum]; ok {
		return Identity{Tenant: k.tenant, Plan: k.plan}, nil
	}
	if a.stored != nil {
		r, err := a.stored.Lookup(sum)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: %w", ErrBadCredential, err)
		}
		if err := policy.CheckTenantID(r.Tenant); err != nil {
			// A key stored before the tenant rule: refused, so that no
			// request is charged to a tenant the upstream reads otherwise.
			return Identity{}, fmt.Errorf("%w: the key's tenant ID is refused (%w): make the tenant a new key", ErrBadCredential, err)
		}
		return Identity{Tenant: r.Tenant, Plan: r.Plan}, nil
	}
	return Identity{}, fmt.Errorf("%w: %w", ErrBadCredential, apikeys.ErrUnknown)
}

func (a *Authenticator) verifyJWT(tok string) (Identity, error) {
	claims := jwt.MapClaims{}
	if _, err := a.parser.ParseWithClaims(tok, claims, a.keyfunc); err != nil {
		return Identity{}, fmt.Errorf("%w: %s", ErrBadCredential, jwtReason(err))
	}
	tenant, _ := claims[a.tenant].(string)
	if tenant == "" {
		return Identity{}, fmt.Errorf("%w: token has no %q claim", ErrBadCredential, a.tenant)
	}
	if err := policy.CheckTenantID(tenant); err != nil {
		// The same rule as every other source of a tenant ID: the
		// upstream must see the tenant charged (policy.CheckTenantID).
		return Identity{}, fmt.Errorf("%w: token's %q claim: %w", ErrBadCredential, a.tenant, err)
	}
	plan, _ := claims[a.plan].(string)
	return Identity{Tenant: tenant, Plan: plan}, nil
}

// jwtReason says why a token was refused without echoing it.
func jwtReason(err error) string {
	switch {
	case errors.Is(err, errCrit):
		return errCrit.Error()
	case errors.Is(err, jwt.ErrTokenExpired):
		return "token expired"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "token is for another audience"
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return "token from another issuer"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "signature does not verify"
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return "token not valid yet"
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		for _, c := range []string{"iss", "aud", "exp", "nbf", "sub"} {
			if strings.Contains(err.Error(), c+" claim is required") {
				return "token lacks the required " + c + " claim"
			}
		}
		return "token lacks a required claim"
	}
	return "malformed token"
}

// EmptyBearer reports whether r's one Authorization is the Bearer scheme
// without a token ("Bearer" or "Bearer "): what curl -H "Authorization:
// Bearer $TOKEN" sends when the shell variable is unset, worth its own
// answer rather than the one for a wrong token.
func EmptyBearer(r *http.Request) bool {
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 {
		return false
	}
	scheme, tok, _ := strings.Cut(strings.TrimSpace(vs[0]), " ")
	return strings.EqualFold(scheme, "Bearer") && strings.TrimSpace(tok) == ""
}

// BearerMatches reports whether r carries "Authorization: Bearer <token>",
// once, for the token whose SHA-256 is sum, compared in constant time (of
// hashes, so the length does not show either).
func BearerMatches(r *http.Request, sum [sha256.Size]byte) bool {
	vs := r.Header.Values("Authorization")
	if len(vs) != 1 {
		return false
	}
	tok, err := bearerToken(vs[0])
	if err != nil || tok == "" {
		return false
	}
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], sum[:]) == 1
}
