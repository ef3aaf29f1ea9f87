package replay

import (
	"strings"
	"testing"
)

// FuzzParseLine: any line is a request or an error; a request has a
// method, a path starting with '/', and a time.
func FuzzParseLine(f *testing.F) {
	f.Add(genLine(1, false), "")
	f.Add(genLine(2, true), "")
	f.Add(genLine(3, true), "host")
	f.Add(`{"time":1.5e9,"org":"x","method":"GET","path":"/"}`, "org")
	f.Add(`- - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1`, "ident")
	f.Fuzz(func(t *testing.T, line, field string) {
		l, err := ParseLine([]byte(line), Options{TenantField: field})
		if err != nil {
			return
		}
		if l.Method == "" || !strings.HasPrefix(l.Path, "/") || l.Time.IsZero() {
			t.Fatalf("accepted %q as %+v", line, l)
		}
	})
}
