package app

import (
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// clearServeEnv unsets, for the test, every variable ParseServe reads that
// a case might set.
func clearServeEnv(t *testing.T) {
	t.Helper()
	for _, k := range os.Environ() {
		name, _, _ := strings.Cut(k, "=")
		if strings.HasPrefix(name, "FAIRGATE_") || strings.HasPrefix(name, "OTEL_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
}

// TestServeFlagModes: every flag that acts only in some modes, given in
// a mode where it does nothing, on the command line or through its
// environment variable, stops the start with a line naming it and why;
// in a mode where it acts, it is taken. The listener addresses the
// container image sets for every mode are only warned about when they
// come from the environment.
func TestServeFlagModes(t *testing.T) {
	const decision, proxy = "", "--upstream=http://127.0.0.1:9"
	otlp := map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}
	admin := map[string]string{"FAIRGATE_ADMIN_TOKEN": "admin-token-for-the-test-01"}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		err  string // "" for a start; else what the error says
		warn string // what a warning says, if any
	}{
		{name: "upstream-timeout, decision service", args: []string{"--upstream-timeout=5s"}, err: "--upstream-timeout does nothing here: it bounds the wait for the proxied upstream"},
		{name: "upstream-timeout, proxy", args: []string{proxy, "--upstream-timeout=5s"}},
		{name: "FAIRGATE_UPSTREAM_TIMEOUT, decision service", env: map[string]string{"FAIRGATE_UPSTREAM_TIMEOUT": "5s"}, err: "FAIRGATE_UPSTREAM_TIMEOUT (--upstream-timeout) does nothing here"},
		{name: "internal-listen, decision service", args: []string{"--internal-listen=127.0.0.1:9"}, err: "--internal-listen does nothing here: the internal listener exists only with --upstream"},
		{name: "internal-listen, proxy", args: []string{proxy, "--internal-listen=127.0.0.1:9"}},
		{name: "FAIRGATE_INTERNAL_LISTEN, decision service (the image's)", env: map[string]string{"FAIRGATE_INTERNAL_LISTEN": "0.0.0.0:8090"}, warn: "FAIRGATE_INTERNAL_LISTEN (--internal-listen) is set but unused"},
		{name: "admin-listen, no admin token", args: []string{"--admin-listen=127.0.0.1:9"}, err: "--admin-listen does nothing here: the admin API starts only with an admin token"},
		{name: "admin-listen, admin token", args: []string{"--admin-listen=127.0.0.1:9"}, env: admin},
		{name: "FAIRGATE_ADMIN_LISTEN, no admin token (the image's)", env: map[string]string{"FAIRGATE_ADMIN_LISTEN": "0.0.0.0:8081"}, warn: "FAIRGATE_ADMIN_LISTEN (--admin-listen) is set but unused"},
		{name: "admin-tls-cert-file, no admin token", args: []string{"--admin-tls-cert-file=/c.pem", "--admin-tls-key-file=/k.pem"}, err: "--admin-tls-cert-file does nothing here"},
		{name: "FAIRGATE_ADMIN_TLS_KEY_FILE, no admin token", env: map[string]string{"FAIRGATE_ADMIN_TLS_KEY_FILE": "/k.pem"}, err: "FAIRGATE_ADMIN_TLS_KEY_FILE (--admin-tls-key-file) does nothing here"},
		{name: "admin-tls-cert-file, admin token", args: []string{"--admin-tls-cert-file=/c.pem", "--admin-tls-key-file=/k.pem"}, env: admin},
		{name: "grpc-client-ca-file, no gRPC", args: []string{"--grpc-client-ca-file=/ca.pem"}, err: "--grpc-client-ca-file does nothing here: it is the gRPC listener's, which is served only with --grpc-listen"},
		{name: "grpc-tls-cert-file, no gRPC", args: []string{"--grpc-tls-cert-file=/c.pem"}, err: "--grpc-tls-cert-file does nothing here"},
		{name: "FAIRGATE_GRPC_TLS_KEY_FILE, no gRPC", env: map[string]string{"FAIRGATE_GRPC_TLS_KEY_FILE": "/k.pem"}, err: "FAIRGATE_GRPC_TLS_KEY_FILE (--grpc-tls-key-file) does nothing here"},
		{name: "grpc TLS, gRPC", args: []string{"--grpc-listen=127.0.0.1:9", "--grpc-tls-cert-file=/c.pem", "--grpc-tls-key-file=/k.pem", "--grpc-client-ca-file=/ca.pem"}},
		{name: "grpc TLS, gRPC and a proxy", args: []string{proxy, "--grpc-listen=127.0.0.1:9", "--grpc-client-ca-file=/ca.pem"}},
		{name: "config-poll, the embedded example", args: []string{"--config-poll=5s"}, err: "--config-poll does nothing here: only a config file"},
		{name: "FAIRGATE_CONFIG_POLL, the embedded example", env: map[string]string{"FAIRGATE_CONFIG_POLL": "5s"}, err: "FAIRGATE_CONFIG_POLL (--config-poll) does nothing here"},
		{name: "config-poll, a config file", args: []string{"--config=/etc/fairgate.yaml", "--config-poll=5s"}},
		{name: "trace-tenants, tracing off", args: []string{"--trace-tenants"}, err: "--trace-tenants does nothing here: tracing is off"},
		{name: "FAIRGATE_TRACE_TENANTS, tracing off", env: map[string]string{"FAIRGATE_TRACE_TENANTS": "true"}, err: "FAIRGATE_TRACE_TENANTS (--trace-tenants) does nothing here"},
		{name: "trace-tenants=false, tracing off", args: []string{"--trace-tenants=false"}},
		{name: "trace-tenants, tracing on", args: []string{"--trace-tenants"}, env: otlp},
		{name: "trust-trace-context, tracing off", args: []string{proxy, "--trust-trace-context"}, err: "--trust-trace-context does nothing here: tracing is off"},
		{name: "FAIRGATE_TRUST_TRACE_CONTEXT, tracing off", env: map[string]string{"FAIRGATE_TRUST_TRACE_CONTEXT": "true"}, err: "FAIRGATE_TRUST_TRACE_CONTEXT (--trust-trace-context) does nothing here"},
		{name: "trust-trace-context, tracing on", args: []string{"--trust-trace-context"}, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "every refusal, one line each", args: []string{"--upstream-timeout=5s", "--config-poll=5s", "--grpc-client-ca-file=/ca.pem"},
			err: "--upstream-timeout does nothing here: it bounds the wait for the proxied upstream's response headers, and needs --upstream\nserve: --grpc-client-ca-file does nothing here"},
		// The flags of every mode are never refused.
		{name: "store-timeout, the memory store", args: []string{"--store-timeout=1s"}, err: "--store-timeout does nothing here: it bounds each call to a shared store"},
		{name: "store-timeout, Redis", args: []string{"--store=redis://127.0.0.1:9", "--store-timeout=1s"}},
		{name: "store-timeout, a per-second Redis", args: []string{"--per-second-store=redis://127.0.0.1:9", "--store-timeout=1s"}},
		{name: "FAIRGATE_STORE_TIMEOUT, the memory store (the chart's)", env: map[string]string{"FAIRGATE_STORE_TIMEOUT": "100ms"}, warn: "FAIRGATE_STORE_TIMEOUT (--store-timeout) is set but unused"},
		{name: "ready-requires-store, the memory store", args: []string{"--ready-requires-store"}, err: "--ready-requires-store does nothing here: it makes /readyz follow a shared store, and needs a Redis --store"},
		{name: "FAIRGATE_READY_REQUIRES_STORE, the memory store", env: map[string]string{"FAIRGATE_READY_REQUIRES_STORE": "true"}, err: "FAIRGATE_READY_REQUIRES_STORE (--ready-requires-store) does nothing here"},
		{name: "FAIRGATE_READY_REQUIRES_STORE=false, the memory store", env: map[string]string{"FAIRGATE_READY_REQUIRES_STORE": "false"}},
		{name: "ready-requires-store, Redis", args: []string{"--store=redis://127.0.0.1:9", "--ready-requires-store"}},
		{name: "FAIRGATE_READY_REQUIRES_STORE, Redis", args: []string{"--store=redis://127.0.0.1:9"}, env: map[string]string{"FAIRGATE_READY_REQUIRES_STORE": "true"}},
		{name: "every-mode flags, decision service", args: []string{"--listen=127.0.0.1:9", "--store=memory://", "--control-timeout=1s", "--drain=0", "--shutdown-grace=1s", "--read-timeout=1s"},
			env: map[string]string{"FAIRGATE_INTERNAL_TOKEN": "internal-token-for-the-test", "FAIRGATE_WORKER_TOKEN": "worker-token-for-the-test-1"}},
		// The internal listener's TLS acts in both modes: without an
		// upstream it is --listen's (TestServeInternalTLSOnListen).
		{name: "internal TLS, decision service", args: []string{"--internal-tls-cert-file=/c.pem", "--internal-tls-key-file=/k.pem", "--internal-client-ca-file=/ca.pem"}},
		{name: "FAIRGATE_INTERNAL_CLIENT_CA_FILE, decision service with a certificate", args: []string{"--tls-cert-file=/c.pem", "--tls-key-file=/k.pem"}, env: map[string]string{"FAIRGATE_INTERNAL_CLIENT_CA_FILE": "/ca.pem"}},
		{name: "internal-client-ca-file, decision service without a certificate", args: []string{"--internal-client-ca-file=/ca.pem"}, err: "--internal-client-ca-file needs a certificate for --listen"},
		{name: "two certificates for --listen, decision service", args: []string{"--tls-cert-file=/a.pem", "--tls-key-file=/a.key", "--internal-tls-cert-file=/c.pem", "--internal-tls-key-file=/k.pem"}, err: "both name --listen's certificate"},
		{name: "two certificates, proxy", args: []string{proxy, "--tls-cert-file=/a.pem", "--tls-key-file=/a.key", "--internal-tls-cert-file=/c.pem", "--internal-tls-key-file=/k.pem"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearServeEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			args := []string{}
			for _, a := range c.args {
				if a != "" {
					args = append(args, a)
				}
			}
			got, err := ParseServe(args, io.Discard)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one saying %q", err, c.err)
			case c.err != "":
				for _, line := range strings.Split(err.Error(), "\n") {
					if !strings.HasPrefix(line, "serve: ") {
						t.Errorf("line %q: want one line per problem, each starting serve:", line)
					}
				}
				return
			}
			warned := strings.Join(got.Warnings, "\n")
			if c.warn == "" && warned != "" || !strings.Contains(warned, c.warn) {
				t.Errorf("warnings %q, want %q", warned, c.warn)
			}
		})
	}
}

// TestInternalTLSIsListensWithoutUpstream: without --upstream the internal
// listener's TLS files, and its client CA, are --listen's; with one they
// stay the internal listener's.
func TestInternalTLSIsListensWithoutUpstream(t *testing.T) {
	clearServeEnv(t)
	c, err := ParseServe([]string{"--internal-tls-cert-file=/c.pem", "--internal-tls-key-file=/k.pem", "--internal-client-ca-file=/ca.pem"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (TLSFiles{Cert: "/c.pem", Key: "/k.pem", ClientCA: "/ca.pem"}); c.TLS != want || c.InternalTLS != (TLSFiles{}) || c.AdminTLS.on() {
		t.Errorf("decision service: --listen %+v, internal %+v, admin %+v; want --listen %+v", c.TLS, c.InternalTLS, c.AdminTLS, want)
	}
	c, err = ParseServe([]string{"--tls-cert-file=/a.pem", "--tls-key-file=/a.key", "--internal-client-ca-file=/ca.pem"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := (TLSFiles{Cert: "/a.pem", Key: "/a.key", ClientCA: "/ca.pem"}); c.TLS != want {
		t.Errorf("decision service with the main certificate: --listen %+v, want %+v", c.TLS, want)
	}
	c, err = ParseServe([]string{"--upstream=http://127.0.0.1:9", "--internal-tls-cert-file=/c.pem", "--internal-tls-key-file=/k.pem", "--internal-client-ca-file=/ca.pem"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.TLS.on() || c.InternalTLS != (TLSFiles{Cert: "/c.pem", Key: "/k.pem", ClientCA: "/ca.pem"}) {
		t.Errorf("proxy: --listen %+v, internal %+v", c.TLS, c.InternalTLS)
	}
}

// boolVars are the FAIRGATE_* variables of serve's boolean flags, read
// from its usage (a boolean flag's line has no type after its name), so
// that a boolean flag added later is tested with the rest.
func boolVars(t *testing.T) []string {
	t.Helper()
	clearServeEnv(t)
	var usage strings.Builder
	if _, err := ParseServe([]string{"-h"}, &usage); err == nil {
		t.Fatal("-h: no usage")
	}
	var names []string
	lines := strings.Split(usage.String(), "\n")
	for i, line := range lines {
		f := strings.Fields(line)
		if !strings.HasPrefix(line, "  -") || len(f) != 1 || i+1 == len(lines) {
			continue
		}
		v := regexp.MustCompile(`FAIRGATE_[A-Z_]+`).FindString(lines[i+1])
		if v == "" {
			t.Fatalf("boolean flag %s names no FAIRGATE_* variable: %q", f[0], lines[i+1])
		}
		names = append(names, v)
	}
	if len(names) < 2 {
		t.Fatalf("boolean variables %v: want FAIRGATE_TRACE_TENANTS and FAIRGATE_TRUST_TRACE_CONTEXT at least", names)
	}
	return names
}

// TestServeBoolVariables: every boolean FAIRGATE_* variable takes what
// strconv.ParseBool takes, and anything else stops the start with one
// line naming the variable, rather than leave the switch silently off.
func TestServeBoolVariables(t *testing.T) {
	otlp := "http://127.0.0.1:4318" // tracing on, so that the switches act
	for _, name := range boolVars(t) {
		for _, c := range []struct {
			value string
			on    bool
			err   bool
		}{
			{"true", true, false}, {"TRUE", true, false}, {"True", true, false}, {"1", true, false}, {"t", true, false}, {"T", true, false},
			{"false", false, false}, {"FALSE", false, false}, {"0", false, false}, {"f", false, false}, {"", false, false},
			{"yes", false, true}, {"on", false, true}, {"no", false, true}, {"2", false, true}, {" true", false, true}, {"garbage", false, true},
		} {
			t.Run(name+"="+c.value, func(t *testing.T) {
				clearServeEnv(t)
				t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp)
				t.Setenv("FAIRGATE_STORE", "redis://127.0.0.1:9") // so that FAIRGATE_READY_REQUIRES_STORE acts
				t.Setenv(name, c.value)
				got, err := ParseServe(nil, io.Discard)
				if c.err {
					want := "serve: " + name + "=" + strconv.Quote(c.value) + ": want true or false"
					if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
						t.Fatalf("error %v, want one line starting %q", err, want)
					}
					return
				}
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				on := map[string]bool{"FAIRGATE_TRACE_TENANTS": got.TraceTenants, "FAIRGATE_TRUST_TRACE_CONTEXT": got.TrustTraceContext, "FAIRGATE_READY_REQUIRES_STORE": got.ReadyRequiresStore}
				v, known := on[name]
				if !known {
					t.Fatalf("%s: the test does not know its field; add it", name)
				}
				if v != c.on {
					t.Errorf("%s=%q: %v, want %v", name, c.value, v, c.on)
				}
			})
		}
	}
}

// TestServeMaxOverrideUnitVariable: FAIRGATE_RLS_MAX_OVERRIDE_UNIT goes
// into the config made from envoyproxy/ratelimit's environment; with a
// config file (or the embedded example) it would be ignored, so it stops
// the start, saying to set rls.max_override_unit in the file.
func TestServeMaxOverrideUnitVariable(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		err  string
	}{
		{name: "with --config", args: []string{"--config=/etc/fairgate.yaml"}, env: map[string]string{"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "second"},
			err: "serve: FAIRGATE_RLS_MAX_OVERRIDE_UNIT does nothing here: it goes into the config made from envoyproxy/ratelimit's environment (RUNTIME_ROOT, RUNTIME_SUBDIRECTORY or CONFIG_TYPE, and no --config); with a config file, set rls.max_override_unit in the file"},
		{name: "garbage with --config", args: []string{"--config=/etc/fairgate.yaml"}, env: map[string]string{"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "garbage"}, err: "FAIRGATE_RLS_MAX_OVERRIDE_UNIT does nothing here"},
		{name: "the embedded example", env: map[string]string{"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "hour"}, err: "FAIRGATE_RLS_MAX_OVERRIDE_UNIT does nothing here"},
		// A config file and a runtime directory together are refused
		// whole: one would be followed, the other silently ignored (the
		// container image sets FAIRGATE_CONFIG, which made the chart's
		// Envoy swap answer OK to everything).
		{name: "with --config and a runtime directory", args: []string{"--config=/etc/fairgate.yaml"}, env: map[string]string{"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "hour", "RUNTIME_ROOT": "/srv/runtime"}, err: "set FAIRGATE_CONFIG= (fairgate's container image sets it"},
		{name: "FAIRGATE_CONFIG and a runtime directory", env: map[string]string{"FAIRGATE_CONFIG": "/etc/fairgate/fairgate.yaml", "RUNTIME_ROOT": "/srv/runtime", "RUNTIME_SUBDIRECTORY": "ratelimit"}, err: "both a config file (/etc/fairgate/fairgate.yaml"},
		{name: "FAIRGATE_CONFIG emptied and a runtime directory", env: map[string]string{"FAIRGATE_CONFIG": "", "FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "hour", "RUNTIME_ROOT": "/srv/runtime", "RUNTIME_SUBDIRECTORY": "ratelimit"}},
		{name: "the environment's config", env: map[string]string{"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "hour", "RUNTIME_ROOT": "/srv/runtime", "RUNTIME_SUBDIRECTORY": "ratelimit"}},
		{name: "the environment's config over xDS", env: map[string]string{"FAIRGATE_RLS_MAX_OVERRIDE_UNIT": "hour", "CONFIG_TYPE": "GRPC_XDS_SOTW"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clearServeEnv(t)
			for _, k := range []string{"RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "CONFIG_TYPE"} {
				t.Setenv(k, "")
				os.Unsetenv(k)
			}
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			got, err := ParseServe(c.args, io.Discard)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want one saying %q", err, c.err)
			case c.err == "" && !strings.Contains(string(got.ConfigData), "max_override_unit: hour"):
				t.Errorf("config made:\n%s\nwant max_override_unit: hour", got.ConfigData)
			}
		})
	}
}

// TestServeRLSMaxCalls: --rls-max-calls (FAIRGATE_RLS_MAX_CALLS) takes a
// positive number; zero means the default.
func TestServeRLSMaxCalls(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want int
		err  string
	}{
		{want: 0},
		{args: []string{"--rls-max-calls=64"}, want: 64},
		{env: "32", want: 32},
		{args: []string{"--rls-max-calls=64"}, env: "32", want: 64},
		{args: []string{"--rls-max-calls=0"}, err: `serve: rls max calls "0": want a positive number such as 128`},
		{env: "many", err: `serve: rls max calls "many"`},
	} {
		clearServeEnv(t)
		if c.env != "" {
			t.Setenv("FAIRGATE_RLS_MAX_CALLS", c.env)
		}
		got, err := ParseServe(c.args, io.Discard)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v %q: %v, want an error saying %q", c.args, c.env, err, c.err)
		case c.err == "" && (err != nil || got.RLSMaxCalls != c.want):
			t.Errorf("%v %q: %d %v, want %d", c.args, c.env, got.RLSMaxCalls, err, c.want)
		}
	}
}
