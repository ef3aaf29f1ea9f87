package pertenant

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/algo"
	"github.com/fairgate/fairgate/policy"
)

func TestWrapRefuses(t *testing.T) {
	anyone := func(*http.Request) (policy.Identity, error) { return policy.Identity{Tenant: "acme"}, nil }
	bad := filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(bad, []byte("plans:\n  free: {limit: 10, period: 1m, colour: red}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no Identify", Config{Limit: algo.PerMinute(1)}, "pertenant: Config.Identify is required"},
		{"no limit", Config{Identify: anyone}, "pertenant: Config.Limit: "},
		{"bad file", Config{File: bad, Identify: anyone}, bad + `:2: plans.free.colour: unknown field "colour"`},
		{"bad form", Config{Limit: algo.PerMinute(1), Identify: anyone, Headers: "loud"}, `unknown header form "loud"`},
	} {
		if _, err := Wrap(http.NotFoundHandler(), c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}
