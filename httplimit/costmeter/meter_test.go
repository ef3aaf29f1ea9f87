package costmeter

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// openAIStream is a streamed completion as OpenAI sends it with
// stream_options.include_usage: chunks, the usage in the last one, then
// [DONE].
const openAIStream = "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21}}\n\n" +
	"data: [DONE]\n\n"

func gzipped(s string) string {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	return b.String()
}

// TestMeter: where each kind of answer gives its cost, and where it does
// not.
func TestMeter(t *testing.T) {
	all := policy.Measure{Header: "X-Usage-Tokens", Trailer: "X-Usage-Tokens", JSON: "usage.total_tokens", SSE: "usage.total_tokens"}
	jsonOnly := policy.Measure{JSON: "usage.total_tokens"}
	sseOnly := policy.Measure{SSE: "usage.total_tokens"}
	es := http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}}
	js := http.Header{"Content-Type": {"application/json"}}
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		if h == nil {
			h = http.Header{}
		}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	big := `{"usage": {"total_tokens": 5}, "pad": "` + strings.Repeat("x", MaxBody) + `"}`
	for _, tc := range []struct {
		name    string
		m       policy.Measure
		header  http.Header // at Start
		body    string
		after   http.Header // added at End (trailers)
		want    int64
		wantOK  bool
		chunked int // write the body this many bytes at a time (0: at once)
	}{
		{name: "header", m: all, header: with(js, "X-Usage-Tokens", " 42 "), body: `{}`, want: 42, wantOK: true},
		{name: "header not a count", m: all, header: with(js, "X-Usage-Tokens", "lots"), body: `{}`},
		{name: "header negative", m: all, header: with(js, "X-Usage-Tokens", "-3"), body: `{}`},
		{name: "header huge: the most", m: all, header: with(js, "X-Usage-Tokens", "99999999999999999999999"), want: algo.MaxCount, wantOK: true},
		{name: "trailer with its prefix", m: all, header: js, body: `{}`, after: http.Header{"Trailer:X-Usage-Tokens": {"77"}}, want: 77, wantOK: true},
		{name: "trailer announced", m: all, header: with(js, "Trailer", "X-Other, x-usage-tokens"), after: http.Header{"X-Usage-Tokens": {"78"}}, want: 78, wantOK: true},
		{name: "trailer not announced is the header", m: all, header: with(js, "X-Usage-Tokens", "3"), after: http.Header{"X-Usage-Tokens": {"79"}}, want: 3, wantOK: true},
		{name: "trailer first", m: all, header: with(js, "X-Usage-Tokens", "3"), body: `{"usage":{"total_tokens":4}}`, after: http.Header{"Trailer:X-Usage-Tokens": {"5"}}, want: 5, wantOK: true},
		{name: "body before header", m: all, header: with(js, "X-Usage-Tokens", "3"), body: `{"usage":{"total_tokens":4}}`, want: 4, wantOK: true},
		{name: "json", m: jsonOnly, header: js, body: `{"id": "x", "usage": {"prompt_tokens": 1, "total_tokens": 1234}}`, want: 1234, wantOK: true, chunked: 3},
		{name: "json fraction rounds up", m: jsonOnly, body: `{"usage": {"total_tokens": 2.1}}`, want: 3, wantOK: true},
		{name: "json string", m: jsonOnly, body: `{"usage": {"total_tokens": "9"}}`},
		{name: "json negative", m: jsonOnly, body: `{"usage": {"total_tokens": -9}}`},
		{name: "json huge", m: jsonOnly, body: `{"usage": {"total_tokens": 1e300}}`, want: algo.MaxCount, wantOK: true},
		{name: "json not an object", m: jsonOnly, body: `[{"usage": {"total_tokens": 9}}]`},
		{name: "json broken", m: jsonOnly, body: `{"usage": {"total_tokens": 9}`},
		{name: "json duplicate member: the last", m: jsonOnly, body: `{"usage": {"total_tokens": 9}, "usage": {"total_tokens": 10}}`, want: 10, wantOK: true},
		{name: "json gzip", m: jsonOnly, header: with(js, "Content-Encoding", "gzip"), body: gzipped(`{"usage": {"total_tokens": 55}}`), want: 55, wantOK: true, chunked: 7},
		{name: "json brotli: not read", m: jsonOnly, header: with(js, "Content-Encoding", "br"), body: `{"usage": {"total_tokens": 55}}`},
		{name: "json over the bound", m: jsonOnly, body: big, chunked: 32 << 10},
		{name: "json declared over the bound", m: jsonOnly, header: with(js, "Content-Length", "2000000"), body: `{"usage": {"total_tokens": 5}}`},
		{name: "json gzip inflating over the bound", m: jsonOnly, header: with(js, "Content-Encoding", "gzip"), body: gzipped(big)},
		{name: "sse", m: all, header: es, body: openAIStream, want: 21, wantOK: true, chunked: 5},
		{name: "sse only, any content type", m: sseOnly, body: openAIStream, want: 21, wantOK: true},
		{name: "sse: the last event with the path", m: sseOnly, body: "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2}}\n\ndata: {\"usage\":null}\n\n", want: 2, wantOK: true},
		{name: "sse crlf and cr", m: sseOnly, body: "data: {\"usage\":{\"total_tokens\":1}}\r\n\r\ndata: {\"usage\":{\"total_tokens\":2}}\r\rdata: x\r\n\r\n", want: 2, wantOK: true, chunked: 1},
		{name: "sse data lines joined", m: sseOnly, body: "event: x\nid: 1\n: a comment\ndata: {\"usage\":\ndata:{\"total_tokens\":\ndata: 6}}\n\n", want: 6, wantOK: true},
		{name: "sse data without colon", m: sseOnly, body: "data\ndata: {\"usage\":{\"total_tokens\":6}}\n\n", want: 6, wantOK: true},
		{name: "sse byte order mark", m: sseOnly, body: bom + "data: {\"usage\":{\"total_tokens\":8}}\n\n", want: 8, wantOK: true},
		{name: "sse unfinished event dropped", m: sseOnly, body: "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2}}\n", want: 1, wantOK: true},
		{name: "sse other field names", m: sseOnly, body: "datum: {\"usage\":{\"total_tokens\":1}}\n\nData: {\"usage\":{\"total_tokens\":1}}\n\n"},
		{name: "sse event over the bound skipped", m: sseOnly, body: "data: {\"usage\":{\"total_tokens\":1}}\n\ndata: {\"usage\":{\"total_tokens\":2},\"pad\":\"" + strings.Repeat("y", MaxEvent) + "\"}\n\n", want: 1, wantOK: true, chunked: 4096},
		{name: "sse gzip: not read", m: sseOnly, header: with(es, "Content-Encoding", "gzip"), body: gzipped(openAIStream)},
		{name: "json answer of a measure with both", m: all, header: js, body: `{"usage": {"total_tokens": 31}}`, want: 31, wantOK: true},
		{name: "nothing written", m: all},
	} {
		h := tc.header.Clone()
		if h == nil {
			h = http.Header{}
		}
		mt := New(tc.m)
		mt.Start(h)
		body := []byte(tc.body)
		step := tc.chunked
		if step == 0 {
			step = len(body) + 1
		}
		for len(body) > 0 {
			n := min(step, len(body))
			mt.Write(body[:n])
			body = body[n:]
			if got := mt.held(); got > max(MaxBody, MaxEvent) {
				t.Fatalf("%s: the meter holds %d bytes", tc.name, got)
			}
		}
		for k, vs := range tc.after {
			h[k] = vs
		}
		got, ok := mt.End(h)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: End = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}

// TestSSEAnySplit: an event stream gives the same cost however its bytes
// are split into writes (each split into three parts).
func TestSSEAnySplit(t *testing.T) {
	stream := []byte(bom + "data: {\"usage\":{\"total_tokens\":1}}\r\n\r\n: c\rdata:{\"usage\":\ndata: {\"total_tokens\": 7}}\r\rdata: [DONE]\n\n")
	want := refSSE(stream, "usage.total_tokens", MaxEvent)
	if want != (refResult{7, true}) {
		t.Fatalf("reference: %v, want 7", want)
	}
	for i := 0; i <= len(stream); i++ {
		for j := i; j <= len(stream); j++ {
			s := &sseScanner{path: "usage.total_tokens", limit: MaxEvent}
			s.write(stream[:i])
			s.write(stream[i:j])
			s.write(stream[j:])
			if got := (refResult{s.cost, s.found}); got != want {
				t.Fatalf("split at %d, %d: %v, want %v", i, j, got, want)
			}
		}
	}
}

// TestMeterHoldsAtMostItsBound: 8 MiB of JSON body, or one event of
// 8 MiB, never make the meter hold more than its bound.
func TestMeterHoldsAtMostItsBound(t *testing.T) {
	chunk := bytes.Repeat([]byte("z"), 32<<10)
	for _, tc := range []struct {
		name  string
		m     policy.Measure
		start string
		bound int
	}{
		{"json", policy.Measure{JSON: "usage.total_tokens"}, `{"pad": "`, MaxBody},
		{"sse event", policy.Measure{SSE: "usage.total_tokens"}, `data: {"pad": "`, MaxEvent},
	} {
		mt := New(tc.m)
		mt.Start(http.Header{})
		mt.Write([]byte(tc.start))
		most := 0
		for range (8 << 20) / len(chunk) {
			mt.Write(chunk)
			most = max(most, mt.held())
		}
		if most > tc.bound {
			t.Errorf("%s: held %d bytes, over its bound %d", tc.name, most, tc.bound)
		}
		if _, ok := mt.End(http.Header{}); ok {
			t.Errorf("%s: measured an answer over its bound", tc.name)
		}
	}
}

// TestCount: header and trailer values.
func TestCount(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int64
		ok   bool
	}{
		{"12", 12, true}, {" 12 ", 12, true}, {"+12", 12, true}, {"0", 0, true},
		{"", 0, false}, {"-1", 0, false}, {"1.5", 0, false}, {"0x10", 0, false}, {"1_000", 0, false},
		{"2000000000", algo.MaxCount, true}, {"99999999999999999999", algo.MaxCount, true}, {"-99999999999999999999", 0, false},
	} {
		if got, ok := Count(tc.v); got != tc.want || ok != tc.ok {
			t.Errorf("Count(%q) = %d, %v; want %d, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

// TestIsEventStream: the media type, in any case, with parameters.
func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true, " text/event-stream ;x=y": true,
		"text/event-streams": false, "application/json": false, "": false, "text/event": false,
	} {
		if got := isEventStream(ct); got != want {
			t.Errorf("isEventStream(%q) = %v, want %v", ct, got, want)
		}
	}
}

// refResult is a cost and whether there was one.
type refResult struct {
	cost  int64
	found bool
}

// refSSE is the event stream format read the plain way, the whole stream
// at once: the reference the streaming scanner is held to.
func refSSE(stream []byte, path string, limit int) refResult {
	s := strings.TrimPrefix(string(stream), bom)
	var lines []string
	for {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			break // an unfinished line is no line
		}
		lines = append(lines, s[:i])
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			i++
		}
		s = s[i+1:]
	}
	var r refResult
	var data []string
	for _, line := range lines {
		if line == "" {
			if d := strings.Join(data, "\n"); data != nil && len(d) <= limit {
				if n, ok := policy.JSONCount(DecodePath([]byte(d), path), path); ok {
					r = refResult{n, true}
				}
			}
			data = nil
			continue
		}
		name, value, colon := strings.Cut(line, ":")
		if colon {
			value = strings.TrimPrefix(value, " ")
		}
		if name == "data" {
			data = append(data, value)
		}
	}
	return r
}
