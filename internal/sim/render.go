package sim

import (
	"fmt"
	"html"
	"io"
	"iter"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Chart geometry, in SVG user units.
const (
	chartW   = 960
	panelH   = 240
	padLeft  = 60
	padRight = 20
	padTop   = 36
	padBot   = 52 // the time labels, then the legend
)

// unit is what r's remaining capacity counts, for labels: the policy's
// unit, "units" for traffic with costs, else "capacity".
func (r *Run) unit() string {
	switch {
	case r.Policy.Unit != "":
		return r.Policy.Unit
	case r.Costs:
		return "units"
	}
	return "capacity"
}

// SVG writes one panel per run, stacked, on one time axis from 0 to end:
// the remaining capacity as a line, the requests in flight as a second
// line for a policy with a concurrency layer (on the right-hand scale, 0
// to its limit), admitted requests as green dots and rejected ones as red
// crosses (orange for no slot), measured requests' settlements as purple
// diamonds, and a debt (remaining below zero) on a red ground under the
// zero line, the scale going down to the deepest debt; a legend under
// each panel names each of these it draws, with the policy's unit, and
// the axes have ticks at round values. Markers carry data-t (seconds),
// data-remaining and data-in-flight (settlements data-applied), so the
// chart can be checked against the runs.
func SVG(w io.Writer, runs []Run, end time.Duration) error {
	h := len(runs) * panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, h, chartW, h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	plotW := float64(chartW - padLeft - padRight)
	plotH := float64(panelH - padTop - padBot)
	for i, r := range runs {
		top := float64(i*panelH + padTop)
		hi := r.Policy.capacity()
		lo := min(0, r.Lowest())
		x := func(t time.Duration) float64 { return padLeft + plotW*t.Seconds()/end.Seconds() }
		y := func(rem int64) float64 { return top + plotH*float64(hi-rem)/float64(hi-lo) }
		fmt.Fprintf(&b, `<g class="panel" data-policy="%s">`+"\n", html.EscapeString(r.Policy.Text))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold">%s — %s: %d admitted, %d rejected</text>`+"\n",
			padLeft, top-14, html.EscapeString(r.Policy.Text), html.EscapeString(r.Policy.Describe()), r.Admitted, r.Rejected)
		if lo < 0 {
			// The debt: the ground under zero, and the zero line.
			fmt.Fprintf(&b, `<rect class="debt" x="%d" y="%.1f" width="%.1f" height="%.1f" fill="#fee2e2"/>`+"\n", padLeft, y(0), plotW, y(lo)-y(0))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#b91c1c">debt</text>`+"\n", padLeft+plotW-4, y(0)+14)
		}
		// Axes, with ticks at round times and counts (timeTicks,
		// signedTicks).
		fmt.Fprintf(&b, `<path d="M%d %.1f V%.1f H%.1f" stroke="#444" fill="none"/>`+"\n", padLeft, top, top+plotH, padLeft+plotW)
		for _, t := range timeTicks(end) {
			fmt.Fprintf(&b, `<text class="tick-t" x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", x(t), top+plotH+16, timeLabel(t))
		}
		for _, v := range signedTicks(lo, hi) {
			fmt.Fprintf(&b, `<text class="tick-y" x="%d" y="%.1f" text-anchor="end" fill="#444">%d</text>`+"\n", padLeft-6, y(v)+4, v)
			stroke := "#eee"
			if v == 0 && lo < 0 {
				stroke = "#b91c1c"
			}
			fmt.Fprintf(&b, `<path d="M%d %.1f H%.1f" stroke="%s"/>`+"\n", padLeft, y(v), padLeft+plotW, stroke)
		}
		legend(&b, legendSeries(&r, lo < 0), top+plotH+36)
		// The remaining capacity, as a step line through the samples.
		b.WriteString(`<polyline class="remaining" fill="none" stroke="#2563eb" stroke-width="1.5" points="`)
		for j, s := range r.Samples {
			if s.At > end {
				break
			}
			if j > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%.2f,%.2f", x(s.At), y(s.Remaining))
		}
		b.WriteString(`"/>` + "\n")
		if conc := r.Policy.Concurrency; conc > 0 {
			inFlight(&b, r, end, conc, x, top, plotW, plotH)
		}
		for _, q := range r.Requests {
			if q.At > end {
				continue
			}
			secs := strconv.FormatFloat(q.At.Seconds(), 'f', -1, 64)
			if q.Allowed {
				fmt.Fprintf(&b, `<circle class="admitted" data-t="%s" data-remaining="%d" data-in-flight="%d" cx="%.2f" cy="%.2f" r="2.5" fill="#16a34a"/>`+"\n", secs, q.Remaining, q.InFlight, x(q.At), y(q.Remaining))
			} else {
				cx, cy, color := x(q.At), top+plotH+4, "#dc2626"
				if q.NoSlot {
					color = "#ea580c"
				}
				fmt.Fprintf(&b, `<path class="rejected" data-t="%s" data-remaining="%d" data-in-flight="%d" d="M%.2f %.2f l6 6 m0 -6 l-6 6" stroke="%s" stroke-width="1.5"/>`+"\n", secs, q.Remaining, q.InFlight, cx-3, cy-3, color)
			}
		}
		for _, s := range r.Settlements {
			if s.At > end {
				continue
			}
			fmt.Fprintf(&b, `<path class="settled" data-t="%s" data-applied="%d" data-remaining="%d" d="M%.2f %.2f l3 3 l-3 3 l-3 -3 z" fill="#7c3aed"/>`+"\n",
				strconv.FormatFloat(s.At.Seconds(), 'f', -1, 64), s.Applied, s.Remaining, x(s.At), y(s.Remaining)-3)
		}
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// A series is one kind of mark a panel draws, as its legend names it.
type series struct {
	class, label string
	swatch       string // SVG of the mark, drawn at (0, 0)
}

// legendSeries are r's panel's series: the concurrency ones only for a
// policy with a concurrency layer, the settlements only for a run with
// some, the debt only when the panel shows one.
func legendSeries(r *Run, debt bool) []series {
	s := []series{
		{"remaining", "remaining " + r.unit() + " (left scale)", `<path d="M-8 0 H8" stroke="#2563eb" stroke-width="1.5"/>`},
		{"admitted", "admitted request", `<circle r="2.5" fill="#16a34a"/>`},
		{"rejected", "rejected request", `<path d="M-3 -3 l6 6 m0 -6 l-6 6" stroke="#dc2626" stroke-width="1.5"/>`},
	}
	if r.Policy.Concurrency > 0 {
		s = append(s,
			series{"in-flight", "requests in flight (right scale)", `<path d="M-8 0 H8" stroke="#ea580c" stroke-width="1.2" stroke-dasharray="4 2"/>`},
			series{"no-slot", "rejected: no slot", `<path d="M-3 -3 l6 6 m0 -6 l-6 6" stroke="#ea580c" stroke-width="1.5"/>`})
	}
	if len(r.Settlements) > 0 {
		s = append(s, series{"settled", "settlement", `<path d="M0 -3 l3 3 l-3 3 l-3 -3 z" fill="#7c3aed"/>`})
	}
	if debt {
		s = append(s, series{"debt", "debt (below 0)", `<rect x="-8" y="-5" width="16" height="10" fill="#fee2e2" stroke="#b91c1c"/>`})
	}
	return s
}

// legend draws a panel's legend in a row at y, or in two rows about it
// when one is too long: each series' mark and name.
func legend(b *strings.Builder, items []series, y float64) {
	b.WriteString(`<g class="legend">` + "\n")
	x := float64(padLeft + 10)
	width := func(s series) float64 { return 30 + 6*float64(len(s.label)) }
	all := x
	for _, s := range items {
		all += width(s)
	}
	if all > chartW-padRight {
		y -= 6
	}
	for _, s := range items {
		w := width(s)
		if x+w > chartW-padRight && x > padLeft+10 {
			x, y = padLeft+10, y+14
		}
		fmt.Fprintf(b, `<g class="legend-item" data-series="%s" transform="translate(%.1f %.1f)">%s<text x="14" y="4" fill="#444">%s</text></g>`+"\n", s.class, x, y, s.swatch, html.EscapeString(s.label))
		x += w
	}
	b.WriteString("</g>\n")
}

// inFlight draws a run's requests in flight as a step line on a scale of
// 0 to conc, labelled on the right.
func inFlight(b *strings.Builder, r Run, end time.Duration, conc int64, x func(time.Duration) float64, top, plotW, plotH float64) {
	y := func(n int64) float64 { return top + plotH*(1-float64(n)/float64(conc)) }
	for _, v := range []int64{0, conc} {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#ea580c">%d</text>`+"\n", padLeft+plotW, y(v)-3, v)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" fill="#ea580c">in flight</text>`+"\n", padLeft+plotW, top-14)
	b.WriteString(`<polyline class="in-flight" fill="none" stroke="#ea580c" stroke-width="1.2" stroke-dasharray="4 2" points="`)
	for j, s := range r.Samples {
		if s.At > end {
			break
		}
		if j > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(b, "%.2f,%.2f", x(s.At), y(s.InFlight))
	}
	b.WriteString(`"/>` + "\n")
}

// An event is a request decided or a settlement applied, in the order the
// run made them.
type event struct {
	At  time.Duration
	Req *Request    // a request, or nil
	Set *Settlement // a settlement, or nil
	I   int         // the request's index (a settlement's request)
}

// remaining is the capacity after the event.
func (e event) remaining() int64 {
	if e.Set != nil {
		return e.Set.Remaining
	}
	return e.Req.Remaining
}

// events are r's requests and settlements in the order they were made.
func (r *Run) events() iter.Seq[event] {
	return func(yield func(event) bool) {
		k := 0
		for i := range r.Requests {
			for ; k < len(r.Settlements) && r.Settlements[k].After <= i; k++ {
				s := &r.Settlements[k]
				if !yield(event{At: s.At, Set: s, I: s.Request}) {
					return
				}
			}
			if !yield(event{At: r.Requests[i].At, Req: &r.Requests[i], I: i}) {
				return
			}
		}
		for ; k < len(r.Settlements); k++ {
			s := &r.Settlements[k]
			if !yield(event{At: s.At, Set: s, I: s.Request}) {
				return
			}
		}
	}
}

// Table writes each run's totals and, per stretch of time with requests,
// how many were asked, admitted and rejected and the capacity left after.
// A run with costs (see [Run.Costs]) says, in the policy's unit, what
// admission charged and what settlements moved in each stretch with a
// request or a settlement, the remaining after and the lowest remaining
// in it (below zero: a debt).
func Table(w io.Writer, runs []Run, end time.Duration) error {
	bucket := max(time.Second, (end / 30).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i := range runs {
		r := &runs[i]
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw, r.headline())
		if r.Costs {
			costTable(tw, r, bucket)
			continue
		}
		conc := r.Policy.Concurrency > 0
		if conc {
			fmt.Fprintln(tw, "  from\tto\trequests\tadmitted\trejected\tno slot\tremaining after\tin flight after")
		} else {
			fmt.Fprintln(tw, "  from\tto\trequests\tadmitted\trejected\tremaining after")
		}
		for j := 0; j < len(r.Requests); {
			start := r.Requests[j].At.Truncate(bucket)
			k, adm, noSlot := j, 0, 0
			for ; k < len(r.Requests) && r.Requests[k].At < start+bucket; k++ {
				if r.Requests[k].Allowed {
					adm++
				}
				if r.Requests[k].NoSlot {
					noSlot++
				}
			}
			last := r.Requests[k-1]
			if conc {
				fmt.Fprintf(tw, "  %v\t%v\t%d\t%d\t%d\t%d\t%d\t%d\n", r.Requests[j].At, last.At, k-j, adm, k-j-adm, noSlot, last.Remaining, last.InFlight)
			} else {
				fmt.Fprintf(tw, "  %v\t%v\t%d\t%d\t%d\t%d\n", r.Requests[j].At, last.At, k-j, adm, k-j-adm, last.Remaining)
			}
			j = k
		}
	}
	return tw.Flush()
}

// Totals are a run's sums of units, for its table's first line.
type Totals struct {
	// Charged is what admission took: the admitted requests' estimates
	// (or fixed costs).
	Charged int64
	// Settled is what settlements moved, signed (a refund negative).
	Settled int64
	// Unapplied is what settlements could not charge: a debt is at most
	// one burst.
	Unapplied int64
	// Lowest is the least remaining: below zero, the deepest debt.
	Lowest int64
}

// Totals sums r's units.
func (r *Run) Totals() Totals {
	t := Totals{Lowest: r.Lowest()}
	for i := range r.Requests {
		t.Charged += r.Requests[i].Charged
	}
	for _, s := range r.Settlements {
		t.Settled += s.Applied
		if s.Delta > 0 {
			t.Unapplied += s.Delta - s.Applied
		}
	}
	return t
}

// headline is a run's first line: the policy and its decisions, and for
// a run with costs their sums.
func (r *Run) headline() string {
	s := fmt.Sprintf("policy %s (%s): %d admitted, %d rejected", r.Policy.Text, r.Policy.Describe(), r.Admitted, r.Rejected)
	if !r.Costs {
		return s
	}
	t := r.Totals()
	s += fmt.Sprintf("; %s: %d charged at admission", r.unit(), t.Charged)
	if len(r.Settlements) > 0 {
		s += fmt.Sprintf(", %+d settled", t.Settled)
	}
	if t.Unapplied > 0 {
		s += fmt.Sprintf(" (%d not applied: a debt is at most one burst)", t.Unapplied)
	}
	s += fmt.Sprintf(", lowest remaining %d", t.Lowest)
	if t.Lowest < 0 {
		s += " (a debt)"
	}
	return s
}

// costTable is Table for a run with costs.
func costTable(tw io.Writer, r *Run, bucket time.Duration) {
	conc := r.Policy.Concurrency > 0
	slot := ""
	if conc {
		slot = "no slot\t"
	}
	fmt.Fprintf(tw, "  from\tto\trequests\tadmitted\trejected\t%scharged\tsettled\tnot applied\tremaining %s after\tlowest\n", slot, r.unit())
	type row struct {
		from, to                                   time.Duration
		n, adm, noSlot                             int
		charged, settled, unapplied, after, lowest int64
	}
	var cur *row
	flush := func() {
		if cur == nil {
			return
		}
		if conc {
			slot = strconv.Itoa(cur.noSlot) + "\t"
		}
		fmt.Fprintf(tw, "  %v\t%v\t%d\t%d\t%d\t%s%d\t%+d\t%d\t%d\t%d\n", cur.from, cur.to, cur.n, cur.adm, cur.n-cur.adm, slot, cur.charged, cur.settled, cur.unapplied, cur.after, cur.lowest)
	}
	for e := range r.events() {
		if cur == nil || e.At >= cur.from.Truncate(bucket)+bucket {
			flush()
			cur = &row{from: e.At, lowest: e.remaining()}
		}
		cur.to, cur.after = e.At, e.remaining()
		cur.lowest = min(cur.lowest, e.remaining())
		if q := e.Req; q != nil {
			cur.n++
			cur.charged += q.Charged
			if q.Allowed {
				cur.adm++
			}
			if q.NoSlot {
				cur.noSlot++
			}
		} else {
			cur.settled += e.Set.Applied
			if e.Set.Delta > 0 {
				cur.unapplied += e.Set.Delta - e.Set.Applied
			}
		}
	}
	flush()
}

// Steps writes each run's requests and settlements one a line, in the
// order the run made them: each request's estimate, true cost, what
// admission charged and the remaining after; each settlement's units
// moved (signed) and not applied, and the remaining after (below zero: a
// debt); a refused request's retry-after.
func Steps(w io.Writer, runs []Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i := range runs {
		r := &runs[i]
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw, r.headline())
		fmt.Fprintf(tw, "  at\trequest\tevent\testimate\ttrue cost\tcharged\tsettled\tnot applied\tremaining %s\tretry after\n", r.unit())
		for e := range r.events() {
			if q := e.Req; q != nil {
				what, retry := "admitted", ""
				switch {
				case q.NoSlot:
					what, retry = "no slot", q.Retry.String()
				case !q.Allowed:
					what, retry = "rejected", q.Retry.String()
				}
				fmt.Fprintf(tw, "  %v\t%d\t%s\t%d\t%d\t%d\t\t\t%d\t%s\n", e.At, e.I+1, what, q.Estimate, q.Cost, q.Charged, q.Remaining, retry)
				continue
			}
			s := e.Set
			unapplied := ""
			if s.Delta > 0 && s.Applied < s.Delta {
				unapplied = strconv.FormatInt(s.Delta-s.Applied, 10)
			}
			fmt.Fprintf(tw, "  %v\t%d\tsettled\t\t\t\t%+d\t%s\t%d\t\n", e.At, e.I+1, s.Applied, unapplied, s.Remaining)
		}
	}
	return tw.Flush()
}
