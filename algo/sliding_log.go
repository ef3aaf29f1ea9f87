package algo

// slidingLog keeps the timestamps of admitted units, ascending, and admits
// while fewer than limit fall in (now-period, now]. A unit logged at t stops
// counting at t+period. A clock that steps back never reorders the log: new
// entries are logged at max(now, newest).
//
// Expired entries are ignored on every call and dropped on every admitted
// take; rejected takes and peeks write nothing.
//
// Mirror: store/redisstore/lua/sliding_log.lua. Change both or neither.
func slidingLog(period, limit int64, s State, now, cost int64) (Outcome, State) {
	log := s.Log
	drop := 0 // entries at or before now-period no longer count
	for drop < len(log) && log[drop] <= now-period {
		drop++
	}
	live := log[drop:]
	n := int64(len(live))
	if cost == 0 {
		return Outcome{Allowed: true, Remaining: clamp0(limit - n), ResetUs: slReset(live, period, now)}, s
	}
	if n+cost > limit {
		// The (n+cost-limit)th oldest live entry must expire first.
		k := n + cost - limit
		return Outcome{
			Remaining: clamp0(limit - n),
			RetryUs:   live[k-1] + period - now,
			ResetUs:   slReset(live, period, now),
		}, s
	}
	ts := now
	if len(live) > 0 && live[len(live)-1] > ts {
		ts = live[len(live)-1]
	}
	next := live
	if cap(next)-len(next) < int(cost) || len(next) == 0 {
		// Appending in place writes only past the input's length, which
		// the input never sees; without room, copy the live part to a fresh
		// array so the dropped prefix can be freed.
		next = make([]int64, len(live), len(live)+int(cost)+len(live)/2)
		copy(next, live)
	}
	for range cost {
		next = append(next, ts)
	}
	return Outcome{Allowed: true, Remaining: limit - n - cost, ResetUs: slReset(next, period, now)}, State{Log: next}
}

// slReset is the time from now until every live entry has expired.
func slReset(live []int64, period, now int64) int64 {
	if len(live) == 0 {
		return 0
	}
	return clamp0(live[len(live)-1] + period - now)
}
