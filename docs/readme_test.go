package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeNamesTheGo: the README's setup names the Go that go.mod asks
// for, so that a new user does not learn it from a failed build.
func TestReadmeNamesTheGo(t *testing.T) {
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go line")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	two := string(readme)
	if i := strings.Index(two, "## Two commands"); i >= 0 {
		two = two[i:]
	}
	if want := "Go " + string(m[1]) + " or newer"; !strings.Contains(two, want) {
		t.Errorf("the README's Two commands section does not say %q (go.mod: go %s)", want, m[1])
	}
}
