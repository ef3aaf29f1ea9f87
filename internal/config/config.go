// Package config reads fairgate's YAML config file: strict decoding (an
// unknown field is an error with its line), defaults, and validation that
// collects every problem with its file, line and field. The result is a
// policy.Policy plus the service's own settings; nothing here is used on
// the request path.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/policy"

	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/quota"
)

// Config is a loaded, valid config file.
type Config struct {
	// File is the path it was read from.
	File string
	// Policy is the limiting policy.
	Policy policy.Policy
	// Headers is the response header form: "draft" (RateLimit-Limit,
	// RateLimit-Remaining, RateLimit-Reset), "structured" (the IETF draft's
	// RateLimit and RateLimit-Policy structured fields) or "x"
	// (X-RateLimit-*).
	Headers string
	// Providers are the outbound providers by name.
	Providers map[string]quota.Provider
	// Queues are the kinds of job of the fair job queue.
	Queues fairq.Kinds
	// QueueWeights are the dispatch weights by plan (unlisted plans: 1).
	QueueWeights map[string]int
	// Dependencies are the downstream dependencies with a circuit breaker
	// by name; "upstream" is the proxied API's.
	Dependencies map[string]breaker.Settings
	// RLS is the Envoy rate limit service's configuration.
	RLS rls.Config
	// Dashboard turns GET /dashboard on (the default) or off.
	Dashboard bool
	// Auth are the credentials the proxy accepts.
	Auth auth.Config
	// TrustedProxies are the peers whose X-Forwarded-For and Forwarded
	// headers are believed.
	TrustedProxies []netip.Prefix
	// ClientIPHeader is the one header the trusted proxies put the client's
	// address in: "x-forwarded-for" (the default), "forwarded" or
	// "x-real-ip". Never a mix.
	ClientIPHeader string
	// UpstreamHeaders name the headers the proxy tells the upstream the
	// verified tenant and plan in (client-sent copies are removed).
	UpstreamHeaders UpstreamHeaders
	// Instances is how many fairgate instances share the store (sizes the
	// fallback limiter). At least 1.
	Instances int
}

// Problem is one thing wrong with a file.
type Problem struct {
	Line    int    // 1-based; 0 when the file as a whole is wrong
	Path    string // the field, such as plans.free[0].burst
	Message string // what is wrong and what would be right
}

// Error is every problem of one file. A file with problems is never used.
type Error struct {
	File     string
	Problems []Problem
}

// Error lists the problems, one per line, as file:line: field: message.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Line > 0 {
			fmt.Fprintf(&b, "%s:%d: %s: %s", e.File, p.Line, p.Path, p.Message)
		} else {
			fmt.Fprintf(&b, "%s: %s: %s", e.File, p.Path, p.Message)
		}
	}
	return b.String()
}

// MaxFileBytes is the largest config file fairgate reads: 4 MiB, some
// thousand times a policy of a hundred plans and ten thousand tenants'
// overrides in the file (run-time overrides live in the store).
const MaxFileBytes = 4 << 20

// ReadFile reads the config file at path, refusing one over MaxFileBytes
// without reading it whole.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("config: %s is over %d bytes (4 MiB), the most a config file may be: keep tenants' overrides in the store (admin API) instead", path, MaxFileBytes)
	}
	return data, nil
}

// UpstreamHeaders name the request headers that carry the verified
// identity to the proxied upstream.
type UpstreamHeaders struct {
	// Tenant is the verified tenant's header. Default X-Fairgate-Tenant.
	Tenant string
	// Plan is the tenant's plan's header. Default X-Fairgate-Plan.
	Plan string
}

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse validates data as the config file named file.
func Parse(file string, data []byte) (*Config, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("config: %s is over %d bytes (4 MiB), the most a config file may be", file, MaxFileBytes)
	}
	d := &decoder{file: file, where: map[string]where{}}
	c := &Config{File: file, Headers: "draft", Providers: map[string]quota.Provider{}, Queues: fairq.Kinds{}, QueueWeights: map[string]int{}, Dependencies: map[string]breaker.Settings{}, Instances: 1, Dashboard: true,
		ClientIPHeader: "x-forwarded-for", UpstreamHeaders: UpstreamHeaders{Tenant: "X-Fairgate-Tenant", Plan: "X-Fairgate-Plan"}}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		line := 0
		msg := err.Error()
		var te *yaml.TypeError
		if errors.As(err, &te) && len(te.Errors) > 0 {
			msg = te.Errors[0]
		}
		if n, ok := yamlLine(msg); ok {
			line = n
		}
		return nil, &Error{File: file, Problems: []Problem{{Line: line, Path: "(file)", Message: "not valid YAML: " + strings.TrimPrefix(msg, "yaml: ")}}}
	}
	if len(root.Content) == 0 {
		return nil, &Error{File: file, Problems: []Problem{{Path: "(file)", Message: "empty: want a mapping with plans, classes and routes (see examples/fairgate.yaml)"}}}
	}
	d.config(root.Content[0], c)
	for _, plan := range slices.Sorted(maps.Keys(d.weightKeys)) {
		if _, ok := c.Policy.Plans[plan]; !ok {
			d.add(d.weightKeys[plan], "queues.weights."+plan, "unknown plan %q: want one of %s", plan, strings.Join(slices.Sorted(maps.Keys(c.Policy.Plans)), ", "))
		}
	}
	// The policy's own validation runs too, so that every problem is
	// reported at once; a field that already has a decoding problem gets
	// no second one that follows from it (other fields on its line do).
	bad := map[string]bool{}
	for _, p := range d.problems {
		bad[p.Path] = true
	}
	if _, err := policy.Compile(c.Policy); err != nil {
		var ps policy.Problems
		if errors.As(err, &ps) {
			for _, p := range ps {
				w := d.lookup(p.Path)
				if !bad[w.shown] {
					d.problems = append(d.problems, Problem{Line: w.line, Path: w.shown, Message: p.Message})
				}
			}
		} else {
			d.problems = append(d.problems, Problem{Path: "(policy)", Message: err.Error()})
		}
	}
	if len(d.problems) > 0 {
		sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
		return nil, &Error{File: file, Problems: d.problems}
	}
	return c, nil
}

// yamlLine finds "line N" in a yaml error message.
func yamlLine(msg string) (int, bool) {
	i := strings.Index(msg, "line ")
	if i < 0 {
		return 0, false
	}
	j := i + 5
	for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
		j++
	}
	n, err := strconv.Atoi(msg[i+5 : j])
	return n, err == nil
}

// where is a field's line and the path shown to the user.
type where struct {
	line  int
	shown string
}

type decoder struct {
	file     string
	problems []Problem
	// where maps policy.Problem paths to the field's place in the file.
	where map[string]where
	// weightKeys are the plans queues.weights names, checked once the
	// plans are known.
	weightKeys map[string]*yaml.Node
}

func (d *decoder) add(n *yaml.Node, path, format string, args ...any) {
	d.problems = append(d.problems, Problem{Line: n.Line, Path: path, Message: fmt.Sprintf(format, args...)})
}

// note records that the limiter's path lp is the file's field shown, at n.
func (d *decoder) note(lp, shown string, n *yaml.Node) { d.where[lp] = where{n.Line, shown} }

// lookup returns the place of limiter path lp, or of its longest recorded
// prefix.
func (d *decoder) lookup(lp string) where {
	for p := lp; p != ""; {
		if w, ok := d.where[p]; ok {
			if p != lp {
				w.shown += lp[len(p):]
			}
			return w
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return where{0, lp}
}

// fields walks mapping n, calling the handler of each key; unknown keys,
// repeated keys and non-mappings are problems.
func (d *decoder) fields(n *yaml.Node, path string, handlers map[string]func(v *yaml.Node, path string)) {
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "want a mapping with %s", strings.Join(sortedNames(handlers), ", "))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		h, ok := handlers[k.Value]
		switch {
		case !ok:
			d.add(k, p, "unknown field %q: want one of %s", k.Value, strings.Join(sortedNames(handlers), ", "))
		case seen[k.Value]:
			d.add(k, p, "field %q given twice", k.Value)
		default:
			seen[k.Value] = true
			h(v, p)
		}
	}
}

// entries walks a mapping of user-chosen names.
func (d *decoder) entries(n *yaml.Node, path string, each func(name string, k, v *yaml.Node, path string)) {
	if n.Kind != yaml.MappingNode {
		d.add(n, path, "want a mapping of names")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if seen[k.Value] {
			d.add(k, p, "%q given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		each(k.Value, k, v, p)
	}
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func sortedNames[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func (d *decoder) str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.add(n, path, "want a string")
		return ""
	}
	return n.Value
}

func (d *decoder) int(n *yaml.Node, path string) int64 {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
			return v
		}
	}
	d.add(n, path, "%q is not an integer", n.Value)
	return 0
}

func (d *decoder) float(n *yaml.Node, path string) float64 {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return v
		}
	}
	d.add(n, path, "%q is not a number", n.Value)
	return 0
}

func (d *decoder) bool(n *yaml.Node, path string) bool {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true", "on", "yes":
			return true
		case "false", "off", "no":
			return false
		}
	}
	d.add(n, path, "%q: want on or off", n.Value)
	return false
}

func (d *decoder) failMode(n *yaml.Node, path string) policy.FailMode {
	switch d.str(n, path) {
	case "open":
		return policy.FailOpen
	case "closed":
		return policy.FailClosed
	case "":
	default:
		d.add(n, path, "fail mode %q: want open or closed", n.Value)
	}
	return policy.FailOpen
}

// duration parses a positive duration such as 30s.
func (d *decoder) duration(n *yaml.Node, path string) time.Duration {
	v := d.str(n, path)
	p, err := time.ParseDuration(v)
	if err != nil || p <= 0 {
		d.add(n, path, "duration %q does not parse: want a positive duration such as 500ms, 30s or 5m", v)
		return 0
	}
	return p
}

// slowDown parses a class's slow_down: off, or a duration (see
// policy.Class.SlowDown; off is stored as -1).
func (d *decoder) slowDown(n *yaml.Node, path string) time.Duration {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "off", "false", "no":
			return -1
		case "on", "true", "yes":
			return 0
		}
		if v, err := time.ParseDuration(n.Value); err == nil && v > 0 {
			return v
		}
	}
	d.add(n, path, "slow_down %q: want off, or a positive duration such as 100ms", n.Value)
	return 0
}

// count parses a non-negative integer.
func (d *decoder) count(n *yaml.Node, path string) int64 {
	v := d.int(n, path)
	if v < 0 {
		d.add(n, path, "%d is negative", v)
		return 0
	}
	return v
}

// period parses a duration ("1m", "10s", "7d") or a calendar window ("day",
// "month").
func (d *decoder) period(n *yaml.Node, path string) (time.Duration, policy.Calendar) {
	v := d.str(n, path)
	switch v {
	case "day":
		return 0, policy.Day
	case "month":
		return 0, policy.Month
	case "":
		return 0, policy.NoCalendar
	}
	s := v
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil {
			return time.Duration(n) * 24 * time.Hour, policy.NoCalendar
		}
	}
	p, err := time.ParseDuration(s)
	if err != nil || p <= 0 {
		d.add(n, path, "period %q does not parse: want a positive duration such as 1s, 1m, 1h or 7d, or day or month for a calendar window", v)
		return 0, policy.NoCalendar
	}
	return p, policy.NoCalendar
}
