package rls

import (
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"strconv"
	"unicode/utf8"
)

// prefixHash takes bytes in order and keeps the first of them, as many as
// its head holds (a buffer of the caller's, on its stack); once more are
// written than head holds, it keeps the SHA-256 of all of them too. A long
// input (a value a client chose) is so hashed in pieces and never copied
// whole, and an ordinary one allocates nothing.
type prefixHash struct {
	head  []byte // head[:n] are the first bytes written; head is never reassigned
	n     int
	spill *spill // nil until the bytes outgrow head
}

// spill is a prefixHash's hash, apart from its head: the hash (an
// interface) is given only what is in scratch, so that the head and the
// caller's strings stay on the stack.
type spill struct {
	h       hash.Hash // every byte written
	scratch []byte
}

// str writes s.
func (p *prefixHash) str(s string) {
	if p.spill == nil {
		if p.n+len(s) <= len(p.head) {
			p.n += copy(p.head[p.n:], s)
			return
		}
		p.start()
	}
	p.n += copy(p.head[p.n:], s)
	for len(s) > 0 {
		k := copy(p.spill.scratch, s)
		p.spill.h.Write(p.spill.scratch[:k])
		s = s[k:]
	}
}

// char writes c.
func (p *prefixHash) char(c byte) {
	if p.spill == nil && p.n < len(p.head) {
		p.head[p.n] = c
		p.n++
		return
	}
	p.str(string(rune(c)))
}

// start makes the hash, and writes the head to it.
func (p *prefixHash) start() {
	sp := &spill{h: sha256.New(), scratch: make([]byte, 4096)}
	sp.h.Write(sp.scratch[:copy(sp.scratch, p.head[:p.n])])
	p.spill = sp
}

// lenPrefixed writes "<len(s)>:<s>".
func (p *prefixHash) lenPrefixed(s string) {
	var n [20]byte
	for _, c := range strconv.AppendInt(n[:0], int64(len(s)), 10) {
		p.char(c)
	}
	p.char(':')
	p.str(s)
}

// sum is the SHA-256 of every byte written.
func (p *prefixHash) sum() [sha256.Size]byte {
	if p.spill == nil {
		return sha256.Sum256(p.head[:p.n])
	}
	var out [sha256.Size]byte
	copy(out[:], p.spill.h.Sum(nil))
	return out
}

// statName is what was written as a statistics key: as it is when it
// fits in head (of MaxStatName bytes); else its first bytes, cut between
// characters, '#' and statHashChars characters of the SHA-256 of the
// whole (base64url): at most MaxStatName bytes.
func (p *prefixHash) statName() string {
	if p.spill == nil {
		return string(p.head[:p.n])
	}
	cut := min(p.n, MaxStatName-1-statHashChars)
	for cut > 0 && cut < p.n && !utf8.RuneStart(p.head[cut]) {
		cut--
	}
	sum := p.sum()
	return string(p.head[:cut]) + "#" + base64.RawURLEncoding.EncodeToString(sum[:statHashChars*3/4])
}
