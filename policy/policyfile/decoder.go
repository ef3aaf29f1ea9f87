package policyfile

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A Decoder walks a YAML document, collecting every problem with its line
// and recording the line of every field it visits, so that problems found
// later (by [policy.Compile]) are reported at their place in the file too.
// A program decodes its own sections of the file with it (see
// [ParseWith]), as the daemon does. A Decoder is not safe for concurrent
// use.
type Decoder struct {
	file     string
	problems []Problem
	// lines maps the path of every field and list item visited (in the
	// file's spelling, such as plans.free[0].burst) to its line.
	lines map[string]int
	// flagged holds the fields with a problem, by path and line.
	flagged map[placed]bool
}

// placed is a field at a line.
type placed struct {
	path string
	line int
}

// Handlers decode the fields of a mapping, by name. Each gets the field's
// value node and path.
type Handlers map[string]func(v *yaml.Node, path string)

// File is the path of the file being decoded.
func (d *Decoder) File() string { return d.file }

// Add records a problem at n's line, unless the field at path already has
// one there: a bad value is reported once, not again for each check that
// follows from it (a number that does not parse, then its zero).
func (d *Decoder) Add(n *yaml.Node, path, format string, args ...any) {
	at := placed{path, n.Line}
	if d.flagged[at] {
		return
	}
	if d.flagged == nil {
		d.flagged = map[placed]bool{}
	}
	d.flagged[at] = true
	d.problems = append(d.problems, Problem{Line: n.Line, Path: path, Message: fmt.Sprintf(format, args...)})
}

// Fields walks mapping n, calling the handler of each key; unknown keys,
// repeated keys and non-mappings are problems.
func (d *Decoder) Fields(n *yaml.Node, path string, h Handlers) {
	if n.Kind != yaml.MappingNode {
		d.Add(n, path, "want a mapping with %s", strings.Join(slices.Sorted(maps.Keys(h)), ", "))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := Join(path, k.Value)
		f, ok := h[k.Value]
		switch {
		case !ok:
			d.Add(k, p, "unknown field %q: want one of %s", k.Value, strings.Join(slices.Sorted(maps.Keys(h)), ", "))
		case seen[k.Value]:
			d.Add(k, p, "field %q given twice", k.Value)
		default:
			seen[k.Value] = true
			d.lines[p] = v.Line
			f(v, p)
		}
	}
}

// Entries walks a mapping of user-chosen names.
func (d *Decoder) Entries(n *yaml.Node, path string, each func(name string, k, v *yaml.Node, path string)) {
	if n.Kind != yaml.MappingNode {
		d.Add(n, path, "want a mapping of names")
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := Join(path, k.Value)
		if seen[k.Value] {
			d.Add(k, p, "%q given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		d.lines[p] = k.Line
		each(k.Value, k, v, p)
	}
}

// List walks a sequence.
func (d *Decoder) List(n *yaml.Node, path string, each func(i int, v *yaml.Node, path string)) {
	if n.Kind != yaml.SequenceNode {
		d.Add(n, path, "want a list")
		return
	}
	for i, v := range n.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		d.lines[p] = v.Line
		each(i, v, p)
	}
}

// line returns the line of path in the file, or of its longest visited
// prefix, and the path shown for it.
func (d *Decoder) line(path string) (int, bool) {
	for p := path; p != ""; {
		if n, ok := d.lines[p]; ok {
			return n, true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0, false
}

// Join is the path of field name under path ("" for the top level).
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Str reads a string.
func (d *Decoder) Str(n *yaml.Node, path string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		d.Add(n, path, "want a string")
		return ""
	}
	return n.Value
}

// Int reads an integer ("1_000" included).
func (d *Decoder) Int(n *yaml.Node, path string) int64 {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 0, 64); err == nil {
			return v
		}
	}
	d.Add(n, path, "%q is not an integer", n.Value)
	return 0
}

// Count reads a non-negative integer.
func (d *Decoder) Count(n *yaml.Node, path string) int64 {
	v := d.Int(n, path)
	if v < 0 {
		d.Add(n, path, "%d is negative", v)
		return 0
	}
	return v
}

// Float reads a number.
func (d *Decoder) Float(n *yaml.Node, path string) float64 {
	if n.Kind == yaml.ScalarNode && (n.Tag == "!!int" || n.Tag == "!!float") {
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil {
			return v
		}
	}
	if pct, ok := strings.CutSuffix(strings.TrimSpace(n.Value), "%"); ok && n.Kind == yaml.ScalarNode {
		if f, err := strconv.ParseFloat(strings.TrimSpace(pct), 64); err == nil {
			d.Add(n, path, "%q is not a number: for %s write %v", n.Value, n.Value, f/100)
			return 0
		}
	}
	d.Add(n, path, "%q is not a number", n.Value)
	return 0
}

// Bool reads on/off (true/false, yes/no).
func (d *Decoder) Bool(n *yaml.Node, path string) bool {
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true", "on", "yes":
			return true
		case "false", "off", "no":
			return false
		}
	}
	d.Add(n, path, "%q: want on or off", n.Value)
	return false
}

// Duration reads a positive duration such as 30s.
func (d *Decoder) Duration(n *yaml.Node, path string) time.Duration {
	v := d.Str(n, path)
	p, err := time.ParseDuration(v)
	if err != nil || p <= 0 {
		d.Add(n, path, "duration %q does not parse: want a positive duration such as 500ms, 30s or 5m", v)
		return 0
	}
	return p
}
