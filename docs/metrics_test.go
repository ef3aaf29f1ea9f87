package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestEveryMetricHasARow: each metric the code registers (a Prometheus
// Name: "fairgate_…" in a source file) has a row in the metrics table of
// service.md, so that an operator finds every series in one place.
func TestEveryMetricHasARow(t *testing.T) {
	doc, err := os.ReadFile("service.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for line := range strings.Lines(string(doc)) {
		if strings.HasPrefix(line, "| `fairgate_") {
			first, _, _ := strings.Cut(line[1:], "|")
			rows = append(rows, first)
		}
	}
	name := regexp.MustCompile(`Name:\s+"(fairgate_[a-z0-9_]+)"`)
	seen := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 30 {
		t.Fatalf("found %d metric names in the source: the pattern no longer matches how metrics are declared", len(seen))
	}
	for m := range seen {
		found := false
		for _, r := range rows {
			if strings.Contains(r, "`"+m+"`") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("metric %s has no row in service.md's metrics table", m)
		}
	}
}
