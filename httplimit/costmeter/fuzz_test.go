package costmeter

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/fairgate/fairgate/policy"
)

// FuzzSSE: the streaming scanner reads any bytes, split anywhere into
// writes, as the whole-stream reference does, and never holds more than
// its bound (a small one here, so that events pass it).
func FuzzSSE(f *testing.F) {
	f.Add([]byte(openAIStream), uint16(3), uint16(40))
	f.Add([]byte(bom+"data: {\"usage\":{\"total_tokens\":1}}\r\n\r\n: c\rdata:{\"usage\":\ndata: {\"total_tokens\": 7}}\r\r"), uint16(1), uint16(2))
	f.Add([]byte("data\ndata:\ndata: {\"usage\":{\"total_tokens\":2.5}}\r\n\n"), uint16(0), uint16(9))
	f.Add([]byte("data: {\"usage\":{\"total_tokens\":1},\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}\n\n"), uint16(5), uint16(7))
	const limit = 48
	const path = "usage.total_tokens"
	f.Fuzz(func(t *testing.T, stream []byte, a, b uint16) {
		i := min(int(a), len(stream))
		j := min(i+int(b), len(stream))
		s := &sseScanner{path: path, limit: limit}
		for _, part := range [][]byte{stream[:i], stream[i:j], stream[j:]} {
			s.write(part)
			if s.held() > limit {
				t.Fatalf("holds %d bytes, over %d", s.held(), limit)
			}
		}
		got := refResult{s.cost, s.found}
		if want := refSSE(stream, path, limit); got != want {
			t.Fatalf("split at %d, %d: %v, want %v (the whole stream read at once)", i, j, got, want)
		}
	})
}

// FuzzDecodePath: the count DecodePath leads to is the one the whole
// body decoded gives, for any bytes whose path's last name is written as
// itself.
func FuzzDecodePath(f *testing.F) {
	for _, s := range []string{
		`{"usage": {"total_tokens": 12}}`, `{"total_tokens": 1.5}`, `{"usage": {"total_tokens": 9}, "usage": 1}`,
		`{"u\u0073age": {"total_tokens": 3}}`, `[1]`, `null`, `{"usage": {"total_tokens": -1}}`, `{"usage":{"total_tokens":1e99}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, path := range []string{"usage.total_tokens", "total_tokens"} {
			got, gotOK := policy.JSONCount(DecodePath(data, path), path)
			var v any
			if json.Unmarshal(data, &v) != nil || !bytes.Contains(data, []byte(`"total_tokens"`)) {
				if gotOK {
					t.Fatalf("%s: %d from %q, which is not JSON or lacks the name", path, got, data)
				}
				continue
			}
			if want, wantOK := policy.JSONCount(v, path); got != want || gotOK != wantOK {
				t.Fatalf("%s: %d, %v; the whole body decoded gives %d, %v", path, got, gotOK, want, wantOK)
			}
		}
	})
}
