package config

import "testing"

func TestExampleLoads(t *testing.T) {
	c, err := Load("../../examples/fairgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policy.Plans) != 3 || c.Policy.DefaultPlan != "free" || c.Providers["sms"].Limit.Limit != 100 {
		t.Errorf("example decoded as %+v", c)
	}
}
