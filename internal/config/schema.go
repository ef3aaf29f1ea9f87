package config

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/breaker"
	"github.com/fairgate/fairgate/fairq"
	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/quota"
)

// config decodes the top level.
func (d *decoder) config(n *yaml.Node, c *Config) {
	p := &c.Policy
	p.Plans, p.Classes, p.Tenants = map[string]policy.Plan{}, map[string]policy.Class{}, map[string]policy.Tenant{}
	d.fields(n, "", map[string]func(*yaml.Node, string){
		"timezone": func(v *yaml.Node, path string) {
			name := d.str(v, path)
			loc, err := time.LoadLocation(name)
			if err != nil {
				d.add(v, path, "unknown time zone %q: want UTC or an IANA name such as Europe/Berlin", name)
				return
			}
			p.Location = loc
		},
		"default_plan":  func(v *yaml.Node, path string) { p.DefaultPlan = d.str(v, path); d.note(path, path, v) },
		"default_class": func(v *yaml.Node, path string) { p.DefaultClass = d.str(v, path); d.note(path, path, v) },
		"headers": func(v *yaml.Node, path string) {
			switch h := d.str(v, path); h {
			case "draft", "structured", "x":
				c.Headers = h
			default:
				d.add(v, path, "header form %q: want draft (RateLimit-Limit, -Remaining, -Reset), structured (RateLimit, RateLimit-Policy) or x (X-RateLimit-*)", h)
			}
		},
		"plans": func(v *yaml.Node, path string) {
			d.note(path, path, v)
			d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
				d.note(path, path, k)
				p.Plans[name] = policy.Plan{Name: name, Rules: d.rules(v, path, path+".rules")}
			})
		},
		"classes": func(v *yaml.Node, path string) {
			d.note(path, path, v)
			d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
				d.note(path, path, k)
				cl := policy.Class{Name: name, Share: 1}
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"share": func(v *yaml.Node, path string) {
						// Written out, 0 is a mistake (Go's zero means the default 1).
						if cl.Share = d.float(v, path); cl.Share == 0 {
							d.add(v, path, "share 0 is outside (0, 1]: a class gets a fraction of the plan's limit; omit it for 1")
						}
						d.note(path, path, v)
					},
					"fail":       func(v *yaml.Node, path string) { cl.Fail = d.failMode(v, path) },
					"shadow":     func(v *yaml.Node, path string) { cl.Shadow = d.bool(v, path) },
					"near_cache": func(v *yaml.Node, path string) { cl.NoNearCache = !d.bool(v, path) },
					"lease":      func(v *yaml.Node, path string) { cl.Lease = d.int(v, path); d.note(path, path, v) },
					"slow_down":  func(v *yaml.Node, path string) { cl.SlowDown = d.slowDown(v, path); d.note(path, path, v) },
				})
				p.Classes[name] = cl
			})
		},
		"routes": func(v *yaml.Node, path string) {
			d.list(v, path, func(i int, v *yaml.Node, path string) {
				d.note(path, path, v)
				r := policy.Route{Cost: 1}
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"route": func(v *yaml.Node, path string) { r.Pattern = d.str(v, path); d.note(path, path, v) },
					"class": func(v *yaml.Node, path string) { r.Class = d.str(v, path); d.note(path, path, v) },
					"cost":  func(v *yaml.Node, path string) { r.Cost = d.int(v, path); d.note(path, path, v) },
				})
				if r.Pattern == "" {
					d.add(v, path+".route", "route is required: a method and a path such as \"GET /v1/users/{id}\"")
				}
				if r.Class == "" {
					d.add(v, path+".class", "class is required")
				}
				p.Routes = append(p.Routes, r)
			})
		},
		"anonymous": func(v *yaml.Node, path string) {
			d.list(v, path, func(i int, v *yaml.Node, path string) {
				d.note(path, path, v)
				a := policy.AnonRoute{Cost: 1, Fail: policy.FailClosed}
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"name":   func(v *yaml.Node, path string) { a.Name = d.str(v, path); d.note(path, path, v) },
					"route":  func(v *yaml.Node, path string) { a.Pattern = d.str(v, path); d.note(path, path, v) },
					"cost":   func(v *yaml.Node, path string) { a.Cost = d.int(v, path); d.note(path, path, v) },
					"fail":   func(v *yaml.Node, path string) { a.Fail = d.failMode(v, path) },
					"shadow": func(v *yaml.Node, path string) { a.Shadow = d.bool(v, path) },
					"limits": func(v *yaml.Node, fpath string) {
						lp := fmt.Sprintf("anonymous[%d].rules", i)
						d.list(v, fpath, func(j int, v *yaml.Node, path string) {
							by := policy.ByIP
							r := d.rule(v, path, fmt.Sprintf("%s[%d]", lp, j), map[string]func(*yaml.Node, string){
								"by": func(v *yaml.Node, path string) {
									switch s := d.str(v, path); s {
									case "ip":
									case "credential":
										by = policy.ByCredential
									default:
										d.add(v, path, "by %q: want ip or credential", s)
									}
								},
							})
							a.Rules = append(a.Rules, policy.AnonRule{Rule: r, By: by})
						})
					},
				})
				if a.Name == "" {
					d.add(v, path+".name", "name is required: it tells the route's keys apart")
				}
				if a.Pattern == "" {
					d.add(v, path+".route", "route is required")
				}
				p.Anonymous = append(p.Anonymous, a)
			})
		},
		"tenants": func(v *yaml.Node, path string) {
			d.entries(v, path, func(id string, k, v *yaml.Node, path string) {
				d.note(path, path, k)
				var t policy.Tenant
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"plan":  func(v *yaml.Node, path string) { t.Plan = d.str(v, path); d.note(path, path, v) },
					"limit": func(v *yaml.Node, path string) { t.Limit = d.int(v, path); d.note(path, path, v) },
					"burst": func(v *yaml.Node, path string) { t.Burst = d.int(v, path); d.note(path, path, v) },
					"limits": func(v *yaml.Node, path string) {
						t.Rules = map[string]policy.RuleOverride{}
						d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
							lp := "tenants." + id + ".rules." + name
							d.note(lp, path, k)
							var o policy.RuleOverride
							d.fields(v, path, map[string]func(*yaml.Node, string){
								"limit": func(v *yaml.Node, path string) { o.Limit = d.int(v, path); d.note(lp+".limit", path, v) },
								"burst": func(v *yaml.Node, path string) { o.Burst = d.int(v, path); d.note(lp+".burst", path, v) },
							})
							t.Rules[name] = o
						})
					},
					"shares": func(v *yaml.Node, path string) {
						t.Shares = map[string]float64{}
						d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
							d.note(path, path, v)
							t.Shares[name] = d.float(v, path)
						})
					},
				})
				p.Tenants[id] = t
			})
		},
		"instances": func(v *yaml.Node, path string) {
			if n := d.int(v, path); n < 1 || n > 10_000 {
				d.add(v, path, "instances %d: want 1 to 10000, the number of fairgate instances sharing the store", n)
			} else {
				c.Instances = int(n)
			}
		},
		"trusted_proxies": func(v *yaml.Node, path string) {
			d.list(v, path, func(i int, v *yaml.Node, path string) {
				s := d.str(v, path)
				p, err := netip.ParsePrefix(s)
				if err != nil {
					a, aerr := netip.ParseAddr(s)
					if aerr != nil {
						d.add(v, path, "%q is not a CIDR such as 10.0.0.0/8 or an address", s)
						return
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
				c.TrustedProxies = append(c.TrustedProxies, p.Masked())
			})
		},
		"auth": func(v *yaml.Node, path string) { d.auth(v, path, &c.Auth) },
		"providers": func(v *yaml.Node, path string) {
			d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
				if !policy.ValidName(name) {
					d.add(k, path, "provider name %q: want lower-case letters, digits, '-' and '_'", name)
				}
				var pr quota.Provider
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"limit":  func(v *yaml.Node, path string) { pr.Limit.Limit = d.int(v, path) },
					"period": func(v *yaml.Node, path string) { pr.Limit.Period = d.fixedPeriod(v, path) },
					"burst":  func(v *yaml.Node, path string) { pr.Limit.Burst = d.int(v, path) },
					"tenant": func(v *yaml.Node, path string) {
						d.fields(v, path, map[string]func(*yaml.Node, string){
							"limit":  func(v *yaml.Node, path string) { pr.Tenant.Limit = d.int(v, path) },
							"period": func(v *yaml.Node, path string) { pr.Tenant.Period = d.fixedPeriod(v, path) },
							"burst":  func(v *yaml.Node, path string) { pr.Tenant.Burst = d.int(v, path) },
						})
						d.checkLimit(v, path, pr.Tenant)
					},
				})
				d.checkLimit(v, path, pr.Limit)
				c.Providers[name] = pr
			})
		},
		"queues": func(v *yaml.Node, path string) {
			d.fields(v, path, map[string]func(*yaml.Node, string){
				"weights": func(v *yaml.Node, path string) {
					d.entries(v, path, func(plan string, k, v *yaml.Node, path string) {
						w := d.int(v, path)
						if w < 1 || w > 1000 {
							d.add(v, path, "weight %d is outside 1..1000", w)
						}
						c.QueueWeights[plan] = int(w)
						if d.weightKeys == nil {
							d.weightKeys = map[string]*yaml.Node{}
						}
						d.weightKeys[plan] = k
					})
				},
				"kinds": func(v *yaml.Node, path string) {
					d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
						if !policy.ValidName(name) {
							d.add(k, path, "kind name %q: want lower-case letters, digits, '-' and '_'", name)
						}
						var kd fairq.Kind
						d.fields(v, path, map[string]func(*yaml.Node, string){
							"warn":         func(v *yaml.Node, path string) { kd.Warn = d.count(v, path) },
							"refuse":       func(v *yaml.Node, path string) { kd.Refuse = d.count(v, path) },
							"visibility":   func(v *yaml.Node, path string) { kd.Visibility = d.duration(v, path) },
							"max_attempts": func(v *yaml.Node, path string) { kd.MaxAttempts = int(d.count(v, path)) },
						})
						if kd.Refuse > 0 && kd.Warn > kd.Refuse {
							d.add(v, path, "warn %d is over refuse %d: warn before refusing", kd.Warn, kd.Refuse)
						}
						c.Queues[name] = kd
					})
				},
			})
		},
		"rls":       func(v *yaml.Node, path string) { d.rlsSection(v, path, c) },
		"dashboard": func(v *yaml.Node, path string) { c.Dashboard = d.bool(v, path) },
		"route_match": func(v *yaml.Node, path string) {
			d.fields(v, path, map[string]func(*yaml.Node, string){
				"case_sensitive":       func(v *yaml.Node, path string) { p.RouteMatch.CaseSensitive = d.bool(v, path) },
				"exact_trailing_slash": func(v *yaml.Node, path string) { p.RouteMatch.ExactTrailingSlash = d.bool(v, path) },
			})
		},
		"client_ip_header": func(v *yaml.Node, path string) {
			switch h := strings.ToLower(d.str(v, path)); h {
			case "x-forwarded-for", "forwarded", "x-real-ip":
				c.ClientIPHeader = h
			default:
				d.add(v, path, "client_ip_header %q: want x-forwarded-for, forwarded or x-real-ip (the one header your trusted proxies set)", h)
			}
		},
		"upstream_headers": func(v *yaml.Node, path string) {
			d.fields(v, path, map[string]func(*yaml.Node, string){
				"tenant": func(v *yaml.Node, path string) { c.UpstreamHeaders.Tenant = d.header(v, path) },
				"plan":   func(v *yaml.Node, path string) { c.UpstreamHeaders.Plan = d.header(v, path) },
			})
		},
		"dependencies": func(v *yaml.Node, path string) {
			d.entries(v, path, func(name string, k, v *yaml.Node, path string) {
				if !policy.ValidName(name) {
					d.add(k, path, "dependency name %q: want lower-case letters, digits, '-' and '_'", name)
				}
				var st breaker.Settings
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"consecutive_failures": func(v *yaml.Node, path string) { st.ConsecutiveFailures = uint32(min(d.count(v, path), 1<<31)) },
					"failure_ratio": func(v *yaml.Node, path string) {
						if st.FailureRatio = d.float(v, path); st.FailureRatio <= 0 || st.FailureRatio > 1 {
							d.add(v, path, "failure ratio %v is outside (0, 1]", st.FailureRatio)
						}
					},
					"min_requests": func(v *yaml.Node, path string) { st.MinRequests = uint32(min(d.count(v, path), 1<<31)) },
					"window":       func(v *yaml.Node, path string) { st.Window = d.duration(v, path) },
					"cooldown":     func(v *yaml.Node, path string) { st.Cooldown = d.duration(v, path) },
				})
				c.Dependencies[name] = st
			})
		},
	})
}

// auth decodes the credentials section. Key files are read relative to
// the config file's directory.
func (d *decoder) auth(n *yaml.Node, path string, a *auth.Config) {
	d.fields(n, path, map[string]func(*yaml.Node, string){
		"api_keys": func(v *yaml.Node, path string) {
			d.list(v, path, func(i int, v *yaml.Node, path string) {
				var k auth.APIKey
				d.fields(v, path, map[string]func(*yaml.Node, string){
					"sha256": func(v *yaml.Node, path string) {
						k.SHA256 = strings.ToLower(d.str(v, path))
						if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
							d.add(v, path, "want the 64 hex digits of the key's SHA-256 (printf %%s KEY | sha256sum), never the key itself")
						}
					},
					"tenant": func(v *yaml.Node, path string) { k.Tenant = d.str(v, path) },
					"plan":   func(v *yaml.Node, path string) { k.Plan = d.str(v, path) },
				})
				if k.Tenant == "" {
					d.add(v, path+".tenant", "tenant is required: the tenant the key belongs to")
				}
				a.APIKeys = append(a.APIKeys, k)
			})
		},
		"jwt": func(v *yaml.Node, path string) {
			j := &auth.JWTConfig{}
			a.JWT = j
			d.fields(v, path, map[string]func(*yaml.Node, string){
				"issuer":       func(v *yaml.Node, path string) { j.Issuer = d.str(v, path) },
				"audience":     func(v *yaml.Node, path string) { j.Audience = d.str(v, path) },
				"tenant_claim": func(v *yaml.Node, path string) { j.TenantClaim = d.str(v, path) },
				"plan_claim":   func(v *yaml.Node, path string) { j.PlanClaim = d.str(v, path) },
				"jwks_url":     func(v *yaml.Node, path string) { j.JWKSURL = d.str(v, path) },
				"algorithms": func(v *yaml.Node, path string) {
					d.list(v, path, func(i int, v *yaml.Node, path string) { j.Methods = append(j.Methods, d.str(v, path)) })
				},
				"public_keys": func(v *yaml.Node, path string) {
					d.list(v, path, func(i int, v *yaml.Node, path string) {
						if k, err := readPublicKey(d.rel(d.str(v, path))); err != nil {
							d.add(v, path, "%v", err)
						} else {
							j.Keys = append(j.Keys, k)
						}
					})
				},
				"hmac_secret_file": func(v *yaml.Node, path string) {
					b, err := os.ReadFile(d.rel(d.str(v, path)))
					if err != nil || len(bytes.TrimSpace(b)) < 32 {
						d.add(v, path, "want a readable file with a secret of at least 32 bytes")
						return
					}
					j.Keys = append(j.Keys, bytes.TrimSpace(b))
				},
			})
			if j.Audience == "" {
				d.add(v, path+".audience", "audience is required, so that tokens for other services are refused")
			}
			if len(j.Keys) == 0 && j.JWKSURL == "" {
				d.add(v, path, "give public_keys, hmac_secret_file or jwks_url to verify tokens with")
			}
		},
	})
}

// rel resolves a path relative to the config file's directory.
func (d *decoder) rel(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(d.file), p)
}

// readPublicKey reads a PEM public key (PKIX: RSA, ECDSA or Ed25519).
func readPublicKey(path string) (any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("public key %s: no PEM block", path)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("public key %s: %w", path, err)
	}
	return k, nil
}

// list walks a sequence.
func (d *decoder) list(n *yaml.Node, path string, each func(i int, v *yaml.Node, path string)) {
	if n.Kind != yaml.SequenceNode {
		d.add(n, path, "want a list")
		return
	}
	for i, v := range n.Content {
		each(i, v, fmt.Sprintf("%s[%d]", path, i))
	}
}

// rules decodes a plan: a list of limits, or one limit.
func (d *decoder) rules(n *yaml.Node, path, lp string) []policy.Rule {
	d.note(lp, path, n)
	if n.Kind == yaml.MappingNode {
		d.note(lp+"[0]", path, n)
		return []policy.Rule{d.rule(n, path, lp+"[0]", nil)}
	}
	var out []policy.Rule
	d.list(n, path, func(i int, v *yaml.Node, path string) {
		out = append(out, d.rule(v, path, fmt.Sprintf("%s[%d]", lp, i), nil))
	})
	if n.Kind == yaml.SequenceNode && len(out) == 0 {
		d.add(n, path, "no limits: give at least one")
	}
	return out
}

// rule decodes one limit; extra adds fields (such as an anonymous rule's
// by). lp is the limiter's path of the rule.
func (d *decoder) rule(n *yaml.Node, path, lp string, extra map[string]func(*yaml.Node, string)) policy.Rule {
	d.note(lp, path, n)
	var r policy.Rule
	var hasLimit, hasPeriod bool
	fields := map[string]func(*yaml.Node, string){
		"name": func(v *yaml.Node, path string) { r.Name = d.str(v, path); d.note(lp+".name", path, v) },
		"limit": func(v *yaml.Node, path string) {
			r.Limit.Limit = d.int(v, path)
			hasLimit = true
			d.note(lp+".limit", path, v)
		},
		"period": func(v *yaml.Node, path string) {
			r.Limit.Period, r.Calendar = d.period(v, path)
			hasPeriod = true
			d.note(lp+".period", path, v)
		},
		"burst": func(v *yaml.Node, path string) { r.Limit.Burst = d.int(v, path); d.note(lp+".burst", path, v) },
		"algorithm": func(v *yaml.Node, path string) {
			a, err := algo.ParseAlgorithm(d.str(v, path))
			if err != nil {
				d.add(v, path, "unknown algorithm %q: want gcra, token_bucket, sliding_log, sliding_window or fixed_window", v.Value)
			}
			r.Limit.Algorithm = a
			d.note(lp+".algorithm", path, v)
		},
		"shadow": func(v *yaml.Node, path string) { r.Shadow = d.bool(v, path) },
	}
	for k, f := range extra {
		fields[k] = f
	}
	d.fields(n, path, fields)
	if n.Kind == yaml.MappingNode {
		if !hasLimit {
			d.add(n, path+".limit", "limit is required: how many per period")
		}
		if !hasPeriod {
			d.add(n, path+".period", "period is required: a duration such as 1m, or day or month")
		}
		if r.Calendar != policy.NoCalendar && r.Limit.Algorithm != algo.GCRA && r.Limit.Algorithm != algo.FixedWindow {
			d.add(n, path+".algorithm", "a calendar window (%v) is always a fixed window: leave algorithm out", r.Calendar)
		}
	}
	return r
}

// fixedPeriod is period without calendar windows.
func (d *decoder) fixedPeriod(n *yaml.Node, path string) time.Duration {
	p, cal := d.period(n, path)
	if cal != policy.NoCalendar {
		d.add(n, path, "%v: want a duration such as 1s here", cal)
	}
	return p
}

// checkLimit validates a provider's limit.
func (d *decoder) checkLimit(n *yaml.Node, path string, l algo.Limit) {
	if l.Limit == 0 && l.Period == 0 {
		d.add(n, path, "limit and period are required")
		return
	}
	if err := l.Validate(); err != nil {
		d.add(n, path, "%v", err)
	}
}

// header reads an HTTP header name: a token of letters, digits and '-'.
func (d *decoder) header(v *yaml.Node, path string) string {
	h := d.str(v, path)
	ok := h != ""
	for _, r := range h {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-') {
			ok = false
		}
	}
	if !ok {
		d.add(v, path, "header name %q: want letters, digits and '-', such as X-Tenant", h)
		return ""
	}
	return http.CanonicalHeaderKey(h)
}
