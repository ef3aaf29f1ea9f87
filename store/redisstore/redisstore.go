package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/store"
)

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
	if _, err := s.exec(ctx, holdScript, []string{s.Key(lim.Algorithm, key)}, args); err != nil {
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
	// URL is redis://[user:pass@]host:port[/db], rediss://… (TLS),
	// redis-cluster://[user:pass@]host:port,host:port (rediss-cluster://
	// for TLS), or redis-sentinel://[user:pass@]host:port,host:port/<master
	// name>[?sentinel_username=…&sentinel_password=…&db=N] for a master the
	// Redis Sentinels at those addresses watch (rediss-sentinel:// for TLS;
	// user and password are the master's), or unix:///path/to/redis.sock.
	// A sentinel's address given as a Redis server's is refused. The store
	// owns the client it opens. Parameters of every form: tls_ca_file,
	// tls_cert_file and tls_key_file, tls_server_name, skip_verify (no
	// verification at all), skip_hostname_verify (the chain is verified,
	// the name is not), password_file, key_prefix; docs/redis.md has them.
	// The client it opens has client-side caching on, for the reads made
	// with DoCache only (see [Store.Tracking]; decisions never are), and
	// finds dead connections by TCP keep-alive rather than by PINGs.
	URL string
	// Prefix starts every key the store writes. Zero means the URL's
	// key_prefix parameter, else "fg:". It must not contain '{' or '}'.
	Prefix string
	// NoCoalescing sends every batch, and every settlement's part, in a
	// script call of its own instead of merging concurrent ones (see
	// coalesce.go). Zero means coalesce.
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
	tracking   bool // Redis keeps the client's cached reads fresh
	coMu       sync.Mutex
	co         map[uint32]*coalescer // by slot or node, takes' and settlements' apart (coalescerFor); one of each on standalone Redis
	nodes      nodeMaps              // a Cluster's slot map, for merging by node (node.go)
}

// New returns a store on the configured Redis. With a URL it connects and
// peeks at a key as a decision does; it fails with [ErrConnect] if Redis
// cannot be reached, and with [ErrRefused] if Redis refuses the URL's
// settings.
func New(c Config) (*Store, error) {
	if (c.Client == nil) == (c.URL == "") {
		return nil, errors.New("redisstore: set exactly one of Config.Client and Config.URL")
	}
	prefix := c.Prefix
	if prefix == "" && c.URL != "" {
		prefix = urlPrefix(c.URL)
	}
	if prefix == "" {
		prefix = "fg:"
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("redisstore: prefix %q contains a brace: it would change the keys' cluster slots", prefix)
	}
	s := &Store{c: c.Client, prefix: prefix, noCoalesce: c.NoCoalescing}
	if s.c == nil {
		opt, err := parseURL(c.URL)
		if err != nil {
			return nil, err
		}
		opt.RetryDelay = retryDelay
		s.c, err = rueidis.NewClient(opt)
		if errors.Is(err, rueidis.ErrNoCache) {
			// No client tracking (a proxy without RESP3, an ACL user
			// without CLIENT TRACKING): the cached reads go to Redis.
			opt.DisableCache = true
			s.c, err = rueidis.NewClient(opt)
		}
		if err != nil {
			return nil, connectError(c.URL, err)
		}
		s.owned, s.tracking = true, !opt.DisableCache
		if opt.Sentinel.MasterSet == "" {
			if err := notSentinel(s.c, c.URL); err != nil {
				s.c.Close()
				return nil, err
			}
		}
	}
	s.cluster = s.c.Mode() == rueidis.ClientModeCluster
	if s.owned {
		if err := s.checkAccess(c.URL); err != nil {
			s.c.Close()
			return nil, err
		}
	}
	return s, nil
}

// accessCheck is the peek New makes: a decision's script on a key under
// the prefix, which an ACL user without the commands or the key pattern
// of docs/redis.md is refused.
var accessCheck = []store.Check{{Key: "probe", Limit: algo.Limit{Limit: 1, Period: time.Second}}}

// checkAccess peeks at a key as a decision does, so that an ACL user that
// may not decide is refused at start rather than on every call.
func (s *Store) checkAccess(raw string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var res store.Result
	if err := s.Take(ctx, accessCheck, &res); err != nil {
		return connectError(raw, err)
	}
	return nil
}

// notSentinel refuses a Redis Sentinel given as a Redis server: it would
// connect and then fail every script call.
func notSentinel(c rueidis.Client, raw string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "NOPERM") {
		return nil // an ACL user without INFO: nothing to tell, and no sentinel would accept it anyway
	}
	if err != nil {
		return connectError(raw, err)
	}
	if strings.Contains(info, "redis_mode:sentinel") {
		return fmt.Errorf("redisstore: %s is a Redis Sentinel, not a Redis server: use redis-sentinel://host:port[,host:port]/<master name>", RedactURL(raw))
	}
	return nil
}

// Key returns the Redis key holding the state of key under algorithm a.
func (s *Store) Key(a algo.Algorithm, key string) string {
	return s.prefix + algoCodes[a] + key
}

// Prefix returns the prefix of every key the store writes: Config.Prefix,
// the URL's key_prefix, or "fg:". Other users of the same Redis (the
// shared overlay, the job queue) take it too, so that one ACL key pattern
// covers them all.
func (s *Store) Prefix() string { return s.prefix }

// Client returns the store's rueidis client.
func (s *Store) Client() rueidis.Client { return s.c }

// Tracking reports whether Redis keeps the client's cached reads fresh
// (RESP3 client tracking; see [Config].URL): then a read made with
// DoCache, such as the version the shared overlay and the stored API keys
// are polled by, costs Redis nothing until its key changes. It is false
// for a client of the caller's, and where Redis (or a proxy before it, or
// the ACL user) refuses tracking: DoCache then sends every read to Redis.
func (s *Store) Tracking() bool { return s.tracking }

// Reset forgets key's state under every algorithm: one DEL per
// algorithm's key (in a cluster they may live in different slots). See
// [store.Resetter].
func (s *Store) Reset(ctx context.Context, key string) error {
	cmds := make(rueidis.Commands, 0, len(algo.Algorithms))
	for _, a := range algo.Algorithms {
		cmds = append(cmds, s.c.B().Del().Key(s.Key(a, key)).Build())
	}
	for _, r := range s.c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return fmt.Errorf("%w: reset: %w", store.ErrUnavailable, err)
		}
	}
	return nil
}

// ErrConnect means New could not reach Redis at the URL (refused, timed
// out, reset): worth retrying, unlike a bad URL or option or [ErrRefused].
var ErrConnect = errors.New("redisstore: connect to")

// ErrRefused means New reached Redis (or the sentinels) and was refused
// for the URL's settings: a wrong password or none, an ACL user that may
// not run what fairgate needs, a database number the server lacks, a
// master name the sentinels do not watch, a TLS certificate that does not
// verify. Retrying does not help until the settings or the server change.
var ErrRefused = errors.New("redisstore: Redis refused the settings of")

// refusals say, for a part of a Redis error reply at connect, which
// setting is wrong and how to fix it.
var refusals = []struct{ reply, why string }{
	{"WRONGPASS", "the user name or password is wrong (WRONGPASS): fix the password in the URL (or its password_file), or the ACL user"},
	{"invalid password", "the password is wrong: fix the password in the URL (or its password_file)"},
	{"NOAUTH", "Redis asks for a password and none was given (NOAUTH): put it in the URL (redis://:PASSWORD@host:port, redis://USER:PASSWORD@…) or in password_file; for sentinels that ask for one, sentinel_password"},
	{"NOPERM", "the Redis user may not run what fairgate needs (NOPERM): give it the ACL line of docs/redis.md, with ~PREFIX* for the URL's key_prefix"},
	{"DB index is out of range", "the database number is not one the server has (its databases setting, 16 by default): use a smaller one"},
	{"invalid DB index", "the database number is not one the server has: use 0 to 15, or what its databases setting allows"},
	{"No such master with that name", "the sentinels watch no master of that name: use the name of their `sentinel monitor` line after the last /"},
}

// connectError is err, met while connecting to raw, as ErrRefused with
// what to fix when Redis refused the settings, else as ErrConnect.
func connectError(raw string, err error) error {
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		for _, r := range refusals {
			if strings.Contains(re.Error(), r.reply) {
				return fmt.Errorf("%w %s: %s: %w", ErrRefused, RedactURL(raw), r.why, err)
			}
		}
	}
	var ve *tls.CertificateVerificationError
	if errors.As(err, &ve) {
		return fmt.Errorf("%w %s: the server's TLS certificate does not verify: set tls_ca_file to the CA that signed it, or tls_server_name to a name it holds: %w", ErrRefused, RedactURL(raw), err)
	}
	return fmt.Errorf("%w %s: %w", ErrConnect, RedactURL(raw), err)
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
	_ store.Store    = (*Store)(nil)
	_ store.Resetter = (*Store)(nil)
)

// Shard implements store.Sharded: the cluster slot of c's Redis key
// (every key of a standalone Redis is in domain 0).
func (s *Store) Shard(c store.Check) int {
	if !s.cluster {
		return 0
	}
	return int(slot(s.Key(c.Limit.Algorithm, c.Key)))
}

var _ store.Sharded = (*Store)(nil)

// retryDelay is the client's retry rule for a retryable command (a
// read-only one, or a script made with NewLuaScriptRetryable) that met a
// network error, or a CLUSTERDOWN, LOADING or TRYAGAIN reply: rueidis
// counts the first try as attempt 1, so at most maxRetries tries in all,
// the second 2 ms after the first and the third 4 ms after that (a
// TRYAGAIN past them is the store's to wait out, see tryagain.go).
// rueidis's own rule retries until the caller's deadline, and without one
// for ever: a background poll of a Redis that went away (a kill, a
// failover) then never returned, and with it the probe that notices the
// outage (a store seen "up" for as long as no request came).
func retryDelay(attempts int, _ rueidis.Completed, _ error) time.Duration {
	if attempts >= maxRetries {
		return -1
	}
	return time.Millisecond << attempts
}

// maxRetries bounds retryDelay's tries.
const maxRetries = 3
