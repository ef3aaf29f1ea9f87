package policy_test

import (
	"testing"
	"time"

	"github.com/fairgate/fairgate/policy"
)

// TestPlanPrecedence: where a tenant's plan comes from, first to last
// (policy.PlanSource): its run-time entry until it expires, its file entry,
// the plan its credential names (an API key's, from the file or the admin
// API, or a JWT's claim: one credential per request, so one value), the
// default plan. Decisions (Resolve) and Standing agree on every row.
func TestPlanPrecedence(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	p := testPolicy()
	p.Tenants["overrides-only"] = policy.Tenant{Limit: 300} // no plan: the default plan, with its override
	snap, err := policy.CompileWith(p, policy.Overlay{Tenants: map[string]policy.Tenant{
		"bumped":  {Plan: "team"},                                      // run-time only
		"globex":  {Plan: "enterprise"},                                // run-time over the file's team
		"acme":    {Plan: "team", Expires: now.Add(-time.Minute)},      // expired: the file's enterprise again
		"initech": {Plan: "enterprise", Expires: now.Add(time.Minute)}, // in force until then, then none
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, tenant, credential string
		wantPlan                 string
		wantSource               policy.PlanSource
	}{
		{"no entry, no credential plan: the default", "newco", "", "free", policy.PlanFromDefault},
		{"no entry: the credential's plan", "newco", "team", "team", policy.PlanFromCredential},
		{"no entry, unknown credential plan: the default", "newco", "platinum", "free", policy.PlanFromDefault},
		{"file entry over the credential's plan", "acme", "team", "enterprise", policy.PlanFromFile},
		{"file entry without a credential plan", "acme", "", "enterprise", policy.PlanFromFile},
		{"file entry without a plan: the default, over the credential's", "overrides-only", "team", "free", policy.PlanFromFile},
		{"run-time entry over the file's", "globex", "free", "enterprise", policy.PlanFromRuntime},
		{"run-time entry over the credential's", "bumped", "enterprise", "team", policy.PlanFromRuntime},
		{"expired run-time entry: the file's", "acme", "free", "enterprise", policy.PlanFromFile},
		{"run-time entry until it expires", "initech", "team", "enterprise", policy.PlanFromRuntime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := snap.Standing(tc.tenant, tc.credential, now)
			if st.Plan != tc.wantPlan || st.Source != tc.wantSource {
				t.Errorf("Standing(%q, plan %q) = plan %q from %v, want %q from %v", tc.tenant, tc.credential, st.Plan, st.Source, tc.wantPlan, tc.wantSource)
			}
			res, err := snap.Resolve(policy.Request{Tenant: tc.tenant, Plan: tc.credential, Class: "read"}, now)
			if err != nil || res.Plan != tc.wantPlan {
				t.Errorf("Resolve: plan %q, %v; want %q", res.Plan, err, tc.wantPlan)
			}
		})
	}
	// FileStanding: what stands once a run-time entry ends (expired or
	// deleted): the file's entry, else the credential's plan, else the
	// default; a tenant without a run-time entry stands as it does now.
	for _, tc := range []struct {
		tenant, credential, wantPlan string
		wantSource                   policy.PlanSource
	}{
		{"globex", "free", "team", policy.PlanFromFile},
		{"acme", "team", "enterprise", policy.PlanFromFile},
		{"bumped", "enterprise", "enterprise", policy.PlanFromCredential},
		{"bumped", "", "free", policy.PlanFromDefault},
		{"initech", "team", "team", policy.PlanFromCredential},
		{"newco", "team", "team", policy.PlanFromCredential},
		{"overrides-only", "team", "free", policy.PlanFromFile},
	} {
		if st := snap.FileStanding(tc.tenant, tc.credential); st.Plan != tc.wantPlan || st.Source != tc.wantSource {
			t.Errorf("FileStanding(%q, plan %q) = plan %q from %v, want %q from %v", tc.tenant, tc.credential, st.Plan, st.Source, tc.wantPlan, tc.wantSource)
		}
	}
	// Once initech's run-time entry expires, its credential's plan decides.
	if st := snap.Standing("initech", "team", now.Add(time.Hour)); st.Plan != "team" || st.Source != policy.PlanFromCredential {
		t.Errorf("initech after its entry expired: %+v, want team from the credential", st)
	}
}
