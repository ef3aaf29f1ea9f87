package sim

import (
	"fmt"
	"html"
	"io"
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

// SVG writes one panel per run, stacked, on one time axis from 0 to end:
// the remaining capacity as a line, the requests in flight as a second
// line for a policy with a concurrency layer (on the right-hand scale, 0
// to its limit), admitted requests as green dots and rejected ones as red
// crosses (orange for no slot); a legend under each panel names each of
// these it draws, and the axes have ticks at round values. Markers carry data-t (seconds),
// data-remaining and data-in-flight, so the chart can be checked against
// the runs.
func SVG(w io.Writer, runs []Run, end time.Duration) error {
	h := len(runs) * panelH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, h, chartW, h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	plotW := float64(chartW - padLeft - padRight)
	plotH := float64(panelH - padTop - padBot)
	for i, r := range runs {
		top := float64(i*panelH + padTop)
		capa := float64(r.Policy.capacity())
		x := func(t time.Duration) float64 { return padLeft + plotW*t.Seconds()/end.Seconds() }
		y := func(rem int64) float64 { return top + plotH*(1-float64(rem)/capa) }
		fmt.Fprintf(&b, `<g class="panel" data-policy="%s">`+"\n", html.EscapeString(r.Policy.Text))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-weight="bold">%s — %s: %d admitted, %d rejected</text>`+"\n",
			padLeft, top-14, html.EscapeString(r.Policy.Text), html.EscapeString(r.Policy.Describe()), r.Admitted, r.Rejected)
		// Axes, with ticks at round times and counts (timeTicks,
		// countTicks).
		fmt.Fprintf(&b, `<path d="M%d %.1f V%.1f H%.1f" stroke="#444" fill="none"/>`+"\n", padLeft, top, top+plotH, padLeft+plotW)
		for _, t := range timeTicks(end) {
			fmt.Fprintf(&b, `<text class="tick-t" x="%.1f" y="%.1f" text-anchor="middle" fill="#444">%s</text>`+"\n", x(t), top+plotH+16, timeLabel(t))
		}
		for _, v := range countTicks(int64(capa)) {
			fmt.Fprintf(&b, `<text class="tick-y" x="%d" y="%.1f" text-anchor="end" fill="#444">%d</text>`+"\n", padLeft-6, y(v)+4, v)
			fmt.Fprintf(&b, `<path d="M%d %.1f H%.1f" stroke="#eee"/>`+"\n", padLeft, y(v), padLeft+plotW)
		}
		legend(&b, r.Policy.Concurrency > 0, top+plotH+36)
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

// legendSeries are a panel's series: the concurrency ones only for a
// policy with a concurrency layer.
func legendSeries(conc bool) []series {
	s := []series{
		{"remaining", "remaining capacity (left scale)", `<path d="M-8 0 H8" stroke="#2563eb" stroke-width="1.5"/>`},
		{"admitted", "admitted request", `<circle r="2.5" fill="#16a34a"/>`},
		{"rejected", "rejected request", `<path d="M-3 -3 l6 6 m0 -6 l-6 6" stroke="#dc2626" stroke-width="1.5"/>`},
	}
	if conc {
		s = append(s,
			series{"in-flight", "requests in flight (right scale)", `<path d="M-8 0 H8" stroke="#ea580c" stroke-width="1.2" stroke-dasharray="4 2"/>`},
			series{"no-slot", "rejected: no slot", `<path d="M-3 -3 l6 6 m0 -6 l-6 6" stroke="#ea580c" stroke-width="1.5"/>`})
	}
	return s
}

// legend draws a panel's legend in a row at y: each series' mark and name.
func legend(b *strings.Builder, conc bool, y float64) {
	b.WriteString(`<g class="legend">` + "\n")
	x := float64(padLeft + 10)
	for _, s := range legendSeries(conc) {
		fmt.Fprintf(b, `<g class="legend-item" data-series="%s" transform="translate(%.1f %.1f)">%s<text x="14" y="4" fill="#444">%s</text></g>`+"\n", s.class, x, y, s.swatch, s.label)
		x += 30 + 6*float64(len(s.label))
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

// Table writes each run's totals and, per stretch of time with requests,
// how many were asked, admitted and rejected and the capacity left after.
func Table(w io.Writer, runs []Run, end time.Duration) error {
	bucket := max(time.Second, (end / 30).Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, r := range runs {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		conc := r.Policy.Concurrency > 0
		fmt.Fprintf(tw, "policy %s (%s): %d admitted, %d rejected\n", r.Policy.Text, r.Policy.Describe(), r.Admitted, r.Rejected)
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
