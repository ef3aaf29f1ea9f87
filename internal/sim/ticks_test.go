package sim

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTimeTicks: a time axis is labelled at round times, 1-2-5 steps up to
// 20 s and clock steps past them, at most seven labels (the chart said
// 29.5s and 10.05s, quarters of its range).
func TestTimeTicks(t *testing.T) {
	for _, c := range []struct {
		end  time.Duration
		want string
	}{
		{35 * time.Second, "0 10s 20s 30s"},
		{30 * time.Second, "0 5s 10s 15s 20s 25s 30s"},
		{40200 * time.Millisecond, "0 10s 20s 30s 40s"},
		{118 * time.Second, "0 20s 40s 1m 1m20s 1m40s"},
		{3 * time.Minute, "0 30s 1m 1m30s 2m 2m30s 3m"},
		{10 * time.Minute, "0 2m 4m 6m 8m 10m"},
		{2 * time.Hour, "0 30m 1h 1h30m 2h"},
		{1500 * time.Millisecond, "0 500ms 1s 1.5s"},
		{time.Millisecond, "0 1ms"},
	} {
		var got []string
		for _, tk := range timeTicks(c.end) {
			got = append(got, timeLabel(tk))
		}
		if s := strings.Join(got, " "); s != c.want {
			t.Errorf("timeTicks(%v) = %s, want %s", c.end, s, c.want)
		}
	}
}

// TestCountTicks: a count axis is labelled at multiples of a 1-2-5 step,
// and at the full capacity.
func TestCountTicks(t *testing.T) {
	for _, c := range []struct {
		top  int64
		want []int64
	}{
		{60, []int64{0, 10, 20, 30, 40, 50, 60}},
		{100, []int64{0, 20, 40, 60, 80, 100}},
		{25, []int64{0, 5, 10, 15, 20, 25}},
		{7, []int64{0, 2, 4, 6, 7}},
		{21, []int64{0, 5, 10, 15, 21}},
		{9, []int64{0, 2, 4, 6, 8, 9}},
		{1, []int64{0, 1}},
		{1000, []int64{0, 200, 400, 600, 800, 1000}},
		{1001, []int64{0, 200, 400, 600, 800, 1001}},
	} {
		if got := countTicks(c.top); !slices.Equal(got, c.want) {
			t.Errorf("countTicks(%d) = %v, want %v", c.top, got, c.want)
		}
	}
}

// TestLegend: every panel has a legend naming each series it draws: the
// remaining capacity, admitted and rejected requests, and for a policy
// with a concurrency layer the requests in flight and the no-slot
// rejections.
func TestLegend(t *testing.T) {
	rate, _ := ParsePolicy(exPolicy)
	conc, _ := ParsePolicy("limit=100,period=1m,concurrency=2")
	reqs, _ := ParseTraffic("burst 5 at 1s hold 2s; burst 70 at 10s hold 100ms", 1)
	end := time.Minute
	runs := []Run{Simulate(rate, reqs, end, time.Second), Simulate(conc, reqs, end, time.Second)}
	var buf bytes.Buffer
	if err := SVG(&buf, runs, end); err != nil {
		t.Fatal(err)
	}
	type elem struct {
		Class    string `xml:"class,attr"`
		Series   string `xml:"data-series,attr"`
		Children []elem `xml:",any"`
		Text     string `xml:",chardata"`
	}
	var root elem
	if err := xml.Unmarshal(buf.Bytes(), &root); err != nil {
		t.Fatalf("the SVG is not XML: %v", err)
	}
	var panels []elem
	for _, c := range root.Children {
		if c.Class == "panel" {
			panels = append(panels, c)
		}
	}
	if len(panels) != 2 {
		t.Fatalf("%d panels, want 2", len(panels))
	}
	for i, p := range panels {
		drawn := map[string]bool{}
		var legend []string
		var walk func(e elem)
		walk = func(e elem) {
			drawn[e.Class] = true
			if e.Class == "legend-item" {
				legend = append(legend, e.Series)
			}
			for _, c := range e.Children {
				walk(c)
			}
		}
		walk(p)
		want := []string{"remaining", "admitted", "rejected"}
		if i == 1 {
			want = append(want, "in-flight", "no-slot")
		}
		if !slices.Equal(legend, want) {
			t.Errorf("panel %d: legend %v, want %v", i, legend, want)
		}
		for _, s := range want {
			class := s
			if s == "no-slot" {
				class = "rejected" // a rejection, drawn in orange
			}
			if !drawn[class] {
				t.Errorf("panel %d: the legend names %s, which it does not draw", i, s)
			}
		}
		if !strings.Contains(fmt.Sprint(p), "remaining capacity") {
			t.Errorf("panel %d: no legend label", i)
		}
	}
}

// TestSignedTicks: an axis that goes below zero for a debt is labelled at
// multiples of one step on both sides of zero, and at its ends.
func TestSignedTicks(t *testing.T) {
	for _, c := range []struct {
		lo, top int64
		want    []int64
	}{
		{0, 60, []int64{0, 10, 20, 30, 40, 50, 60}}, // countTicks
		{-20000, 20000, []int64{-20000, -10000, 0, 10000, 20000}},
		{-8807, 20000, []int64{-8807, -5000, 0, 5000, 10000, 15000, 20000}},
		{-2000, 20000, []int64{-2000, 0, 5000, 10000, 15000, 20000}},
		{-1, 3, []int64{-1, 0, 1, 2, 3}},
		{-100, 100, []int64{-100, -50, 0, 50, 100}},
		{-30, 100, []int64{-30, 0, 50, 100}}, // a step of 50 for the range of 130
	} {
		if got := signedTicks(c.lo, c.top); !slices.Equal(got, c.want) {
			t.Errorf("signedTicks(%d, %d) = %v, want %v", c.lo, c.top, got, c.want)
		}
	}
}
