// Package replay runs recorded traffic through a proposed policy on a
// virtual clock, for `fairgate replay`: which tenants would a new number
// have limited, and when, before anything is enforced.
//
// Input is access logs: JSON lines ({"time", "tenant", "method", "path",
// and optionally "ip"}) or the common/combined log format, with the tenant
// in a chosen field. Lines are decided in file order, the clock set to
// each line's time, through a real limiter.Limiter on an in-memory store.
// A malformed line is counted and reported with its file and line number,
// never fatal. With Options.CostField, a request of a class with a
// measured cost is charged its estimate and settled at the cost its line
// gives, as a front that settles does; a line without one is counted.
package replay
