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
//   - reload.go: a config reload, also as Caddy's: the whole graph of
//     what the config determines is built from the new file and
//     validated, then swapped in; the settings only a restart changes are
//     decided in one place (fixedAtStart), and a reload that changes one
//     says so.
package app
