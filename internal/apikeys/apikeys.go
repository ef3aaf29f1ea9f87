// Package apikeys holds API keys in the control store, so that a SaaS with
// thousands of tenants can create, rotate and revoke them without a
// deploy: fairgate generates each key, shows it once and keeps only its
// SHA-256.
//
// Every instance keeps the whole set in memory, indexed by the key's
// SHA-256, so a lookup is one hash and one map probe whatever the number
// of keys. The map is probed with the digest, never with the key, so the
// time a lookup takes says nothing an attacker can use about the keys held
// (finding a key whose digest shares a prefix with a held one is as hard
// as finding a SHA-256 preimage). Instances poll the backend's version and
// apply its change log, so a key created or revoked on one instance is in
// force on every other within two polls (DefaultPoll is 500 ms).
package apikeys

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fairgate/fairgate/policy"
)

// Prefix starts every key fairgate generates, so that secret scanners and
// people can tell one from other tokens.
const Prefix = "fgk_"

// IDLen is the length of a key's ID: the first hex digits of its SHA-256.
const IDLen = 16

// Limits on what a record may hold, so that the admin API cannot be made
// to store unbounded bytes.
const (
	MaxTenant = policy.MaxStatedTenantID // and policy.CheckTenantID's other rules
	MaxPlan   = 64
	MaxLabel  = 200
)

// Record is one stored key: never the key, only its SHA-256.
type Record struct {
	// ID is the first IDLen hex digits of Sum: how the admin API names it.
	ID string `json:"id"`
	// Sum is the key's SHA-256.
	Sum [sha256.Size]byte `json:"-"`
	// Tenant the key authenticates as; Plan, if set, its plan.
	Tenant string `json:"tenant"`
	Plan   string `json:"plan,omitempty"`
	// Label is the operator's note (what the key is for).
	Label string `json:"label,omitempty"`
	// Created is when the key was made; Expires, if not zero, when it stops
	// being accepted.
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires,omitzero"`
}

// ErrBadRecord wraps what Check finds wrong.
var ErrBadRecord = errors.New("apikeys: bad record")

// Check says what is wrong with r's fields (wrapping ErrBadRecord), or nil.
func (r Record) Check() error {
	var what string
	switch {
	case r.Tenant == "":
		what = "tenant: required: the tenant the key authenticates as"
	case policy.CheckTenantID(r.Tenant) != nil:
		what = "tenant: " + policy.CheckTenantID(r.Tenant).Error()
	default:
		return r.checkChange()
	}
	return fmt.Errorf("%w: %s", ErrBadRecord, what)
}

// checkChange is Check less the tenant, which a change (Update) keeps as
// it is: a key made before the tenant rule can still be expired.
func (r Record) checkChange() error {
	var what string
	switch {
	case len(r.Plan) > MaxPlan:
		what = fmt.Sprintf("plan: %d bytes, at most %d", len(r.Plan), MaxPlan)
	case len(r.Label) > MaxLabel:
		what = fmt.Sprintf("label: %d bytes, at most %d", len(r.Label), MaxLabel)
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBadRecord, what)
}

// Generate returns a new random key and its record (ID and Sum set).
func Generate() (key string, r Record) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	key = Prefix + base64.RawURLEncoding.EncodeToString(b[:])
	r.Sum = sha256.Sum256([]byte(key))
	r.ID = hex.EncodeToString(r.Sum[:])[:IDLen]
	return key, r
}

// ValidID reports whether s has the form of a key ID.
func ValidID(s string) bool {
	if len(s) != IDLen {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// wire is a Record as the backends store it: the digest in hex.
type wire struct {
	Sum string `json:"sum"`
	Record
}

// Sum returns the SHA-256 of key: what Lookup takes.
func Sum(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }
