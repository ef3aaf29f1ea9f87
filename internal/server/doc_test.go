package server

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/docs"
)

// TestDocListsEveryEndpoint: the package doc's endpoint list (doc.go) is
// docs/openapi.json's, operation for operation, and names files that
// exist.
func TestDocListsEveryEndpoint(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`\{[^}]*\}`)
	norm := func(path string) string { return param.ReplaceAllString(path, "{}") }
	row := regexp.MustCompile(`^//\t(GET|POST|PUT|PATCH|DELETE|ANY) +(/\S*) .*?((?:\S+\.go)(?:, \S+\.go)*|package \S+)$`)
	listed, anyMethod := map[string]bool{}, map[string]bool{}
	for line := range strings.Lines(string(src)) {
		m := row.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			continue
		}
		if m[1] == "ANY" {
			anyMethod[norm(m[2])] = true
		} else {
			listed[m[1]+" "+norm(m[2])] = true
		}
		for _, f := range strings.Split(m[3], ", ") {
			if _, err := os.Stat(f); strings.HasSuffix(f, ".go") && err != nil {
				t.Errorf("doc.go names %s for %s %s: %v", f, m[1], m[2], err)
			}
		}
	}
	var api struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(docs.OpenAPI(), &api); err != nil {
		t.Fatal(err)
	}
	described := map[string]bool{}
	for path, ops := range api.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			op := strings.ToUpper(method) + " " + norm(path)
			described[op] = true
			if !listed[op] && !anyMethod[norm(path)] {
				t.Errorf("docs/openapi.json's %s is not in the package doc's list (doc.go)", op)
			}
		}
	}
	for op := range listed {
		if !described[op] {
			t.Errorf("doc.go lists %s, which docs/openapi.json does not describe", op)
		}
	}
	for path := range anyMethod {
		if _, ok := api.Paths[path]; !ok && path != "/" { // "/": the proxy, the upstream's API
			t.Errorf("doc.go lists ANY %s, which docs/openapi.json does not describe", path)
		}
	}
	if len(listed) < 30 {
		t.Errorf("doc.go lists %d endpoints: the list's form changed, update this test", len(listed))
	}
}
