package replay

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// printable is s as the table writes it: as it is when every character is
// printable, else quoted and escaped as a Go string ("\x1b[2J",
// "a\nb"). A tenant is whatever the log's user field held, which nginx
// fills from any request's Basic credentials: written raw, an escape
// sequence would clear or rewrite the screen, a newline or tab forge rows
// or columns. A name starting with '"' is quoted too, so a quoted name is
// always an escaped one.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.HasPrefix(s, `"`) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// cell is s as a CSV cell: escaped as the table escapes it (printable:
// a CSV goes to a terminal as often as to a spreadsheet), and one starting
// with =, +, -, @, a tab or a carriage return gets a leading ', so that a
// spreadsheet reads it as text, never as a formula (OWASP's guidance on
// CSV injection): a tenant named =HYPERLINK(…) is the client's choice.
func cell(s string) string {
	s = printable(s)
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}

// stamp formats a time for a report ("" for none).
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// WriteTable writes the report for a person: totals, every tenant (most
// limited first; at most top, 0 for all, with a line counting the rest),
// every policy, and the first malformed lines. Its rows and counts are the
// CSV's and the JSON's; share is limited / requests.
func (r *Report) WriteTable(w io.Writer, top int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%d lines: %d requests, %d would have been limited (%.2f%%), %d more by shadow policies (%.2f%%), %d malformed\n\n",
		r.Lines, r.Requests, r.Limited, pct(r.Limited, r.Requests), r.ShadowLimited, pct(r.ShadowLimited, r.Requests), r.Malformed)
	if r.Files > 1 {
		fmt.Fprintf(tw, "%d files, merged by time\n", r.Files)
	}
	if r.OutOfOrder > 0 {
		lines := "lines"
		if r.OutOfOrder == 1 {
			lines = "line"
		}
		fmt.Fprintf(tw, "%d %s out of order by more than %s, decided where they stood: the counts depend on them (--reorder-window widens the window)\n", r.OutOfOrder, lines, window(r.ReorderWindowMs))
	}
	if r.CostField != "" {
		fmt.Fprintf(tw, "cost field %s: %d requests of measured classes settled at their logged cost%s, %d not settled (their estimate stands), %d units beyond the debt bound not applied\n",
			printable(r.CostField), r.Settled, r.unitsNote(), r.Unsettled, r.Unapplied)
	}
	if r.Files > 1 || r.OutOfOrder > 0 || r.CostField != "" {
		fmt.Fprintln(tw)
	}
	// With costs, each row has its settled cost and deepest debt after
	// the shadow counts.
	costHead, costRow := "", func(*Stat) string { return "" }
	if r.CostField != "" {
		costHead = "\tcost\tmax debt"
		costRow = func(s *Stat) string { return fmt.Sprintf("\t%d\t%d", s.Cost, s.MaxDebt) }
	}
	fmt.Fprintf(tw, "tenant\trequests\tlimited\tshare\tshadow limited%s\tfirst limited\tlast limited\n", costHead)
	tenants := r.TopTenants(0)
	shown := tenants
	if top > 0 && len(tenants) > top {
		shown = tenants[:top]
	}
	for _, t := range shown {
		s := r.Tenants[t]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f%%\t%d%s\t%s\t%s\n", printable(t), s.Requests, s.Limited, pct(s.Limited, s.Requests), s.ShadowLimited, costRow(s), stamp(s.FirstLimited), stamp(s.LastLimited))
	}
	if more := len(tenants) - len(shown); more > 0 {
		fmt.Fprintf(tw, "(%d more tenants, fewer limited: --top 0 lists them all)\n", more)
	}
	fmt.Fprintf(tw, "\npolicy\trequests\tlimited\tshare\tshadow limited%s\tfirst limited\tlast limited\n", costHead)
	for _, p := range slices.Sorted(maps.Keys(r.Policies)) {
		s := r.Policies[p]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f%%\t%d%s\t%s\t%s\n", printable(p), s.Requests, s.Limited, pct(s.Limited, s.Requests), s.ShadowLimited, costRow(s), stamp(s.FirstLimited), stamp(s.LastLimited))
	}
	for _, list := range []struct {
		title string
		lines []Bad
	}{{"malformed lines", r.Bad}, {"requests not settled", r.UnsettledLines}} {
		if len(list.lines) > 0 {
			fmt.Fprintf(tw, "\n%s (first ones):\n", list.title)
			for _, b := range list.lines {
				fmt.Fprintf(tw, "%s:%d: %s\n", printable(b.File), b.Line, printable(b.Reason))
			}
		}
	}
	return tw.Flush()
}

// unitsNote names the units of the costs settled: " in tokens", or
// " in rows, tokens (each class its own)"; "" for none.
func (r *Report) unitsNote() string {
	switch len(r.Units) {
	case 0:
		return ""
	case 1:
		return " in " + r.Units[0]
	}
	return " in " + strings.Join(r.Units, ", ") + " (each class its own)"
}

// window writes a reorder window of ms milliseconds: "60s", "1.5s".
func window(ms int64) string {
	if ms%1000 == 0 {
		return strconv.FormatInt(ms/1000, 10) + "s"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// WriteCSV writes one row per tenant and per policy:
// kind,name,requests,limited,shadow_limited,first_limited,last_limited,
// then a last row out_of_order,WINDOW,N: the lines out of order by more
// than the reorder window (such as 60s). With a cost field each row ends
// with cost,max_debt, and rows settled,FIELD,N, unsettled,FIELD,N and
// unapplied,FIELD,N follow (Report.Settled, Unsettled and Unapplied). A
// name starting with =, +, -, @, a tab or a carriage return is written
// with a leading ' (see cell).
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	costs := r.CostField != ""
	head := []string{"kind", "name", "requests", "limited", "shadow_limited", "first_limited", "last_limited"}
	if costs {
		head = append(head, "cost", "max_debt")
	}
	cw.Write(head)
	n := strconv.FormatInt
	// line writes a row, as wide as the header.
	line := func(f ...string) { cw.Write(append(f, make([]string, len(head)-len(f))...)) }
	row := func(kind, name string, s *Stat) {
		f := []string{kind, cell(name), n(s.Requests, 10), n(s.Limited, 10), n(s.ShadowLimited, 10), stamp(s.FirstLimited), stamp(s.LastLimited)}
		if costs {
			f = append(f, n(s.Cost, 10), n(s.MaxDebt, 10))
		}
		line(f...)
	}
	for _, t := range r.TopTenants(0) {
		row("tenant", t, r.Tenants[t])
	}
	for _, p := range slices.Sorted(maps.Keys(r.Policies)) {
		row("policy", p, r.Policies[p])
	}
	line("out_of_order", window(r.ReorderWindowMs), n(r.OutOfOrder, 10))
	if costs {
		line("settled", cell(r.CostField), n(r.Settled, 10))
		line("unsettled", cell(r.CostField), n(r.Unsettled, 10))
		line("unapplied", cell(r.CostField), n(r.Unapplied, 10))
	}
	cw.Flush()
	return cw.Error()
}

// WriteJSON writes the whole report as one JSON object; names are as they
// are, JSON-escaped (control characters as \u00XX).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
