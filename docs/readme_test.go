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

// TestReadmeNewUserSteps: the README's steps work as written for someone
// new. The library quick start says how to get the module and what to
// import; its runnable examples are shown by a command that runs them (go
// doc never lists example functions), in a package that has some; a
// generated admin token is exported before the server starts, so the
// user can send it; and the dashboard's address names the internal
// listener for proxy mode, where /dashboard on the public one is the
// upstream's.
func TestReadmeNewUserSteps(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	lib := readme
	if i := strings.Index(lib, "## Library quick start"); i >= 0 {
		lib = lib[i:]
	}
	for _, want := range []string{"go get github.com/fairgate/fairgate", `"github.com/fairgate/fairgate/httplimit/pertenant"`, `"github.com/fairgate/fairgate/algo"`, "go test -v -run Example ./httplimit/pertenant"} {
		if !strings.Contains(lib, want) {
			t.Errorf("the library quick start does not say %s", want)
		}
	}
	if regexp.MustCompile("`go doc[^`]*`[^.]*examples|examples[^.]*`go doc -all").MatchString(readme) {
		t.Error("the README shows runnable examples with go doc, which never lists them")
	}
	ex, err := os.ReadFile("../httplimit/pertenant/example_test.go")
	if err != nil || !strings.Contains(string(ex), "\nfunc Example") {
		t.Errorf("httplimit/pertenant has no example functions for the README's command: %v", err)
	}
	for _, line := range strings.Split(readme, "\n") {
		if strings.Contains(line, "FAIRGATE_ADMIN_TOKEN=$(") && !strings.HasPrefix(strings.TrimSpace(line), "export FAIRGATE_ADMIN_TOKEN=$(") {
			t.Errorf("a token the user never sees: %q (export it first, then serve, then send it)", line)
		}
	}
	if strings.Contains(readme, "8080/dashboard") && !strings.Contains(readme, "127.0.0.1:8090/dashboard") {
		t.Error("the README puts the dashboard on :8080 without saying it is on the internal listener (:8090) in proxy mode")
	}
}
