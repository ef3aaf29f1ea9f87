package costmeter

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// Meter reads a measured cost from one answer as it passes: [Meter.Start]
// with the answer's header, [Meter.Write] with each part of its body as
// it is sent, [Meter.End] with the header map once the answer has ended
// (its trailers). Its zero value measures nothing; make one with [New].
type Meter struct {
	m       policy.Measure
	started bool
	// header is the header's count; trailer reports that the trailer
	// was announced in the header's Trailer field.
	header    int64
	hasHeader bool
	trailer   bool
	body      scanner
}

// scanner reads a body as it passes.
type scanner interface {
	write(p []byte)
	end() (int64, bool)
	held() int
}

// New returns a meter that reads the cost where m says it is.
func New(m policy.Measure) *Meter { return &Meter{m: m} }

// Start reads the answer's header h, as it is when the status is sent:
// the count in the measure's header; whether the trailer is announced;
// and how the body is read, by its Content-Type and Content-Encoding: as
// server-sent events when the measure names an sse path and the body is
// text/event-stream (or the measure names no json path), else as JSON
// when it names a json path. An encoded event stream, or a JSON body in
// a coding other than gzip, is not read. Calls after the first do
// nothing.
func (mt *Meter) Start(h http.Header) {
	if mt.started {
		return
	}
	mt.started = true
	m := &mt.m
	if m.Header != "" {
		mt.header, mt.hasHeader = Count(h.Get(m.Header))
	}
	if m.Trailer != "" {
		mt.trailer = announced(h.Values("Trailer"), m.Trailer)
	}
	coding := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding")))
	plain := coding == "" || coding == "identity"
	switch {
	case m.SSE != "" && (m.JSON == "" || isEventStream(h.Get("Content-Type"))):
		if plain {
			mt.body = &sseScanner{path: m.SSE, limit: MaxEvent}
		}
	case m.JSON != "":
		gz := coding == "gzip" || coding == "x-gzip"
		if !plain && !gz {
			break
		}
		b := &jsonBody{path: m.JSON, limit: MaxBody, gzip: gz}
		if n, err := strconv.ParseInt(h.Get("Content-Length"), 10, 64); err == nil {
			if n > MaxBody {
				b.over = true // it cannot fit: nothing is copied
			} else {
				b.size = n
			}
		}
		mt.body = b
	}
}

// Write reads p, the next bytes of the body as sent. It always returns
// len(p), nil.
func (mt *Meter) Write(p []byte) (int, error) {
	if mt.body != nil {
		mt.body.write(p)
	}
	return len(p), nil
}

// End returns the answer's cost, h being its header map after it ended
// (a trailer is there: under its own name when the header announced it,
// else under [http.TrailerPrefix] and its name, as net/http sends them
// and httputil.ReverseProxy sets them): the trailer's count, else the
// body's, else the header's; ok is false when none of the places the
// measure names holds a count. End releases the body's bytes; call it
// once.
func (mt *Meter) End(h http.Header) (cost int64, ok bool) {
	if !mt.started {
		mt.Start(h)
	}
	if name := mt.m.Trailer; name != "" {
		if n, ok := Count(trailerValue(h, name, mt.trailer)); ok {
			return n, true
		}
	}
	if mt.body != nil {
		if n, ok := mt.body.end(); ok {
			return n, true
		}
	}
	return mt.header, mt.hasHeader
}

// held is how many bytes the meter holds for the body.
func (mt *Meter) held() int {
	if mt.body == nil {
		return 0
	}
	return mt.body.held()
}

// Count reads a header or trailer value as a count: a decimal integer,
// surrounding spaces allowed, at most algo.MaxCount (a larger one reads
// as MaxCount); ok is false for anything else (empty, negative, not a
// number).
func Count(v string) (n int64, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" || v[0] == '-' {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err == nil:
		return min(n, algo.MaxCount), true
	case errors.Is(err, strconv.ErrRange):
		return algo.MaxCount, true
	}
	return 0, false
}

// announced reports whether the Trailer field values vs name trailer.
func announced(vs []string, trailer string) bool {
	for _, v := range vs {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), trailer) {
				return true
			}
		}
	}
	return false
}

// trailerValue returns trailer name's value in h: under
// http.TrailerPrefix and its name, else under its name when it was
// announced.
func trailerValue(h http.Header, name string, announced bool) string {
	if v := h.Get(http.TrailerPrefix + http.CanonicalHeaderKey(name)); v != "" {
		return v
	}
	for k, vs := range h {
		if len(vs) > 0 && len(k) > len(http.TrailerPrefix) && strings.HasPrefix(k, http.TrailerPrefix) && strings.EqualFold(k[len(http.TrailerPrefix):], name) {
			return vs[0]
		}
	}
	if announced {
		return h.Get(name)
	}
	return ""
}

// isEventStream reports whether the Content-Type ct is text/event-stream
// (any case, parameters allowed).
func isEventStream(ct string) bool {
	const es = "text/event-stream"
	ct = strings.TrimSpace(ct)
	if len(ct) < len(es) || !strings.EqualFold(ct[:len(es)], es) {
		return false
	}
	rest := strings.TrimLeft(ct[len(es):], " \t")
	return rest == "" || rest[0] == ';'
}
