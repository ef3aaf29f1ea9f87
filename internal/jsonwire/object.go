package jsonwire

// Kind is the type of a member's value.
type Kind uint8

// The kinds of value a simple object holds.
const (
	// String is a string without escapes: Member.Str holds its bytes.
	String Kind = iota + 1
	// Int is an integer without fraction or exponent that fits an int64
	// with room to spare (at most 18 digits): Member.Int holds it.
	Int
)

// Member is one name and value of an object. Name and Str point into the
// bytes read: they are valid while those are.
type Member struct {
	Name []byte
	Kind Kind
	Str  []byte
	Int  int64
}

// Object reads the members of one simple JSON object in turn. The zero
// value is not usable: start with [NewObject].
type Object struct {
	b     []byte
	i     int
	first bool // no member read yet
	end   bool // the closing brace is read
	bad   bool // something outside the simple form was met
}

// NewObject starts reading b, which must hold one object and nothing but
// whitespace after it.
func NewObject(b []byte) Object {
	o := Object{b: b, first: true}
	o.ws()
	if o.i >= len(b) || b[o.i] != '{' {
		o.bad = true
	}
	o.i++
	return o
}

// Next reads the next member. It returns false at the object's end and at
// anything outside the simple form; [Object.Simple] tells which.
func (o *Object) Next() (Member, bool) {
	if o.bad || o.end {
		return Member{}, false
	}
	o.ws()
	if o.i >= len(o.b) {
		return o.fail()
	}
	switch c := o.b[o.i]; {
	case c == '}':
		o.i++
		o.end = true
		return Member{}, false
	case !o.first:
		if c != ',' {
			return o.fail()
		}
		o.i++
		o.ws()
	}
	o.first = false
	var m Member
	var ok bool
	if m.Name, ok = o.str(); !ok {
		return o.fail()
	}
	if o.ws(); o.i >= len(o.b) || o.b[o.i] != ':' {
		return o.fail()
	}
	o.i++
	o.ws()
	if o.i >= len(o.b) {
		return o.fail()
	}
	if o.b[o.i] == '"' {
		m.Kind = String
		m.Str, ok = o.str()
	} else {
		m.Kind = Int
		m.Int, ok = o.integer()
	}
	if !ok {
		return o.fail()
	}
	return m, true
}

// Simple reports whether everything read was in the simple form and, once
// Next has returned false, whether the object ended there with nothing but
// whitespace after it.
func (o *Object) Simple() bool {
	if o.bad {
		return false
	}
	if !o.end {
		return true
	}
	o.ws()
	return o.i == len(o.b)
}

func (o *Object) fail() (Member, bool) {
	o.bad = true
	return Member{}, false
}

func (o *Object) ws() {
	for o.i < len(o.b) {
		switch o.b[o.i] {
		case ' ', '\t', '\n', '\r':
			o.i++
		default:
			return
		}
	}
}

// str reads a string at o.i without its quotes: no escapes and no control
// characters (bytes of 0x80 and above are taken as they are; the caller
// has checked that the input is UTF-8).
func (o *Object) str() ([]byte, bool) {
	if o.i >= len(o.b) || o.b[o.i] != '"' {
		return nil, false
	}
	start := o.i + 1
	for i := start; i < len(o.b); i++ {
		switch c := o.b[i]; {
		case c == '"':
			o.i = i + 1
			return o.b[start:i], true
		case c == '\\' || c < 0x20:
			return nil, false
		}
	}
	return nil, false
}

// integer reads -?(0|[1-9][0-9]*) of at most 18 digits, followed by a
// delimiter.
func (o *Object) integer() (int64, bool) {
	i, neg := o.i, false
	if i < len(o.b) && o.b[i] == '-' {
		neg = true
		i++
	}
	start := i
	var v int64
	for i < len(o.b) && o.b[i] >= '0' && o.b[i] <= '9' {
		v = v*10 + int64(o.b[i]-'0')
		i++
	}
	n := i - start
	switch {
	case n == 0 || n > 18:
		return 0, false
	case n > 1 && o.b[start] == '0':
		return 0, false
	case i < len(o.b) && !delimiter(o.b[i]):
		return 0, false // a fraction, an exponent, or garbage
	}
	o.i = i
	if neg {
		v = -v
	}
	return v, true
}

func delimiter(c byte) bool {
	switch c {
	case ',', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}
