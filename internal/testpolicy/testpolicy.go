// Package testpolicy holds the policy the tests of several packages
// decide by: examples/fairgate.yaml, written in Go.
package testpolicy

import (
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
