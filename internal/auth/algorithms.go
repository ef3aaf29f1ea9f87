package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"fmt"
	"strings"
)

// Algorithms are the signing algorithms jwt.algorithms may name, as
// golang-jwt and RFC 7518 spell them (case-sensitive). "none" is never
// among them.
var Algorithms = []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// keyFamily is the kind of key that verifies alg ("" for an unknown
// algorithm), and how the config file gives one.
func keyFamily(alg string) (family, giveIt string) {
	switch alg {
	case "HS256", "HS384", "HS512":
		return "hmac", "hmac_secret_file"
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		return "rsa", "an RSA key in public_keys, or jwks_url"
	case "ES256", "ES384", "ES512":
		return "ecdsa", "an ECDSA key in public_keys, or jwks_url"
	case "EdDSA":
		return "ed25519", "an Ed25519 key in public_keys, or jwks_url"
	}
	return "", ""
}

// familyOf is the kind of a verification key as JWTConfig.Keys holds it.
func familyOf(k any) string {
	switch k.(type) {
	case []byte:
		return "hmac"
	case *rsa.PublicKey:
		return "rsa"
	case *ecdsa.PublicKey:
		return "ecdsa"
	case ed25519.PublicKey:
		return "ed25519"
	}
	return ""
}

// CheckAlgorithm says what is wrong with alg as an entry of jwt.algorithms,
// for a configuration whose static keys are keys and that fetches a JWKS
// when jwks is set; nil if some configured key can verify it. Refused: a
// name golang-jwt does not know (names are case-sensitive: "rs256" is
// not RS256), "none" (unsigned tokens, which anyone can mint), and an
// algorithm no configured key can verify (HS* without an HMAC secret;
// RS*, PS*, ES* or EdDSA without a public key of its kind or a JWKS): a
// typo there would make every token fail at run time.
func CheckAlgorithm(alg string, keys []any, jwks bool) error {
	if err := CheckAlgorithmName(alg); err != nil {
		return err
	}
	family, giveIt := keyFamily(alg)
	if jwks && family != "hmac" {
		return nil // the key set's types are known only once fetched
	}
	for _, k := range keys {
		if familyOf(k) == family {
			return nil
		}
	}
	return fmt.Errorf("%s: no configured key can verify it (it needs %s), so every token signed with it would be refused: give one, or remove %s", alg, giveIt, alg)
}

// CheckAlgorithmName is CheckAlgorithm without the keys: it refuses only
// an unknown name and "none".
func CheckAlgorithmName(alg string) error {
	if strings.EqualFold(alg, "none") {
		return fmt.Errorf("%q accepts unsigned tokens, which anyone can mint: never allowed; want one of %s", alg, strings.Join(Algorithms, ", "))
	}
	if family, _ := keyFamily(alg); family == "" {
		hint := ""
		for _, a := range Algorithms {
			if strings.EqualFold(a, alg) {
				hint = fmt.Sprintf(" (did you mean %s?)", a)
			}
		}
		return fmt.Errorf("unknown algorithm %q%s: want one of %s (case-sensitive)", alg, hint, strings.Join(Algorithms, ", "))
	}
	return nil
}
