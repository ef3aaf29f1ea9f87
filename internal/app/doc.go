// Package app wires fairgate's daemon: flags and environment -> store ->
// servers, and runs them until the context ends.
//
// Its rooms, one job each:
//   - flags.go: `fairgate serve`'s flags and FAIRGATE_* environment
//     variables (and envoyproxy/ratelimit's), read into a ServeConfig.
//   - backend.go and lazy.go: the store a URL names; a Redis one is
//     connected in the background behind lazy adapters (store, control
//     store, job queue, API keys).
//   - backpressure.go: the dependencies' breakers and the fair job
//     queue, with their dispatch weights.
//   - rlsdomains.go: the Envoy rate limit service's domains, merged from
//     the config file and an xDS management server.
//   - serve.go: the daemon's life, as Caddy's: build every part, start the
//     listeners (listen.go) and loops, wait, stop.
//   - reload.go: the config watcher, and a reload put in force.
package app
