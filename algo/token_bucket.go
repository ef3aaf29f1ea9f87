package algo

// tokenBucket refills one token every em microseconds up to burst. State A
// is the whole tokens, B the time up to which refill has been credited; the
// partial token is the time now-B, kept exactly instead of as a fraction.
//
// Mirror: store/redisstore/lua/token_bucket.lua. Change both or neither.
//
// Tokens written under a larger burst are read as at most this burst; a
// debt ([Limit.Settle]: tokens below zero) as at most one burst.
func tokenBucket(em, burst int64, s State, now, cost int64) (Outcome, State) {
	tokens, last := tbRefill(em, burst, s, now)
	if cost == 0 {
		return Outcome{Allowed: true, Remaining: clamp0(tokens), ResetUs: tbReset(em, burst, tokens, last, now)}, s
	}
	if tokens < cost {
		return Outcome{
			Remaining: clamp0(tokens),
			RetryUs:   (cost-tokens)*em - (now - last),
			ResetUs:   tbReset(em, burst, tokens, last, now),
		}, s
	}
	tokens -= cost
	return Outcome{Allowed: true, Remaining: tokens, ResetUs: tbReset(em, burst, tokens, last, now)},
		State{A: tokens, B: last}
}

// tbRefill reads a bucket's state at now: its tokens, between -burst and
// burst, and the time refill is credited up to.
func tbRefill(em, burst int64, s State, now int64) (tokens, last int64) {
	tokens, last = max(-burst, min(s.A, burst)), s.B
	if now > last {
		n := (now - last) / em
		tokens += n
		last += n * em
		if tokens >= burst {
			tokens, last = burst, now
		}
	}
	return tokens, last
}

// tbReset is the time from now until the bucket holds burst tokens.
func tbReset(em, burst, tokens, last, now int64) int64 {
	if tokens >= burst {
		return 0
	}
	return clamp0((burst-tokens)*em - (now - last))
}
