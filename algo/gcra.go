package algo

// gcra is the generic cell rate algorithm. em is the emission interval
// (µs per unit), burst the capacity. State A is the theoretical arrival
// time (TAT): the moment the key is full again.
//
// Mirror: store/redisstore/lua/gcra.lua. Change both or neither.
func gcra(em, burst int64, s State, now, cost int64) (Outcome, State) {
	tat := s.A
	if tat < now {
		tat = now
	}
	tolerance := em * burst
	// left is the capacity now: how many emission intervals TAT is behind
	// now+tolerance.
	if cost == 0 {
		left := min(clamp0(now+tolerance-tat)/em, burst)
		return Outcome{Allowed: true, Remaining: left, ResetUs: tat - now}, s
	}
	newTat := tat + em*cost
	allowAt := newTat - tolerance
	if now < allowAt {
		left := min(clamp0(now+tolerance-tat)/em, burst)
		return Outcome{Remaining: left, RetryUs: allowAt - now, ResetUs: tat - now}, s
	}
	return Outcome{Allowed: true, Remaining: (now - allowAt) / em, ResetUs: newTat - now}, State{A: newTat}
}
