// Package algo is fairgate's pure algorithm core: GCRA, token bucket,
// sliding window log, sliding window counter and fixed window.
//
// Each algorithm is a function of (limit, state, now, cost) that returns a
// decision and the state after the take. Nothing here reads a clock, does
// I/O or keeps state of its own: the stores own state and time. The Lua
// scripts in store/redisstore/lua are line-by-line mirrors of these
// functions, and the differential tests hold both to identical answers.
//
// Units: time is integer microseconds since the Unix epoch, durations inside
// the arithmetic are integer microseconds, and counts are int64. Public
// results carry [time.Duration]. No float appears anywhere, so the Go
// reference and the Lua scripts (whose numbers are IEEE doubles, exact up to
// 2^53) compute the same integers. [Limit.Validate] keeps every intermediate
// value below 2^53.
//
// [Limit.Settle] adjusts a charge already admitted by a signed delta (a
// measured cost known when the work ends): a charge is applied whatever the
// key holds and may put it in debt, at most one burst, paid back at the
// limit's rate; a refund gives back at most what makes the key full. Each
// algorithm's rule is in its doc.
//
// The definitions, bounds and worked examples are in docs/algorithms.md.
//
// Everything in this package is safe for concurrent use: it has no mutable
// package state.
package algo
