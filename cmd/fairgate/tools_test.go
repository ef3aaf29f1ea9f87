package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSimulateCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "bucket.svg")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"simulate",
		"--policy", "limit=60,period=1m,burst=60,algorithm=token_bucket",
		"--policy", "limit=60,period=1m,algorithm=fixed_window",
		"--traffic", "burst 60 at 1s; burst 25 at 30s; steady 0.5/s from 40s to 90s",
		"--out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "110 admitted, 0 rejected") {
		t.Fatalf("table:\n%s", stdout.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil {
		t.Fatalf("the SVG does not parse: %v", err)
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"simulate", "--policy", "limit=60", "--traffic", "burst 1 at 1s"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "limit and period are required") {
		t.Fatalf("bad policy: %d %s", code, stderr.String())
	}
}

// TestSimulateConcurrency: a concurrency layer over time, beside a rate
// limit, in the table and the chart; without holds it is refused by name.
func TestSimulateConcurrency(t *testing.T) {
	out := filepath.Join(t.TempDir(), "conc.svg")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"simulate",
		"--policy", "concurrency=4",
		"--policy", "limit=100,period=1m,concurrency=4",
		"--traffic", "steady 10/s from 0s to 10s hold 300ms; burst 6 at 5s hold 2s",
		"--out", out}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"policy concurrency=4 (4 in flight):", "in flight after", "no slot"} {
		if !strings.Contains(stdout.String(), want) {
			t.Fatalf("the table lacks %q:\n%s", want, stdout.String())
		}
	}
	if b, err := os.ReadFile(out); err != nil || !bytes.Contains(b, []byte(`class="in-flight"`)) {
		t.Fatalf("the chart has no in-flight line (%v)", err)
	}
	stderr.Reset()
	if code := run(t.Context(), []string{"simulate", "--policy", "concurrency=4", "--traffic", "burst 5 at 1s"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "no request is ever in flight: give --hold") {
		t.Fatalf("without holds: %d %s", code, stderr.String())
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"simulate", "--policy", "concurrency=2", "--hold", "1s", "--traffic", "burst 5 at 1s"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "2 admitted, 3 rejected") {
		t.Fatalf("with --hold: %d %s", code, stdout.String())
	}
}

func TestReplayCommand(t *testing.T) {
	dir := t.TempDir()
	var log strings.Builder
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for i := range 400 {
		fmt.Fprintf(&log, `{"time":%q,"tenant":"newco","method":"GET","path":"/v1/search"}`+"\n", at.Add(time.Duration(i)*10*time.Millisecond).Format(time.RFC3339Nano))
	}
	log.WriteString("garbage\n")
	path := filepath.Join(dir, "access.log")
	os.WriteFile(path, []byte(log.String()), 0o600)
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"replay", "--format", "json", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var rep struct {
		Requests, Limited, Malformed int64
		Bad                          []struct{ Line int64 }
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requests != 400 || rep.Limited == 0 || rep.Malformed != 1 || rep.Bad[0].Line != 401 {
		t.Fatalf("report %+v", rep)
	}
	if strings.Contains(stderr.String(), "[#") {
		t.Fatal("a progress bar was drawn on a stderr that is not a terminal")
	}
	// Without --config the report says, on stderr, which config it used.
	if !strings.Contains(stderr.String(), "no --config given: replaying through the embedded example config") {
		t.Errorf("replay without --config: stderr %q, want a note naming the config used", stderr.String())
	}
}

// TestReplayFlagsAfterFiles: flags may follow the logs, as a new user
// types them (`replay access.log --format csv` failed with "open
// --format: no such file or directory"); after "--" a name starting with
// '-' is a log.
func TestReplayFlagsAfterFiles(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	line := `{"time":"2026-12-03T10:00:00Z","tenant":"newco","method":"GET","path":"/v1/search"}` + "\n"
	for _, name := range []string{"access.log", "-odd.log"} {
		if err := os.WriteFile(name, []byte(line), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"replay", "access.log", "--format", "csv"},
		{"replay", "access.log", "--format=csv", "--top", "3"},
		{"replay", "--format", "csv", "access.log"},
		{"replay", "--format", "csv", "--", "-odd.log"},
		{"replay", "access.log", "--format", "csv", "--", "-odd.log"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "kind,name,requests") {
			t.Errorf("fairgate %s: exit %d, stdout %q, stderr %q; want the CSV report", strings.Join(args[1:], " "), code, stdout.String(), stderr.String())
		}
	}
}

// TestReplayReorderWindow: --reorder-window sets how far back a line may
// be and still be decided in time order; 0 keeps file order and the table
// counts each line behind the one before it.
func TestReplayReorderWindow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	var log strings.Builder
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for i := range 10 {
		fmt.Fprintf(&log, `{"time":%q,"tenant":"newco","method":"GET","path":"/v1/search"}`+"\n", at.Add(time.Duration(10-i)*time.Second).Format(time.RFC3339))
	}
	os.WriteFile(path, []byte(log.String()), 0o600)
	for _, c := range []struct {
		window, want string
	}{
		{"60s", "10 lines: 10 requests"},
		{"0", "9 lines out of order by more than 0s"},
		{"5s", "4 lines out of order by more than 5s"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(t.Context(), []string{"replay", path, "--reorder-window", c.window}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), c.want) {
			t.Errorf("--reorder-window %s: exit %d, %s%s; want %q", c.window, code, stdout.String(), stderr.String(), c.want)
		}
		if c.window == "60s" && strings.Contains(stdout.String(), "out of order") {
			t.Errorf("--reorder-window 60s, lines 10 s apart at most: %s", stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"replay", "--reorder-window", "-1s", path}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "reorder window -1s: want 0 or more") {
		t.Errorf("--reorder-window -1s: exit %d, %s", code, stderr.String())
	}
}

// TestSimulateMeasured: a measured cost through the command: --steps
// lists docs/cost.md's worked example in the policy's unit, the table
// shows the debt, and the chart draws it and the settlements.
func TestSimulateMeasured(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tokens.svg")
	var stdout, stderr bytes.Buffer
	traffic := "burst 1 at 0s estimate 6000 cost 9500; burst 1 at 0s estimate 1000 cost 0; burst 1 at 0s estimate 8000 cost 40000; burst 1 at 0s estimate 1000 cost 1000"
	if code := run(t.Context(), []string{"simulate", "--steps", "--policy", "limit=200000,period=1m,burst=20000,unit=tokens", "--traffic", traffic, "--out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"remaining tokens", "+22500", "-20000", "6.3s", "lowest remaining -20000 (a debt)"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("the steps lack %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b, new(struct{})); err != nil || !bytes.Contains(b, []byte(`class="debt"`)) || bytes.Count(b, []byte(`class="settled"`)) != 3 {
		t.Fatalf("the chart draws no debt or not the 3 settlements (%v)", err)
	}
	stdout.Reset()
	if code := run(t.Context(), []string{"simulate", "--seed", "7", "--policy", "limit=200000,period=1m,burst=20000,unit=tokens", "--traffic", "steady 10/s from 0s to 10s estimate 1000 cost 500..4000"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	first := stdout.String()
	stdout.Reset()
	run(t.Context(), []string{"simulate", "--seed", "7", "--policy", "limit=200000,period=1m,burst=20000,unit=tokens", "--traffic", "steady 10/s from 0s to 10s estimate 1000 cost 500..4000"}, &stdout, &stderr)
	if stdout.String() != first || !strings.Contains(first, "remaining tokens after") {
		t.Fatalf("one seed, two tables:\n%s\n%s", first, stdout.String())
	}
}

// TestReplayCostField: --cost-field through the command, with a config
// of a measured class: the CSV carries each tenant's cost and deepest
// debt and the totals; a line without a cost is counted, not fatal.
func TestReplayCostField(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tokens.yaml")
	os.WriteFile(cfg, []byte(`default_plan: pro
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
`), 0o600)
	var log strings.Builder
	for _, l := range []string{`"max_tokens":6000,"usage":{"total_tokens":9500}`, `"usage":{"total_tokens":"0"}`, `"max_tokens":8000,"usage":{"total_tokens":40000}`, `"max_tokens":1000,"usage":{"total_tokens":1000}`, `"usage":{"total_tokens":"lots"}`} {
		fmt.Fprintf(&log, `{"time":"2026-12-03T10:00:00Z","tenant":"acme","method":"POST","path":"/v1/completions",%s}`+"\n", l)
	}
	path := filepath.Join(dir, "access.log")
	os.WriteFile(path, []byte(log.String()), 0o600)
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"replay", "--config", cfg, "--format", "csv", "--cost-field", "usage.total_tokens", "--estimate-field", "max_tokens", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := `kind,name,requests,limited,shadow_limited,first_limited,last_limited,cost,max_debt
tenant,acme,5,2,0,2026-12-03T10:00:00Z,2026-12-03T10:00:00Z,49500,20000
policy,pro.tenant.1m,5,2,0,2026-12-03T10:00:00Z,2026-12-03T10:00:00Z,49500,20000
out_of_order,60s,0,,,,,,
settled,usage.total_tokens,3,,,,,,
unsettled,usage.total_tokens,0,,,,,,
unapplied,usage.total_tokens,9500,,,,,,
`
	if stdout.String() != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", stdout.String(), want)
	}
}
