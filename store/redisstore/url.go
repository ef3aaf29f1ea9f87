package redisstore

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
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
		return rueidis.ClientOption{}, fmt.Errorf("redisstore: bad URL %q: %s", RedactURL(raw), scrub(why, raw))
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return bad("want redis://host:port, rediss://host:port, redis-cluster://host:port,host:port or redis-sentinel://host:port/<master>")
	}
	rest, query, _ := strings.Cut(rest, "?")
	q, err := url.ParseQuery(query)
	if err != nil {
		return bad(err.Error())
	}
	o, err := takeOptions(q, scheme)
	if err != nil {
		return bad(err.Error())
	}
	var opt rueidis.ClientOption
	switch scheme {
	case "redis", "rediss", "unix":
		// What is left of the query is rueidis's own (db, timeouts, …).
		opt, err = rueidis.ParseURL(scheme + "://" + rest + "?" + q.Encode())
	case "redis-cluster", "rediss-cluster":
		opt, err = parseCluster(rest)
	case "redis-sentinel", "rediss-sentinel":
		opt, err = parseSentinel(rest, q)
	default:
		return bad("unknown scheme " + strconv.Quote(scheme) + ": want redis, rediss, unix, redis-cluster, rediss-cluster, redis-sentinel or rediss-sentinel")
	}
	if err != nil {
		return bad(strings.TrimPrefix(err.Error(), "redis: "))
	}
	if err := o.apply(&opt, strings.HasPrefix(scheme, "rediss")); err != nil {
		return bad(err.Error())
	}
	connOptions(&opt)
	// No CLIENT SETINFO: Redis before 7.2 has none, and an ACL user then
	// needs one command fewer.
	opt.ClientSetInfo = rueidis.DisableClientSetInfo
	return opt, nil
}

// urlPrefix is the key_prefix parameter of a URL parseURL accepted.
func urlPrefix(raw string) string {
	_, rest, _ := strings.Cut(raw, "://")
	_, query, _ := strings.Cut(rest, "?")
	q, _ := url.ParseQuery(query)
	return q.Get("key_prefix")
}

// options are the URL parameters every scheme takes: TLS and secrets.
type options struct {
	caFile, certFile, keyFile, serverName string
	skipVerify, skipHostname              bool
	passwordFile, sentinelPasswordFile    string
}

// schemeParams are the parameters each scheme takes beside the common
// ones (the redis ones are the client library's own).
var schemeParams = map[string][]string{
	"redis":          {"db", "dial_timeout", "write_timeout", "client_name", "protocol", "addr", "master_set"},
	"unix":           {"db", "dial_timeout", "write_timeout", "client_name", "protocol"},
	"redis-cluster":  nil,
	"redis-sentinel": {"sentinel_username", "sentinel_password", "sentinel_password_file", "db"},
}

// commonParams are the parameters every scheme takes.
var commonParams = []string{"tls_ca_file", "tls_cert_file", "tls_key_file", "tls_server_name", "skip_verify", "skip_hostname_verify", "password_file", "key_prefix"}

// takeOptions takes the common parameters out of q, leaving the scheme's
// own, and refuses any other by name.
func takeOptions(q url.Values, scheme string) (options, error) {
	own := schemeParams[strings.Replace(scheme, "rediss", "redis", 1)]
	for k := range q {
		if !slices.Contains(commonParams, k) && !slices.Contains(own, k) {
			return options{}, fmt.Errorf("unknown parameter %q: want %s", k, strings.Join(append(slices.Clone(own), commonParams...), ", "))
		}
	}
	o := options{caFile: q.Get("tls_ca_file"), certFile: q.Get("tls_cert_file"), keyFile: q.Get("tls_key_file"), serverName: q.Get("tls_server_name"),
		passwordFile: q.Get("password_file"), sentinelPasswordFile: q.Get("sentinel_password_file")}
	if p := q.Get("key_prefix"); strings.ContainsAny(p, "{}") {
		return options{}, errors.New("key_prefix contains a brace: it would change the keys' cluster slots")
	}
	for _, b := range []struct {
		name string
		v    *bool
	}{{"skip_verify", &o.skipVerify}, {"skip_hostname_verify", &o.skipHostname}} {
		if q.Has(b.name) {
			v, err := strconv.ParseBool(cmp.Or(q.Get(b.name), "true"))
			if err != nil {
				return o, fmt.Errorf("%s: want true or false", b.name)
			}
			*b.v = v
		}
	}
	for _, k := range commonParams {
		q.Del(k)
	}
	q.Del("sentinel_password_file")
	return o, nil
}

// apply sets the TLS configuration (for a TLS scheme: useTLS) and the
// passwords read from files.
func (o options) apply(opt *rueidis.ClientOption, useTLS bool) error {
	tlsSet := o.caFile != "" || o.certFile != "" || o.keyFile != "" || o.serverName != "" || o.skipVerify || o.skipHostname
	switch {
	case tlsSet && !useTLS:
		return errors.New("tls_* and skip_verify need a TLS scheme: rediss://, rediss-cluster:// or rediss-sentinel://")
	case useTLS:
		c, err := o.tlsConfig()
		if err != nil {
			return err
		}
		if c.ServerName == "" && opt.TLSConfig != nil {
			c.ServerName = opt.TLSConfig.ServerName // rediss://: the host
		}
		opt.TLSConfig = c
		if opt.Sentinel.MasterSet != "" {
			opt.Sentinel.TLSConfig = c.Clone()
		}
	}
	if o.passwordFile != "" {
		if opt.Password != "" {
			return errors.New("a password in the URL and a password_file: give one")
		}
		p, err := readSecret(o.passwordFile)
		if err != nil {
			return err
		}
		opt.Password = p
	}
	if o.sentinelPasswordFile != "" {
		if opt.Sentinel.Password != "" {
			return errors.New("a sentinel_password and a sentinel_password_file: give one")
		}
		p, err := readSecret(o.sentinelPasswordFile)
		if err != nil {
			return err
		}
		opt.Sentinel.Password = p
	}
	return nil
}

// readSecret reads a password from a file, without its trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("password file: %w", err)
	}
	p := strings.TrimRight(string(b), "\r\n")
	if p == "" {
		return "", fmt.Errorf("password file %s is empty", path)
	}
	return p, nil
}

// parseCluster reads the rest of a redis-cluster URL:
// [user:pass@]host:port[,host:port…].
func parseCluster(rest string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	rest, err := userinfo(&opt, rest)
	if err != nil {
		return opt, err
	}
	rest = strings.TrimSuffix(rest, "/")
	for _, hp := range strings.Split(rest, ",") {
		host, port, err := splitHostPort(hp)
		if err != nil {
			return opt, err
		}
		opt.InitAddress = append(opt.InitAddress, host+":"+port)
	}
	return opt, nil
}

// userinfo takes "user:pass@" off rest into opt.
func userinfo(opt *rueidis.ClientOption, rest string) (string, error) {
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return rest, nil
	}
	user, pass, _ := strings.Cut(rest[:at], ":")
	var err error
	if opt.Username, err = url.PathUnescape(user); err != nil {
		return rest, fmt.Errorf("user name: %w", err)
	}
	if opt.Password, err = url.PathUnescape(pass); err != nil {
		return rest, fmt.Errorf("password: %w", err)
	}
	return rest[at+1:], nil
}

// parseSentinel reads the rest of a redis-sentinel URL:
// [user:pass@]host:port[,host:port…]/<master name>, the user and password
// the master's, and its parameters sentinel_username, sentinel_password and
// db.
func parseSentinel(rest string, q url.Values) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	rest, err := userinfo(&opt, rest)
	if err != nil {
		return opt, err
	}
	hosts, master, _ := strings.Cut(rest, "/")
	master, err = url.PathUnescape(master)
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
	opt.Sentinel.Username, opt.Sentinel.Password = q.Get("sentinel_username"), q.Get("sentinel_password")
	if q.Has("db") {
		if opt.SelectDB, err = strconv.Atoi(q.Get("db")); err != nil || opt.SelectDB < 0 {
			return opt, errors.New("db: want a database number")
		}
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

// scrub hides in msg (an error about raw, some from the client library
// or from net/url, which quotes the whole URL) what RedactURL hides in the
// URL: the password and the values of raw's query parameters, each
// wherever it is quoted, and one of 4 bytes or more as it stands (raw and
// unescaped). A URL quoted whole is replaced by its redacted form. The
// paths of the *_file parameters stay: an error about a file names it.
func scrub(msg, raw string) string {
	msg = strings.ReplaceAll(msg, strconv.Quote(raw), strconv.Quote(RedactURL(raw)))
	var secrets []string
	if _, pass, ok := splitUserinfo(raw); ok {
		secrets = append(secrets, pass)
		if u, err := url.PathUnescape(pass); err == nil && u != pass {
			secrets = append(secrets, u)
		}
	}
	_, rest, _ := strings.Cut(raw, "://")
	_, query, _ := strings.Cut(rest, "?")
	q, _ := url.ParseQuery(query)
	for k, vs := range q {
		if !shownParam(k) {
			secrets = append(secrets, vs...)
		}
	}
	for _, v := range secrets {
		if v == "" {
			continue
		}
		msg = strings.ReplaceAll(msg, strconv.Quote(v), `"xxxxx"`)
		if len(v) >= 4 {
			msg = strings.ReplaceAll(msg, v, "xxxxx")
		}
	}
	return msg
}

// splitUserinfo finds the user name and password of raw, read as
// RedactURL reads it: by net/url when it parses raw, else up to the last
// '@' (a password with a '?' or a '/' in it, a host list, a typo such as
// redis:/…); ok is false without a password. at indexes the '@' in raw.
func splitUserinfo(raw string) (user, pass string, ok bool) {
	_, user, pass, _, ok = findUserinfo(raw)
	return user, pass, ok
}

// findUserinfo is splitUserinfo with the index of the userinfo's start and of
// its '@' in raw (-1 when there is none).
func findUserinfo(raw string) (start int, user, pass string, at int, ok bool) {
	start = strings.Index(raw, "://") + 3
	if start < 3 {
		i := strings.IndexByte(raw, ':')
		if i < 0 {
			return 0, "", "", -1, false
		}
		start = i + 1
		for start < len(raw) && raw[start] == '/' {
			start++
		}
	}
	rest := raw[start:]
	at = -1
	if u, err := url.Parse(raw); err == nil && strings.Contains(raw, "://") {
		if u.User == nil {
			return start, "", "", -1, false
		}
		authority := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority = rest[:i]
		}
		at = strings.LastIndexByte(authority, '@')
	} else {
		at = strings.LastIndexByte(rest, '@')
	}
	if at < 0 {
		return start, "", "", -1, false
	}
	user, pass, ok = strings.Cut(rest[:at], ":")
	return start, user, pass, start + at, ok
}

// RedactURL returns a store URL for logs and messages: its password and
// the query parameters' values hidden (the names kept), but for the known
// ones that hold no secret (shownParam). A URL that does not
// parse is read to its last '@', so that a password with a '?' in it, or
// a URL with a typo, is hidden all the same.
func RedactURL(raw string) string {
	start, user, _, at, hasPass := findUserinfo(raw)
	head, rest := raw[:start], raw[start:]
	if at >= 0 {
		switch {
		case !hasPass:
			// a user name alone: kept
		case strings.ContainsAny(user, "?/#"):
			rest = "xxxxx@" + raw[at+1:]
		default:
			rest = user + ":xxxxx@" + raw[at+1:]
		}
	}
	rest, query, hasQuery := strings.Cut(rest, "?")
	if !hasQuery {
		return head + rest
	}
	params := strings.Split(query, "&")
	for i, p := range params {
		if name, v, hasValue := strings.Cut(p, "="); hasValue && v != "" && !shownParam(name) {
			params[i] = name + "=xxxxx"
		}
	}
	return head + rest + "?" + strings.Join(params, "&")
}

// shownParam reports whether a query parameter's value is shown in
// messages: a known one that holds no secret (a database number, a
// timeout, a prefix, a file's path), so that an error about it can say
// what was wrong with it. Every other value is hidden, an unknown
// parameter's above all (a misspelt password=…).
func shownParam(name string) bool {
	switch name {
	case "db", "dial_timeout", "write_timeout", "client_name", "protocol", "key_prefix",
		"skip_verify", "skip_hostname_verify", "tls_server_name", "master_set":
		return true
	}
	return strings.HasSuffix(name, "_file")
}
