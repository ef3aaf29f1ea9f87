package policyfile_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/policy/policyfile"
)

// TestYAMLErrorLine: a file that is not YAML is reported at the line to
// fix. yaml.v3's parser names the line before the block a misplaced key
// breaks (its 0-based start); the problem is the line indented deeper
// than the block's keys after a complete value, or else the block's
// first line, with the advice to check the lines after it.
func TestYAMLErrorLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		line int
		want string
	}{
		{"key under a flow mapping", "default_plan: free\ndefault_class: read\nplans:\n  free: {limit: 100, period: 1m}\nclasses:\n  read: {share: 1}\n   search: {share: 0.5}\n",
			7, "line 7 is indented deeper than the keys of the block that starts at line 6"},
		{"key under a quoted string", "default_plan: free\ndefault_class: \"read\"\n  plans: {}\n",
			3, "in the block that starts at line 3, or at that line"}, // a block on line 1: yaml.v3 names the problem's own line
		{"key under a flow list, after comments", "a: 1\nb:\n  c: [1, 2]\n  # note\n\n     d: 2\n",
			6, "line 6 is indented deeper"},
		{"list item under a flow mapping", "plans:\n  free:\n    - {limit: 1, period: 1m}\n     - {limit: 2, period: 1s}\n",
			4, "line 4 is indented deeper than the items of the block that starts at line 3"},
		{"key after a nested block", "a: 1\nb:\n  c:\n    x: {k: 1}\n  d: 2\n e: 3\n",
			6, "check the indentation of that line and of the lines after it"},
		{"key indented less than its block", "a: 1\nb:\n    c: 1\n  d: 2\n",
			4, "check the indentation"},
		{"mapping value in a plain scalar", "a: 1\nb:\n  c: 1\n   d: 2\n",
			4, "line 4: mapping values are not allowed in this context"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policyfile.Parse("f.yaml", []byte(tc.doc))
			var fe *policyfile.Error
			if !errors.As(err, &fe) || len(fe.Problems) != 1 {
				t.Fatalf("Parse = %v, want one problem", err)
			}
			p := fe.Problems[0]
			if p.Line != tc.line || !strings.Contains(p.Message, tc.want) || !strings.HasPrefix(p.Message, "not valid YAML: ") {
				t.Errorf("problem at line %d: %s\nwant line %d: not valid YAML: …%s…", p.Line, p.Message, tc.line, tc.want)
			}
		})
	}
}
