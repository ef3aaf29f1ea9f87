package rls_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/store/memstore"
	"github.com/fairgate/fairgate/store/redisstore"
)

// nameSink is a statsd sink that keeps the names it is given.
type nameSink struct {
	mu    sync.Mutex
	names map[string]uint64
}

func (s *nameSink) Add(name string, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]uint64{}
	}
	s.names[name] += n
}

// overrideDesc is a descriptor of one entry with its own limit.
func overrideDesc(key, value string, n uint32, unit typepb.RateLimitUnit) *commonpb.RateLimitDescriptor {
	return &commonpb.RateLimitDescriptor{
		Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		Limit:   &commonpb.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit},
	}
}

// TestStatsBoundedInBytes: calls whose values are about 1 MB each, unique,
// named in the statistics (a descriptor with its own limit; a
// detailed_metric rule) leave every statistics key within MaxStatName
// bytes, still one per value, and the /metrics scrape and the statsd
// names bounded accordingly; ordinary keys keep envoyproxy/ratelimit's
// names.
func TestStatsBoundedInBytes(t *testing.T) {
	cfg := rls.Config{Domains: []rls.Domain{{Name: "api", Algorithm: algo.FixedWindow, Descriptors: []*rls.Descriptor{
		{Key: "k", DetailedMetric: true, Limit: &rls.RateLimit{RequestsPerUnit: 100, Unit: rlspb.RateLimitResponse_RateLimit_HOUR}},
	}}}}
	reg := prometheus.NewRegistry()
	svc, err := rls.New(cfg, testGuard(t, memstore.New(memstore.Config{})), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	sink := &nameSink{}
	svc.SetStatsSink(sink)
	c := serveService(t, svc)
	const n = 20
	pad := strings.Repeat("é", 500_000) // 1 MB, two bytes a character: a cut must fall between them
	for i := range n {
		v := strconv.Itoa(i) + pad
		ask(t, c, "api", 1, overrideDesc("user", v, 1000, typepb.RateLimitUnit_HOUR))
		ask(t, c, "api", 1, desc("k="+v))
	}
	ask(t, c, "api", 1, desc("k=10.0.0.1"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	series := 0
	for _, mf := range mfs {
		if mf.GetName() != "fairgate_rls_rate_limit_hits_total" {
			continue
		}
		for _, m := range mf.Metric {
			series++
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if name := l["domain"] + "." + l["key"]; len(name) > rls.MaxStatName || !utf8.ValidString(name) {
				t.Fatalf("a statistics key of %d bytes (valid UTF-8: %v), bound %d", len(name), utf8.ValidString(name), rls.MaxStatName)
			}
			keys[l["key"]] = true
		}
	}
	if len(keys) != 2*n+1 {
		t.Errorf("%d statistics keys for %d distinct values, want one each", len(keys), 2*n+1)
	}
	if !keys["k_10.0.0.1"] {
		t.Errorf("an ordinary value's key: not among %d keys, want k_10.0.0.1", len(keys))
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	// A series' line: the metric's name, the labels (a value escaped at
	// most doubles), the value; plus a few KiB of HELP, TYPE and the
	// other metrics.
	const line = len(`fairgate_rls_rate_limit_hits_total{domain="",key="",stat="over_limit_with_local_cache"} 1.8446744073709552e+19`) + 1
	if bound := series*(line+2*rls.MaxStatName) + 8<<10; rec.Body.Len() > bound {
		t.Errorf("/metrics: %d bytes for %d series, bound %d", rec.Body.Len(), series, bound)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	most := len("ratelimit.service.rate_limit.") + rls.MaxStatName + len(".over_limit_with_local_cache")
	for name := range sink.names {
		if len(name) > most {
			t.Fatalf("a statsd name of %d bytes, bound %d", len(name), most)
		}
	}
	if sink.names["ratelimit.service.rate_limit.api.k_10_0_0_1.total_hits"] != 1 {
		t.Errorf("statsd: no ratelimit.service.rate_limit.api.k_10_0_0_1.total_hits (envoyproxy/ratelimit's name of an address)")
	}
}

// TestStatName: a statistics key of at most MaxStatName bytes is kept as
// it is; a longer one is cut between characters and ends in '#' and a
// hash of the whole key, so two long keys that share their first bytes
// stay apart.
func TestStatName(t *testing.T) {
	long := "api.k_" + strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name, key string
		same      bool
	}{
		{"short", "api.remote_address_10.0.0.1", true},
		{"at the bound", strings.Repeat("a", rls.MaxStatName), true},
		{"one past", strings.Repeat("a", rls.MaxStatName+1), false},
		{"long", long, false},
		{"multi-byte", "api.k_" + strings.Repeat("€", 400), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := rls.StatName(tc.key)
			switch {
			case tc.same && got != tc.key:
				t.Fatalf("StatName(%q) = %q, want it unchanged", tc.key, got)
			case tc.same:
				return
			case len(got) > rls.MaxStatName || !utf8.ValidString(got):
				t.Fatalf("StatName: %d bytes (valid UTF-8: %v), want at most %d", len(got), utf8.ValidString(got), rls.MaxStatName)
			case !strings.HasPrefix(tc.key, strings.Split(got, "#")[0]) || len(got)-strings.LastIndexByte(got, '#') != 25:
				t.Fatalf("StatName = %q, want a prefix of the key, '#' and 24 characters", got)
			}
		})
	}
	if a, b := rls.StatName(long+"a"), rls.StatName(long+"b"); a == b {
		t.Errorf("two long keys that differ at the end: both %q", a)
	}
}

// TestStatsdName: statsd names are envoyproxy/ratelimit's (':' and '|' and
// the dots of an IPv4 address as '_'), and a value cannot start a line.
func TestStatsdName(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"edge.remote_address_10.0.0.1", "edge.remote_address_10_0_0_1"},
		{"edge.remote_address_2001:db8::1", "edge.remote_address_2001_db8__1"},
		{"api.path_/v1.2/x", "api.path_/v1.2/x"},
		{"api.k_a|b", "api.k_a_b"},
		{"api.k_x\nevil:1|c", "api.k_x_evil_1_c"},
	} {
		if got := rls.StatsdName(tc.key); got != tc.want {
			t.Errorf("StatsdName(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// TestOversizeRequests: a request past the service's bounds is refused
// with InvalidArgument naming the bound, counted as invalid; a message
// past MaxMessage is refused by gRPC before it is read.
func TestOversizeRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	svc, err := rls.New(oneRule(10, rls.Domain{Algorithm: algo.FixedWindow}), testGuard(t, memstore.New(memstore.Config{})), nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	c := serveService(t, svc)
	many := func(n int) []*commonpb.RateLimitDescriptor {
		ds := make([]*commonpb.RateLimitDescriptor, n)
		for i := range ds {
			ds[i] = desc("k=v")
		}
		return ds
	}
	wide := &commonpb.RateLimitDescriptor{}
	for range rls.MaxEntries + 1 {
		wide.Entries = append(wide.Entries, &commonpb.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for _, tc := range []struct {
		name string
		ds   []*commonpb.RateLimitDescriptor
		code codes.Code
		want string
	}{
		{"descriptors", many(rls.MaxDescriptors + 1), codes.InvalidArgument, "65 descriptors in one request: at most 64"},
		{"entries", []*commonpb.RateLimitDescriptor{desc("k=v"), wide}, codes.InvalidArgument, "descriptor 1 has 33 entries: want 1 to 32"},
		{"no entries", []*commonpb.RateLimitDescriptor{{}}, codes.InvalidArgument, "descriptor 0 has 0 entries"},
		{"own limit per year", []*commonpb.RateLimitDescriptor{overrideDesc("k", "v", 1, typepb.RateLimitUnit_YEAR)}, codes.InvalidArgument, "descriptor 0 has its own limit per year, longer than max_override_unit (day)"},
		{"own limit per week", []*commonpb.RateLimitDescriptor{desc("k=v"), overrideDesc("k", "v", 1, typepb.RateLimitUnit(rlspb.RateLimitResponse_RateLimit_WEEK))}, codes.InvalidArgument, "descriptor 1 has its own limit per week"},
		{"message", []*commonpb.RateLimitDescriptor{desc("k=" + strings.Repeat("v", rls.MaxMessage))}, codes.ResourceExhausted, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: tc.ds})
			if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Fatalf("%v, want %v containing %q", err, tc.code, tc.want)
			}
		})
	}
	mfs, _ := reg.Gather()
	invalid := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "fairgate_rls_requests_total" {
			for _, m := range mf.Metric {
				for _, p := range m.Label {
					if p.GetName() == "code" && p.GetValue() == "invalid" {
						invalid += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if invalid != 5 {
		t.Errorf("fairgate_rls_requests_total{code=\"invalid\"} %v, want 5", invalid)
	}
}

// TestOverrideLifetime: a descriptor's own limit makes a counter that
// lives as long as its unit, so its unit is bounded (max_override_unit,
// a day by default): on a real Redis every key the calls leave expires
// within a day, a longer unit is refused and leaves no key, and an
// operator who raises the bound gets the longer lifetime. The memory
// store's keys expire alike.
func TestOverrideLifetime(t *testing.T) {
	const day = 24 * time.Hour
	cfg := func(most rls.Unit) rls.Config {
		c := oneRule(10, rls.Domain{Algorithm: algo.FixedWindow})
		c.Settings.MaxOverrideUnit = most
		return c
	}
	call := func(c rlspb.RateLimitServiceClient, unit typepb.RateLimitUnit, i int) error {
		ds := make([]*commonpb.RateLimitDescriptor, rls.MaxDescriptors)
		for j := range ds {
			ds[j] = overrideDesc("user", fmt.Sprint(i, "-", j), 1, unit)
		}
		_, err := c.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "api", Descriptors: ds})
		return err
	}
	t.Run("redis", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			most     rls.Unit
			unit     typepb.RateLimitUnit
			refused  bool
			keys     int
			min, max time.Duration // the longest key's lifetime
		}{
			{"default, per day", 0, typepb.RateLimitUnit_DAY, false, 3 * rls.MaxDescriptors, 0, day},
			{"default, per year", 0, typepb.RateLimitUnit_YEAR, true, 0, 0, 0},
			{"hour, per day", rlspb.RateLimitResponse_RateLimit_HOUR, typepb.RateLimitUnit_DAY, true, 0, 0, 0},
			{"hour, per minute", rlspb.RateLimitResponse_RateLimit_HOUR, typepb.RateLimitUnit_MINUTE, false, 3 * rls.MaxDescriptors, 0, time.Minute},
			{"year, per year", rlspb.RateLimitResponse_RateLimit_YEAR, typepb.RateLimitUnit_YEAR, false, 3 * rls.MaxDescriptors, day, 365 * day},
		} {
			t.Run(tc.name, func(t *testing.T) {
				prefix := fmt.Sprintf("rlslife%d:", time.Now().UnixNano())
				st, err := redisstore.New(redisstore.Config{URL: "redis://" + redistest.Shared(t).Addr, Prefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				c, _ := serve(t, cfg(tc.most), st)
				for i := range 3 {
					err := call(c, tc.unit, i)
					if tc.refused != (status.Code(err) == codes.InvalidArgument) || !tc.refused && err != nil {
						t.Fatalf("call %d: %v, want refused %v", i, err, tc.refused)
					}
				}
				got, err := redistest.Do(redistest.Shared(t).Addr, "EVAL", `local ks = redis.call('KEYS', ARGV[1] .. '*')
local most = 0
for _, k in ipairs(ks) do most = math.max(most, redis.call('PTTL', k)) end
return #ks .. ' ' .. most`, "0", prefix)
				if err != nil {
					t.Fatal(err)
				}
				var keys int
				var ms int64
				fmt.Sscan(got, &keys, &ms)
				if life := time.Duration(ms) * time.Millisecond; keys != tc.keys || keys > 0 && (life <= tc.min || life > tc.max) {
					t.Fatalf("%d keys, the longest living %v; want %d keys living at most %v (more than %v)", keys, life, tc.keys, tc.max, tc.min)
				}
			})
		}
	})
	t.Run("memory", func(t *testing.T) {
		var now atomic.Int64
		now.Store(time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Load()) }
		for _, tc := range []struct {
			name    string
			most    rls.Unit
			unit    typepb.RateLimitUnit
			refused bool
			left    int // keys held a day later
		}{
			{"default, per day", 0, typepb.RateLimitUnit_DAY, false, 0},
			{"default, per month", 0, typepb.RateLimitUnit_MONTH, true, 0},
			{"year, per year", rlspb.RateLimitResponse_RateLimit_YEAR, typepb.RateLimitUnit_YEAR, false, rls.MaxDescriptors},
		} {
			t.Run(tc.name, func(t *testing.T) {
				st := memstore.New(memstore.Config{Now: clock})
				c, _ := serve(t, cfg(tc.most), st)
				err := call(c, tc.unit, 0)
				if tc.refused != (status.Code(err) == codes.InvalidArgument) || !tc.refused && err != nil {
					t.Fatalf("%v, want refused %v", err, tc.refused)
				}
				if want := map[bool]int{false: rls.MaxDescriptors, true: 0}[tc.refused]; st.Len() != want {
					t.Fatalf("%d keys after the call, want %d", st.Len(), want)
				}
				now.Add(int64(day + time.Second))
				st.Sweep()
				if st.Len() != tc.left {
					t.Fatalf("%d keys a day later, want %d", st.Len(), tc.left)
				}
			})
		}
	})
}
