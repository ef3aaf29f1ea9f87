package algo

// gcra is the generic cell rate algorithm. em is the emission interval
// (µs per unit), burst the capacity. State A is the theoretical arrival
// time (TAT): the moment the key is full again. div divides by em (see
// [divisor]), exactly as the script's integer division by em.
//
// Mirror: store/redisstore/lua/gcra.lua. Change both or neither.
//
// It takes and returns only the TAT, the whole of GCRA's state (so that the
// call passes everything in registers): the TAT after the take, unchanged
// (stored) when rejected or peeking.
//
// A TAT more than the whole burst's refill ahead of now was written under
// another, slower limit (a plan downgraded, an override lifted): it is read
// as now + em·burst, so that no key waits longer than the limit in force
// allows; the clamped TAT is returned (and stored) whatever the outcome, so
// that a client that waits the Retry-After it is given is admitted. held
// marks a TAT set by [Limit.Hold] (an upstream's Retry-After), which is
// kept as it is.
func gcra(em, burst int64, div divisor, stored int64, held bool, now, cost int64) (Outcome, int64) {
	tat := stored
	if tat < now {
		tat = now
	}
	tolerance := em * burst
	if !held && tat-now > tolerance {
		tat = now + tolerance
		stored = tat
	}
	// left is the capacity now: how many emission intervals TAT is behind
	// now+tolerance.
	if cost == 0 {
		left := min(div.div(clamp0(now+tolerance-tat)), burst)
		return Outcome{Allowed: true, Remaining: left, ResetUs: tat - now}, stored
	}
	newTat := tat + em*cost
	allowAt := newTat - tolerance
	if now < allowAt {
		left := min(div.div(clamp0(now+tolerance-tat)), burst)
		return Outcome{Remaining: left, RetryUs: allowAt - now, ResetUs: tat - now}, stored
	}
	return Outcome{Allowed: true, Remaining: div.div(now - allowAt), ResetUs: newTat - now}, newTat
}
