// Package fairshare shares an upstream's concurrency between tenants. A
// [Gate] admits requests up to a limit of requests in flight, fixed or
// learned from the upstream's latency (AIMD on how much requests queue,
// compared per route kind, between a floor and a ceiling). No single
// tenant moves the learned limit: each tenant's requests give it one
// vote on whether the upstream is congested, the limit shrinks only when
// most votes say so, and an upload's latency counts from when its body
// was sent ([Request.Upload], [Ticket.Sent]).
//
// While the upstream has room, a tenant may borrow what the others leave,
// less a headroom kept for the requests within their tenants' shares: the
// room they hold on average by Little's law, plus two of its standard
// deviations, plus one. A tenant is within its share while it has fewer
// requests in flight than the limit's weighted share among the tenants
// that wanted room lately; a tenant that held less than its share on
// average may burst past it as a Poisson stream does, and its bursts stay
// its own. A tenant new to the gate has no average: its burst is borrowed.
//
// When the limit is full, freed room goes by weighted max-min fairness:
// first to the waiting tenant within its share that has the fewest
// requests in flight for its weight, then to the borrowers in the same
// order (round robin between equals). A
// request waits at most MaxWait in its tenant's queue; then, or when the
// queue is full, it is shed with a retry-after. Requests of a critical
// class may use a reserved part of the limit, so that non-critical
// traffic is shed first.
//
// It is per instance and in memory: nothing here touches a store. The
// proxy of `fairgate serve` puts it in front of the upstream with the
// config's upstream_capacity section (docs/concurrency.md).
//
// Clock: the gate reads time.Now, as its waits are real timers (a waiter
// gives up on a context or a timer, never on a clock of its own); tests
// run under testing/synctest, whose fake time moves the clock and the
// timers together, which an injected clock alone could not.
package fairshare
