package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestHelpAndUsageErrors: every command's help (-h, --help, fairgate help
// CMD) exits 0 with its usage on stdout and nothing on stderr; a bad flag
// or argument is one line on stderr saying what is wrong and where the
// help is, exit 2, and nothing on stdout. Before: `serve --help` exited 2
// with "flag: help requested", and simulate printed every flag after each
// error.
func TestHelpAndUsageErrors(t *testing.T) {
	for _, cmd := range commands {
		asks := [][]string{{cmd, "-h"}, {cmd, "--help"}, {"help", cmd}}
		if cmd == "help" {
			asks = [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "help"}}
		}
		for _, args := range asks {
			var out, errb bytes.Buffer
			code := run(context.Background(), args, &out, &errb)
			want := "usage: fairgate " + cmd
			if cmd == "help" {
				want = "Usage:"
			}
			if code != 0 || !strings.Contains(out.String(), want) || errb.Len() > 0 {
				t.Errorf("fairgate %s: exit %d, stdout %.80q, stderr %q; want 0 and %q on stdout alone", strings.Join(args, " "), code, out.String(), errb.String(), want)
			}
		}
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--bogus"}, "fairgate serve: flag provided but not defined: -bogus (see fairgate serve --help)"},
		{[]string{"serve", "--store-timeout", "soon"}, `fairgate serve: store timeout "soon": want a positive duration such as 50ms (see fairgate serve --help)`},
		{[]string{"serve", "--log-level", "loud"}, `fairgate serve: log level "loud" (--log-level): want debug, info, warn or error (see fairgate serve --help)`},
		{[]string{"serve", "--log-format", "xml"}, `fairgate serve: log format "xml" (--log-format): want json or text (see fairgate serve --help)`},
		{[]string{"check-config", "--bogus"}, `fairgate check-config: takes one file and no flags, not ["--bogus"] (see fairgate check-config --help)`},
		{[]string{"simulate", "--bogus"}, "fairgate simulate: flag provided but not defined: -bogus (see fairgate simulate --help)"},
		{[]string{"simulate", "--traffic", "burst 1 at 1s"}, "fairgate simulate: give at least one --policy (see fairgate simulate --help)"},
		{[]string{"simulate", "--policy", "limit=60", "--traffic", "burst 1 at 1s"}, "limit and period are required"},
		{[]string{"simulate", "--policy", "limit=1,period=1s", "--traffic", "whenever"}, "(see fairgate simulate --help)"},
		{[]string{"replay", "--bogus"}, "fairgate replay: flag provided but not defined: -bogus (see fairgate replay --help)"},
		{[]string{"replay"}, "fairgate replay: name at least one access log (see fairgate replay --help)"},
		{[]string{"replay", "--format", "xml", "x.log"}, `fairgate replay: format "xml": want table, csv or json (see fairgate replay --help)`},
		{[]string{"replay", "x.log", "--format", "xml"}, `fairgate replay: format "xml": want table, csv or json (see fairgate replay --help)`},
		{[]string{"simulate", "stray", "--policy", "limit=1,period=1s", "--traffic", "burst 1 at 1s"}, `fairgate simulate: unexpected argument "stray" (see fairgate simulate --help)`},
		{[]string{"simulate", "--policy", "limit=200000,period=1m,burst=20000", "--traffic", "burst 1 at 1s estimate 30000 cost 5"}, `fairgate simulate: policy "limit=200000,period=1m,burst=20000": the request at 1s is estimated at 30000, over the burst 20000: it could never be admitted`},
		{[]string{"simulate", "--policy", "limit=1,period=1s", "--traffic", "burst 1 at 1s estimate 1"}, "an estimate needs the true cost its requests are settled at"},
		{[]string{"simulate", "--policy", "limit=1,period=1s,unit=Tokens", "--traffic", "burst 1 at 1s"}, `unit="Tokens": want lower-case letters`},
		{[]string{"replay", "--estimate-field", "max_tokens", "x.log"}, "fairgate replay: --estimate-field needs --cost-field"},
		{[]string{"replay", "--cost-field", "n", "--estimate-field", "n", "x.log"}, `--estimate-field and --cost-field both name "n"`},
		{[]string{"replay", "--cost-field", "usage..total", "x.log"}, `--cost-field "usage..total": want a key or a dotted path`},
		{[]string{"replay", "--log-format", "common", "--cost-field", "tokens", "x.log"}, `--cost-field "tokens": want bytes (the response size) or last (the line's last field) for the common format`},
		{[]string{"version", "--bogus"}, `fairgate version: takes no arguments, not ["--bogus"] (see fairgate version --help)`},
		{[]string{"help", "frobnicate"}, `fairgate help: unknown command "frobnicate": the commands are serve, check-config, simulate, replay, version, help (see fairgate help)`},
		{[]string{"frobnicate"}, `fairgate: unknown command "frobnicate": the commands are serve, check-config, simulate, replay, version, help (see fairgate help)`},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), c.args, &out, &errb)
		lines := strings.Split(strings.TrimSuffix(errb.String(), "\n"), "\n")
		if code != 2 || out.Len() > 0 || len(lines) != 1 || !strings.Contains(lines[0], c.msg) || !strings.Contains(lines[0], "--help)") && !strings.Contains(lines[0], "(see fairgate help)") {
			t.Errorf("fairgate %q: exit %d, stdout %.80q, stderr %q; want 2 and one line on stderr with %q", c.args, code, out.String(), errb.String(), c.msg)
		}
	}
}

// TestLogFlags: --log-format text and --log-level (and their FAIRGATE_*
// variables) shape serve's logs; a bad variable refuses to start, naming
// it.
func TestLogFlags(t *testing.T) {
	sv := startServe(t, "--listen", "127.0.0.1:0", "--log-format", "text", "--log-level", "warn")
	sv.stop()
	logs := sv.logs.String()
	if !strings.Contains(logs, "level=WARN msg=") || strings.Contains(logs, "level=INFO") || strings.Contains(logs, `"msg"`) {
		t.Errorf("--log-format text --log-level warn: %s", logs)
	}
	t.Setenv("FAIRGATE_LOG_FORMAT", "text")
	t.Setenv("FAIRGATE_LOG_LEVEL", "debug")
	sv = startServe(t, "--listen", "127.0.0.1:0")
	sv.stop()
	if logs := sv.logs.String(); !strings.Contains(logs, `level=INFO msg="policy loaded"`) {
		t.Errorf("FAIRGATE_LOG_FORMAT=text: %s", logs)
	}
	t.Setenv("FAIRGATE_LOG_LEVEL", "verbose")
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `log level "verbose" (FAIRGATE_LOG_LEVEL): want debug, info, warn or error`) {
		t.Errorf("FAIRGATE_LOG_LEVEL=verbose: exit %d, %q", code, errb.String())
	}
	// envoyproxy/ratelimit's LOG_LEVEL, where ours is unset.
	os.Unsetenv("FAIRGATE_LOG_LEVEL")
	t.Setenv("LOG_LEVEL", "loudest")
	errb.Reset()
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `log level "loudest" (LOG_LEVEL)`) {
		t.Errorf("LOG_LEVEL=loudest: exit %d, %q", code, errb.String())
	}
}

// TestFailedStartLogsOnlyItsError: a start that fails once the loops have
// started (its listener cannot open) logs the failure alone: no stray
// "store call failed: context canceled" from a loop stopped by it.
func TestFailedStartLogsOnlyItsError(t *testing.T) {
	for range 5 {
		var out, errb bytes.Buffer
		code := run(context.Background(), []string{"serve", "--listen", "256.0.0.1:99999", "--log-level", "debug"}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "fairgate: serve: listen on 256.0.0.1:99999") {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		if strings.Contains(errb.String(), "context canceled") || strings.Contains(errb.String(), "store call failed") {
			t.Fatalf("a failed start logged a stray store failure: %s", errb.String())
		}
	}
}
