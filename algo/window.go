package algo

// windowStart is the start of the window [offset + k×period, +period) that
// holds t: floored, also for t < offset.
func windowStart(t, period, offset int64) int64 {
	r := (t - offset) % period
	if r < 0 {
		r += period
	}
	return t - r
}
