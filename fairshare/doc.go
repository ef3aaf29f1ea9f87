// Package fairshare shares an upstream's concurrency between tenants
// (issue 24 §2, first part). A [Gate] admits requests up to a limit of
// requests in flight; the limit is learned from the upstream's latency
// (AIMD on how much requests queue, compared per route kind, between a
// floor and a ceiling); while the upstream has room, a tenant may borrow
// what the others leave, less a headroom kept for the tenants within
// their shares (their expected hold by Little's law, with a margin); when
// it is full, the room is split by weighted max-min fairness between the
// tenants that want it: a request of a tenant under its share waits ahead
// of any request of a tenant over it, and the borrower's excess is the
// first to wait. A request waits at most MaxWait in its tenant's queue; then, or
// when the queue is full, it is shed with a retry-after. Requests of a
// class that reserves part of the limit are admitted into that part when
// the rest is full, so that non-critical traffic is shed first.
//
// It is per instance and in memory: nothing here touches a store.
package fairshare
