package app

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/config"
)

// TestDemoKeyList: examples.DemoAPIKeys is the one list of published keys,
// so it must be complete: every API key of the example config is one of
// them, every demo key the README and docs print is listed, and the
// image's and chart's starting config accepts none.
func TestDemoKeyList(t *testing.T) {
	c, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	if got := demoKeyTenants(c.Auth.APIKeys); len(got) != len(c.Auth.APIKeys) || len(got) == 0 {
		t.Errorf("demo keys found for tenants %v of the example's %d keys: a key of examples/fairgate.yaml is missing from examples.DemoAPIKeys", got, len(c.Auth.APIKeys))
	}
	printed := regexp.MustCompile(`demo-[a-z0-9-]+-key`)
	files, _ := filepath.Glob("../../docs/*.md")
	for _, f := range append(files, "../../README.md", "../../examples/fairgate.yaml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range printed.FindAllString(string(b), -1) {
			if !slices.Contains(examples.DemoAPIKeys, k) {
				t.Errorf("%s prints %q, which examples.DemoAPIKeys does not list", f, k)
			}
		}
	}
	minimal, err := os.ReadFile("../../examples/fairgate.minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m, err := config.Parse("examples/fairgate.minimal.yaml", minimal)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Auth.APIKeys) != 0 || m.Auth.JWT != nil {
		t.Errorf("examples/fairgate.minimal.yaml holds credentials: %+v", m.Auth)
	}
}

// TestExposureHeardAtAnyLevel: the warning that a demo key is accepted
// is written whatever the least level logged: at WARN, or at ERROR when
// the operator asked for errors only (LOG_LEVEL=error used to hide it).
func TestExposureHeardAtAnyLevel(t *testing.T) {
	c, err := config.Parse(examples.ConfigName, examples.Config())
	if err != nil {
		t.Fatal(err)
	}
	for _, c2 := range []struct{ level, want string }{{"debug", "WARN"}, {"info", "WARN"}, {"warn", "WARN"}, {"error", "ERROR"}} {
		var out strings.Builder
		warnDemoKeys(Logger(&out, c2.level, "json"), c.File, c.Auth.APIKeys)
		if !strings.Contains(out.String(), `"level":"`+c2.want+`"`) || !strings.Contains(out.String(), "published demo API key") || !strings.Contains(out.String(), `"exposure":true`) {
			t.Errorf("--log-level %s: %q, want the demo key warning at %s", c2.level, out.String(), c2.want)
		}
	}
}
