package redisstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// algoFiles are the algorithm scripts, indexed by algo.Algorithm.
var algoFiles = [...]string{"gcra", "token_bucket", "sliding_log", "sliding_window", "fixed_window"}

// fragments are the sections of one algorithm file: --@helpers, --@eval,
// --@write and --@refund (see lua/lib.lua for their contract).
type fragments struct{ helpers, eval, write, refund string }

// readLua returns an embedded script file; its absence is a build defect.
func readLua(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redisstore: missing embedded script " + name)
	}
	return string(src)
}

// parseFragments splits an algorithm file at its --@section lines.
func parseFragments(name string) fragments {
	var f fragments
	var cur *string
	for _, line := range strings.SplitAfter(readLua(name), "\n") {
		switch strings.TrimSpace(line) {
		case "--@helpers":
			cur = &f.helpers
		case "--@eval":
			cur = &f.eval
		case "--@write":
			cur = &f.write
		case "--@refund":
			cur = &f.refund
		default:
			if cur != nil {
				*cur += line
			}
		}
	}
	if f.eval == "" || f.write == "" || f.refund == "" {
		panic("redisstore: " + name + ".lua lacks an --@eval, --@write or --@refund section")
	}
	return f
}

// script builds the named driver (take or refund) for the algorithms in mask
// (bit i for algo.Algorithm i): lib.lua, their helpers, and the driver with
// each --{{section}} replaced by a dispatch on the algorithm code to their
// fragments. A batch runs the script of just the algorithms it uses: Redis
// runs the whole chunk on every call, so what a batch does not use would
// still cost it.
func script(driver string, mask uint8) string {
	var frags []fragments
	var codes []int
	for i, name := range algoFiles {
		if mask&(1<<i) != 0 {
			frags = append(frags, parseFragments(name))
			codes = append(codes, i)
		}
	}
	dispatch := func(pick func(fragments) string) string {
		var b strings.Builder
		for j, f := range frags {
			if j == 0 {
				fmt.Fprintf(&b, "if code == %d then\n", codes[j])
			} else {
				fmt.Fprintf(&b, "elseif code == %d then\n", codes[j])
			}
			b.WriteString(pick(f))
		}
		b.WriteString("end\n")
		return b.String()
	}
	var b strings.Builder
	b.WriteString(readLua("lib"))
	for _, f := range frags {
		b.WriteString(f.helpers)
	}
	body := readLua(driver)
	for section, pick := range map[string]func(fragments) string{
		"eval":   func(f fragments) string { return f.eval },
		"write":  func(f fragments) string { return f.write },
		"refund": func(f fragments) string { return f.refund },
	} {
		body = strings.ReplaceAll(body, "--{{"+section+"}}", dispatch(pick))
	}
	b.WriteString(body)
	return b.String()
}

// TakeScript returns the source of the single-check script the store runs
// (lib.lua, the five algorithm files and take1.lua), for tools and
// benchmarks that want to call it through another client.
func TakeScript() string { return script("take1", allAlgorithms) }

const allAlgorithms = 1<<len(algoFiles) - 1

// take1Scripts and refundScripts hold one script per set of algorithms
// (batches of several checks run take_multi.lua, in coalesce.go).
//
// A take is retried by the client on a fresh connection when its connection
// breaks (a restart or failover leaves every pooled connection to find out
// on its own), within the caller's deadline. If the broken attempt had run,
// the retry charges the batch a second time: that errs toward limiting. A
// refund is never retried, since refunding twice would over-admit.
var take1Scripts, refundScripts = func() (take1, refund [allAlgorithms + 1]*rueidis.Lua) {
	for m := 1; m <= allAlgorithms; m++ {
		take1[m] = rueidis.NewLuaScriptRetryable(script("take1", uint8(m)))
		refund[m] = rueidis.NewLuaScript(script("refund", uint8(m)))
	}
	return take1, refund
}()

// holdScript holds a GCRA key (see Hold). Retrying it after a broken
// connection at worst lengthens the hold by the retry's delay.
var holdScript = rueidis.NewLuaScriptRetryable(readLua("lib") + readLua("hold"))

// Hold makes key admit nothing for d under lim, on the Redis clock. See
// [store.Holder].
func (s *Store) Hold(ctx context.Context, key string, lim algo.Limit, d time.Duration) error {
	if err := store.ValidateHold(key, lim, d); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	em, burst, _ := lim.Params()
	args := []string{strconv.FormatInt(em, 10), strconv.FormatInt(burst, 10), strconv.FormatInt(max(1, int64(d/time.Microsecond)), 10)}
	if err := holdScript.Exec(ctx, s.c, []string{s.Key(lim.Algorithm, key)}, args).Error(); err != nil {
		return fmt.Errorf("%w: hold: %w", store.ErrUnavailable, err)
	}
	return nil
}

// algoCodes are the per-algorithm key segments, and algoArgs the codes the
// scripts dispatch on, indexed by algo.Algorithm.
var (
	algoCodes = [...]string{"g:", "t:", "l:", "w:", "f:"}
	algoArgs  = [...]string{"0", "1", "2", "3", "4"}
)

// Config configures a Store. Set exactly one of Client and URL.
type Config struct {
	// Client is a rueidis client of the caller's. The store does not close it.
	Client rueidis.Client
	// URL is redis://[user:pass@]host:port[/db], rediss://… (TLS), or
	// redis-cluster://[user:pass@]host:port,host:port (rediss-cluster://
	// for TLS). The store owns the client it opens.
	URL string
	// Prefix starts every key the store writes. Zero means "fg:". It must
	// not contain '{' or '}'.
	Prefix string
	// NoCoalescing sends every batch in a script call of its own instead
	// of merging concurrent ones (see coalesce.go). Zero means coalesce.
	NoCoalescing bool
}

// Store is the Redis store. It is safe for concurrent use.
type Store struct {
	c          rueidis.Client
	owned      bool
	cluster    bool
	prefix     string
	once       sync.Once
	noCoalesce bool
	coMu       sync.Mutex
	co         map[uint16]*coalescer // by slot; one at 0 on standalone Redis
}

// New returns a store on the configured Redis. With a URL it connects (and
// fails if Redis cannot be reached).
func New(c Config) (*Store, error) {
	if (c.Client == nil) == (c.URL == "") {
		return nil, errors.New("redisstore: set exactly one of Config.Client and Config.URL")
	}
	prefix := c.Prefix
	if prefix == "" {
		prefix = "fg:"
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q contains a brace: it would change the keys' cluster slots", prefix)
	}
	s := &Store{c: c.Client, prefix: prefix, noCoalesce: c.NoCoalescing}
	if s.c == nil {
		opt, err := ParseURL(c.URL)
		if err != nil {
			return nil, err
		}
		if s.c, err = rueidis.NewClient(opt); err != nil {
			return nil, fmt.Errorf("redisstore: connect to %s: %w", RedactURL(c.URL), err)
		}
		s.owned = true
	}
	s.cluster = s.c.Mode() == rueidis.ClientModeCluster
	return s, nil
}

// ParseURL turns a store URL (see [Config.URL]) into rueidis options.
func ParseURL(raw string) (rueidis.ClientOption, error) {
	bad := func(why string) (rueidis.ClientOption, error) {
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: bad URL %q: %s", RedactURL(raw), why)
	}
	var opt rueidis.ClientOption
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return bad("want redis://host:port, rediss://host:port or redis-cluster://host:port,host:port")
	}
	switch scheme {
	case "redis", "rediss":
		o, err := rueidis.ParseURL(raw)
		if err != nil {
			return bad(err.Error())
		}
		opt = o
	case "redis-cluster", "rediss-cluster":
		rest, query, _ := strings.Cut(rest, "?")
		if query != "" {
			return bad("redis-cluster URLs take no query parameters")
		}
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			user, pass, _ := strings.Cut(rest[:at], ":")
			var err error
			if opt.Username, err = url.PathUnescape(user); err != nil {
				return bad("user name: " + err.Error())
			}
			if opt.Password, err = url.PathUnescape(pass); err != nil {
				return bad("password: " + err.Error())
			}
			rest = rest[at+1:]
		}
		rest = strings.TrimSuffix(rest, "/")
		for _, hp := range strings.Split(rest, ",") {
			host, port, err := splitHostPort(hp)
			if err != nil {
				return bad(err.Error())
			}
			opt.InitAddress = append(opt.InitAddress, host+":"+port)
		}
		if scheme == "rediss-cluster" {
			opt.TLSConfig = tlsConfig()
		}
	default:
		return bad("unknown scheme " + strconv.Quote(scheme) + ": want redis, rediss, redis-cluster or rediss-cluster")
	}
	opt.DisableCache = true // no client-side caching: every decision goes to Redis
	return opt, nil
}

func splitHostPort(hp string) (string, string, error) {
	i := strings.LastIndexByte(hp, ':')
	if i <= 0 || i == len(hp)-1 {
		return "", "", fmt.Errorf("address %q: want host:port", hp)
	}
	if p, err := strconv.Atoi(hp[i+1:]); err != nil || p < 1 || p > 65535 {
		return "", "", fmt.Errorf("address %q: bad port", hp)
	}
	return hp[:i], hp[i+1:], nil
}

// RedactURL returns a store URL with its password hidden, for logs and
// messages.
func RedactURL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
		}
	}
	return raw
}

// Key returns the Redis key holding the state of key under algorithm a.
func (s *Store) Key(a algo.Algorithm, key string) string {
	return s.prefix + algoCodes[a] + key
}

// Client returns the store's rueidis client.
func (s *Store) Client() rueidis.Client { return s.c }

// part is the checks of one batch that one script call decides.
type part struct {
	idx   []int  // indexes into the batch
	slot  uint16 // its cluster slot (0 on standalone Redis)
	algos uint8  // the algorithms it uses, a bit each
	keys  []string
	args  []string
	reply []int64
	err   error
}

// Take decides checks atomically. See [store.Store] and the package doc.
func (s *Store) Take(ctx context.Context, checks []store.Check, res *store.Result) error {
	if err := store.Validate(checks); err != nil {
		return err
	}
	parts := s.split(checks)
	if len(parts) == 1 {
		p := &parts[0]
		s.decide(ctx, p)
		if p.err != nil {
			return p.err
		}
		res.Allowed = p.reply[1] == 1
		res.Now = time.UnixMicro(p.reply[0])
		fill(res, checks, p, 2, 6)
		return nil
	}
	return s.takeParts(ctx, checks, parts, res)
}

// argsPerCheck is how many ARGV values the take scripts read per check:
// algorithm code, p1, p2, p3, cost.
const argsPerCheck = 5

// split groups the checks by cluster slot (one group on standalone Redis),
// in first-seen order, and encodes each group's keys and arguments.
func (s *Store) split(checks []store.Check) []part {
	var parts []part
	var slots []uint16
	for i := range checks {
		c := &checks[i]
		k := s.Key(c.Limit.Algorithm, c.Key)
		g := 0
		if s.cluster {
			sl := Slot(k)
			for g = 0; g < len(slots) && slots[g] != sl; g++ {
			}
			if g == len(slots) {
				slots = append(slots, sl)
			}
		}
		if g == len(parts) {
			parts = append(parts, part{})
			if s.cluster {
				parts[g].slot = slots[g]
			}
		}
		p := &parts[g]
		p1, p2, p3 := c.Limit.Params()
		p.idx = append(p.idx, i)
		p.algos |= 1 << c.Limit.Algorithm
		p.keys = append(p.keys, k)
		p.args = append(p.args, algoArgs[c.Limit.Algorithm], strconv.FormatInt(p1, 10), strconv.FormatInt(p2, 10), strconv.FormatInt(p3, 10), strconv.FormatInt(c.Cost, 10))
	}
	return parts
}

// run executes script for p and parses a reply of 2 + per×len(p.idx)
// integers (take, per 6) or 1 + per×len(p.idx) (refund, per 4) into p.reply.
func (s *Store) run(ctx context.Context, sc *rueidis.Lua, p *part, per int) {
	head := 2
	if per == 4 {
		head = 1
	}
	msgs, err := sc.Exec(ctx, s.c, p.keys, p.args).ToArray()
	if err != nil {
		p.err = fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		return
	}
	if want := head + per*len(p.idx); len(msgs) != want {
		p.err = fmt.Errorf("%w: script replied %d values, want %d", store.ErrUnavailable, len(msgs), want)
		return
	}
	p.reply = p.reply[:0]
	for i := range msgs {
		v, err := msgs[i].AsInt64()
		if err != nil {
			p.err = fmt.Errorf("%w: script reply %d: %w", store.ErrUnavailable, i, err)
			return
		}
		p.reply = append(p.reply, v)
	}
}

// fill writes the decisions of part p (per values per check, from offset
// off in p.reply) into res.
func fill(res *store.Result, checks []store.Check, p *part, off, per int) {
	if len(res.Decisions) != len(checks) {
		res.Decisions = append(res.Decisions[:0], make([]algo.Decision, len(checks))...)
	}
	for j, i := range p.idx {
		r := p.reply[off+per*j:]
		res.Decisions[i] = algo.Outcome{Allowed: r[0] == 1, Remaining: r[1], RetryUs: r[2], ResetUs: r[3]}.Decision(checks[i].Limit)
	}
}

// takeParts decides a batch over several cluster slots: reserve every part
// in parallel, then refund the charged parts if any part rejected or failed.
func (s *Store) takeParts(ctx context.Context, checks []store.Check, parts []part, res *store.Result) error {
	var wg sync.WaitGroup
	for g := range parts {
		wg.Go(func() { s.decide(ctx, &parts[g]) })
	}
	wg.Wait()
	allowed, failed := true, error(nil)
	var now int64
	for g := range parts {
		if parts[g].err != nil {
			failed = parts[g].err
			continue
		}
		allowed = allowed && parts[g].reply[1] == 1
		now = max(now, parts[g].reply[0])
	}
	res.Allowed = allowed && failed == nil
	res.Now = time.UnixMicro(now)
	for g := range parts {
		if parts[g].err == nil {
			fill(res, checks, &parts[g], 2, 6)
		}
	}
	if res.Allowed {
		return nil
	}
	// Refund the parts that were charged, each with the information its
	// reservation returned.
	var refunds []part
	for g := range parts {
		p := &parts[g]
		if p.err != nil || p.reply[1] != 1 {
			continue
		}
		r := part{idx: p.idx, algos: p.algos, keys: p.keys}
		for j := range p.idx {
			a := p.args[argsPerCheck*j : argsPerCheck*(j+1)]
			info := p.reply[2+6*j+4 : 2+6*j+6]
			r.args = append(r.args, a...)
			r.args = append(r.args, strconv.FormatInt(info[0], 10), strconv.FormatInt(info[1], 10))
		}
		refunds = append(refunds, r)
	}
	// A refund must happen even when the caller's deadline has passed.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	s.parallel(rctx, &refundScripts, refunds, 4)
	for g := range refunds {
		if refunds[g].err != nil {
			return fmt.Errorf("redisstore: refund of a rejected cross-slot batch failed, its reservation stays charged: %w", refunds[g].err)
		}
		fill(res, checks, &refunds[g], 1, 4)
	}
	return failed
}

// parallel runs every part at once, each with the script of its algorithms.
func (s *Store) parallel(ctx context.Context, scripts *[allAlgorithms + 1]*rueidis.Lua, parts []part, per int) {
	var wg sync.WaitGroup
	for g := range parts {
		wg.Go(func() { s.run(ctx, scripts[parts[g].algos], &parts[g], per) })
	}
	wg.Wait()
}

// Close closes the client if the store opened it. It is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		if s.owned {
			s.c.Close()
		}
	})
	return nil
}

var (
	_ store.Store  = (*Store)(nil)
	_ store.Holder = (*Store)(nil)
)

// Shard implements store.Sharded: the cluster slot of c's Redis key
// (every key of a standalone Redis is in domain 0).
func (s *Store) Shard(c store.Check) int {
	if !s.cluster {
		return 0
	}
	return int(Slot(s.Key(c.Limit.Algorithm, c.Key)))
}

var _ store.Sharded = (*Store)(nil)
