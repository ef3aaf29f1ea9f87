package redisstore

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// CheckURL reports what is wrong with a store URL (see [Config.URL]),
// without connecting: nil when New would accept it.
func CheckURL(raw string) error {
	_, err := parseURL(raw)
	return err
}

// parseURL turns a store URL (see [Config.URL]) into rueidis options.
func parseURL(raw string) (rueidis.ClientOption, error) {
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
	case "redis-sentinel", "rediss-sentinel":
		o, err := parseSentinel(rest, scheme == "rediss-sentinel")
		if err != nil {
			return bad(err.Error())
		}
		opt = o
	default:
		return bad("unknown scheme " + strconv.Quote(scheme) + ": want redis, rediss, redis-cluster, rediss-cluster, redis-sentinel or rediss-sentinel")
	}
	opt.DisableCache = true // no client-side caching: every decision goes to Redis
	return opt, nil
}

// parseSentinel reads the rest of a redis-sentinel URL:
// [user:pass@]host:port[,host:port…]/<master name>[?options], the user
// and password the master's, the options sentinel_username,
// sentinel_password and db.
func parseSentinel(rest string, useTLS bool) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	rest, query, _ := strings.Cut(rest, "?")
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, pass, _ := strings.Cut(rest[:at], ":")
		var err error
		if opt.Username, err = url.PathUnescape(user); err != nil {
			return opt, fmt.Errorf("user name: %w", err)
		}
		if opt.Password, err = url.PathUnescape(pass); err != nil {
			return opt, fmt.Errorf("password: %w", err)
		}
		rest = rest[at+1:]
	}
	hosts, master, _ := strings.Cut(rest, "/")
	master, err := url.PathUnescape(master)
	if err != nil || master == "" || strings.Contains(master, "/") {
		return opt, errors.New("want redis-sentinel://host:port[,host:port]/<master name>: the name the sentinels monitor the master under")
	}
	for _, hp := range strings.Split(hosts, ",") {
		host, port, err := splitHostPort(hp)
		if err != nil {
			return opt, err
		}
		opt.InitAddress = append(opt.InitAddress, host+":"+port)
	}
	opt.Sentinel.MasterSet = master
	q, err := url.ParseQuery(query)
	if err != nil {
		return opt, err
	}
	for k, v := range q {
		switch k {
		case "sentinel_username":
			opt.Sentinel.Username = v[0]
		case "sentinel_password":
			opt.Sentinel.Password = v[0]
		case "db":
			if opt.SelectDB, err = strconv.Atoi(v[0]); err != nil || opt.SelectDB < 0 {
				return opt, fmt.Errorf("db=%q: want a database number", v[0])
			}
		default:
			return opt, fmt.Errorf("unknown option %q: want sentinel_username, sentinel_password or db", k)
		}
	}
	if useTLS {
		opt.TLSConfig, opt.Sentinel.TLSConfig = tlsConfig(), tlsConfig()
	}
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
	if i := strings.Index(rest, "sentinel_password="); i >= 0 {
		end := strings.IndexByte(rest[i:], '&')
		if end < 0 {
			end = len(rest) - i
		}
		rest = rest[:i] + "sentinel_password=xxxxx" + rest[i+end:]
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
			return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
		}
	}
	return scheme + "://" + rest
}
