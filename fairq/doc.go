// Package fairq is a per-tenant fair job queue for expensive work
// (reports, bulk imports, inference): rate limits decide how fast a tenant
// may ask; the queue decides whose work runs next when the backend is
// busy, so that one tenant's 100,000 queued jobs delay another tenant's one
// job by at most one round.
//
// Workers Lease a job for a kind's visibility timeout and Ack or Nack it
// (with a retry delay). A job not acked in time is handed out again; after
// MaxAttempts deliveries it goes to the dead letters. Dispatch is deficit
// round robin over the tenants that have ready jobs: each tenant in turn is
// handed up to its weight (by plan) of jobs, then goes to the back.
//
// Queue depth (unfinished jobs of a kind) is the backpressure signal: from
// a kind's Warn threshold Enqueue says so, and at its Refuse threshold it
// refuses with a *FullError (the HTTP layer answers 503 with Retry-After:
// 30).
//
// Two backends: [Memory], in-process (the embedded default; a restart
// loses its jobs), and package redisq on Redis Streams (jobs survive
// worker deaths and fairgate restarts, and every instance shares them).
// Both are safe for concurrent use and pass the same tests.
//
// Job IDs are ULIDs. A job belongs to the tenant that enqueued it: Get by
// any other tenant is ErrNotFound.
package fairq
