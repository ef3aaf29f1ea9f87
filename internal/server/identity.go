package server

import (
	"cmp"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/fairgate/fairgate/internal/auth"
	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/gateway"
	"github.com/fairgate/fairgate/policy"
)

// Who is calling: the credentials, trusted proxies and identity headers
// in force, swapped whole on a reload, and the verification of a request's
// credential for the proxy, /v1/authz, /v1/me/limits and the job API.

// identity is what the server verifies credentials and finds client
// addresses with, and the headers it tells the upstream who the caller is
// in; swapped whole on a config reload.
type identity struct {
	auth          *auth.Authenticator
	ip            auth.ClientIP
	tenantHdr     string
	planHdr       string
	fa            config.ForwardAuth
	gw            *gateway.Gateway // fa's gateway; nil: none named
	unknownLog    sync.Map         // plan claims already logged as unknown
	unknownLogged atomic.Int64
}

// SetIdentity replaces the credentials, trusted proxies, upstream
// identity headers and forward-auth settings, as a config reload does.
// Requests in flight finish with the old ones. Forward-auth settings
// that name no gateway rightly are refused (ForwardAuth.Resolve), and
// nothing changes.
func (s *Server) SetIdentity(a *auth.Authenticator, ip auth.ClientIP, h config.UpstreamHeaders, fa config.ForwardAuth) error {
	gw, err := fa.Resolve()
	if err != nil {
		return err
	}
	if fa.DenyStatus == 0 {
		fa.DenyStatus = http.StatusTooManyRequests
		if gw != nil {
			fa.DenyStatus = gw.DenyStatus
		}
	}
	if fa.TenantHeader != "" {
		fa.TenantHeader = http.CanonicalHeaderKey(fa.TenantHeader)
	}
	s.id.Store(&identity{auth: a, ip: ip, fa: fa, gw: gw,
		tenantHdr: http.CanonicalHeaderKey(cmp.Or(h.Tenant, "X-Fairgate-Tenant")),
		planHdr:   http.CanonicalHeaderKey(cmp.Or(h.Plan, "X-Fairgate-Plan"))})
	return nil
}

// Swap runs f, which replaces the identity ([Server.SetIdentity]) and the
// limiter's policy, as one step for the requests that read both: pinned
// reads them again when a swap overlapped its reading, so that no request
// is decided by one config's policy and another's credentials (a plan
// renamed in the new file would otherwise fall to the default plan for a
// moment). Requests wait out a swap; none waits otherwise.
func (s *Server) Swap(f func()) {
	s.swapMu.Lock()
	s.swapGen.Add(1) // odd: a swap is under way
	defer func() {
		s.swapGen.Add(1)
		s.swapMu.Unlock()
	}()
	f()
}

// pinned verifies r's credential and reads the policy snapshot as one
// generation of the config (see [Server.Swap]).
func (s *Server) pinned(r *http.Request) (policy.Identity, *policy.Snapshot, error) {
	for {
		gen := s.swapGen.Load()
		if gen&1 == 1 {
			s.swapMu.RLock() // wait out the swap
			s.swapMu.RUnlock()
			continue
		}
		snap := s.lim.Snapshot()
		id, err := s.identifyIn(r, s.id.Load(), snap)
		if s.swapGen.Load() == gen {
			return id, snap, err
		}
	}
}

// clientIP is the request's client address by the trusted proxies in force.
func (s *Server) clientIP(r *http.Request) netip.Addr { return s.id.Load().ip.Of(r) }

// identifyIn verifies r's credential for the proxy and /v1/me/limits with
// ids, the plan it names checked in snap: a zero identity for none, an
// error for a bad one. Callers use pinned.
func (s *Server) identifyIn(r *http.Request, ids *identity, snap *policy.Snapshot) (policy.Identity, error) {
	a := ids.auth
	if a == nil || !a.Enabled() {
		if len(r.Header.Values("Authorization")) > 0 || len(r.Header.Values("X-API-Key")) > 0 {
			return policy.Identity{}, errors.New("no credentials are configured: this service accepts none")
		}
		return policy.Identity{}, nil
	}
	id, err := a.Authenticate(r)
	if errors.Is(err, auth.ErrNoCredential) {
		return policy.Identity{}, nil
	}
	if err != nil {
		return policy.Identity{}, err
	}
	if id.Plan != "" && !snap.KnownPlan(id.Plan) {
		// The policy's default applies; say so once per plan name (at
		// most 1,000 names, so a flood of made-up claims cannot grow it).
		if ids.unknownLogged.Load() < 1000 {
			if _, seen := ids.unknownLog.LoadOrStore(id.Plan, true); !seen {
				ids.unknownLogged.Add(1)
				s.log.Warn("a credential names an unknown plan; the tenant gets its configured or the default plan", slog.String("tenant", id.Tenant), slog.String("plan", id.Plan))
			}
		}
	}
	return policy.Identity{Tenant: id.Tenant, Plan: id.Plan}, nil
}
