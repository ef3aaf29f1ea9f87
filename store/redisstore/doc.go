// Package redisstore is fairgate's shared store on Redis 6.2 or later,
// standalone or Redis Cluster, through the rueidis client (which pipelines
// concurrent calls on one connection automatically).
//
// A batch is decided by one Lua script call that reads Redis TIME,
// evaluates every check, and writes only when all pass. The script is built
// from lua/: lib.lua, then a driver (take1.lua for one check, take_multi.lua for
// more) with the eval and write fragments of the algorithms the batch uses
// spliced in (one file per algorithm, each a mirror of its algo/ twin).
// Redis runs a script's whole chunk on every call, so a batch gets the
// script of just its algorithms, and fragments are inline code rather than
// functions defined per call: together that took Redis's time per call from
// 47 µs to 17.5 µs on the benchmark machine (bench/RESULTS.md). Scripts run by SHA and are sent again by
// the client after a NOSCRIPT reply (a restart or failover empties the
// script cache). A take whose connection breaks is retried on a fresh one
// within the caller's deadline; should the broken attempt have run, the
// batch is charged twice, which errs toward limiting.
//
// Concurrent batches for one slot are coalesced: while a script call to a
// slot is in flight, further batches queue and go together in the next
// call (lua/take_multi.lua), sent when the one in flight returns, which
// decides each as its own atomic step, in order. A second call (up to 4)
// goes out beside it only when 64 batches wait. No timer is involved: a
// batch that finds no call in flight is sent at once from the caller's
// goroutine. Config.NoCoalescing
// turns it off (for settlements too). A caller whose deadline passes while its batch is queued is
// answered with the deadline error and its batch is not sent.
//
// On Redis Cluster, a batch whose keys share one slot (the same hash tag)
// is one call. A batch over several slots is decided in two phases: each
// slot's part is reserved by one script call, all parts in parallel; when
// any part rejects (or fails), the parts that were charged are refunded by
// lua/refund.lua. Between the two phases a concurrent caller can see the
// reserved parts as taken: it may be rejected, or told less remaining, by a
// batch that in the end charged nothing. It can never be admitted beyond a
// limit. If a refund itself fails, the reservation stays charged (the error
// is returned): the store errs toward limiting. Each part is decided at its
// own node's TIME.
//
// While a slot migrates (resharding), the client follows MOVED and ASK. A
// script call of several keys that Redis answers TRYAGAIN (its keys split
// between the slot's old and new master, or one not yet written) ran
// nowhere: it is sent again, 1 to 8 ms apart, within the caller's deadline
// and 1 s (a merged call without the batches whose callers gave up). Past
// that it fails with an error that wraps store.ErrUnavailable and
// context.DeadlineExceeded: a timeout, as the guard's breakers count it.
//
// A settlement (Store.Settle) is applied per slot, at that node's TIME,
// by lua/settle.lua, which applies the slot's adjustments and records the
// settlement id in the slot (Prefix + "s:{<tag>}" + id, the tag chosen to
// hash to the slot; Prefix + "s:" + id on standalone Redis) with SET NX PX
// for store.SettleIDLifetime, as one atomic step: a retry with the same id
// applies nothing where it was applied. Concurrent settlements are merged
// as takes are, in coalescers of their own (a merged call is all takes or
// all settlements): the parts that queue for a slot while a settlement's
// call to it is in flight go together in the next call
// (lua/settle_multi.lua), each part its own atomic step in order (its id
// record's SET NX, then its adjustments, so the same id twice in one call
// applies once), and on a Cluster the parts of a node's slots go together
// in lua/settle_node.lua (keys undeclared, as take_node.lua): a part whose
// id record the node refuses wrote nothing and is sent again alone. Like a
// take, a settlement's call is retried by the client on a fresh
// connection; unlike a take's, that retry is harmless.
//
// The client a URL opens has client-side caching on (RESP3 client
// tracking, opt-in) for the few reads other packages make with DoCache to
// poll for changes (limiter/redisctl's and the stored API keys' versions,
// fairq/redisq's depths), so that an idle instance costs Redis under one
// command a second; no decision is read from it. It finds dead
// connections by TCP keep-alive and TCP_USER_TIMEOUT, which send Redis no
// command, and PINGs a connection only after 30 s of silence (conn.go).
//
// State keys are Prefix + algorithm code + ":" + the check's key, so one
// key under two algorithms has two states, and hash tags in the check's
// key are kept (the prefix has no braces).
package redisstore
