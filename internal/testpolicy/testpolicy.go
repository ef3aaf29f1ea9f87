// Package testpolicy holds the policy the tests of several packages
// decide by: examples/fairgate.yaml, written in Go.
package testpolicy

import (
	"fmt"
	"time"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

// PerMin is n per minute with burst.
func PerMin(n, burst int64) algo.Limit {
	return algo.Limit{Limit: n, Period: time.Minute, Burst: burst}
}

// Policy mirrors examples/fairgate.yaml in Go.
func Policy() policy.Policy {
	return policy.Policy{
		DefaultPlan:  "free",
		DefaultClass: "read",
		Plans: map[string]policy.Plan{
			"free": {Rules: []policy.Rule{
				{Limit: PerMin(120, 30)},
				{Name: "daily", Limit: algo.Limit{Limit: 10_000}, Calendar: policy.Day},
			}},
			"team":       {Rules: []policy.Rule{{Limit: PerMin(1200, 200)}}},
			"enterprise": {Rules: []policy.Rule{{Limit: PerMin(6000, 600)}}},
		},
		Classes: map[string]policy.Class{
			"read":   {Share: 1},
			"write":  {Share: 0.5, Fail: policy.FailClosed},
			"search": {Share: 0.25},
			"export": {Share: 0.1, Fail: policy.FailClosed, Shadow: true},
		},
		Routes: []policy.Route{
			{Pattern: "GET /healthz", Class: "read", Free: true},
			{Pattern: "GET /v1/users/{id}", Class: "read", Cost: 1},
			{Pattern: "POST /v1/users", Class: "write", Cost: 1},
			{Pattern: "GET /v1/search", Class: "search", Cost: 1},
			{Pattern: "POST /v1/reports", Class: "export", Cost: 3},
		},
		Anonymous: []policy.AnonRoute{{
			Name: "login", Pattern: "POST /v1/login", Cost: 1, Fail: policy.FailClosed,
			Rules: []policy.AnonRule{
				{Rule: policy.Rule{Limit: PerMin(10, 0)}, By: policy.ByIP},
				{Rule: policy.Rule{Name: "per-user", Limit: algo.Limit{Limit: 5, Period: 15 * time.Minute}}, By: policy.ByCredential},
			},
		}},
		Tenants: map[string]policy.Tenant{
			"acme":   {Plan: "enterprise"},
			"globex": {Plan: "team", Burst: 400, Shares: map[string]float64{"search": 0.5}},
		},
	}
}

// Tokens is a policy file (YAML) with plan pro at limit tokens per
// period (a duration such as 720h) and class llm, half of it, with a
// measured cost in tokens: estimated from X-Max-Tokens or max_tokens
// (default 500, cap 4000), measured from X-Usage-Tokens or
// usage.total_tokens, and routed at POST /v1/chat. Other requests are
// class read; GET /healthz is free.
func Tokens(limit int64, period string) string {
	return fmt.Sprintf(`default_plan: pro
default_class: read
plans:
  pro: {limit: %d, period: %s}
classes:
  read: {}
  llm:
    share: 0.5
    cost:
      unit: tokens
      estimate: {header: X-Max-Tokens, json: max_tokens, default: 500, cap: 4000}
      measure: {header: X-Usage-Tokens, json: usage.total_tokens}
routes:
  - {route: "GET /healthz", class: read, cost: 0}
  - {route: "POST /v1/chat", class: llm}
`, limit, period)
}
