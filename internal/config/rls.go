package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/internal/rlsconfig"
	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
)

// rlsFiles reads the envoyproxy/ratelimit files a list of globs names,
// with the node each domain came from.
func (d *decoder) rlsFiles(v *yaml.Node, path string, c *Config) (domains []rlsconfig.Domain, where []*yaml.Node) {
	d.List(v, path, func(i int, v *yaml.Node, path string) {
		pattern := d.rel(d.Str(v, path))
		c.RLSFiles = append(c.RLSFiles, pattern)
		matches, err := filepath.Glob(pattern)
		c.read.glob(pattern, len(matches))
		if err == nil && len(matches) == 0 {
			err = errors.New("no such file")
		}
		if err != nil {
			d.Add(v, path, "%s: %v", pattern, err)
			return
		}
		for _, f := range matches {
			b, err := ReadFile(f)
			c.read.file(f, b, err)
			var ds []rlsconfig.Domain
			if err == nil {
				ds, err = ParseRLS(f, b)
			} else {
				err = fmt.Errorf("rls %w", err)
			}
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

// rlsDomainSettings are a domain's own settings in the rls section.
type rlsDomainSettings struct {
	fail      *policy.FailMode
	algorithm *algo.Algorithm
	atomic    *bool
	charge    *bool
	key       *yaml.Node
}

// apply sets a domain's own settings on dom.
func (o *rlsDomainSettings) apply(dom *rlsconfig.Domain) {
	dom.Fail = deref(o.fail, dom.Fail)
	dom.Algorithm = deref(o.algorithm, dom.Algorithm)
	dom.Atomic = deref(o.atomic, dom.Atomic)
	dom.Charge = deref(o.charge, dom.Charge)
}

// rlsState is what the rls section gathers before its domains are put
// together.
type rlsState struct {
	fail      policy.FailMode
	algorithm algo.Algorithm
	atomic    bool
	charge    bool
	chargeAt  *yaml.Node // the section's hits_addend, for its error
	own       map[string]*rlsDomainSettings
	domains   []rlsconfig.Domain
	where     []*yaml.Node // the node each domain came from, for duplicate errors
	runtime   []*yaml.Node // each runtime_dir's node
	ignoreDot bool
	merge     bool
}

// rlsSection decodes the rls section: envoyproxy/ratelimit config files
// (as they are), its runtime directory, inline domains in the same
// format, xDS, and the service's settings.
func (d *decoder) rlsSection(n *yaml.Node, path string, c *Config) {
	c.RLS.FailClosed = rlsconfig.ClosedUnavailable
	c.HasRLS = true
	st := &rlsState{fail: policy.FailOpen, algorithm: algo.FixedWindow, own: map[string]*rlsDomainSettings{}}
	h := d.rlsSources(st, c)
	maps.Copy(h, d.rlsDecisions(st, c))
	maps.Copy(h, d.rlsSettings(&c.RLS.Settings))
	h["xds"] = func(v *yaml.Node, path string) { d.rlsXDS(v, path, &c.RLSXDS) }
	h["statsd"] = func(v *yaml.Node, path string) { d.rlsStatsd(v, path, &c.Statsd) }
	d.Fields(n, path, h)
	c.rlsDefault = rlsconfig.Domain{Fail: st.fail, Algorithm: st.algorithm, Atomic: st.atomic, Charge: st.charge}
	d.rlsCharges(path, st)
	for i := range c.RLSSources {
		c.RLSSources[i].IgnoreDot = st.ignoreDot
		ds, err := c.RLSSources[i].domains(c.read)
		if err != nil {
			d.Add(st.runtime[i], path+".runtime_dir", "%v", err)
		}
		for range ds {
			st.where = append(st.where, st.runtime[i])
		}
		st.domains = append(st.domains, ds...)
	}
	d.rlsDomains(path, st, c)
}

// rlsSources are the handlers of where the domains come from.
func (d *decoder) rlsSources(st *rlsState, c *Config) policyfile.Handlers {
	return policyfile.Handlers{
		"files": func(v *yaml.Node, path string) {
			ds, ws := d.rlsFiles(v, path, c)
			st.domains, st.where = append(st.domains, ds...), append(st.where, ws...)
		},
		"config": func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				st.domains = append(st.domains, d.rlsDomain(v, path))
				st.where = append(st.where, v)
			})
		},
		"runtime_dir": func(v *yaml.Node, path string) {
			c.RLSSources = append(c.RLSSources, Source{Dir: d.rel(d.Str(v, path))})
			st.runtime = append(st.runtime, v)
		},
		"ignore_dot_files": func(v *yaml.Node, path string) { st.ignoreDot = d.Bool(v, path) },
		"merge_domains":    func(v *yaml.Node, path string) { st.merge = d.Bool(v, path) },
	}
}

// rlsDecisions are the handlers of how the domains are decided: the
// section's defaults and each domain's own.
func (d *decoder) rlsDecisions(st *rlsState, c *Config) policyfile.Handlers {
	return policyfile.Handlers{
		"tenant_key": func(v *yaml.Node, path string) { c.RLS.TenantKey = d.Str(v, path) },
		"fail":       func(v *yaml.Node, path string) { st.fail = d.Fail(v, path) },
		"fail_closed_code": func(v *yaml.Node, path string) {
			switch s := d.Str(v, path); s {
			case "unavailable":
				c.RLS.FailClosed = rlsconfig.ClosedUnavailable
			case "over_limit":
				c.RLS.FailClosed = rlsconfig.ClosedOverLimit
			default:
				d.Add(v, path, "%q: want unavailable (the gRPC status; Envoy applies its failure_mode_deny) or over_limit", s)
			}
		},
		"algorithm": func(v *yaml.Node, path string) { st.algorithm = d.rlsAlgorithm(v, path) },
		"atomic":    func(v *yaml.Node, path string) { st.atomic = d.Bool(v, path) },
		"hits_addend": func(v *yaml.Node, path string) {
			st.charge, st.chargeAt = d.rlsHitsAddend(v, path), v
		},
		"domains": func(v *yaml.Node, path string) {
			d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
				o := &rlsDomainSettings{key: k}
				st.own[name] = o
				d.Fields(v, path, policyfile.Handlers{
					"fail":      func(v *yaml.Node, path string) { f := d.Fail(v, path); o.fail = &f },
					"algorithm": func(v *yaml.Node, path string) { a := d.rlsAlgorithm(v, path); o.algorithm = &a },
					"atomic":    func(v *yaml.Node, path string) { b := d.Bool(v, path); o.atomic = &b },
					"hits_addend": func(v *yaml.Node, path string) {
						b := d.rlsHitsAddend(v, path)
						o.charge = &b
					},
				})
			})
		},
	}
}

// rlsHitsAddend decodes hits_addend: charge (true) or take (false, the
// default).
func (d *decoder) rlsHitsAddend(v *yaml.Node, path string) bool {
	switch s := d.Str(v, path); s {
	case "charge":
		return true
	case "take":
	default:
		d.Add(v, path, "hits_addend %q: want take (the default: a descriptor's hits_addend is taken when it fits, refused and not counted when not) or charge (charged in full, into debt: the charge Envoy sends when a stream ends)", s)
	}
	return false
}

// rlsCharges checks that hits_addend: charge goes with the algorithm and
// atomic it is decided with: the section's own, and each domain's as its
// own settings make it.
func (d *decoder) rlsCharges(path string, st *rlsState) {
	if st.charge {
		if p := rlsconfig.ChargeProblem(st.algorithm, st.atomic); p != "" {
			d.Add(st.chargeAt, path+".hits_addend", "%s", p)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.own)) {
		o := st.own[name]
		dom := rlsconfig.Domain{Algorithm: st.algorithm, Atomic: st.atomic, Charge: st.charge}
		o.apply(&dom)
		if !dom.Charge || o.charge == nil && o.algorithm == nil && o.atomic == nil {
			continue // not charged, or the section's, checked above
		}
		if p := rlsconfig.ChargeProblem(dom.Algorithm, dom.Atomic); p != "" {
			d.Add(o.key, path+".domains."+name, "%s", p)
		}
	}
}

// rlsSettings are the handlers of envoyproxy/ratelimit's service-wide
// settings.
func (d *decoder) rlsSettings(set *rlsconfig.Settings) policyfile.Handlers {
	return policyfile.Handlers{
		"stop_increment_when_over_limit": func(v *yaml.Node, path string) { set.StopIncrementWhenOverLimit = d.Bool(v, path) },
		"near_limit_ratio": func(v *yaml.Node, path string) {
			r := d.Float(v, path)
			if r <= 0 || r > 1 {
				d.Add(v, path, "near_limit_ratio %v: want a ratio above 0, at most 1 (default 0.8)", r)
			}
			set.NearLimitRatio = r
		},
		"shadow_mode": func(v *yaml.Node, path string) { set.Shadow = d.Bool(v, path) },
		"healthy_with_at_least_one_config_loaded": func(v *yaml.Node, path string) { set.RequireDomains = d.Bool(v, path) },
		"quota_mode":       func(v *yaml.Node, path string) { set.Quota = d.Bool(v, path) },
		"dynamic_metadata": func(v *yaml.Node, path string) { set.DynamicMetadata = d.Bool(v, path) },
		"local_cache_bytes": func(v *yaml.Node, path string) {
			set.LocalCacheEntries = rlsconfig.LocalCacheEntries(int(d.Count(v, path)))
		},
		"max_override_unit": func(v *yaml.Node, path string) {
			u, ok := rlsconfig.ParseUnit(d.Str(v, path))
			if !ok {
				d.Add(v, path, "max_override_unit %q: want second, minute, hour, day (the default), week, month or year", v.Value)
			}
			set.MaxOverrideUnit = u
		},
		"response_headers": func(v *yaml.Node, path string) {
			h := &set.Headers
			d.Fields(v, path, policyfile.Handlers{
				"enabled":   func(v *yaml.Node, path string) { h.Enabled = d.Bool(v, path) },
				"limit":     func(v *yaml.Node, path string) { h.Limit = d.headerName(v, path) },
				"remaining": func(v *yaml.Node, path string) { h.Remaining = d.headerName(v, path) },
				"reset":     func(v *yaml.Node, path string) { h.Reset = d.headerName(v, path) },
			})
		},
	}
}

// rlsXDS decodes the xds block.
func (d *decoder) rlsXDS(v *yaml.Node, path string, x *XDS) {
	x.NodeID = "default"
	d.Fields(v, path, policyfile.Handlers{
		"address": func(v *yaml.Node, path string) {
			x.Address = d.hostPort(v, path, "xds", "the management server's host:port")
		},
		"node_id": func(v *yaml.Node, path string) { x.NodeID = d.Str(v, path) },
		"node_metadata": func(v *yaml.Node, path string) {
			x.Metadata = map[string]string{}
			d.Entries(v, path, func(name string, k, v *yaml.Node, path string) { x.Metadata[name] = d.Str(v, path) })
		},
		"retry": func(v *yaml.Node, path string) { x.Retry = d.Duration(v, path) },
	})
	if x.Address == "" {
		d.Add(v, policyfile.Join(path, "address"), "xds needs the management server's address")
	}
}

// hostPort decodes a what's address, which must be host:port (want says
// whose, for the message).
func (d *decoder) hostPort(v *yaml.Node, path, what, want string) string {
	a := d.Str(v, path)
	if _, _, err := net.SplitHostPort(a); err != nil {
		d.Add(v, path, "%s address %q: want %s", what, a, want)
	}
	return a
}

// rlsStatsd decodes the statsd block.
func (d *decoder) rlsStatsd(v *yaml.Node, path string, s *Statsd) {
	d.Fields(v, path, policyfile.Handlers{
		"address":        func(v *yaml.Node, path string) { s.Address = d.hostPort(v, path, "statsd", "host:port") },
		"flush_interval": func(v *yaml.Node, path string) { s.FlushInterval = d.Duration(v, path) },
		"protocol": func(v *yaml.Node, path string) {
			s.Protocol = d.Str(v, path)
			switch s.Protocol {
			case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
			default:
				d.Add(v, path, "statsd protocol %q: want udp or tcp (or tcp4, tcp6, udp4, udp6)", s.Protocol)
			}
		},
		"tags":      func(v *yaml.Node, path string) { s.Tags = d.statsdTags(v, path) },
		"dogstatsd": func(v *yaml.Node, path string) { s.DogStatsD = d.Bool(v, path) },
		"mogrifiers": func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				var m statsd.Mogrifier
				d.Fields(v, path, policyfile.Handlers{
					"pattern": func(v *yaml.Node, path string) {
						re, err := regexp.Compile(d.Str(v, path))
						if err != nil {
							d.Add(v, path, "mogrifier pattern: %v", err)
						}
						m.Pattern = re
					},
					"name": func(v *yaml.Node, path string) { m.Name = d.Str(v, path) },
					"tags": func(v *yaml.Node, path string) { m.Tags = d.statsdTags(v, path) },
				})
				if m.Pattern == nil || m.Name == "" {
					d.Add(v, path, "a mogrifier needs a pattern and a name")
				}
				s.Mogrifiers = append(s.Mogrifiers, m)
			})
		},
	})
	if len(s.Mogrifiers) > 0 && !s.DogStatsD {
		d.Add(v, path, "statsd mogrifiers go with dogstatsd: true")
	}
}

// statsdTags decodes a mapping of tags, keys without the characters that
// would end a tag or a line.
func (d *decoder) statsdTags(v *yaml.Node, path string) map[string]string {
	tags := map[string]string{}
	d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
		if name == "" || strings.ContainsAny(name, ":|,#=\n") {
			d.Add(k, path, "tag key %q: want a non-empty key without ':', '|', ',', '#', '=' or a line break", name)
		}
		tags[name] = d.Str(v, path)
	})
	return tags
}

// rlsDomains puts the gathered domains together: duplicates merged or
// refused, each with its fail mode, algorithm and atomic, its limits
// checked against its algorithm's bounds.
func (d *decoder) rlsDomains(path string, st *rlsState, c *Config) {
	seen := map[string]int{}
	for i, dom := range st.domains {
		if j, dup := seen[dom.Name]; dup {
			if !st.merge {
				d.Add(st.where[i], path, "domain %q is configured twice: set merge_domains (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG) to merge them", dom.Name)
				continue
			}
			d.mergeDomain(st.where[i], path, &c.RLS.Domains[j], dom)
			continue
		}
		seen[dom.Name] = len(c.RLS.Domains)
		dom.Fail, dom.Algorithm, dom.Atomic, dom.Charge = st.fail, st.algorithm, st.atomic, st.charge
		if o := st.own[dom.Name]; o != nil {
			o.apply(&dom)
		}
		d.rlsLimits(st.where[i], path, dom.Name, dom.Descriptors, dom.Algorithm)
		c.RLS.Domains = append(c.RLS.Domains, dom)
	}
	for name, o := range st.own {
		if _, ok := seen[name]; !ok && c.RLSXDS.Address == "" {
			d.Add(o.key, path+".domains."+name, "no domain %q is configured", name)
		}
	}
	c.rlsOwn = st.own
}

// mergeDomain adds from's descriptors to into's, as envoyproxy/ratelimit's
// MERGE_DOMAIN_CONFIG does: a descriptor both have is a problem.
func (d *decoder) mergeDomain(n *yaml.Node, path string, into *rlsconfig.Domain, from rlsconfig.Domain) {
	for _, x := range from.Descriptors {
		for _, y := range into.Descriptors {
			if x.Key == y.Key && x.Value == y.Value {
				d.Add(n, path, "domain %q: merging repeats the descriptor key %q, value %q", from.Name, x.Key, x.Value)
			}
		}
		into.Descriptors = append(into.Descriptors, x)
	}
	d.rlsLimits(n, path, into.Name, from.Descriptors, into.Algorithm)
}

// deref is *p, or def when p is nil.
func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// rlsAlgorithm decodes an algorithm name.
func (d *decoder) rlsAlgorithm(v *yaml.Node, path string) algo.Algorithm {
	a, err := algo.ParseAlgorithm(d.Str(v, path))
	if err != nil {
		d.Add(v, path, "unknown algorithm %q: want fixed_window (the default: as envoyproxy/ratelimit counts), gcra, token_bucket, sliding_log or sliding_window", v.Value)
	}
	return a
}

// headerName decodes an HTTP header name.
func (d *decoder) headerName(v *yaml.Node, path string) string {
	s := d.Str(v, path)
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f || strings.ContainsRune("()<>@,;:\\\"/[]?={}", r) }) >= 0 {
		d.Add(v, path, "%q is not an HTTP header name", s)
	}
	return s
}

// rlsLimits checks every limit of a domain against the algorithm's bounds.
func (d *decoder) rlsLimits(n *yaml.Node, path, domain string, ds []*rlsconfig.Descriptor, a algo.Algorithm) {
	for _, x := range ds {
		if rl := x.Limit; rl != nil && !rl.Unlimited && rl.RequestsPerUnit > 0 {
			l := algo.Limit{Limit: int64(rl.RequestsPerUnit), Period: rlsconfig.Period(rl.Unit), Algorithm: a}
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
func ParseRLSFile(file string) ([]rlsconfig.Domain, error) {
	data, err := ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("rls %w", err)
	}
	return ParseRLS(file, data)
}

// ParseRLS is ParseRLSFile on data already read; file names it in errors.
func ParseRLS(file string, data []byte) ([]rlsconfig.Domain, error) {
	root, err := policyfile.Root(file, data, "want a domain and its descriptors")
	if err != nil {
		return nil, err
	}
	d := &decoder{Decoder: policyfile.NewDecoder(file)}
	dom := d.rlsDomain(root, "")
	if err := d.Err(); err != nil {
		return nil, err
	}
	return []rlsconfig.Domain{dom}, nil
}

// rlsDomain decodes {domain, descriptors}.
func (d *decoder) rlsDomain(n *yaml.Node, path string) rlsconfig.Domain {
	dom := rlsconfig.Domain{Algorithm: algo.FixedWindow} // as envoyproxy/ratelimit counts
	d.Fields(n, path, policyfile.Handlers{
		"domain":      func(v *yaml.Node, path string) { dom.Name = d.Str(v, path) },
		"descriptors": func(v *yaml.Node, path string) { dom.Descriptors = d.rlsDescriptors(v, path) },
	})
	if dom.Name == "" {
		d.Add(n, policyfile.Join(path, "domain"), "a config needs a non-empty domain")
	}
	return dom
}

// rlsDescriptors decodes one level of descriptors.
func (d *decoder) rlsDescriptors(n *yaml.Node, path string) []*rlsconfig.Descriptor {
	var out []*rlsconfig.Descriptor
	seen := map[[2]string]bool{}
	d.List(n, path, func(i int, v *yaml.Node, path string) {
		x := &rlsconfig.Descriptor{}
		d.Fields(v, path, policyfile.Handlers{
			"key":             func(v *yaml.Node, path string) { x.Key = d.Str(v, path) },
			"value":           func(v *yaml.Node, path string) { x.Value = d.Str(v, path) },
			"rate_limit":      func(v *yaml.Node, path string) { x.Limit = d.rlsRateLimit(v, path) },
			"shadow_mode":     func(v *yaml.Node, path string) { x.Shadow = d.Bool(v, path) },
			"detailed_metric": func(v *yaml.Node, path string) { x.DetailedMetric = d.Bool(v, path) },
			"quota_mode":      func(v *yaml.Node, path string) { x.QuotaMode = d.Bool(v, path) },
			"value_to_metric": func(v *yaml.Node, path string) { x.ValueToMetric = d.Bool(v, path) },
			"share_threshold": func(v *yaml.Node, path string) { x.ShareThreshold = d.Bool(v, path) },
			"metadata":        func(v *yaml.Node, path string) { x.Metadata = d.metadata(v, path) },
			"descriptors":     func(v *yaml.Node, path string) { x.Children = d.rlsDescriptors(v, path) },
		})
		if x.Key == "" {
			d.Add(v, path, "descriptor has an empty key")
		}
		if x.ShareThreshold && !strings.Contains(x.Value, "*") {
			d.Add(v, path, "share_threshold is only for a wildcard value (with '*'): key %q, value %q", x.Key, x.Value)
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
func (d *decoder) rlsRateLimit(n *yaml.Node, path string) *rlsconfig.RateLimit {
	rl := &rlsconfig.RateLimit{}
	unit := ""
	var unitNode *yaml.Node
	hasRPU := false
	d.Fields(n, path, policyfile.Handlers{
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
				d.Fields(v, path, policyfile.Handlers{
					"name": func(v *yaml.Node, path string) { name = d.Str(v, path) },
				})
				if name == "" {
					d.Add(v, path, "a replaces entry needs a name")
				}
				rl.Replaces = append(rl.Replaces, name)
			})
		},
	})
	u, ok := rlsconfig.ParseUnit(unit)
	switch {
	case rl.Unlimited && unit != "":
		d.Add(unitNode, policyfile.Join(path, "unit"), "an unlimited rate_limit takes no unit")
	case !rl.Unlimited && !ok:
		at := unitNode
		if at == nil {
			at = n
		}
		d.Add(at, policyfile.Join(path, "unit"), "unit %q: want second, minute, hour, day, week, month or year", unit)
	case !rl.Unlimited && !hasRPU:
		d.Add(n, policyfile.Join(path, "requests_per_unit"), "requests_per_unit is required (0 blocks every request)")
	}
	rl.Unit = u
	if rl.Name != "" && slices.Contains(rl.Replaces, rl.Name) {
		d.Add(n, policyfile.Join(path, "replaces"), "a rate_limit cannot replace itself (%q)", rl.Name)
	}
	return rl
}

// metadata decodes a descriptor's metadata: any map, as the response's
// dynamic metadata carries it.
func (d *decoder) metadata(v *yaml.Node, path string) *structpb.Struct {
	var m map[string]any
	if err := v.Decode(&m); err != nil {
		d.Add(v, path, "metadata must be a map: %v", err)
		return nil
	}
	st, err := structpb.NewStruct(m)
	if err != nil {
		d.Add(v, path, "metadata: %v", err)
		return nil
	}
	return st
}

// RLSDomainDefaults sets on each of ds (domains from xDS) the rls
// section's fail mode, algorithm and atomic, and a domain's own where the
// section's domains name it.
func (c *Config) RLSDomainDefaults(ds []rlsconfig.Domain) {
	for i := range ds {
		ds[i].Fail, ds[i].Algorithm, ds[i].Atomic, ds[i].Charge = c.rlsDefault.Fail, c.rlsDefault.Algorithm, c.rlsDefault.Atomic, c.rlsDefault.Charge
		if o := c.rlsOwn[ds[i].Name]; o != nil {
			o.apply(&ds[i])
		}
	}
}
