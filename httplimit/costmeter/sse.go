package costmeter

import (
	"bytes"

	"github.com/fairgate/fairgate/policy"
)

// MaxEvent is how many bytes of one server-sent event's data a meter
// holds to parse it: 64 KiB. An event with more data is skipped.
const MaxEvent = 64 << 10

// sseState is where a sseScanner is in the line it reads.
type sseState uint8

const (
	lineStart sseState = iota // nothing of the line read yet
	inName                    // in the field name
	afterData                 // after "data:": one space may follow
	inValue                   // in a data line's value
	inSkip                    // in a line that is not data: skipped to its end
)

// bom is the byte order mark an event stream may start with.
const bom = "\xEF\xBB\xBF"

// sseScanner reads server-sent events as they pass (the WHATWG HTML
// standard's event stream format: lines ended by CRLF, LF or CR, "data"
// fields joined by LF, an event dispatched at a blank line, comments and
// other fields ignored) and keeps the count at path in the JSON data of
// the last event that carries one. Data that is not JSON (such as
// OpenAI's "[DONE]") or lacks the path is passed over; an event whose
// data is over limit is skipped, and an event the stream ends inside
// (without its blank line) is dropped, as the standard says.
type sseScanner struct {
	path  string
	limit int
	data  []byte // the event's data so far
	name  [8]byte
	nlen  int // bytes of the field name in name
	state sseState
	cr    bool // the last byte was a CR: an LF next ends no line
	// hasData: the event has a data field; over: its data passed limit;
	// started: the first line has ended.
	hasData, over, started bool
	cost                   int64
	found                  bool
}

// write reads p, the next bytes of the stream.
func (s *sseScanner) write(p []byte) {
	for len(p) > 0 {
		if s.cr {
			s.cr = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		switch s.state {
		case inValue, inSkip:
			i := lineEnd(p)
			if i < 0 {
				if s.state == inValue {
					s.add(p)
				}
				return
			}
			if s.state == inValue {
				s.add(p[:i])
			}
			s.cr = p[i] == '\r'
			s.endLine()
			p = p[i+1:]
		case afterData:
			if p[0] == ' ' {
				p = p[1:]
			}
			s.state = inValue
		default: // lineStart, inName
			b := p[0]
			p = p[1:]
			switch {
			case b == '\r' || b == '\n':
				s.cr = b == '\r'
				s.endLine()
			case b == ':' && s.state == lineStart: // a comment
				s.state = inSkip
			case b == ':':
				s.state = inSkip
				if s.isData() {
					s.beginData()
					s.state = afterData
				}
			case s.nlen < len(s.name):
				s.name[s.nlen] = b
				s.nlen++
				s.state = inName
			default: // a name longer than "data" can be
				s.state = inSkip
			}
		}
	}
}

// lineEnd returns the index of the first CR or LF in p, or -1.
func lineEnd(p []byte) int {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return bytes.IndexByte(p, '\r')
	}
	if j := bytes.IndexByte(p[:i], '\r'); j >= 0 {
		return j
	}
	return i
}

// isData reports whether the field name read is "data" (after a byte
// order mark on the stream's first line).
func (s *sseScanner) isData() bool {
	n := string(s.name[:s.nlen])
	return n == "data" || !s.started && n == bom+"data"
}

// beginData starts a data field's value: joined to the event's earlier
// data by an LF.
func (s *sseScanner) beginData() {
	if s.hasData {
		s.add([]byte{'\n'})
	}
	s.hasData = true
}

// add appends p to the event's data, up to limit.
func (s *sseScanner) add(p []byte) {
	if s.over {
		return
	}
	var ok bool
	if s.data, ok = appendBounded(s.data, p, s.limit); !ok {
		s.over, s.data = true, s.data[:0]
	}
}

// endLine ends the line read: a blank one dispatches the event; "data"
// alone is a data field with an empty value.
func (s *sseScanner) endLine() {
	switch s.state {
	case lineStart:
		s.dispatch()
	case inName:
		if s.isData() {
			s.beginData()
		}
	}
	s.state, s.nlen, s.started = lineStart, 0, true
}

// dispatch reads the event's data and starts the next event.
func (s *sseScanner) dispatch() {
	if s.hasData && !s.over {
		if n, ok := policy.JSONCount(DecodePath(s.data, s.path), s.path); ok {
			s.cost, s.found = n, true
		}
	}
	s.data, s.hasData, s.over = s.data[:0], false, false
}

// held is how many bytes s holds (its data buffer's capacity).
func (s *sseScanner) held() int { return cap(s.data) }

func (s *sseScanner) end() (int64, bool) {
	s.data = nil
	return s.cost, s.found
}
