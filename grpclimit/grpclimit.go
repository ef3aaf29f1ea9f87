package grpclimit

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/limitheader"
	"github.com/fairgate/fairgate/policy"
)

// Config configures the interceptors.
type Config struct {
	// Limiter decides the calls. Required.
	Limiter *limiter.Limiter
	// Identify returns the verified identity of a call (the tenant, and a
	// plan if the credential names one); a zero Identity for an anonymous
	// call (limited by the policy's anonymous routes, per peer address).
	// An error fails the call with UNAUTHENTICATED and the error's text.
	// Required. The same shape as httplimit.Config.Identify's.
	Identify func(ctx context.Context, fullMethod string) (policy.Identity, error)
	// Headers is the form of the trailing rate-limit metadata (see package
	// limitheader). Zero means the IETF draft's RateLimit-Limit,
	// -Remaining and -Reset.
	Headers limitheader.Form
	// SlowDown holds a call the near cache rejects for its class's
	// slow_down before failing it (see policy.Class.SlowDown), pacing a
	// client that retries without waiting. False (the default) fails it
	// at once.
	SlowDown bool
}

// decider is a validated Config.
type decider struct {
	Config
	form limitheader.Form
}

func newDecider(c Config) (*decider, error) {
	if c.Limiter == nil || c.Identify == nil {
		return nil, errors.New("grpclimit: Config.Limiter and Config.Identify are required")
	}
	form, err := limitheader.ParseForm(string(c.Headers))
	if err != nil {
		return nil, err
	}
	return &decider{Config: c, form: form}, nil
}

// UnaryServerInterceptor decides each unary call before its handler runs.
func UnaryServerInterceptor(c Config) (grpc.UnaryServerInterceptor, error) {
	d, err := newDecider(c)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		slots, err := d.decide(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		defer hold(ctx, slots)()
		return handler(ctx, req)
	}, nil
}

// StreamServerInterceptor decides each stream when it opens.
func StreamServerInterceptor(c Config) (grpc.StreamServerInterceptor, error) {
	d, err := newDecider(c)
	if err != nil {
		return nil, err
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		slots, err := d.decide(ss.Context(), info.FullMethod)
		if err != nil {
			return err
		}
		defer hold(ss.Context(), slots)()
		return handler(srv, ss)
	}, nil
}

// hold keeps a call's concurrency slots for as long as its handler runs
// (renewed for a long stream) and returns what gives them back: when the
// handler returns, whether it ended well, failed, or its client went away.
func hold(ctx context.Context, slots *limiter.Slots) func() {
	if slots == nil {
		return func() {}
	}
	stop := slots.KeepAlive()
	return func() {
		stop()
		slots.Release(ctx)
	}
}

// decide returns nil to let the call through, with the concurrency slots
// it holds (nil for none), or its status error. The rate-limit metadata is
// set as trailers either way.
func (d *decider) decide(ctx context.Context, fullMethod string) (*limiter.Slots, error) {
	id, err := d.Identify(ctx, fullMethod)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	req := policy.Request{Tenant: id.Tenant, Plan: id.Plan, Method: http.MethodPost, Path: fullMethod, Hold: d.SlowDown}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			req.IP = ap.Addr().Unmap()
		} else if tcp, ok := p.Addr.(*net.TCPAddr); ok {
			req.IP, _ = netip.AddrFromSlice(tcp.IP)
		}
	}
	dec, err := d.Limiter.Decide(ctx, req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	h := http.Header{}
	limitheader.Set(h, d.form, dec)
	if !dec.Allowed {
		h.Set("Retry-After", limitheader.RetryAfter(dec.RetryAfter))
	}
	md := metadata.MD{}
	for k, v := range h {
		md[strings.ToLower(k)] = v
	}
	grpc.SetTrailer(ctx, md)
	if dec.Allowed {
		return dec.Slots, nil
	}
	code, msg := codes.ResourceExhausted, "rate limited by "+dec.Policy+": retry after "+dec.RetryAfter.String()
	if dec.Reason == limiter.ReasonUnavailable {
		code, msg = codes.Unavailable, "the rate limiter cannot decide right now and this method fails closed; retry later"
	}
	st, err := status.New(code, msg).WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(dec.RetryAfter)})
	if err != nil {
		return nil, status.Error(code, msg)
	}
	return nil, st.Err()
}
