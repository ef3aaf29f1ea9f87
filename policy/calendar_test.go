package policy

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestCalendarUTCAgrees: the integer arithmetic of UTC windows gives the
// same window and label as the time package, for random instants from
// 1900 to 2400 and at every day's and month's edges.
func TestCalendarUTCAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var ats []time.Time
	for range 20000 {
		ats = append(ats, time.UnixMicro(r.Int64N(500*31_557_600_000_000)-70*31_557_600_000_000).UTC()) // µs in a Julian year
	}
	for d := time.Date(1999, 12, 30, 0, 0, 0, 0, time.UTC); d.Year() < 2001; d = d.AddDate(0, 0, 1) {
		ats = append(ats, d, d.Add(-time.Microsecond))
	}
	ats = append(ats, time.Date(2024, 2, 29, 23, 59, 59, 999999000, time.UTC), time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, 0).Add(-time.Microsecond))
	slow := func(c Calendar, at time.Time) calWindow {
		y, m, d := at.Date()
		start := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		end, label := start.AddDate(0, 0, 1), dateLabel('d', y, m, d)
		if c == Month {
			start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
			end, label = start.AddDate(0, 1, 0), dateLabel('m', y, m, 0)
		}
		p := int64(end.Sub(start) / time.Microsecond)
		return calWindow{period: end.Sub(start), label: label, offset: time.Duration((start.UnixMicro()%p+p)%p) * time.Microsecond}
	}
	for _, at := range ats {
		for _, c := range []Calendar{Day, Month} {
			if got, want := calendarUTC(c, at.UnixMicro()), slow(c, at); got != want {
				t.Fatalf("%v at %v: %+v, want %+v", c, at, got, want)
			}
		}
	}
}
