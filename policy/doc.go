// Package policy is fairgate's policy model and compiler: plans, route
// classes, routes, anonymous routes and tenants, compiled into an
// immutable [Snapshot] that resolves a request ("tenant acme calls POST
// /v1/reports") into the layers to check and their store keys.
//
// It is pure: values in, values out. It does no I/O, reads no clock (every
// time is an argument), keeps no metrics and holds no state that changes
// after [Compile], so that nothing one tenant's requests do can change what
// another's resolve to. Package limiter decides the layers against a
// store; quota, fairq and the daemon's config loader use the names and
// keys defined here.
//
// Layers, narrowest first: for a tenant, one layer per plan rule for the
// route class (the rule's limit and burst times the class's share; a class
// with share 1 adds none, and calendar quotas are counted only for the
// tenant as a whole), then one per plan rule for the tenant overall. An
// anonymous route (no tenant) has its own rules, keyed by client IP (IPv6
// per /64) or by the hashed credential. All layers of one request share a
// Redis Cluster hash tag, so that a store can decide them as one batch.
package policy
