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
	"github.com/fairgate/fairgate/internal/gateway"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"
	"github.com/fairgate/fairgate/quota"
)

// sections decodes the daemon's own top-level fields into c.
func (d *decoder) sections(c *Config) policyfile.Sections {
	on := func(f func(v *yaml.Node, path string)) func(*policyfile.Decoder, *yaml.Node, string) {
		return func(pd *policyfile.Decoder, v *yaml.Node, path string) { d.Decoder = pd; f(v, path) }
	}
	return policyfile.Sections{
		"headers": on(func(v *yaml.Node, path string) {
			switch h := d.Str(v, path); h {
			case "draft", "structured", "x":
				c.Headers = h
			default:
				d.Add(v, path, "header form %q: want draft (RateLimit-Limit, -Remaining, -Reset), structured (RateLimit, RateLimit-Policy) or x (X-RateLimit-*)", h)
			}
		}),
		"instances": on(func(v *yaml.Node, path string) {
			if n := d.Int(v, path); n < 1 || n > 10_000 {
				d.Add(v, path, "instances %d: want 1 to 10000, the number of fairgate instances sharing the store", n)
			} else {
				c.Instances = int(n)
			}
		}),
		"trusted_proxies": on(func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				s := d.Str(v, path)
				p, err := netip.ParsePrefix(s)
				if err != nil {
					a, aerr := netip.ParseAddr(s)
					if aerr != nil {
						d.Add(v, path, "%q is not a CIDR such as 10.0.0.0/8 or an address", s)
						return
					}
					p = netip.PrefixFrom(a, a.BitLen())
				}
				c.TrustedProxies = append(c.TrustedProxies, p.Masked())
			})
		}),
		"auth":      on(func(v *yaml.Node, path string) { d.auth(v, path, &c.Auth) }),
		"providers": on(func(v *yaml.Node, path string) { d.providers(v, path, c) }),
		"queues":    on(func(v *yaml.Node, path string) { d.queues(v, path, c) }),
		"rls":       on(func(v *yaml.Node, path string) { d.rlsSection(v, path, c) }),
		"dashboard": on(func(v *yaml.Node, path string) { c.Dashboard = d.Bool(v, path) }),
		"client_ip_header": on(func(v *yaml.Node, path string) {
			switch h := strings.ToLower(d.Str(v, path)); h {
			case "x-forwarded-for", "forwarded", "x-real-ip":
				c.ClientIPHeader = h
			default:
				d.Add(v, path, "client_ip_header %q: want x-forwarded-for, forwarded or x-real-ip (the one header your trusted proxies set)", h)
			}
		}),
		"forward_auth": on(func(v *yaml.Node, path string) {
			d.Fields(v, path, policyfile.Handlers{
				"deny_status": func(v *yaml.Node, path string) {
					switch n := d.Int(v, path); n {
					case 429, 403:
						c.ForwardAuth.DenyStatus = int(n)
					default:
						d.Add(v, path, "deny_status %d: want 429 (Caddy, Traefik) or 403 (nginx auth_request, ingress-nginx: the real status goes in X-Fairgate-Status)", n)
					}
				},
				"tenant_header": func(v *yaml.Node, path string) { c.ForwardAuth.TenantHeader = d.header(v, path) },
				"gateway":       func(v *yaml.Node, path string) { c.ForwardAuth.Gateway = d.Str(v, path) },
				"method_header": func(v *yaml.Node, path string) { c.ForwardAuth.MethodHeader = d.header(v, path) },
				"uri_header":    func(v *yaml.Node, path string) { c.ForwardAuth.URIHeader = d.header(v, path) },
				"settles":       func(v *yaml.Node, path string) { c.ForwardAuth.Settles = d.Bool(v, path) },
			})
			fa := c.ForwardAuth
			if _, err := gateway.Resolve(fa.Gateway, fa.MethodHeader, fa.URIHeader, fa.TenantHeader); err != nil {
				d.Add(v, path, "%v", err)
			}
		}),
		"upstream_headers": on(func(v *yaml.Node, path string) {
			d.Fields(v, path, policyfile.Handlers{
				"tenant": func(v *yaml.Node, path string) { c.UpstreamHeaders.Tenant = d.header(v, path) },
				"plan":   func(v *yaml.Node, path string) { c.UpstreamHeaders.Plan = d.header(v, path) },
			})
		}),
		"dependencies":      on(func(v *yaml.Node, path string) { d.dependencies(v, path, c) }),
		"upstream_capacity": on(func(v *yaml.Node, path string) { d.capacity(v, path, c) }),
	}
}

// providers decodes the outbound providers into c.
func (d *decoder) providers(v *yaml.Node, path string, c *Config) {
	d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
		if !policy.ValidName(name) {
			d.Add(k, path, "provider name %q: want lower-case letters, digits, '-' and '_'", name)
		}
		var pr quota.Provider
		d.Fields(v, path, policyfile.Handlers{
			"limit":  func(v *yaml.Node, path string) { pr.Limit.Limit = d.Int(v, path) },
			"period": func(v *yaml.Node, path string) { pr.Limit.Period = d.fixedPeriod(v, path) },
			"burst":  func(v *yaml.Node, path string) { pr.Limit.Burst = d.Int(v, path) },
			"tenant": func(v *yaml.Node, path string) {
				d.Fields(v, path, policyfile.Handlers{
					"limit":  func(v *yaml.Node, path string) { pr.Tenant.Limit = d.Int(v, path) },
					"period": func(v *yaml.Node, path string) { pr.Tenant.Period = d.fixedPeriod(v, path) },
					"burst":  func(v *yaml.Node, path string) { pr.Tenant.Burst = d.Int(v, path) },
				})
				d.checkLimit(v, path, pr.Tenant)
			},
		})
		d.checkLimit(v, path, pr.Limit)
		c.Providers[name] = pr
	})

}

// queues decodes the job queues' weights and kinds into c.
func (d *decoder) queues(v *yaml.Node, path string, c *Config) {
	d.Fields(v, path, policyfile.Handlers{
		"weights": func(v *yaml.Node, path string) {
			d.Entries(v, path, func(plan string, k, v *yaml.Node, path string) {
				w := d.Int(v, path)
				if w < 1 || w > 1000 {
					d.Add(v, path, "weight %d is outside 1..1000", w)
				}
				c.QueueWeights[plan] = int(w)
				if d.weightKeys == nil {
					d.weightKeys = map[string]*yaml.Node{}
				}
				d.weightKeys[plan] = k
			})
		},
		"kinds": func(v *yaml.Node, path string) {
			d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
				if !policy.ValidName(name) {
					d.Add(k, path, "kind name %q: want lower-case letters, digits, '-' and '_'", name)
				}
				var kd fairq.Kind
				d.Fields(v, path, policyfile.Handlers{
					"warn":         func(v *yaml.Node, path string) { kd.Warn = d.Count(v, path) },
					"refuse":       func(v *yaml.Node, path string) { kd.Refuse = d.Count(v, path) },
					"visibility":   func(v *yaml.Node, path string) { kd.Visibility = d.Duration(v, path) },
					"max_attempts": func(v *yaml.Node, path string) { kd.MaxAttempts = int(d.Count(v, path)) },
				})
				if kd.Refuse > 0 && kd.Warn > kd.Refuse {
					d.Add(v, path, "warn %d is over refuse %d: warn before refusing", kd.Warn, kd.Refuse)
				}
				c.Queues[name] = kd
			})
		},
	})

}

// dependencies decodes the dependencies' breaker settings into c.
func (d *decoder) dependencies(v *yaml.Node, path string, c *Config) {
	d.Entries(v, path, func(name string, k, v *yaml.Node, path string) {
		if !policy.ValidName(name) {
			d.Add(k, path, "dependency name %q: want lower-case letters, digits, '-' and '_'", name)
		}
		var st breaker.Settings
		d.Fields(v, path, policyfile.Handlers{
			"consecutive_failures": func(v *yaml.Node, path string) { st.ConsecutiveFailures = uint32(min(d.Count(v, path), 1<<31)) },
			"failure_ratio": func(v *yaml.Node, path string) {
				if st.FailureRatio = d.Float(v, path); st.FailureRatio <= 0 || st.FailureRatio > 1 {
					d.Add(v, path, "failure ratio %v is outside (0, 1]", st.FailureRatio)
				}
			},
			"min_requests": func(v *yaml.Node, path string) { st.MinRequests = uint32(min(d.Count(v, path), 1<<31)) },
			"window":       func(v *yaml.Node, path string) { st.Window = d.Duration(v, path) },
			"cooldown":     func(v *yaml.Node, path string) { st.Cooldown = d.Duration(v, path) },
			"failure_statuses": func(v *yaml.Node, path string) {
				d.List(v, path, func(i int, v *yaml.Node, path string) {
					code := d.Int(v, path)
					if code < 100 || code > 599 {
						d.Add(v, path, "%d is not an HTTP status", code)
					}
					st.FailureStatuses = append(st.FailureStatuses, int(code))
				})
				if len(st.FailureStatuses) == 0 {
					d.Add(v, path, "want at least one status (omit the field for 502, 503 and 504)")
				}
			},
			"min_parties": func(v *yaml.Node, path string) {
				if n := d.Int(v, path); n < 2 || n > 1000 {
					d.Add(v, path, "%d is outside 2..1000: one party's failures never open the breaker for everyone", n)
				} else {
					st.MinParties = int(n)
				}
			},
		})
		c.Dependencies[name] = st
	})

}

// auth decodes the credentials section. Key files are read relative to
// the config file's directory.
func (d *decoder) auth(n *yaml.Node, path string, a *auth.Config) {
	d.Fields(n, path, policyfile.Handlers{
		"api_keys": func(v *yaml.Node, path string) {
			d.List(v, path, func(i int, v *yaml.Node, path string) {
				var k auth.APIKey
				d.Fields(v, path, policyfile.Handlers{
					"sha256": func(v *yaml.Node, path string) {
						k.SHA256 = strings.ToLower(d.Str(v, path))
						if b, err := hex.DecodeString(k.SHA256); err != nil || len(b) != sha256.Size {
							d.Add(v, path, "want the 64 hex digits of the key's SHA-256 (printf %%s KEY | sha256sum), never the key itself")
						}
					},
					"tenant": func(v *yaml.Node, path string) {
						if k.Tenant = d.Str(v, path); k.Tenant != "" {
							if err := policy.CheckTenantID(k.Tenant); err != nil {
								d.Add(v, path, "tenant ID: %v", err)
							}
						}
					},
					"plan": func(v *yaml.Node, path string) {
						k.Plan = d.Str(v, path)
						d.keyPlans = append(d.keyPlans, keyPlan{node: v, path: path})
					},
				})
				if k.Tenant == "" {
					d.Add(v, path+".tenant", "tenant is required: the tenant the key belongs to")
				}
				if n := len(d.keyPlans); n > 0 && d.keyPlans[n-1].path == path+".plan" {
					d.keyPlans[n-1].tenant, d.keyPlans[n-1].plan = k.Tenant, k.Plan
				}
				a.APIKeys = append(a.APIKeys, k)
			})
		},
		"jwt": func(v *yaml.Node, path string) {
			j := &auth.JWTConfig{Leeway: auth.DefaultLeeway}
			a.JWT = j
			var algNodes []*yaml.Node // algorithms' items, checked once the keys are read
			keySources := 0           // public_keys' items and hmac_secret_file given, read or not
			d.Fields(v, path, policyfile.Handlers{
				"issuer":       func(v *yaml.Node, path string) { j.Issuer = d.Str(v, path) },
				"audience":     func(v *yaml.Node, path string) { j.Audience = d.Str(v, path) },
				"tenant_claim": func(v *yaml.Node, path string) { j.TenantClaim = d.Str(v, path) },
				"plan_claim":   func(v *yaml.Node, path string) { j.PlanClaim = d.Str(v, path) },
				"jwks_url":     func(v *yaml.Node, path string) { j.JWKSURL = d.Str(v, path) },
				"algorithms": func(v *yaml.Node, path string) {
					d.List(v, path, func(i int, v *yaml.Node, path string) {
						j.Methods = append(j.Methods, d.Str(v, path))
						algNodes = append(algNodes, v)
					})
				},
				"public_keys": func(v *yaml.Node, path string) {
					d.List(v, path, func(i int, v *yaml.Node, path string) {
						keySources++
						if k, err := readPublicKey(d.rel(d.Str(v, path))); err != nil {
							d.Add(v, path, "%v", err)
						} else {
							j.Keys = append(j.Keys, k)
						}
					})
				},
				"hmac_secret_file": func(v *yaml.Node, path string) {
					keySources++
					b, err := os.ReadFile(d.rel(d.Str(v, path)))
					// The secret is the file's bytes less the white space
					// around them (a trailing newline is not part of it).
					secret := bytes.TrimSpace(b)
					switch {
					case err != nil:
						d.Add(v, path, "%v: want a readable file holding the HMAC secret", err)
					case len(secret) < auth.MinHMACSecret:
						d.Add(v, path, "the secret is %d bytes once the white space around it is trimmed: want at least %d (head -c 32 /dev/urandom | base64)", len(secret), auth.MinHMACSecret)
					default:
						j.Keys = append(j.Keys, secret)
					}
				},
				"leeway": func(v *yaml.Node, path string) {
					s := d.Str(v, path)
					l, err := time.ParseDuration(s)
					if err != nil {
						d.Add(v, path, "duration %q does not parse: want 0 (none) to %v, such as 10s", s, auth.MaxLeeway)
						return
					}
					if err := auth.CheckLeeway(l); err != nil {
						d.Add(v, path, "%s", strings.TrimPrefix(err.Error(), "jwt.leeway: "))
						return
					}
					j.Leeway = l
				},
			})
			if j.Audience == "" {
				d.Add(v, path+".audience", "audience is required, so that tokens for other services are refused")
			}
			if len(j.Keys) == 0 && j.JWKSURL == "" && keySources == 0 {
				// Only when none was given: one that failed to read has
				// its own problem above.
				d.Add(v, path, "give public_keys, hmac_secret_file or jwks_url to verify tokens with")
			}
			for i, n := range algNodes {
				err := auth.CheckAlgorithm(j.Methods[i], j.Keys, j.JWKSURL != "")
				if len(j.Keys) < keySources {
					// A key that failed to read has its own problem: judge
					// only the names, so as not to repeat it.
					err = auth.CheckAlgorithmName(j.Methods[i])
				}
				if err != nil {
					d.Add(n, fmt.Sprintf("%s.algorithms[%d]", path, i), "%v", err)
				}
			}
		},
	})
}

// rel resolves a path relative to the config file's directory.
func (d *decoder) rel(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(filepath.Dir(d.File()), p)
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

// fixedPeriod is period without calendar windows.
func (d *decoder) fixedPeriod(n *yaml.Node, path string) time.Duration {
	p, cal := d.Period(n, path)
	if cal != policy.NoCalendar {
		d.Add(n, path, "%v: want a duration such as 1s here", cal)
	}
	return p
}

// checkLimit validates a provider's limit.
func (d *decoder) checkLimit(n *yaml.Node, path string, l algo.Limit) {
	if l.Limit == 0 && l.Period == 0 {
		d.Add(n, path, "limit and period are required")
		return
	}
	if err := l.Validate(); err != nil {
		d.Add(n, path, "%v", err)
	}
}

// header reads an HTTP header name: a token of letters, digits and '-'.
func (d *decoder) header(v *yaml.Node, path string) string {
	h := d.Str(v, path)
	ok := h != ""
	for _, r := range h {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-') {
			ok = false
		}
	}
	if !ok {
		d.Add(v, path, "header name %q: want letters, digits and '-', such as X-Tenant", h)
		return ""
	}
	return http.CanonicalHeaderKey(h)
}
