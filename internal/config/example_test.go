package config

import (
	"strings"
	"testing"
)

func TestExampleLoads(t *testing.T) {
	c, err := Load("../../examples/fairgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Policy.Plans) != 3 || c.Policy.DefaultPlan != "free" || c.Providers["sms"].Limit.Limit != 100 {
		t.Errorf("example decoded as %+v", c)
	}
}

// TestExampleCapacityLoads: the example's commented upstream_capacity
// section is valid once uncommented.
func TestExampleCapacityLoads(t *testing.T) {
	data, err := ReadFile("../../examples/fairgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	on := false
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "# upstream_capacity:") {
			on = true
		}
		if on {
			line = strings.TrimPrefix(strings.TrimPrefix(line, "# "), "#")
		}
		out = append(out, line)
	}
	c, err := Parse("fairgate.yaml", []byte(strings.Join(out, "")))
	if err != nil {
		t.Fatal(err)
	}
	if u := c.UpstreamCapacity; u == nil || u.Gate.Ceiling != 64 || u.Weights["team"] != 4 || len(u.Critical) != 1 {
		t.Fatalf("the example's section decoded as %+v", u)
	}
}
