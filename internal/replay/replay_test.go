package replay

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/policy"
)

func examplePolicy(t testing.TB) policy.Policy {
	t.Helper()
	c, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c.Policy
}

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// genLine is the i-th line of a generated log: three tenants (on the
// example's enterprise, team and default free plans) and anonymous logins,
// every 20 ms, in JSON or the combined format.
func genLine(i int, combined bool) string {
	tenants := []string{"acme", "globex", "newco", ""}
	paths := []string{"/v1/search", "/v1/users/7", "/v1/search", "/v1/login"}
	tn, path := tenants[i%4], paths[i%4]
	method := "GET"
	if path == "/v1/login" {
		method = "POST"
	}
	at := t0.Add(time.Duration(i) * 20 * time.Millisecond)
	if combined {
		user := tn
		if user == "" {
			user = "-"
		}
		return fmt.Sprintf(`192.0.2.%d - %s [%s] "%s %s?q=1 HTTP/1.1" 200 512 "-" "curl/8"`, i%7+1, user, at.Format(clfTime), method, path)
	}
	return fmt.Sprintf(`{"time":%q,"tenant":%q,"method":%q,"path":%q,"ip":"192.0.2.%d"}`, at.Format(time.RFC3339Nano), tn, method, path, i%7+1)
}

// TestReplayMatchesDirect: the per-tenant counts of a replay equal those of
// the same requests sent through a limiter directly, in both log formats;
// malformed lines are counted and listed with their line numbers.
func TestReplayMatchesDirect(t *testing.T) {
	const n = 6000 // two minutes of traffic
	for _, combined := range []bool{false, true} {
		t.Run(fmt.Sprint("combined=", combined), func(t *testing.T) {
			var log bytes.Buffer
			for i := range n {
				log.WriteString(genLine(i, combined) + "\n")
				if i == 100 {
					log.WriteString("this is not a log line\n")
				}
				if i == 200 {
					log.WriteString(`{"time":"yesterday","tenant":"acme","method":"GET","path":"/"}` + "\n")
				}
			}
			clock := &Clock{}
			lim, err := NewLimiter(examplePolicy(t), clock)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(context.Background(), lim, clock, []Input{{"access.log", &log}}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			// The same requests, directly.
			dclock := &Clock{}
			direct, _ := NewLimiter(examplePolicy(t), dclock)
			want := map[string][2]int64{}
			for i := range n {
				l, err := ParseLine([]byte(genLine(i, combined)), Options{})
				if err != nil {
					t.Fatal(err)
				}
				dclock.Set(l.Time)
				d, err := direct.Decide(context.Background(), policy.Request{Tenant: l.Tenant, Method: l.Method, Path: l.Path, IP: l.IP})
				if err != nil {
					t.Fatal(err)
				}
				who := l.Tenant
				if who == "" {
					who = "(anonymous)"
				}
				c := want[who]
				c[0]++
				if !d.Allowed {
					c[1]++
				}
				want[who] = c
			}
			for who, c := range want {
				got := rep.Tenants[who]
				if got == nil || got.Requests != c[0] || got.Limited != c[1] {
					t.Errorf("%s: replay %+v, direct requests %d limited %d", who, got, c[0], c[1])
				}
			}
			if rep.Tenants["newco"].Limited == 0 || rep.Tenants["(anonymous)"].Limited == 0 {
				t.Fatalf("the generated log limits nobody: %+v", rep.Tenants)
			}
			// The garbage line and the JSON line with a bad time (the auto
			// format reads a line starting with '{' as JSON in either log).
			const wantBad = 2
			if rep.Malformed != int64(wantBad) || len(rep.Bad) != wantBad || rep.Bad[0].Line != 102 || rep.Bad[0].File != "access.log" {
				t.Fatalf("malformed %d %+v, want %d with the first at access.log:102", rep.Malformed, rep.Bad, wantBad)
			}
			if rep.Lines != n+2 || rep.Requests != n {
				t.Fatalf("lines %d requests %d", rep.Lines, rep.Requests)
			}
		})
	}
}

func TestReports(t *testing.T) {
	var log bytes.Buffer
	for i := range 3000 {
		log.WriteString(genLine(i, false) + "\n")
	}
	clock := &Clock{}
	lim, _ := NewLimiter(examplePolicy(t), clock)
	rep, err := Run(context.Background(), lim, clock, []Input{{"a.log", &log}}, Options{Format: FormatJSON})
	if err != nil {
		t.Fatal(err)
	}
	var tbl, c, j bytes.Buffer
	rep.WriteTable(&tbl, 10)
	if !strings.Contains(tbl.String(), "newco") || !strings.Contains(tbl.String(), "would have been limited") {
		t.Fatalf("table:\n%s", tbl.String())
	}
	rep.WriteCSV(&c)
	rows, err := csv.NewReader(&c).ReadAll()
	if err != nil || len(rows) < 4 || rows[0][0] != "kind" {
		t.Fatalf("csv: %v %v", rows, err)
	}
	rep.WriteJSON(&j)
	var back Report
	if err := json.Unmarshal(j.Bytes(), &back); err != nil || back.Limited != rep.Limited || back.Tenants["newco"].Limited != rep.Tenants["newco"].Limited {
		t.Fatalf("json: %v", err)
	}
}

func TestParseLine(t *testing.T) {
	for _, c := range []struct {
		in, want string
		o        Options
	}{
		{`10.0.0.1 - alice [10/Oct/2000:13:55:36 -0700] "GET /a?x=1 HTTP/1.0" 200 2326`, "alice GET /a 2000-10-10T20:55:36Z", Options{}},
		{`10.0.0.1 bob - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 2326 "-" "ua"`, "bob GET /a 2000-10-10T20:55:36Z", Options{TenantField: "ident"}},
		{`{"time":1764756000.5,"tenant":"t","method":"GET","path":"/x"}`, "t GET /x 2025-12-03T10:00:00.5Z", Options{}},
		{`{"time":"2026-12-03T10:00:00Z","org":"o1","method":"GET","path":"/x"}`, "o1 GET /x 2026-12-03T10:00:00Z", Options{TenantField: "org"}},
	} {
		l, err := ParseLine([]byte(c.in), c.o)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if got := fmt.Sprintf("%s %s %s %s", l.Tenant, l.Method, l.Path, l.Time.UTC().Format(time.RFC3339Nano)); got != c.want {
			t.Errorf("ParseLine(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	for _, in := range []string{
		`10.0.0.1 - alice 10/Oct/2000 "GET / HTTP/1.0"`,
		`10.0.0.1 - alice [10/Oct/2000:13:55:36 -0700] "GET"`,
		`{"time":"2026-12-03T10:00:00Z","method":"GET","path":"x"}`,
		`{"tenant":"t","method":"GET","path":"/x"}`,
		`{"time":"2026-12-03T10:00:00Z","method":"GET","path":"/x","ip":"nope"}`,
	} {
		if _, err := ParseLine([]byte(in), Options{}); err == nil {
			t.Errorf("ParseLine(%s) accepted it", in)
		}
	}
}

// genReader produces n generated JSON log lines without holding them.
type genReader struct {
	i, n int
	buf  []byte
}

func (g *genReader) Read(p []byte) (int, error) {
	for len(g.buf) < len(p) && g.i < g.n {
		g.buf = append(g.buf, genLine(g.i, false)...)
		g.buf = append(g.buf, '\n')
		g.i++
	}
	if len(g.buf) == 0 {
		return 0, io.EOF
	}
	k := copy(p, g.buf)
	g.buf = g.buf[k:]
	return k, nil
}

// BenchmarkReplay: lines per second through the example policy, from a
// generated JSON log read as a stream. 10 million lines take
// 10,000,000 / (lines/s) seconds.
//
//	go test -run '^$' -bench Replay -benchtime 1000000x ./internal/replay
func BenchmarkReplay(b *testing.B) {
	policy := examplePolicy(b)
	clock := &Clock{}
	lim, _ := NewLimiter(policy, clock)
	b.ReportAllocs()
	start := time.Now()
	rep, err := Run(context.Background(), lim, clock, []Input{{"gen", &genReader{n: b.N}}}, Options{Format: FormatJSON})
	if err != nil || rep.Requests != int64(b.N) {
		b.Fatalf("%v: %d of %d", err, rep.Requests, b.N)
	}
	el := time.Since(start)
	b.ReportMetric(float64(b.N)/el.Seconds(), "lines/s")
	b.ReportMetric(1e7/(float64(b.N)/el.Seconds()), "s/10M-lines")
}

// TestShadowAndLongLines: a replay reports what shadow policies would
// have rejected (what one replays a new policy for), counts each policy's
// requests as the requests it took part in (today they always equalled its
// limited ones), and counts a line over 1 MiB as one bad line instead of
// ending the run (today the whole run aborted).
func TestShadowAndLongLines(t *testing.T) {
	policy := policy.Policy{
		DefaultPlan: "free", DefaultClass: "read",
		Plans: map[string]policy.Plan{"free": {Rules: []policy.Rule{{Limit: algo.Limit{Limit: 4, Period: time.Hour}}}}},
		Classes: map[string]policy.Class{
			"read":   {Share: 1},
			"search": {Share: 0.5, Shadow: true},
		},
		Routes: []policy.Route{{Pattern: "GET /v1/search", Class: "search", Cost: 1}},
	}
	var log bytes.Buffer
	for i := range 6 {
		fmt.Fprintf(&log, `{"time":%d,"tenant":"acme","method":"GET","path":"/v1/search"}`+"\n", 1764756000+i)
		if i == 2 {
			log.WriteString(`{"pad":"` + strings.Repeat("x", MaxLine) + `"}` + "\n")
		}
	}
	clock := &Clock{}
	lim, err := NewLimiter(policy, clock)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), lim, clock, []Input{{"a.log", &log}}, Options{Format: FormatJSON})
	if err != nil {
		t.Fatalf("a line over 1 MiB ended the run: %v", err)
	}
	if rep.Malformed != 1 || len(rep.Bad) != 1 || rep.Bad[0].Line != 4 || !strings.Contains(rep.Bad[0].Reason, "over 1 MiB") {
		t.Errorf("malformed %d %+v, want line 4 as the one bad line", rep.Malformed, rep.Bad)
	}
	// 6 requests; the shadow search layer (2 per hour) would have rejected
	// the 3rd and 4th; the tenant layer (4) rejects the 5th and 6th.
	// (shadow limited counts admitted requests only: the 3rd and 4th).
	if rep.Requests != 6 || rep.Limited != 2 || rep.ShadowLimited != 2 {
		t.Fatalf("requests %d limited %d shadow %d, want 6, 2 and 2", rep.Requests, rep.Limited, rep.ShadowLimited)
	}
	search, tenant := rep.Policies["free.search.1h"], rep.Policies["free.tenant.1h"]
	if search == nil || tenant == nil || search.Requests != 6 || search.ShadowLimited != 2 || tenant.Requests != 6 || tenant.Limited != 2 {
		t.Fatalf("policies %+v %+v", search, tenant)
	}
	var tbl bytes.Buffer
	rep.WriteTable(&tbl, 10)
	if !strings.Contains(tbl.String(), "more by shadow policies") {
		t.Errorf("the table does not report shadow policies:\n%s", tbl.String())
	}
}

// TestFormatsAgree: one input, three formats, the same rows with the same
// counts: every tenant in the table too (it left out those with nothing
// limited), the JSON's bad lines in snake_case (they were File, Line,
// Reason), and each policy's requests the requests its layer applies to:
// 20 logins of one address are 20 requests of anonymous.login.1m (the near
// cache made them 6), limited by anonymous.login.per-user alone.
func TestFormatsAgree(t *testing.T) {
	var log bytes.Buffer
	for i := range 20 {
		fmt.Fprintf(&log, `{"time":%d,"method":"POST","path":"/v1/login","ip":"198.51.100.7"}`+"\n", 1764756000+i)
	}
	lines := 20
	for i := range 600 {
		if i%4 != 3 { // no more logins
			log.WriteString(genLine(i, false) + "\n")
			lines++
		}
	}
	fmt.Fprintf(&log, `{"time":%d,"tenant":"quiet","method":"GET","path":"/v1/users/1"}`+"\n", 1764756030)
	log.WriteString("not a log line\n")
	clock := &Clock{}
	lim, err := NewLimiter(examplePolicy(t), clock)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), lim, clock, []Input{{"a.log", &log}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	type counts struct{ requests, limited, shadow string }
	// From the report itself.
	want := map[string]counts{}
	for name, s := range rep.Tenants {
		want["tenant "+name] = counts{fmt.Sprint(s.Requests), fmt.Sprint(s.Limited), fmt.Sprint(s.ShadowLimited)}
	}
	for name, s := range rep.Policies {
		want["policy "+name] = counts{fmt.Sprint(s.Requests), fmt.Sprint(s.Limited), fmt.Sprint(s.ShadowLimited)}
	}
	if c := want["policy anonymous.login.1m"]; c != (counts{"20", "0", "0"}) {
		t.Errorf("anonymous.login.1m: %+v, want 20 requests, none limited", c)
	}
	if c := want["policy anonymous.login.per-user"]; c.requests != "20" || c.limited != "15" {
		t.Errorf("anonymous.login.per-user: %+v, want 20 requests, 15 limited", c)
	}
	if _, ok := want["tenant quiet"]; !ok || rep.Tenants["quiet"].Limited != 0 {
		t.Fatalf("no tenant quiet with nothing limited: %v", want)
	}
	var limitedSum int64
	for _, s := range rep.Policies {
		limitedSum += s.Limited
	}
	if limitedSum != rep.Limited {
		t.Errorf("policies' limited add up to %d, want the total %d", limitedSum, rep.Limited)
	}

	// The table.
	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl, 0); err != nil {
		t.Fatal(err)
	}
	got := map[string]counts{}
	kind := ""
	for _, line := range strings.Split(tbl.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && (f[0] == "tenant" || f[0] == "policy") && f[1] == "requests":
			kind = f[0]
		case len(f) >= 5 && kind != "":
			got[kind+" "+f[0]] = counts{f[1], f[2], f[4]}
		case len(f) == 0:
			kind = ""
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("table rows %v\nwant %v\n%s", got, want, tbl.String())
	}
	// The CSV.
	var c bytes.Buffer
	if err := rep.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&c).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]counts{}
	for _, r := range rows[1:] {
		if r[0] == "out_of_order" { // the quiet tenant's line, a year behind
			if r[2] != fmt.Sprint(rep.OutOfOrder) || rep.OutOfOrder != 1 {
				t.Errorf("CSV out_of_order row %q, want %d (and 1)", r, rep.OutOfOrder)
			}
			continue
		}
		got[r[0]+" "+r[1]] = counts{r[2], r[3], r[4]}
	}
	if !maps.Equal(got, want) {
		t.Errorf("CSV rows %v\nwant %v", got, want)
	}
	// The JSON.
	var j bytes.Buffer
	if err := rep.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Tenants, Policies map[string]map[string]any
		Bad               []map[string]any
	}
	if err := json.Unmarshal(j.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	got = map[string]counts{}
	for k, m := range map[string]map[string]map[string]any{"tenant": back.Tenants, "policy": back.Policies} {
		for name, s := range m {
			got[k+" "+name] = counts{fmt.Sprint(s["requests"]), fmt.Sprint(s["limited"]), fmt.Sprint(s["shadow_limited"])}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("JSON rows %v\nwant %v", got, want)
	}
	if len(back.Bad) != 1 || back.Bad[0]["file"] != "a.log" || back.Bad[0]["line"] != float64(lines+2) || back.Bad[0]["reason"] == nil {
		t.Errorf("JSON bad lines %v, want file, line %d and reason", back.Bad, lines+2)
	}
}

// TestHostileNames: a tenant is whatever the log's user field held (nginx
// fills it from any request's Basic credentials, even a refused one), so
// the table writes a name with a control character quoted and escaped (it
// wrote ESC sequences that clear the screen and newlines that forge rows),
// the CSV writes a name a spreadsheet would run as a formula with a
// leading ' (it wrote =HYPERLINK(…) as it was), and the JSON escapes
// control characters and keeps each name as it is.
func TestHostileNames(t *testing.T) {
	hostile := []string{
		"\x1b[2J\x1b[Hall clear", "evil\nacme\t0\t0", "tab\tbed", "\u202eslo", `"quoted"`,
		"=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)", "\tx", "\rx",
	}
	var log bytes.Buffer
	for i, name := range hostile {
		b, _ := json.Marshal(map[string]any{"time": 1764756000 + i, "tenant": name, "method": "GET", "path": "/v1/search"})
		log.Write(append(b, '\n'))
	}
	log.WriteString(`{"time":1764756100,"tenant":"acme","method":"GET","path":"/v1/search"}` + "\n")
	clock := &Clock{}
	lim, _ := NewLimiter(examplePolicy(t), clock)
	rep, err := Run(context.Background(), lim, clock, []Input{{"a.log", &log}}, Options{})
	if err != nil {
		t.Fatal(err)
	}

	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl, 0); err != nil {
		t.Fatal(err)
	}
	out := tbl.String()
	if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("the table holds %q, not printable, at byte %d:\n%s", out[i:i+1], i, out)
	}
	for _, name := range hostile {
		want := name
		if strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) || !utf8.ValidString(name) || name[0] == '"' {
			want = strconv.Quote(name)
		}
		if !strings.Contains(out, "\n"+want+" ") {
			t.Errorf("the table has no row for %q written as %s:\n%s", name, want, out)
		}
	}
	rows := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "acme ") {
			rows++
		}
	}
	if rows != 1 {
		t.Errorf("%d rows of tenant acme in the table, want 1 (a name forged one):\n%s", rows, out)
	}

	var c bytes.Buffer
	if err := rep.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	records, err := csv.NewReader(&c).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, r := range records[1:] {
		if r[0] == "tenant" {
			names[r[1]] = true
		}
	}
	if i := bytes.IndexFunc(c.Bytes(), func(r rune) bool { return r != '\n' && !unicode.IsPrint(r) }); i >= 0 {
		t.Errorf("the CSV holds %q, not printable, at byte %d (a CSV goes to terminals too)", c.Bytes()[i:i+1], i)
	}
	for _, name := range hostile {
		want := name
		if strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) || !utf8.ValidString(name) || name[0] == '"' {
			want = strconv.Quote(name)
		}
		if strings.ContainsRune("=+-@\t\r", rune(want[0])) {
			want = "'" + want
		}
		if !names[want] {
			t.Errorf("no CSV cell %q for tenant %q (cells %v)", want, name, names)
		}
	}

	var j bytes.Buffer
	if err := rep.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexFunc(j.Bytes(), func(r rune) bool { return r < 0x20 && r != '\n' }); i >= 0 {
		t.Errorf("the JSON holds a raw control character at byte %d", i)
	}
	var back Report
	if err := json.Unmarshal(j.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for _, name := range hostile {
		if back.Tenants[name] == nil {
			t.Errorf("JSON: no tenant %q", name)
		}
	}
}

// replayLogs replays logs (file name, then its lines) through the example
// policy with o.
func replayLogs(t *testing.T, o Options, logs ...[]string) Report {
	t.Helper()
	var inputs []Input
	for i, lines := range logs {
		inputs = append(inputs, Input{fmt.Sprintf("%d.log", i+1), strings.NewReader(strings.Join(lines, "\n") + "\n")})
	}
	clock := &Clock{}
	lim, err := NewLimiter(examplePolicy(t), clock)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), lim, clock, inputs, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// searches are n searches of newco, every step from t0+from.
func searches(n int, from, step time.Duration) []string {
	lines := make([]string, n)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"time":%q,"tenant":"newco","method":"GET","path":"/v1/search"}`, t0.Add(from+time.Duration(i)*step).Format(time.RFC3339Nano))
	}
	return lines
}

// TestOrder: a replay decides in time order whatever the order of the
// lines within the reorder window (60 s by default: nginx writes a line
// when its request ends), merges several files by time, and counts the
// lines further out of order, decided where they stand, in every format.
// Before, the same 60 requests limited 23 ascending and a different number
// reversed, two files were replayed one after the other, and nothing said
// so.
func TestOrder(t *testing.T) {
	asc := searches(60, 0, 500*time.Millisecond)
	want := replayLogs(t, Options{}, asc)
	if want.Limited == 0 || want.OutOfOrder != 0 {
		t.Fatalf("60 searches in 30 s: %d limited, %d out of order; want some limited, none out of order", want.Limited, want.OutOfOrder)
	}
	desc := slices.Clone(asc)
	slices.Reverse(desc)
	if got := replayLogs(t, Options{}, desc); got.Limited != want.Limited || got.OutOfOrder != 0 {
		t.Errorf("the same lines reversed (30 s apart at most): %d limited, %d out of order; want %d and 0", got.Limited, got.OutOfOrder, want.Limited)
	}
	if got := replayLogs(t, Options{ReorderWindow: 10 * time.Second}, desc); got.OutOfOrder != 39 {
		t.Errorf("reversed, a 10 s window: %d lines out of order, want 39 (those over 10 s behind the first)", got.OutOfOrder)
	}
	if got := replayLogs(t, Options{ReorderWindow: -1}, desc); got.OutOfOrder != 59 || got.ReorderWindowMs != 0 {
		t.Errorf("reversed, no window: %d lines out of order (window %d ms), want 59 (0)", got.OutOfOrder, got.ReorderWindowMs)
	}
	// Two files, one line of two each (one per nginx instance): as one.
	var odd, even []string
	for i, l := range asc {
		if i%2 == 0 {
			even = append(even, l)
		} else {
			odd = append(odd, l)
		}
	}
	if got := replayLogs(t, Options{}, even, odd); got.Limited != want.Limited || got.OutOfOrder != 0 || got.Files != 2 {
		t.Errorf("two files of alternate lines: %d limited, %d out of order, %d files; want %d, 0 and 2", got.Limited, got.OutOfOrder, got.Files, want.Limited)
	}
	// Files one after the other in time, given in the other order.
	if got := replayLogs(t, Options{}, asc[30:], asc[:30]); got.Limited != want.Limited {
		t.Errorf("the later file first: %d limited, want %d", got.Limited, want.Limited)
	}

	// A line 2 minutes behind the one before it: decided where it is,
	// counted, and said in each format.
	late := append(searches(3, 5*time.Minute, time.Second), searches(1, 3*time.Minute, 0)...)
	late = append(late, "garbage", searches(1, 6*time.Minute, 0)[0])
	rep := replayLogs(t, Options{}, late)
	if rep.OutOfOrder != 1 || rep.Requests != 5 || rep.Malformed != 1 || rep.Bad[0].Line != 5 {
		t.Fatalf("a line 2 minutes behind: %d out of order, %d requests, %+v bad; want 1, 5 and line 5", rep.OutOfOrder, rep.Requests, rep.Bad)
	}
	var tbl, c, j bytes.Buffer
	rep.WriteTable(&tbl, 0)
	if !strings.Contains(tbl.String(), "1 line out of order by more than 60s") {
		t.Errorf("the table does not say 1 line out of order:\n%s", tbl.String())
	}
	rep.WriteCSV(&c)
	rows, _ := csv.NewReader(&c).ReadAll()
	if last := rows[len(rows)-1]; !slices.Equal(last[:3], []string{"out_of_order", "60s", "1"}) {
		t.Errorf("the CSV's last row %q, want out_of_order,60s,1", last)
	}
	rep.WriteJSON(&j)
	var back struct {
		OutOfOrder      int64 `json:"out_of_order"`
		ReorderWindowMs int64 `json:"reorder_window_ms"`
	}
	if json.Unmarshal(j.Bytes(), &back); back.OutOfOrder != 1 || back.ReorderWindowMs != 60000 {
		t.Errorf("the JSON: %+v, want out_of_order 1, reorder_window_ms 60000", back)
	}
}

// TestHeldBytesBound: the lines held for reordering are bounded in bytes
// too (the second attacker review held hundreds of MB with long lines):
// past the bound the earliest is decided, so reversed lines beyond it
// come out of order, counted, instead of being held.
func TestHeldBytesBound(t *testing.T) {
	desc := searches(60, 0, 500*time.Millisecond)
	slices.Reverse(desc)
	old := maxHeldBytes
	maxHeldBytes = len(desc[0]) * 10 // about ten lines
	defer func() { maxHeldBytes = old }()
	if got := replayLogs(t, Options{}, desc); got.OutOfOrder == 0 || got.Requests != 60 {
		t.Errorf("reversed lines past a 10-line byte bound: %d out of order, %d requests; want some out of order, 60 requests", got.OutOfOrder, got.Requests)
	}
}

// TestUnixSecondsExact: Unix seconds with a fraction are read as the
// decimal they are written in (1796292001.05 was 10:00:01.049999952 in the
// JSON report, through the float).
func TestUnixSecondsExact(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want time.Time
	}{
		{"1796292001.05", time.Unix(1796292001, 50_000_000)},
		{"1796292001", time.Unix(1796292001, 0)},
		{"1796292001.123456789123", time.Unix(1796292001, 123_456_789)},
		{"1796292001.5", time.Unix(1796292001, 500_000_000)},
		{"1.796292001e9", time.Unix(1796292001, 0)},
	} {
		got, err := parseTime(json.RawMessage(tc.raw))
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("parseTime(%s) = %v, %v; want %v", tc.raw, got.Format(time.RFC3339Nano), err, tc.want.UTC().Format(time.RFC3339Nano))
		}
	}
	for _, bad := range []string{"-5", "1e12", "12.x", "abc"} {
		if _, err := parseTime(json.RawMessage(bad)); err == nil {
			t.Errorf("parseTime(%s): no error", bad)
		}
	}
}
