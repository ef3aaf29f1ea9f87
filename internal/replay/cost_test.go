package replay

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/policy"
)

// tokenPolicy is docs/cost.md's config: plan pro at 200,000 tokens a
// minute, burst 20,000 (emission 300 µs), and class completions measured
// in tokens, estimated from max_tokens (default 1000, cap 8000).
const tokenPolicy = `default_plan: pro
default_class: chat
plans:
  pro: {limit: 200000, period: 1m, burst: 20000}
classes:
  chat: {share: 1}
  completions:
    cost:
      unit: tokens
      estimate: {json: max_tokens, default: 1000, cap: 8000}
      measure: {json: usage.total_tokens}
routes:
  - {route: "POST /v1/completions", class: completions}
`

func tokenPolicyOf(t testing.TB) policy.Policy {
	t.Helper()
	c, err := config.Parse("tokens.yaml", []byte(tokenPolicy))
	if err != nil {
		t.Fatal(err)
	}
	return c.Policy
}

// completion is a JSON log line of a completion of tenant at t0 + at: its
// estimate (max_tokens) and true cost (usage.total_tokens) as given,
// left out when nil.
func completion(tenant string, at time.Duration, maxTokens, tokens any) string {
	m := map[string]any{"time": t0.Add(at).Format(time.RFC3339Nano), "tenant": tenant, "method": "POST", "path": "/v1/completions"}
	if maxTokens != nil {
		m["max_tokens"] = maxTokens
	}
	if tokens != nil {
		m["usage"] = map[string]any{"total_tokens": tokens}
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// replayLog replays log through p with o.
func replayLog(t testing.TB, p policy.Policy, log string, o Options) Report {
	t.Helper()
	clock := &Clock{}
	lim, err := NewLimiter(p, clock)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), lim, clock, []Input{{"access.log", strings.NewReader(log)}}, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestReplayCostWorkedExample: docs/cost.md's worked example as an access
// log: a completion estimated 6000 that used 9500; one without
// max_tokens (the default, 1000) that failed (0 tokens); one estimated
// 8000 that used 40,000, which the debt bound stops at 20,000 owed (9500
// not applied); then one more, refused: 49,500 tokens settled in all.
// Without --cost-field the replay is a front that does not settle: each
// request is charged the cap, 8000, and the third is refused already.
func TestReplayCostWorkedExample(t *testing.T) {
	log := strings.Join([]string{
		completion("acme", 0, 6000, 9500),
		completion("acme", 0, nil, 0),
		completion("acme", 0, 8000, 40000),
		completion("acme", 0, 1000, 1000),
	}, "\n")
	rep := replayLog(t, tokenPolicyOf(t), log, Options{CostField: "usage.total_tokens", EstimateField: "max_tokens"})
	want := &Stat{Requests: 4, Limited: 1, FirstLimited: t0, LastLimited: t0, Cost: 49500, MaxDebt: 20000}
	if diff := cmp.Diff(want, rep.Tenants["acme"]); diff != "" {
		t.Errorf("acme (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, rep.Policies["pro.tenant.1m"]); diff != "" {
		t.Errorf("pro.tenant.1m (-want +got):\n%s", diff)
	}
	if rep.Settled != 3 || rep.Unsettled != 0 || rep.Unapplied != 9500 || !cmp.Equal(rep.Units, []string{"tokens"}) {
		t.Errorf("settled %d, unsettled %d, unapplied %d, units %v; want 3, 0, 9500, [tokens]", rep.Settled, rep.Unsettled, rep.Unapplied, rep.Units)
	}
	capped := replayLog(t, tokenPolicyOf(t), log, Options{})
	if s := capped.Tenants["acme"]; s.Limited != 2 || s.Cost != 0 || capped.Settled != 0 {
		t.Errorf("without a cost field: %+v, settled %d; want 2 limited (8000 each from 20,000), nothing settled", s, capped.Settled)
	}
}

// TestReplayCostBudget: which tenants a token budget refuses. Tenant
// heavy's completions use 5000 tokens, light's 200, one a second each,
// on 200,000 tokens a minute (3333 a second): replayed with the logged
// costs, heavy is refused and light never is, and each tenant's counts
// and costs are those of its requests decided and settled through a
// limiter directly. Charged the cap instead (no cost field), light is
// refused too.
func TestReplayCostBudget(t *testing.T) {
	var log strings.Builder
	for i := range 300 {
		at := time.Duration(i) * time.Second
		fmt.Fprintln(&log, completion("heavy", at, nil, 5000))
		fmt.Fprintln(&log, completion("light", at, nil, fmt.Sprint(200))) // as nginx writes a variable
	}
	o := Options{CostField: "usage.total_tokens"}
	rep := replayLog(t, tokenPolicyOf(t), log.String(), o)

	dclock := &Clock{}
	direct, err := NewLimiter(tokenPolicyOf(t), dclock)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]*Stat{}
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		l, err := ParseLine([]byte(line), o)
		if err != nil {
			t.Fatal(err)
		}
		dclock.Set(l.Time)
		d, err := direct.Decide(context.Background(), policy.Request{Tenant: l.Tenant, Method: l.Method, Path: l.Path, Settles: true})
		if err != nil {
			t.Fatal(err)
		}
		s := want[l.Tenant]
		if s == nil {
			s = &Stat{}
			want[l.Tenant] = s
		}
		s.Requests++
		if !d.Allowed {
			s.limitedAt(l.Time)
			continue
		}
		out, err := direct.Settle(context.Background(), &d, l.Cost)
		if err != nil {
			t.Fatal(err)
		}
		s.Cost += l.Cost
		for _, ly := range out.Layers {
			s.MaxDebt = max(s.MaxDebt, -ly.Remaining)
		}
	}
	if diff := cmp.Diff(want, rep.Tenants); diff != "" {
		t.Errorf("replay against direct (-direct +replay):\n%s", diff)
	}
	if h, l := rep.Tenants["heavy"], rep.Tenants["light"]; h.Limited == 0 || l.Limited != 0 || l.Cost != 300*200 {
		t.Errorf("heavy %+v, light %+v: want heavy refused, light never (60,000 tokens)", h, l)
	}
	capped := replayLog(t, tokenPolicyOf(t), log.String(), Options{})
	if capped.Tenants["light"].Limited == 0 {
		t.Errorf("charged the cap 8000 a second, light was never refused: %+v", capped.Tenants["light"])
	}
}

// TestReplayBadCosts: a cost field that is missing or not a count is
// counted and named, never fatal: the request is decided, charged its
// estimate and not settled. A line of a class without a measured cost
// needs none.
func TestReplayBadCosts(t *testing.T) {
	for _, c := range []struct {
		tokens any // nil: no field
		reason string
	}{
		{nil, `cost field "usage.total_tokens": missing`},
		{"", "missing"},
		{"-", "missing"},
		{"lots", `"lots" is not a count`},
		{"0x10", `"0x10" is not a count`},
		{-5, `"-5" is negative`},
		{"-5", `"-5" is negative`},
		{2_000_000_000, `"2000000000" is over 1000000000`},
		{json.RawMessage(`1e400`), `"1e400" is over 1000000000`},
		{json.RawMessage(`-1e400`), `"-1e400" is negative`},
		{json.RawMessage(`99999999999999999999999`), "is over 1000000000"},
		{true, "a JSON boolean is not a count"},
		{map[string]any{"n": 1}, "a JSON object is not a count"},
		{[]any{1}, "a JSON array is not a count"},
		{json.RawMessage(`null`), "missing"},
		{strings.Repeat("9", 5000), `"9999999999999999999999999999999999999999…" is over 1000000000`}, // cut in the reason
	} {
		t.Run(c.reason, func(t *testing.T) {
			log := completion("acme", 0, nil, c.tokens) + "\n" +
				`{"time":"2026-12-03T10:00:01Z","tenant":"acme","method":"GET","path":"/v1/chat"}` + "\n" +
				completion("acme", 2*time.Second, nil, 10)
			rep := replayLog(t, tokenPolicyOf(t), log, Options{CostField: "usage.total_tokens"})
			if rep.Requests != 3 || rep.Malformed != 0 || rep.Settled != 1 || rep.Unsettled != 1 || len(rep.UnsettledLines) != 1 {
				t.Fatalf("requests %d malformed %d settled %d unsettled %d %+v", rep.Requests, rep.Malformed, rep.Settled, rep.Unsettled, rep.UnsettledLines)
			}
			if b := rep.UnsettledLines[0]; b.Line != 1 || !strings.Contains(b.Reason, c.reason) || len(b.Reason) > 200 {
				t.Errorf("unsettled %+v, want line 1 and %q", b, c.reason)
			}
			if s := rep.Tenants["acme"]; s.Cost != 10 {
				t.Errorf("acme's cost %d, want the one settled: 10", s.Cost)
			}
		})
	}
}

// TestCount: a log field's count, as the replay reads a cost and an
// estimate.
func TestCount(t *testing.T) {
	for _, c := range []struct {
		in   any
		want int64
		bad  string
	}{
		{json.Number("0"), 0, ""},
		{json.Number("12"), 12, ""},
		{json.Number("12.1"), 13, ""},
		{json.Number("1e3"), 1000, ""},
		{json.Number("-0"), 0, ""},
		{json.Number("1000000000"), 1_000_000_000, ""},
		{json.Number("1000000000.5"), 0, "is over"},
		{"  42 ", 42, ""},
		{"4 2", 0, "is not a count"},
		{"1.5", 0, "is not a count"}, // a string: digits only
		{12.5, 13, ""},
		{nil, 0, "missing"},
	} {
		n, bad := Count(c.in)
		if n != c.want || !strings.Contains(bad, c.bad) || (c.bad == "") != (bad == "") {
			t.Errorf("Count(%#v) = %d, %q; want %d, %q", c.in, n, bad, c.want, c.bad)
		}
	}
}

// TestParseLineCost: where a line gives its cost and estimate, in JSON
// (a key, a dotted path, a custom tenant field beside it) and in the
// common format (bytes, or the last field, quoted or not).
func TestParseLineCost(t *testing.T) {
	const clf = `10.0.0.1 - alice [10/Oct/2000:13:55:36 -0700] "POST /v1/completions HTTP/1.1" 200 2326`
	for _, c := range []struct {
		line     string
		o        Options
		cost     int64
		bad      string
		estimate int64 // -1: none
	}{
		{`{"time":1,"tenant":"t","method":"GET","path":"/","tokens":7}`, Options{CostField: "tokens"}, 7, "", -1},
		{`{"time":1,"org":"t","method":"GET","path":"/","u":{"n":"8"},"m":3}`, Options{TenantField: "org", CostField: "u.n", EstimateField: "m"}, 8, "", 3},
		{`{"time":1,"tenant":"t","method":"GET","path":"/","u":{"n":8},"m":"x"}`, Options{CostField: "u.n", EstimateField: "m"}, 8, "", -1},
		{`{"time":1,"tenant":"t","method":"GET","path":"/","u":5}`, Options{CostField: "u.n"}, 0, `cost field "u.n": missing`, -1},
		{clf, Options{CostField: "bytes"}, 2326, "", -1},
		{clf + ` "-" "curl/8" 512`, Options{CostField: "last", EstimateField: "bytes"}, 512, "", 2326},
		{clf + ` "-" "curl/8" "77"`, Options{CostField: "last"}, 77, "", -1},
		{clf + ` "-" "curl/8"`, Options{CostField: "last"}, 0, `"curl/8" is not a count`, -1},
		{strings.Replace(clf, "2326", "-", 1), Options{CostField: "bytes"}, 0, "", -1}, // Apache's none
		{clf, Options{CostField: "tokens"}, 0, `cost field "tokens": want bytes or last for the common format`, -1},
	} {
		l, err := ParseLine([]byte(c.line), c.o)
		if err != nil {
			t.Errorf("%s: %v", c.line, err)
			continue
		}
		est := int64(-1)
		if l.HasEstimate {
			est = l.Estimate
		}
		if l.Cost != c.cost || !strings.Contains(l.CostErr, c.bad) || (c.bad == "") != (l.CostErr == "") || est != c.estimate {
			t.Errorf("%s %+v: cost %d %q estimate %d; want %d %q %d", c.line, c.o, l.Cost, l.CostErr, est, c.cost, c.bad, c.estimate)
		}
	}
}

// TestCostFormatsAgree: with a cost field the table, the CSV and the JSON
// give each tenant's and policy's cost and deepest debt alike, and the
// totals of settled, unsettled and unapplied; the CSV's rows are all as
// wide as its header.
func TestCostFormatsAgree(t *testing.T) {
	var log strings.Builder
	for i := range 120 {
		at := time.Duration(i) * 500 * time.Millisecond
		fmt.Fprintln(&log, completion("heavy", at, 8000, 30000+i*100))
		fmt.Fprintln(&log, completion("light", at, 500, 150))
	}
	fmt.Fprintln(&log, completion("light", time.Minute, 500, "n/a"))
	rep := replayLog(t, tokenPolicyOf(t), log.String(), Options{CostField: "usage.total_tokens", EstimateField: "max_tokens"})
	if rep.Tenants["heavy"].MaxDebt == 0 || rep.Unsettled != 1 || rep.Unapplied == 0 {
		t.Fatalf("the log makes no debt: %+v, unsettled %d, unapplied %d", rep.Tenants, rep.Unsettled, rep.Unapplied)
	}
	want := map[string][2]string{}
	for name, s := range rep.Tenants {
		want["tenant "+name] = [2]string{fmt.Sprint(s.Cost), fmt.Sprint(s.MaxDebt)}
	}
	for name, s := range rep.Policies {
		want["policy "+name] = [2]string{fmt.Sprint(s.Cost), fmt.Sprint(s.MaxDebt)}
	}
	totals := fmt.Sprint(rep.Settled, rep.Unsettled, rep.Unapplied)

	var tbl bytes.Buffer
	if err := rep.WriteTable(&tbl, 0); err != nil {
		t.Fatal(err)
	}
	got, kind := map[string][2]string{}, ""
	for _, line := range strings.Split(tbl.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && (f[0] == "tenant" || f[0] == "policy") && f[1] == "requests":
			kind = f[0]
			if !strings.Contains(strings.Join(f, " "), "shadow limited cost max debt first limited") {
				t.Errorf("header %q has no cost and max debt", line)
			}
		case len(f) >= 7 && kind != "":
			got[kind+" "+f[0]] = [2]string{f[5], f[6]}
		case len(f) == 0:
			kind = ""
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("table (-report +table):\n%s\n%s", diff, tbl.String())
	}
	if s := fmt.Sprintf("cost field usage.total_tokens: %d requests of measured classes settled at their logged cost in tokens, %d not settled (their estimate stands), %d units beyond the debt bound not applied", rep.Settled, rep.Unsettled, rep.Unapplied); !strings.Contains(tbl.String(), s) {
		t.Errorf("the table lacks %q:\n%s", s, tbl.String())
	}
	if !strings.Contains(tbl.String(), "requests not settled (first ones):\naccess.log:241: cost field \"usage.total_tokens\": \"n/a\" is not a count") {
		t.Errorf("the table does not list the request not settled:\n%s", tbl.String())
	}

	var c bytes.Buffer
	if err := rep.WriteCSV(&c); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&c).ReadAll() // every row as wide as the header, or an error
	if err != nil {
		t.Fatal(err)
	}
	if h := strings.Join(rows[0], ","); h != "kind,name,requests,limited,shadow_limited,first_limited,last_limited,cost,max_debt" {
		t.Errorf("CSV header %s", h)
	}
	got = map[string][2]string{}
	var csvTotals []string
	for _, r := range rows[1:] {
		switch r[0] {
		case "tenant", "policy":
			got[r[0]+" "+r[1]] = [2]string{r[7], r[8]}
		case "settled", "unsettled", "unapplied":
			if r[1] != "usage.total_tokens" {
				t.Errorf("CSV row %q names the field %q", r, r[1])
			}
			csvTotals = append(csvTotals, r[2])
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CSV (-report +CSV):\n%s", diff)
	}
	if s := strings.Join(csvTotals, " "); s != totals {
		t.Errorf("CSV totals %s, want %s", s, totals)
	}

	var j bytes.Buffer
	if err := rep.WriteJSON(&j); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Tenants, Policies             map[string]map[string]any
		CostField                     string `json:"cost_field"`
		Units                         []string
		Settled, Unsettled, Unapplied int64
		UnsettledLines                []Bad `json:"unsettled_lines"`
	}
	if err := json.Unmarshal(j.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	got = map[string][2]string{}
	for k, m := range map[string]map[string]map[string]any{"tenant": back.Tenants, "policy": back.Policies} {
		for name, s := range m {
			got[k+" "+name] = [2]string{fmt.Sprint(s["cost"]), fmt.Sprint(s["max_debt"])}
		}
	}
	for k, v := range got { // omitted when zero
		got[k] = [2]string{strings.Replace(v[0], "<nil>", "0", 1), strings.Replace(v[1], "<nil>", "0", 1)}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("JSON (-report +JSON):\n%s", diff)
	}
	if s := fmt.Sprint(back.Settled, back.Unsettled, back.Unapplied); s != totals || back.CostField != "usage.total_tokens" || !cmp.Equal(back.Units, []string{"tokens"}) || len(back.UnsettledLines) != 1 {
		t.Errorf("JSON totals %s %q %v %v, want %s", s, back.CostField, back.Units, back.UnsettledLines, totals)
	}
	// Without a cost field nothing of this is written.
	plain := replayLog(t, tokenPolicyOf(t), log.String(), Options{})
	var pj, pc bytes.Buffer
	plain.WriteJSON(&pj)
	plain.WriteCSV(&pc)
	if bytes.Contains(pj.Bytes(), []byte(`"cost`)) || bytes.Contains(pj.Bytes(), []byte("settled")) || strings.Contains(pc.String(), "cost") {
		t.Errorf("a replay without a cost field writes costs:\n%s\n%s", pj.String(), pc.String())
	}
}
