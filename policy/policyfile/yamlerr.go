package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parserError is yaml.v3's message for a token its parser did not expect
// ("did not find expected key"). The line it gives is the 0-based line of
// the mark it keeps: the start of the enclosing block (its first key), or
// the unexpected token itself when that block starts on the first line;
// its scanner's errors give the 1-based line of the problem.
var parserError = regexp.MustCompile(`^line (\d+): did not find expected (.+)$`)

// blockEntries names the entries of a block whose next one yaml.v3's
// parser did not find, by what it expected: a mapping's keys, a list's
// items.
var blockEntries = map[string]string{"key": "keys", "'-' indicator": "items"}

// yamlProblem is the problem of data, a file that is not valid YAML: at
// the line yaml.v3 names or, for a block's entry its parser did not find,
// at the line indented deeper than the block's entries when one is.
func yamlProblem(err error, data []byte) Problem {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	msg = strings.TrimPrefix(msg, "yaml: ")
	if m := parserError.FindStringSubmatch(msg); m != nil {
		start, _ := strconv.Atoi(m[1])
		start++ // 1-based
		if entries, ok := blockEntries[m[2]]; ok {
			if bad := deeperThanEntries(data, start, entries == "items"); bad > 0 {
				return Problem{Line: bad, Path: "(file)", Message: fmt.Sprintf("not valid YAML: line %d is indented deeper than the %s of the block that starts at line %d, after a value complete on its line (did not find expected %s): indent it as those %s, or put it inside that value", bad, entries, start, m[2], entries)}
			}
		}
		return Problem{Line: start, Path: "(file)", Message: fmt.Sprintf("not valid YAML: did not find expected %s in the block that starts at line %d, or at that line: check the indentation of that line and of the lines after it", m[2], start)}
	}
	line := 0
	if i := strings.Index(msg, "line "); i >= 0 {
		j := i + 5
		for j < len(msg) && msg[j] >= '0' && msg[j] <= '9' {
			j++
		}
		line, _ = strconv.Atoi(msg[i+5 : j])
	}
	return Problem{Line: line, Path: "(file)", Message: "not valid YAML: " + msg}
}

// deeperThanEntries returns the first line after start, within the block
// mapping (or, for items, list) whose first entry is on line start
// (1-based), that is indented deeper than the block's entries right after
// one whose value is a flow collection or a quoted string closed on its
// own line: such a line can be nothing but a misplaced entry. 0 when
// there is none.
func deeperThanEntries(data []byte, start int, items bool) int {
	lines := bytes.Split(data, []byte("\n"))
	if start < 1 || start > len(lines) {
		return 0
	}
	column := keyColumn
	if items {
		column = indentation
	}
	keys := column(string(lines[start-1]))
	closed := false // the last key's value is complete on its line
	for i := start - 1; i < len(lines); i++ {
		text := strings.TrimRight(string(lines[i]), " \t\r")
		body := strings.TrimLeft(text, " ")
		if body == "" || body[0] == '#' {
			continue
		}
		col := column(text)
		switch {
		case i > start-1 && indentation(text) < keys:
			return 0 // the block ended
		case col == keys && items:
			v, ok := strings.CutPrefix(body, "- ")
			closed = ok && closedValue(v)
		case col == keys:
			_, v, ok := strings.Cut(body, ": ")
			closed = ok && closedValue(v)
		case closed:
			return i + 1
		}
	}
	return 0
}

// indentation is the column of a line's first character.
func indentation(line string) int { return len(line) - len(strings.TrimLeft(line, " ")) }

// keyColumn is the column of a line's first key: after its indentation
// and any "- " that starts a list item.
func keyColumn(line string) int {
	col := indentation(line)
	for strings.HasPrefix(line[col:], "- ") {
		col += 2
		col += len(line[col:]) - len(strings.TrimLeft(line[col:], " "))
	}
	return col
}

// closedValue reports whether v, a value and what follows it on its line,
// ends there: a flow collection or a quoted string, closed.
func closedValue(v string) bool {
	v = strings.TrimSpace(v)
	if i := strings.Index(v, " #"); i >= 0 {
		v = strings.TrimSpace(v[:i])
	}
	if len(v) < 2 {
		return false
	}
	switch first, last := v[0], v[len(v)-1]; {
	case first == '{' && last == '}', first == '[' && last == ']':
		return strings.Count(v, string(first)) == strings.Count(v, string(last))
	case first == '"' && last == '"', first == '\'' && last == '\'':
		return true
	}
	return false
}
