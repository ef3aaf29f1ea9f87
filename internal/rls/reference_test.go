package rls_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/internal/testenv"
	"github.com/fairgate/fairgate/store"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// call is one ShouldRateLimit call of a reference case and the answer
// envoyproxy/ratelimit (commit f2fb157) gives it.
type call struct {
	domain string
	// ds are the descriptors, each "k=v,k2=v2"; a suffix "#N" sets the
	// descriptor's own hits_addend to N (0 included).
	ds   []string
	hits uint32
	// want is the overall code and each descriptor's, as codesOf writes
	// them; left is each descriptor's limit_remaining (-1: no limit, so 0
	// and no current_limit; -2: unlimited, so the most a uint32 holds and
	// no current_limit).
	want string
	left []int
	// headers, when set, are the response headers' limit and remaining
	// ("20 19"), with RateLimit-Reset to the end of the window; "-" is
	// none.
	headers string
}

// reference is a case of envoyproxy/ratelimit's own tests, re-expressed as
// data: its config files (testdata/reference), its settings, and calls
// with the answers it gives, with its default settings unless said.
type reference struct {
	name  string
	files []string
	set   rls.Settings
	calls []call
}

// repeat is n calls of c whose answer changes with i (0-based).
func repeat(n int, c func(i int) call) []call {
	var out []call
	for i := range n {
		out = append(out, c(i))
	}
	return out
}

// basicCase is test/integration's testBasicBaseConfig: one descriptor on
// a minute limit past its limit, then two descriptors of two limits in one
// call (the minute limit keeps counting while the hour limit is over),
// under the settings given.
func basicCase(name string, set rls.Settings) reference {
	calls := []call{
		{domain: "foo", ds: []string{"hello=world"}, hits: 1, want: "OK: OK", left: []int{-1}},
		{domain: "basic", ds: []string{"key1=foo"}, hits: 1, want: "OK: OK", left: []int{49}},
	}
	calls = append(calls, repeat(25, func(i int) call {
		c := call{domain: "another", ds: []string{"key2=R1"}, hits: 1, want: "OK: OK", left: []int{20 - (i + 1)}}
		if i >= 20 {
			c.want, c.left = "OVER_LIMIT: OVER_LIMIT", []int{0}
		}
		return c
	})...)
	calls = append(calls, repeat(15, func(i int) call {
		c := call{domain: "another", ds: []string{"key2=R2", "key3=R2"}, hits: 1, want: "OK: OK OK", left: []int{20 - (i + 1), 10 - (i + 1)}}
		if i >= 10 {
			c.want, c.left = "OVER_LIMIT: OK OVER_LIMIT", []int{20 - (i + 1), 0}
			if set.StopIncrementWhenOverLimit {
				// The minute limit stops counting when the call is over.
				c.left[0] = 10
			}
		}
		return c
	})...)
	return reference{name: name, files: []string{"basic.yaml", "another.yaml"}, set: set, calls: calls}
}

// references are the cases: the integration test under each setting it
// runs with, and the Envoy end-to-end scripts as the descriptors Envoy
// sends for them (integration-test/scripts/*.sh with
// examples/envoy/proxy.yaml).
func references() []reference {
	e2e := []string{"e2e.yaml"}
	fourheader := func(foo, bar, dst string) []string {
		return []string{"foo=" + foo + ",bar=" + bar, "source_cluster=proxy,destination_cluster=" + dst}
	}
	return []reference{
		basicCase("basic", rls.Settings{}),
		basicCase("basic with local cache", rls.Settings{LocalCacheEntries: rls.LocalCacheEntries(1000)}),
		basicCase("basic, stop increment when over limit", rls.Settings{StopIncrementWhenOverLimit: true}),
		basicCase("basic, local cache and stop increment", rls.Settings{StopIncrementWhenOverLimit: true, LocalCacheEntries: rls.LocalCacheEntries(1000)}),
		{name: "trigger-ratelimit.sh", files: e2e, calls: append(repeat(3, func(i int) call {
			return call{domain: "rl", ds: []string{"foo=pelle,baz=not-so-shady"}, want: "OK: OK", left: []int{2 - i}}
		}), repeat(2, func(int) call {
			return call{domain: "rl", ds: []string{"foo=pelle,baz=not-so-shady"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}}
		})...)},
		{name: "trigger-shadow-mode-key.sh", files: e2e, calls: append(repeat(3, func(i int) call {
			return call{domain: "rl", ds: []string{"foo=pelle,baz=shady"}, want: "OK: OK", left: []int{2 - i}}
		}), repeat(3, func(int) call {
			return call{domain: "rl", ds: []string{"foo=pelle,baz=shady"}, want: "OK: OK", left: []int{0}}
		})...)},
		{name: "replaces.sh", files: e2e, calls: []call{
			{domain: "rl", ds: []string{"foo=bkthomps,bar=banned"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}},
			{domain: "rl", ds: fourheader("bkthomps", "banned", "mock"), want: "OVER_LIMIT: OVER_LIMIT OK", left: []int{0, 0}},
			{domain: "rl", ds: fourheader("bkthomps", "banned", "override"), want: "OK: OK OK", left: []int{-1, 1}},
			{domain: "rl", ds: fourheader("bkthomps", "banned", "override"), want: "OK: OK OK", left: []int{-1, 0}},
			{domain: "rl", ds: fourheader("bkthomps", "banned", "override"), want: "OVER_LIMIT: OK OVER_LIMIT", left: []int{-1, 0}},
			{domain: "rl", ds: fourheader("my_foo", "bkthomps", "bkthomps"), want: "OK: OK OK", left: []int{-1, 1}},
			{domain: "rl", ds: fourheader("my_foo", "bkthomps", "bkthomps"), want: "OK: OK OK", left: []int{-1, 0}},
			{domain: "rl", ds: fourheader("my_foo", "bkthomps", "bkthomps"), want: "OVER_LIMIT: OK OVER_LIMIT", left: []int{-1, 0}},
			{domain: "rl", ds: fourheader("my_foo", "bkthomps", "not_bkthomps"), want: "OK: OK OK", left: []int{0, -1}},
			{domain: "rl", ds: fourheader("my_foo", "bkthomps", "not_bkthomps"), want: "OVER_LIMIT: OVER_LIMIT OK", left: []int{0, -1}},
			{domain: "rl", ds: fourheader("my_foo", "bkthomps", "bkthomps"), want: "OVER_LIMIT: OK OVER_LIMIT", left: []int{-1, 0}},
			{domain: "rl", ds: append(fourheader("my_foo", "bkthomps", "fake"), "category=account"), want: "OK: OK OK OK", left: []int{-1, -1, 3}},
			{domain: "rl", ds: append(fourheader("my_foo", "bkthomps", "fake"), "category=account"), want: "OK: OK OK OK", left: []int{-1, -1, 2}},
			{domain: "rl", ds: append(fourheader("my_foo", "bkthomps", "fake"), "category=account"), want: "OK: OK OK OK", left: []int{-1, -1, 1}},
		}},
		{name: "value-included-in-stats-key-when-unspecified.sh", files: e2e, calls: []call{
			{domain: "rl", ds: []string{"unspec=unspecified_value"}, want: "OK: OK", left: []int{1}},
			{domain: "rl", ds: []string{"unspec=unspecified_value"}, want: "OK: OK", left: []int{0}},
			{domain: "rl", ds: []string{"unspec=unspecified_value"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}},
		}},
		{name: "quota.sh", files: e2e, calls: []call{
			{domain: "rl", ds: []string{"service=service_1", "service=service_2"}, want: "OK: OK OK", left: []int{0, 1}},
			{domain: "rl", ds: []string{"service=service_1", "service=service_2"}, want: "OK: OVER_LIMIT OK", left: []int{0, 0}},
			{domain: "rl", ds: []string{"service=service_1", "service=service_2"}, want: "OVER_LIMIT: OVER_LIMIT OVER_LIMIT", left: []int{0, 0}},
		}},
		{name: "share threshold", files: []string{"share.yaml"}, calls: append(repeat(10, func(i int) call {
			return call{domain: "share-threshold-test", ds: []string{fmt.Sprintf("files=files/R1-%d.csv", i)}, want: "OK: OK", left: []int{9 - i}}
		}), call{domain: "share-threshold-test", ds: []string{"files=files/R1-b.csv"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}},
			call{domain: "share-threshold-test", ds: []string{"files_no_share=files_no_share/R1-1"}, want: "OK: OK", left: []int{9}},
			call{domain: "share-threshold-test", ds: []string{"files_no_share=files_no_share/R1-2"}, want: "OK: OK", left: []int{9}},
		)},
		{name: "wildcard in the middle", files: []string{"wildcard.yaml"}, calls: append(repeat(20, func(i int) call {
			return call{domain: "test-domain", ds: []string{"midWild=barR1b"}, want: "OK: OK", left: []int{19 - i}}
		}), call{domain: "test-domain", ds: []string{"midWild=barR1b"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}},
			call{domain: "test-domain", ds: []string{"midWild=barR1"}, want: "OK: OK", left: []int{-1}},
		)},
		{name: "response headers", files: []string{"another.yaml", "e2e.yaml"}, set: rls.Settings{Headers: rls.Headers{Enabled: true}}, calls: []call{
			{domain: "another", ds: []string{"key2=R1"}, want: "OK: OK", left: []int{19}, headers: "20 19"},
			{domain: "another", ds: []string{"key2=R1", "key3=R1"}, want: "OK: OK OK", left: []int{18, 9}, headers: "10 9"},
			{domain: "rl", ds: []string{"foo=x,bay=y"}, want: "OK: OK", left: []int{-2}, headers: "-"},
			{domain: "rl", ds: []string{"unspec=R1"}, want: "OK: OK", left: []int{1}, headers: "2 1"},
			{domain: "rl", ds: []string{"unspec=R1"}, want: "OK: OK", left: []int{0}, headers: "2 0"},
			{domain: "rl", ds: []string{"unspec=R1", "key9=x"}, want: "OVER_LIMIT: OVER_LIMIT OK", left: []int{0, -1}, headers: "2 0"},
		}},
		{name: "token-quota.sh", files: e2e, calls: []call{
			// On the request, a check that counts nothing; when the stream
			// ends, the charge.
			{domain: "rl", ds: []string{"service=service_2#0"}, want: "OK: OK", left: []int{2}},
			{domain: "rl", ds: []string{"service=service_2#1"}, want: "OK: OK", left: []int{1}},
			{domain: "rl", ds: []string{"service=service_2#0"}, want: "OK: OK", left: []int{1}},
			{domain: "rl", ds: []string{"service=service_2#1"}, want: "OK: OK", left: []int{0}},
			{domain: "rl", ds: []string{"service=service_2#0"}, want: "OK: OK", left: []int{0}},
			{domain: "rl", ds: []string{"service=service_2#1"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}},
			{domain: "rl", ds: []string{"service=service_2#0"}, want: "OVER_LIMIT: OVER_LIMIT", left: []int{0}},
		}},
	}
}

// request builds a call's request; R1, R2 in values become a token of
// this run, so that each run has counters of its own.
func (c call) request(run string) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: c.domain, HitsAddend: c.hits}
	for _, d := range c.ds {
		d, own, hasOwn := strings.Cut(d, "#")
		x := desc(strings.Split(strings.NewReplacer("R1", run+"a", "R2", run+"b").Replace(d), ",")...)
		if hasOwn {
			n, _ := strconv.ParseUint(own, 10, 64)
			x.HitsAddend = wrapperspb.UInt64(n)
		}
		req.Descriptors = append(req.Descriptors, x)
	}
	return req
}

// backends are the stores the reference cases run on: memory, Redis,
// Redis Cluster and Redis behind Sentinel (under -short, memory alone).
func backends(t *testing.T) map[string]func(t *testing.T) store.Store {
	redis := func(url string) func(t *testing.T) store.Store {
		return func(t *testing.T) store.Store {
			st, err := redisstore.New(redisstore.Config{URL: url, Prefix: fmt.Sprintf("ref%d:", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return st
		}
	}
	memory := func(*testing.T) store.Store { return memstore.New(memstore.Config{}) }
	if testenv.Short() {
		return map[string]func(t *testing.T) store.Store{"memory": memory} // the fast tier starts no Redis
	}
	ss, err := redistest.StartSentinels(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Close)
	return map[string]func(t *testing.T) store.Store{
		"memory":   memory,
		"redis":    redis("redis://" + redistest.Shared(t).Addr),
		"cluster":  redis("redis-cluster://" + strings.Join(redistest.SharedCluster(t).Addrs(), ",")),
		"sentinel": redis("redis-sentinel://" + strings.Join(ss.Addrs(), ",") + "/" + redistest.MasterName),
	}
}

// TestReference runs every reference case on every backend and expects
// envoyproxy/ratelimit's answer, field by field: the overall code, and
// per descriptor the code, current_limit (the matched rule's, or none),
// limit_remaining and duration_until_reset (whole seconds to the end of
// the unit's window).
//
// With FAIRGATE_REFERENCE_RLS=host:port, the cases of default settings
// also run against the envoyproxy/ratelimit at that address, the control
// (serving testdata/reference as its runtime directory), on the Redis at
// FAIRGATE_REFERENCE_REDIS, flushed before each case as the end-to-end
// scripts wait out their windows; docs/rls.md says how to build and start
// it. Its answers must be the data's too.
func TestReference(t *testing.T) {
	if addr := os.Getenv("FAIRGATE_REFERENCE_RLS"); addr != "" {
		t.Run("control", func(t *testing.T) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// FAIRGATE_REFERENCE_SETTINGS names the control's own settings:
			// "stop_increment" (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT),
			// "local_cache" (LOCAL_CACHE_SIZE_IN_BYTES=1000), "headers"
			// (LIMIT_RESPONSE_HEADERS_ENABLED), several or none.
			var set rls.Settings
			for _, f := range strings.Split(os.Getenv("FAIRGATE_REFERENCE_SETTINGS"), ",") {
				switch f {
				case "stop_increment":
					set.StopIncrementWhenOverLimit = true
				case "headers":
					set.Headers.Enabled = true
				case "local_cache":
					set.LocalCacheEntries = rls.LocalCacheEntries(1000)
				}
			}
			for _, rc := range references() {
				if rc.set != set {
					continue
				}
				t.Run(rc.name, func(t *testing.T) {
					if _, err := redistest.Do(os.Getenv("FAIRGATE_REFERENCE_REDIS"), "FLUSHALL"); err != nil {
						t.Fatal(err)
					}
					runReference(t, rlspb.NewRateLimitServiceClient(conn), rc)
				})
			}
		})
	}
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			for _, rc := range references() {
				t.Run(rc.name, func(t *testing.T) {
					var c rls.Config
					for _, f := range rc.files {
						ds, err := config.ParseRLSFile(filepath.Join("testdata/reference", f))
						if err != nil {
							t.Fatal(err)
						}
						c.Domains = append(c.Domains, ds...)
					}
					c.Settings = rc.set
					// A store call's deadline a loaded machine cannot miss:
					// past it the fallback would answer, with counts of its
					// own, and the case would compare the fallback.
					svc, err := rls.New(c, testGuardTimeout(t, open(t), 10*time.Second), nil, nil)
					if err != nil {
						t.Fatal(err)
					}
					client := serveService(t, svc)
					runReference(t, client, rc)
				})
			}
		})
	}
}

// runReference makes a case's calls on client and checks each answer.
func runReference(t *testing.T, client rlspb.RateLimitServiceClient, rc reference) {
	t.Helper()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	// The cases count in fixed windows of a second to a minute, as
	// envoyproxy/ratelimit's scripts do, and a case takes about a second:
	// one begun in a minute's last seconds would see its counts reset
	// half-way. Start it in a fresh minute instead.
	if now := time.Now(); now.Second() >= 55 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 50*time.Millisecond).Sub(now))
	}
	for i, cl := range rc.calls {
		before := time.Now()
		r, err := client.ShouldRateLimit(context.Background(), cl.request(run))
		after := time.Now()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		checkReference(t, i, cl, r, before, after)
	}
}

// checkReference compares one answer with the reference's.
func checkReference(t *testing.T, i int, cl call, r *rlspb.RateLimitResponse, before, after time.Time) {
	t.Helper()
	if got := codesOf(r); got != cl.want {
		t.Fatalf("call %d %v: %s, want %s", i, cl.ds, got, cl.want)
	}
	if cl.headers != "" {
		var got []string
		for _, h := range r.ResponseHeadersToAdd {
			got = append(got, h.Key+"="+h.Value)
		}
		want := []string{}
		if cl.headers != "-" {
			lim, left, _ := strings.Cut(cl.headers, " ")
			n, _ := strconv.ParseInt(lim, 10, 64)
			var unit int64
			for _, st := range r.Statuses {
				if st.CurrentLimit != nil && int64(st.CurrentLimit.RequestsPerUnit) == n {
					unit = int64(rls.Period(st.CurrentLimit.Unit) / time.Second)
				}
			}
			reset := strconv.FormatInt(unit-before.Unix()%unit, 10)
			if unit-after.Unix()%unit != unit-before.Unix()%unit && len(got) == 3 && got[2] == "RateLimit-Reset="+strconv.FormatInt(unit-after.Unix()%unit, 10) {
				reset = strconv.FormatInt(unit-after.Unix()%unit, 10)
			}
			want = []string{"RateLimit-Limit=" + lim, "RateLimit-Remaining=" + left, "RateLimit-Reset=" + reset}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("call %d %v: headers %v, want %v", i, cl.ds, got, want)
		}
	}
	for j, st := range r.Statuses {
		left := cl.left[j]
		if left == -2 {
			if st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 || st.DurationUntilReset != nil {
				t.Fatalf("call %d descriptor %d: %v, want unlimited", i, j, st)
			}
			continue
		}
		if left < 0 {
			if st.CurrentLimit != nil || st.LimitRemaining != 0 || st.DurationUntilReset != nil {
				t.Fatalf("call %d descriptor %d: %v, want no limit", i, j, st)
			}
			continue
		}
		if st.CurrentLimit == nil || st.LimitRemaining != uint32(left) {
			t.Fatalf("call %d descriptor %d: %v, want %d remaining", i, j, st, left)
		}
		n := int64(rls.Period(st.CurrentLimit.Unit) / time.Second)
		d := st.GetDurationUntilReset()
		if d.GetNanos() != 0 || d.GetSeconds() != n-before.Unix()%n && d.GetSeconds() != n-after.Unix()%n {
			t.Fatalf("call %d descriptor %d: duration until reset %v, want %ds (to the end of the %v window)", i, j, d.AsDuration(), n-before.Unix()%n, st.CurrentLimit.Unit)
		}
	}
}

// TestMultiServiceTokenQuota is multiservice-tokenquota.sh: Envoy checks
// both services' quotas without counting, routes to the service the
// response's dynamic metadata names (the first whose quota passed), and
// charges that one when the stream ends. Two requests go to service 1,
// three to service 2, and the sixth is refused.
func TestMultiServiceTokenQuota(t *testing.T) {
	ds, err := config.ParseRLSFile("testdata/reference/e2e.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, rls.Config{Domains: ds, Settings: rls.Settings{DynamicMetadata: true}}, memstore.New(memstore.Config{}))
	var got []string
	for range 6 {
		check := &rlspb.RateLimitRequest{Domain: "rl", Descriptors: []*commonpb.RateLimitDescriptor{desc("service=service_1"), desc("service=service_2")}}
		for _, d := range check.Descriptors {
			d.HitsAddend = wrapperspb.UInt64(0)
		}
		r, err := c.ShouldRateLimit(context.Background(), check)
		if err != nil {
			t.Fatal(err)
		}
		if r.OverallCode != ok {
			got = append(got, "429")
			continue
		}
		svc := r.GetDynamicMetadata().GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
		got = append(got, svc)
		charge := desc("service=" + svc)
		charge.HitsAddend = wrapperspb.UInt64(1)
		if _, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "rl", Descriptors: []*commonpb.RateLimitDescriptor{charge}}); err != nil {
			t.Fatal(err)
		}
	}
	if want := "service_1 service_1 service_2 service_2 service_2 429"; strings.Join(got, " ") != want {
		t.Fatalf("routed %v, want %s", got, want)
	}
}
