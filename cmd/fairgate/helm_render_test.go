package main

import (
	"testing"

	"github.com/fairgate/fairgate/internal/helmtest"
)

// helmTemplate is `helm template` for the arguments the chart tests use
// (internal/helmtest renders without building Helm).
func helmTemplate(args ...string) (string, error) { return helmtest.Template(args...) }

// helmLint is `helm lint --strict` on the chart in dir, failing the test
// on any finding.
func helmLint(t *testing.T, dir string) {
	t.Helper()
	for _, m := range helmtest.Lint(dir) {
		t.Errorf("helm lint --strict: %s", m)
	}
}
