package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/configfile"
	"github.com/fairgate/fairgate/internal/rls"
	"github.com/fairgate/fairgate/policy"
)

// rlsFiles reads the envoyproxy/ratelimit files a list of globs names,
// with the node each domain came from.
func (d *decoder) rlsFiles(v *yaml.Node, path string) (domains []rls.Domain, where []*yaml.Node) {
	d.List(v, path, func(i int, v *yaml.Node, path string) {
		pattern := d.rel(d.Str(v, path))
		matches, err := filepath.Glob(pattern)
		if err == nil && len(matches) == 0 {
			err = errors.New("no such file")
		}
		if err != nil {
			d.Add(v, path, "%s: %v", pattern, err)
			return
		}
		for _, f := range matches {
			ds, err := ParseRLSFile(f)
			if err != nil {
				d.Add(v, path, "%v", err)
				continue
			}
			for range ds {
				where = append(where, v)
			}
			domains = append(domains, ds...)
		}
	})
	return domains, where
}

// rlsSection decodes the rls section: envoyproxy/ratelimit config files
// (as they are), inline domains in the same format, and fairgate's own
// settings for them.
func (d *decoder) rlsSection(n *yaml.Node, path string, c *Config) {
	c.RLS.FailClosed = rls.ClosedUnavailable
	fail := policy.FailOpen
	overrides := map[string]policy.FailMode{}
	overrideKeys := map[string]*yaml.Node{}
	var domains []rls.Domain
	var where []*yaml.Node // the node each domain came from, for duplicate errors
	d.Fields(n, path, configfile.Handlers{
		"files": func(v *yaml.Node, path string) {
			ds, ws := d.rlsFiles(v, path)
			domains, where = append(domains, ds...), append(where, ws...)
		},
		"config": func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				domains = append(domains, d.rlsDomain(v, path))
				where = append(where, v)
			})
		},
		"tenant_key": func(v *yaml.Node, path string) { c.RLS.TenantKey = d.Str(v, path) },
		"fail":       func(v *yaml.Node, path string) { fail = d.Fail(v, path) },
		"fail_closed_code": func(v *yaml.Node, path string) {
			switch s := d.Str(v, path); s {
			case "unavailable":
				c.RLS.FailClosed = rls.ClosedUnavailable
			case "over_limit":
				c.RLS.FailClosed = rls.ClosedOverLimit
			default:
				d.Add(v, path, "%q: want unavailable (the gRPC status; Envoy applies its failure_mode_deny) or over_limit", s)
			}
		},
		"algorithm": func(v *yaml.Node, path string) {
			a, err := algo.ParseAlgorithm(d.Str(v, path))
			if err != nil {
				d.Add(v, path, "unknown algorithm %q: want gcra, token_bucket, sliding_log, sliding_window or fixed_window", v.Value)
			}
			c.RLS.Algorithm = a
		},
		"domains": func(v *yaml.Node, path string) {
			d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
				overrideKeys[name] = k
				d.Fields(v, path, configfile.Handlers{
					"fail": func(v *yaml.Node, path string) { overrides[name] = d.Fail(v, path) },
				})
			})
		},
	})
	seen := map[string]bool{}
	for i, dom := range domains {
		if seen[dom.Name] {
			d.Add(where[i], path, "domain %q is configured twice: merging domains (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG) is not supported", dom.Name)
		}
		seen[dom.Name] = true
		dom.Fail = fail
		if f, ok := overrides[dom.Name]; ok {
			dom.Fail = f
		}
		// The algorithm's own bounds, with the configured algorithm.
		d.rlsLimits(where[i], path, dom.Name, dom.Descriptors, c.RLS.Algorithm)
		c.RLS.Domains = append(c.RLS.Domains, dom)
	}
	for name, k := range overrideKeys {
		if !seen[name] {
			d.Add(k, path+".domains."+name, "no domain %q is configured", name)
		}
	}
}

// rlsLimits checks every limit of a domain against the algorithm's bounds.
func (d *decoder) rlsLimits(n *yaml.Node, path, domain string, ds []*rls.Descriptor, a algo.Algorithm) {
	for _, x := range ds {
		if rl := x.Limit; rl != nil && !rl.Unlimited && rl.RequestsPerUnit > 0 {
			l := algo.Limit{Limit: int64(rl.RequestsPerUnit), Period: rls.Period(rl.Unit), Algorithm: a}
			if err := l.Validate(); err != nil {
				d.Add(n, path, "domain %q, descriptor %s: %d per %s: %v", domain, x.Key, rl.RequestsPerUnit, strings.ToLower(rl.Unit.String()), err)
			}
		}
		d.rlsLimits(n, path, domain, x.Children, a)
	}
}

// ParseRLSFile reads one envoyproxy/ratelimit config file: a domain and
// its descriptors, strictly (unknown keys and every rule envoyproxy/ratelimit
// enforces are problems, each with its line).
func ParseRLSFile(file string) ([]rls.Domain, error) {
	data, err := ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("rls %w", err)
	}
	return ParseRLS(file, data)
}

// ParseRLS is ParseRLSFile on data already read; file names it in errors.
func ParseRLS(file string, data []byte) ([]rls.Domain, error) {
	root, err := configfile.Root(file, data, "want a domain and its descriptors")
	if err != nil {
		return nil, err
	}
	d := &decoder{Decoder: configfile.NewDecoder(file)}
	dom := d.rlsDomain(root, "")
	if err := d.Err(); err != nil {
		return nil, err
	}
	return []rls.Domain{dom}, nil
}

// rlsDomain decodes {domain, descriptors}.
func (d *decoder) rlsDomain(n *yaml.Node, path string) rls.Domain {
	var dom rls.Domain
	d.Fields(n, path, configfile.Handlers{
		"domain":      func(v *yaml.Node, path string) { dom.Name = d.Str(v, path) },
		"descriptors": func(v *yaml.Node, path string) { dom.Descriptors = d.rlsDescriptors(v, path) },
	})
	if dom.Name == "" {
		d.Add(n, configfile.Join(path, "domain"), "a config needs a non-empty domain")
	}
	return dom
}

// rlsDescriptors decodes one level of descriptors.
func (d *decoder) rlsDescriptors(n *yaml.Node, path string) []*rls.Descriptor {
	var out []*rls.Descriptor
	seen := map[[2]string]bool{}
	d.List(n, path, func(i int, v *yaml.Node, path string) {
		x := &rls.Descriptor{}
		d.Fields(v, path, configfile.Handlers{
			"key":             func(v *yaml.Node, path string) { x.Key = d.Str(v, path) },
			"value":           func(v *yaml.Node, path string) { x.Value = d.Str(v, path) },
			"rate_limit":      func(v *yaml.Node, path string) { x.Limit = d.rlsRateLimit(v, path) },
			"shadow_mode":     func(v *yaml.Node, path string) { x.Shadow = d.Bool(v, path) },
			"detailed_metric": func(v *yaml.Node, path string) { x.DetailedMetric = d.Bool(v, path) },
			"descriptors":     func(v *yaml.Node, path string) { x.Children = d.rlsDescriptors(v, path) },
		})
		if x.Key == "" {
			d.Add(v, path, "descriptor has an empty key")
		}
		if seen[[2]string{x.Key, x.Value}] {
			d.Add(v, path, "duplicate descriptor: key %q, value %q", x.Key, x.Value)
		}
		seen[[2]string{x.Key, x.Value}] = true
		out = append(out, x)
	})
	return out
}

// rlsRateLimit decodes a rate_limit block.
func (d *decoder) rlsRateLimit(n *yaml.Node, path string) *rls.RateLimit {
	rl := &rls.RateLimit{}
	unit := ""
	var unitNode *yaml.Node
	hasRPU := false
	d.Fields(n, path, configfile.Handlers{
		"unit": func(v *yaml.Node, path string) { unit, unitNode = d.Str(v, path), v },
		"requests_per_unit": func(v *yaml.Node, path string) {
			hasRPU = true
			r := d.Int(v, path)
			if r < 0 || r > 1<<32-1 {
				d.Add(v, path, "requests_per_unit %d is outside 0..4294967295", r)
				return
			}
			rl.RequestsPerUnit = uint32(r)
		},
		"unlimited": func(v *yaml.Node, path string) { rl.Unlimited = d.Bool(v, path) },
		"name":      func(v *yaml.Node, path string) { rl.Name = d.Str(v, path) },
		"replaces": func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				name := ""
				d.Fields(v, path, configfile.Handlers{
					"name": func(v *yaml.Node, path string) { name = d.Str(v, path) },
				})
				if name == "" {
					d.Add(v, path, "a replaces entry needs a name")
				}
				rl.Replaces = append(rl.Replaces, name)
			})
		},
	})
	u, ok := rls.ParseUnit(unit)
	switch {
	case rl.Unlimited && unit != "":
		d.Add(unitNode, configfile.Join(path, "unit"), "an unlimited rate_limit takes no unit")
	case !rl.Unlimited && !ok:
		at := unitNode
		if at == nil {
			at = n
		}
		d.Add(at, configfile.Join(path, "unit"), "unit %q: want second, minute, hour, day, week, month or year", unit)
	case !rl.Unlimited && !hasRPU:
		d.Add(n, configfile.Join(path, "requests_per_unit"), "requests_per_unit is required (0 blocks every request)")
	}
	rl.Unit = u
	if rl.Name != "" && slices.Contains(rl.Replaces, rl.Name) {
		d.Add(n, configfile.Join(path, "replaces"), "a rate_limit cannot replace itself (%q)", rl.Name)
	}
	return rl
}
