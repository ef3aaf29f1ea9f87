// Package job makes and checks job IDs and lease tokens for the queues of
// package fairq (memory and Redis).
package job

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/oklog/ulid/v2"
)

// NewID returns a new job ID: a ULID (time-ordered, 26 characters).
func NewID(now time.Time) string {
	return ulid.MustNew(ulid.Timestamp(now), rand.Reader).String()
}

// NewToken returns a random lease token.
func NewToken() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id has the form of a job ID (a ULID), so that a
// caller's string is never put into a key unchecked.
func ValidID(id string) bool {
	_, err := ulid.ParseStrict(id)
	return err == nil
}
