// Package config reads fairgate's YAML config file: strict decoding (an
// unknown field is an error with its line), defaults, and validation that
// collects every problem with its file, line and field. The result is a
// policy.Policy plus the service's own settings; nothing here is used on
// the request path.
package config

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/gateway"
	"github.com/fairgate/fairgate/internal/rlsconfig"
	"github.com/fairgate/fairgate/internal/statsd"
	"github.com/fairgate/fairgate/policy"
	"github.com/fairgate/fairgate/policy/policyfile"

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
	// NoPolicy reports a file without one (no plans, classes or routes):
	// only the Envoy rate limit service (rls) is configured, and the HTTP
	// decision API has nothing to decide by.
	NoPolicy bool
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
	RLS rlsconfig.Config
	// HasRLS reports an rls section: a file with one needs no policy.
	HasRLS bool
	// RLSSources are the directories the rls domains were read from:
	// the watcher looks at them for changes too.
	RLSSources []Source

	read   *digest           // what decoding read of the rls files and directories
	loaded [sha256.Size]byte // its sum: LoadedFingerprint
	// RLSFiles are the files the rls section named (its files globs).
	RLSFiles []string
	// rlsDefault and rlsOwn are the rls section's fail mode, algorithm and
	// atomic, and each domain's own, for the domains that come from xDS
	// (RLSDomainDefaults).
	rlsDefault rlsconfig.Domain
	rlsOwn     map[string]*rlsDomainSettings
	// RLSXDS, when its Address is set, is the xDS management server the
	// Envoy service's domains also come from.
	RLSXDS XDS
	// Statsd is where the Envoy service's statistics go as statsd
	// counters; an empty Address means nowhere.
	Statsd Statsd
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
	// ForwardAuth configures /v1/authz, the forward-auth endpoint of
	// gateways (nginx auth_request, Caddy forward_auth, Traefik
	// forwardAuth).
	ForwardAuth ForwardAuth
	// UpstreamHeaders name the headers the proxy tells the upstream the
	// verified tenant and plan in (client-sent copies are removed).
	UpstreamHeaders UpstreamHeaders
	// UpstreamCapacity, when set, shares the proxied upstream's
	// concurrency fairly between tenants (package fairshare).
	UpstreamCapacity *UpstreamCapacity
	// Instances is how many fairgate instances share the store (sizes the
	// fallback limiter). At least 1.
	Instances int
}

// XDS is an xDS management server of rate limit configs
// (envoyproxy/ratelimit's CONFIG_TYPE=GRPC_XDS_SOTW).
type XDS struct {
	// Address is its host:port.
	Address string
	// NodeID and Metadata identify this instance to it.
	NodeID   string
	Metadata map[string]string
	// Retry is the wait before reconnecting; zero means 3 s.
	Retry time.Duration
}

// Statsd is a statsd destination.
type Statsd struct {
	// Address is host:port.
	Address string
	// Protocol is "udp" or "tcp"; zero means udp in a config file (the
	// environment of envoyproxy/ratelimit writes tcp, its default).
	Protocol string
	// FlushInterval is how often counts are sent; zero means 10 s.
	FlushInterval time.Duration
	// Tags are put on every stat (envoyproxy/ratelimit's EXTRA_TAGS).
	Tags map[string]string
	// DogStatsD sends the tags in DogStatsD's form (USE_DOG_STATSD).
	DogStatsD bool
	// Mogrifiers rename stats in DogStatsD (USE_DOG_STATSD_MOGRIFIERS).
	Mogrifiers []statsd.Mogrifier
}

// Problem is one thing wrong with a file.
type Problem = policyfile.Problem

// Error is every problem of one file. A file with problems is never used.
type Error = policyfile.Error

// MaxFileBytes is the largest config file fairgate reads.
const MaxFileBytes = policyfile.MaxFileBytes

// ReadFile reads the config file at path, refusing one over MaxFileBytes
// without reading it whole.
func ReadFile(path string) ([]byte, error) { return policyfile.ReadFile(path) }

// ForwardAuth configures /v1/authz, the forward-auth endpoint.
type ForwardAuth struct {
	// DenyStatus is the status of a rejected request: 429, or 403 with the
	// real status (429, or 503 for a fail-closed answer) in
	// X-Fairgate-Status, for gateways that turn anything but 2xx, 401 and
	// 403 into 500 (nginx auth_request, ingress-nginx). Zero means the
	// gateway's own default (403 for those two, else 429).
	DenyStatus int
	// TenantHeader, if set, names the tenant when the peer is a trusted
	// proxy and the request carries no credential of its own. The
	// gateway forwards the client's headers too: it is safe only where
	// the gateway sets this header on every auth request, replacing the
	// client's copy (docs/gateways.md shows how for each).
	TenantHeader string
	// Gateway names the gateway in front (package gateway: nginx,
	// ingress-nginx, caddy, traefik, envoy, or custom with MethodHeader
	// and URIHeader): /v1/authz reads the original request only from the
	// headers it sets. "" means none is named, and /v1/authz answers 500
	// saying so.
	Gateway string
	// MethodHeader and URIHeader are a custom gateway's headers: the
	// original method and request target, set by the gateway on every
	// auth request, replacing the client's copies.
	MethodHeader, URIHeader string
	// Settles says that every admitted request of a measured-cost class
	// is settled through the handle /v1/authz answers in
	// X-Fairgate-Settlement (the API, or the gateway, posts it to
	// /v1/settle with the true cost): such a request is then charged its
	// estimate (the class's estimate header, else its default). False,
	// the default, charges the cap, so that the budget holds if nothing
	// settles; the handle is answered all the same, and settling it
	// refunds the rest.
	Settles bool
}

// Resolve returns the gateway fa names, or nil for none, or an error
// naming what is wrong with it.
func (fa ForwardAuth) Resolve() (*gateway.Gateway, error) {
	g, err := gateway.Resolve(fa.Gateway, fa.MethodHeader, fa.URIHeader, fa.TenantHeader)
	if err != nil {
		return nil, fmt.Errorf("forward_auth: %w", err)
	}
	return g, nil
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
	c := &Config{File: file, Headers: "draft", Providers: map[string]quota.Provider{}, Queues: fairq.Kinds{}, QueueWeights: map[string]int{}, Dependencies: map[string]breaker.Settings{}, Instances: 1, Dashboard: true,
		ClientIPHeader: "x-forwarded-for", UpstreamHeaders: UpstreamHeaders{Tenant: "X-Fairgate-Tenant", Plan: "X-Fairgate-Plan"}}
	d := &decoder{}
	c.read = newDigest()
	// A file with only the Envoy service's settings needs no policy.
	rlsOnly := func() bool { return c.HasRLS }
	p, err := policyfile.ParseWith(file, data, d.sections(c), d.checkWeights, rlsOnly)
	if err != nil {
		return nil, err
	}
	c.Policy, c.NoPolicy = p, p.Plans == nil
	c.loaded, c.read = c.read.sum(), nil
	return c, nil
}

// decoder decodes the daemon's own sections of the file.
type decoder struct {
	*policyfile.Decoder
	// weightKeys are the plans queues.weights names, checked once the
	// plans are known.
	weightKeys map[string]*yaml.Node
	// capacityKeys are the classes and plans upstream_capacity names.
	capacityKeys []capacityKey
	// keyPlans are the plans auth.api_keys name, checked against the
	// tenants' entries once the policy is known.
	keyPlans []keyPlan
}

// keyPlan is an API key's plan in the file, where it is written.
type keyPlan struct {
	node         *yaml.Node
	path         string
	tenant, plan string
}

// checkKeyPlans reports an API key whose plan its tenant's entry would
// override (a tenant's entry decides its plan before any credential's:
// policy.PlanSource): the file would say two things of one tenant.
func (d *decoder) checkKeyPlans(pd *policyfile.Decoder, p policy.Policy) {
	for _, k := range d.keyPlans {
		t, ok := p.Tenants[k.tenant]
		if !ok || k.plan == "" {
			continue
		}
		entry := cmp.Or(t.Plan, p.DefaultPlan)
		if entry != k.plan {
			pd.Add(k.node, k.path, "plan %q would never apply: tenants.%s puts tenant %q on plan %q, and a tenant's entry decides its plan before any credential's; remove this plan or make the two agree", k.plan, k.tenant, k.tenant, entry)
		}
	}
}

// checkWeights reports queue weights of plans the policy does not have,
// and runs the other checks that need the policy (capacity, key plans).
func (d *decoder) checkWeights(pd *policyfile.Decoder, p policy.Policy) {
	d.checkCapacity(pd, p)
	d.checkKeyPlans(pd, p)
	for _, plan := range slices.Sorted(maps.Keys(d.weightKeys)) {
		if _, ok := p.Plans[plan]; !ok && len(p.Plans) > 0 { // none: "plans is required"
			pd.Add(d.weightKeys[plan], "queues.weights."+plan, "unknown plan %q: want one of %s", plan, strings.Join(slices.Sorted(maps.Keys(p.Plans)), ", "))
		}
	}
}
