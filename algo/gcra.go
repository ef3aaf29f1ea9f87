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
// kept as it is. flag is the state's B: 0, [gcraHeld] or [gcraOwed]. An
// owed TAT ([Limit.Settle] put the key in debt) is clamped the same way
// to its debt bound, now + 2·em·burst, so that a debt survives the clamp
// and is never more than one burst of the limit in force.
//
// A take is admitted when wait = tat - now - tolerance + em·cost is not
// positive; computed in that order, every intermediate value stays below
// 2^53 even for an owed TAT.
func gcra(em, burst int64, div divisor, stored, flag, now, cost int64) (Outcome, int64) {
	tat := stored
	if tat < now {
		tat = now
	}
	tolerance := em * burst
	if flag != gcraHeld {
		bound := tolerance
		if flag == gcraOwed {
			bound = 2 * tolerance
		}
		if tat-now > bound {
			tat = now + bound
			stored = tat
		}
	}
	// left is the capacity now: how many emission intervals TAT is behind
	// now+tolerance.
	if cost == 0 {
		left := min(div.div(clamp0(now+tolerance-tat)), burst)
		return Outcome{Allowed: true, Remaining: left, ResetUs: tat - now}, stored
	}
	wait := tat - now - tolerance + em*cost
	if wait > 0 {
		left := min(div.div(clamp0(now+tolerance-tat)), burst)
		return Outcome{Remaining: left, RetryUs: wait, ResetUs: tat - now}, stored
	}
	newTat := tat + em*cost
	return Outcome{Allowed: true, Remaining: div.div(-wait), ResetUs: newTat - now}, newTat
}

// The flags of a GCRA state's B.
const (
	// gcraHeld marks a TAT set by [Limit.Hold]: never clamped.
	gcraHeld = 1
	// gcraOwed marks a TAT a settlement pushed past now + tolerance (a
	// debt): clamped to now + 2·tolerance instead of now + tolerance.
	gcraOwed = 2
)
