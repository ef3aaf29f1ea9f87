package algo

import "time"

// CeilSeconds is d in whole seconds, rounded up (0 for d <= 0): a client
// that waits it is never early.
func CeilSeconds(d time.Duration) int64 { return ceilIn(d, time.Second) }

// CeilMillis is d in whole milliseconds, rounded up (0 for d <= 0): a
// client that waits it is never early.
func CeilMillis(d time.Duration) int64 { return ceilIn(d, time.Millisecond) }

func ceilIn(d, unit time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + unit - 1) / unit)
}
