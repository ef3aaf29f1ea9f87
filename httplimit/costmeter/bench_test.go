package costmeter

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/policy"
)

// chunkEvent is a streamed completion's chunk as OpenAI sends it, about
// 230 bytes; usage says what its usage member holds.
func chunkEvent(i int, usage string) string {
	return fmt.Sprintf(`data: {"id":"chatcmpl-9xk2Lq7b","object":"chat.completion.chunk","created":1750000000,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_a1b2c3","choices":[{"index":0,"delta":{"content":" word%d"},"logprobs":null,"finish_reason":null}],"usage":%s}`+"\n\n", i, usage)
}

// BenchmarkMeter: bytes a second through a meter, written as a proxy
// writes them, and measured at the end: plain (a header measure: the body
// passes by unread); json (a 64 KiB answer in 4 KiB writes, parsed at the
// end), and json-with-length (its Content-Length declared: one buffer);
// sse (500 chunk events, one write each, the usage in the last); and
// sse-usage-in-every-event (each event parsed).
//
//	go test -run '^$' -bench Meter -benchmem ./httplimit/costmeter/
func BenchmarkMeter(b *testing.B) {
	var stream, every strings.Builder
	for i := range 500 {
		stream.WriteString(chunkEvent(i, "null"))
		every.WriteString(chunkEvent(i, fmt.Sprintf(`{"prompt_tokens":9,"completion_tokens":%d,"total_tokens":%d}`, i, i+9)))
	}
	stream.WriteString(chunkEvent(500, `{"prompt_tokens":9,"completion_tokens":500,"total_tokens":509}`))
	stream.WriteString("data: [DONE]\n\n")
	body := `{"id":"x","choices":[{"message":{"content":"` + strings.Repeat("lorem ipsum ", 64<<10/12) + `"}}],"usage":{"prompt_tokens":9,"completion_tokens":500,"total_tokens":509}}`
	events := func(s string) [][]byte {
		var out [][]byte
		for ev := range strings.SplitAfterSeq(s, "\n\n") {
			if ev != "" {
				out = append(out, []byte(ev))
			}
		}
		return out
	}
	blocks := func(s string, n int) [][]byte {
		var out [][]byte
		for len(s) > 0 {
			k := min(n, len(s))
			out = append(out, []byte(s[:k]))
			s = s[k:]
		}
		return out
	}
	es := http.Header{"Content-Type": {"text/event-stream"}}
	js := http.Header{"Content-Type": {"application/json"}}
	for _, bc := range []struct {
		name   string
		m      policy.Measure
		h      http.Header
		writes [][]byte
		want   int64
	}{
		{"plain", policy.Measure{Header: "X-Usage-Tokens"}, http.Header{"X-Usage-Tokens": {"509"}}, blocks(body, 4096), 509},
		{"json", policy.Measure{JSON: "usage.total_tokens"}, js, blocks(body, 4096), 509},
		{"json-with-length", policy.Measure{JSON: "usage.total_tokens"}, http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(body))}}, blocks(body, 4096), 509},
		{"sse", policy.Measure{SSE: "usage.total_tokens"}, es, events(stream.String()), 509},
		{"sse-usage-in-every-event", policy.Measure{SSE: "usage.total_tokens"}, es, events(every.String()), 508},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			for _, w := range bc.writes {
				n += len(w)
			}
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				mt := New(bc.m)
				mt.Start(bc.h)
				for _, w := range bc.writes {
					mt.Write(w)
				}
				if got, ok := mt.End(bc.h); !ok || got != bc.want {
					b.Fatalf("cost %d, %v; want %d", got, ok, bc.want)
				}
			}
		})
	}
}
