// Package store defines the interface every fairgate backend implements: a
// batch of checks (key, limit, cost) decided as one atomic, all-or-nothing
// step, with the decisions of all of them returned.
//
// A batch is allowed only when every check in it is allowed; then every
// check is charged. When any check rejects, none is charged: checks that
// would have passed on their own report what a peek (cost 0) would, their
// current remaining and reset, with no retry-after.
//
// The same key under two algorithms is two separate states. A batch may not
// name the same key under the same algorithm twice ([ErrDuplicateCheck]).
//
// A settlement ([Settler]) adjusts charges already admitted by their
// measured cost, atomically per failure domain and exactly once per
// settlement id ([SettleIDLifetime]).
//
// Backends: store/memstore (in process, the embedded default) and
// store/redisstore (Redis and Redis Cluster). store/storetest holds the
// conformance suite both run. Fail-open and fail-closed are decided above
// the store, in the limiter; a backend only reports errors.
package store
