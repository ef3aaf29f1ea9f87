// Package rlsxds receives the Envoy rate limit service's domains over xDS,
// as envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW: a
// state-of-the-world ADS stream of RateLimitConfig resources
// (ratelimit.config.ratelimit.v3) from a management server built with
// go-control-plane. Each update is checked as strictly as a file
// (package config): a valid one is applied and acknowledged, an invalid
// one is refused (NACK, with why) and the domains in force stay.
//
// A management server answers a refusal at once with what it holds, the
// same invalid update (go-control-plane's snapshot cache does): refusing
// at once again loops thousands of times a second. The client waits
// before each refusal it sends, from NACKBackoff doubling to
// MaxNACKBackoff while the updates stay invalid, so a valid update
// arrives at most MaxNACKBackoff after it is served; it logs a refusal
// when its reason changes, and the same refusal again once a minute with
// how many times it was made.
package rlsxds

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	confpb "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fairgate/fairgate/internal/config"
	"github.com/fairgate/fairgate/internal/rls"
)

// MaxMessage bounds one update from the management server.
const MaxMessage = 16 << 20

// Client follows a management server.
type Client struct {
	// Address is the management server's host:port (plain gRPC).
	Address string
	// Node identifies this instance to the server: its ID and metadata.
	NodeID   string
	Metadata map[string]string
	// Retry is the wait before reconnecting; zero means 3 s.
	Retry time.Duration
	// NACKBackoff is the wait before the first refusal of a run of
	// invalid updates, doubled for each next one up to MaxNACKBackoff;
	// zero means 250 ms and 10 s.
	NACKBackoff, MaxNACKBackoff time.Duration
	// Apply puts a valid update's domains in force, or refuses them (an
	// error is sent back as the NACK's reason).
	Apply func([]rls.Domain) error
	// Refused, if not nil, is called for each update refused before Apply
	// (one that does not decode into domains).
	Refused func()
	Log     *slog.Logger
}

// Run follows the server until ctx ends, reconnecting after errors.
func (c *Client) Run(ctx context.Context) error {
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	retry := c.Retry
	if retry <= 0 {
		retry = 3 * time.Second
	}
	for ctx.Err() == nil {
		if err := c.follow(ctx); err != nil && ctx.Err() == nil {
			c.Log.Warn("xDS: the management server stream ended; reconnecting", slog.String("server", c.Address), slog.String("error", err.Error()), slog.Duration("in", retry))
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
	return nil
}

// follow runs one stream: receive, check, apply, ACK or NACK.
func (c *Client) follow(ctx context.Context) error {
	conn, err := grpc.NewClient(c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessage)))
	if err != nil {
		return err
	}
	defer conn.Close()
	md := map[string]any{}
	for k, v := range c.Metadata {
		md[k] = v
	}
	meta, err := structpb.NewStruct(md)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ads := sotw.NewADSClient(ctx, &corepb.Node{Id: c.NodeID, Metadata: meta}, resource.RateLimitConfigType)
	if err := ads.InitConnect(conn); err != nil {
		return err
	}
	var r refusals
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return err
		}
		domains, err := Domains(resp.Resources)
		if err == nil {
			err = c.Apply(domains)
		} else if c.Refused != nil {
			c.Refused()
		}
		if err != nil {
			wait := r.refused(c, err.Error())
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
			if err := ads.Nack(err.Error()); err != nil {
				return err
			}
			continue
		}
		r = refusals{}
		c.Log.Info("xDS: rate limit config applied", slog.Int("domains", len(domains)))
		if err := ads.Ack(); err != nil {
			return err
		}
	}
}

// refusals is a run of refused updates.
type refusals struct {
	reason  string        // the last one's
	count   int           // refusals of that reason since it was last logged
	logged  time.Time     // when it was last logged
	backoff time.Duration // the wait before the last refusal
}

// refusalLogEvery is how often the same refusal is logged again.
const refusalLogEvery = time.Minute

// refused counts a refusal for reason, logs it if it is new (or a minute
// has passed), and returns the wait before sending it.
func (r *refusals) refused(c *Client, reason string) time.Duration {
	first, most := cmp.Or(c.NACKBackoff, 250*time.Millisecond), cmp.Or(c.MaxNACKBackoff, 10*time.Second)
	r.backoff = min(max(2*r.backoff, first), most)
	r.count++
	if now := time.Now(); reason != r.reason || now.Sub(r.logged) >= refusalLogEvery {
		c.Log.Error("xDS: update refused; keeping the domains in force", slog.String("error", reason),
			slog.Int("refusals", r.count), slog.Duration("next_refusal_in", r.backoff))
		r.reason, r.count, r.logged = reason, 0, now
	}
	return r.backoff
}

// Domains checks and converts RateLimitConfig resources: each one as
// strictly as an envoyproxy/ratelimit file, its name naming it in errors.
func Domains(resources []*anypb.Any) ([]rls.Domain, error) {
	var out []rls.Domain
	seen := map[string]string{}
	for _, r := range resources {
		var c confpb.RateLimitConfig
		if err := r.UnmarshalTo(&c); err != nil {
			return nil, fmt.Errorf("a resource that is not a RateLimitConfig: %w", err)
		}
		data, err := yaml.Marshal(map[string]any{"domain": c.Domain, "descriptors": descriptors(c.Descriptors)})
		if err != nil {
			return nil, err
		}
		ds, err := config.ParseRLS("xds:"+c.Name, data)
		if err != nil {
			return nil, err
		}
		for _, d := range ds {
			if prev, dup := seen[d.Name]; dup {
				return nil, fmt.Errorf("xds:%s: domain %q is also in xds:%s", c.Name, d.Name, prev)
			}
			seen[d.Name] = c.Name
		}
		out = append(out, ds...)
	}
	return out, nil
}

// descriptors turns RateLimitConfig descriptors into the file format's.
func descriptors(ds []*confpb.RateLimitDescriptor) []map[string]any {
	var out []map[string]any
	for _, d := range ds {
		m := map[string]any{"key": d.Key}
		if d.Value != "" {
			m["value"] = d.Value
		}
		if p := d.RateLimit; p != nil {
			rl := map[string]any{}
			if p.Unlimited {
				rl["unlimited"] = true
			} else {
				rl["unit"] = p.Unit.String()
				rl["requests_per_unit"] = p.RequestsPerUnit
			}
			if p.Name != "" {
				rl["name"] = p.Name
			}
			var rep []map[string]any
			for _, r := range p.Replaces {
				rep = append(rep, map[string]any{"name": r.Name})
			}
			if len(rep) > 0 {
				rl["replaces"] = rep
			}
			m["rate_limit"] = rl
		}
		if len(d.Descriptors) > 0 {
			m["descriptors"] = descriptors(d.Descriptors)
		}
		for k, v := range map[string]bool{"shadow_mode": d.ShadowMode, "detailed_metric": d.DetailedMetric, "quota_mode": d.QuotaMode} {
			if v {
				m[k] = true
			}
		}
		if d.Metadata != nil {
			m["metadata"] = d.Metadata.AsMap()
		}
		out = append(out, m)
	}
	return out
}
