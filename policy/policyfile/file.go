package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/policy"
)

// Problem is one thing wrong with a file: its line, the field and what is
// wrong and what would be right.
type Problem struct {
	Line    int    // 1-based; 0 when the file as a whole is wrong
	Path    string // the field, such as plans.free[0].burst
	Message string // what is wrong and what would be right
}

// Error is every problem of one file; its Error method lists them, one
// per line, as file:line: field: message. A file with problems is never
// used.
type Error struct {
	File     string    // the file's name, as the caller gave it
	Problems []Problem // by line
}

// Error lists the problems, one per line, as file:line: field: message.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		if p.Line > 0 {
			fmt.Fprintf(&b, "%s:%d: %s: %s", e.File, p.Line, p.Path, p.Message)
		} else {
			fmt.Fprintf(&b, "%s: %s: %s", e.File, p.Path, p.Message)
		}
	}
	return b.String()
}

// MaxFileBytes is the largest file Load and ReadFile read (and Parse and
// ParseWith decode): 4 MiB, some thousand times
// a policy of a hundred plans and ten thousand tenants' overrides in the
// file (run-time overrides live in the store).
const MaxFileBytes = 4 << 20

// ReadFile reads the file at path, refusing one over MaxFileBytes without
// reading it whole.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("config: %s is over %d bytes (4 MiB), the most a config file may be: keep tenants' overrides in the store (admin API) instead", path, MaxFileBytes)
	}
	return data, nil
}

// daemonSections are the top-level fields of the config file that
// configure the daemon rather than the policy: [Parse] skips them.
var daemonSections = []string{"headers", "instances", "trusted_proxies", "auth", "providers", "queues", "rls", "dashboard", "client_ip_header", "upstream_headers", "dependencies", "forward_auth", "upstream_capacity"}

// Sections decode top-level fields the policy does not define (a
// program's own settings in the same file), by name: each gets the
// [Decoder], the field's value node and its path.
type Sections map[string]func(d *Decoder, v *yaml.Node, path string)

// ParseWith decodes data, a file named file, whose top-level fields are
// the policy's and those of sections, decoded by them (the fairgate
// daemon reads its own settings so); any other field is a problem. check,
// if not nil, runs once everything is decoded, to report problems that
// need the policy. The policy is then compiled, so that the error names
// every problem of the file at once; unless the file gives none of the
// policy's fields and optional, asked then, says the policy may be left
// out (the zero Policy is returned). The error, if any, is an *[Error]
// (or says the file is too large).
func ParseWith(file string, data []byte, sections Sections, check func(d *Decoder, p policy.Policy), optional func() bool) (policy.Policy, error) {
	if len(data) > MaxFileBytes {
		return policy.Policy{}, fmt.Errorf("config: %s is over %d bytes (4 MiB), the most a config file may be", file, MaxFileBytes)
	}
	root, err := Root(file, data, "want a mapping with plans, classes and routes (see examples/fairgate.yaml)")
	if err != nil {
		return policy.Policy{}, err
	}
	d := NewDecoder(file)
	p := d.policy(root, sections)
	if check != nil {
		check(d, p)
	}
	if d.givesPolicy() || optional == nil || !optional() {
		d.compile(p)
	} else {
		p = policy.Policy{}
	}
	if err := d.Err(); err != nil {
		return policy.Policy{}, err
	}
	return p, nil
}

// policySections are the top-level fields of the policy.
var policySections = []string{"plans", "classes", "routes", "anonymous", "preflight", "tenants", "default_plan", "default_class", "timezone", "route_match"}

// givesPolicy reports whether the file gave any of policySections.
func (d *Decoder) givesPolicy() bool {
	for _, s := range policySections {
		if _, ok := d.lines[s]; ok {
			return true
		}
	}
	return false
}

// Root parses data, a YAML file named file, and returns its top-level
// node, for a file decoded with a [Decoder] of its own. Invalid YAML, or a
// file with no document (then want says what belongs in it), is an
// *[Error].
func Root(file string, data []byte, want string) (*yaml.Node, error) {
	var root yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root); err != nil && err != io.EOF {
		return nil, &Error{File: file, Problems: []Problem{yamlProblem(err, data)}}
	}
	if len(root.Content) == 0 {
		return nil, &Error{File: file, Problems: []Problem{{Path: "(file)", Message: "empty: " + want}}}
	}
	return root.Content[0], nil
}

// NewDecoder returns a Decoder for the file named file (relative paths in
// it are resolved against its directory by the caller), for a file that is
// not a policy (see [Root]).
func NewDecoder(file string) *Decoder { return &Decoder{file: file, lines: map[string]int{}} }

// Err returns an *Error with every problem found so far, by line, or nil.
func (d *Decoder) Err() error {
	if len(d.problems) == 0 {
		return nil
	}
	sort.SliceStable(d.problems, func(i, j int) bool { return d.problems[i].Line < d.problems[j].Line })
	return &Error{File: d.file, Problems: d.problems}
}

// compile runs the policy's own validation, so that every problem is
// reported at once; a field that already has a decoding problem gets no
// second one that follows from it (other fields on its line do).
func (d *Decoder) compile(p policy.Policy) {
	bad := map[string]bool{}
	for _, pr := range d.problems {
		bad[pr.Path] = true
	}
	_, err := policy.Compile(p)
	var ps policy.Problems
	if err == nil || !errors.As(err, &ps) {
		if err != nil {
			d.problems = append(d.problems, Problem{Path: "(policy)", Message: err.Error()})
		}
		return
	}
	for _, pr := range ps {
		shown, line := d.place(pr.Path)
		if !bad[shown] {
			d.problems = append(d.problems, Problem{Line: line, Path: shown, Message: pr.Message})
		}
	}
}

// The policy's paths that the file spells otherwise.
var (
	planRule   = regexp.MustCompile(`^(plans\.[^.\[]+)\.rules(?:\[(\d+)\])?(.*)$`)
	anonRule   = regexp.MustCompile(`^(anonymous\[\d+\]|preflight)\.rules(.*)$`)
	tenantRule = regexp.MustCompile(`^(tenants\..*)\.rules\.(.*)$`)
)

// place returns the file's spelling of policy path pp and its line: a
// plan's rules are its list (or its one limit), an anonymous route's and a
// tenant's rules are its limits.
func (d *Decoder) place(pp string) (string, int) {
	var cands []string
	switch {
	case planRule.MatchString(pp):
		m := planRule.FindStringSubmatch(pp)
		if m[2] != "" {
			cands = append(cands, m[1]+"["+m[2]+"]"+m[3])
		}
		if m[2] == "" || m[2] == "0" {
			cands = append(cands, m[1]+m[3])
		}
	case anonRule.MatchString(pp):
		cands = []string{anonRule.ReplaceAllString(pp, "$1.limits$2")}
	case tenantRule.MatchString(pp):
		cands = []string{tenantRule.ReplaceAllString(pp, "$1.limits.$2")}
	}
	cands = append(cands, pp)
	for _, c := range cands {
		if n, ok := d.lines[c]; ok {
			return c, n
		}
	}
	for _, c := range cands {
		if n, ok := d.line(c); ok {
			return c, n
		}
	}
	return cands[0], 0
}
