// Package dropin holds no code: its tests run envoyproxy/ratelimit's
// integration cases (test/integration in that repository, commit f2fb157:
// the basic config over each of its Redis settings, the xDS provider,
// reloads, share_threshold, extra tags, mTLS and the reload of the gRPC
// certificate) against the fairgate binary started exactly as that service
// is started: its environment, its working directory and runtime tree, no
// flag but the subcommand and no fairgate file. The cases are re-expressed
// here, not copied; docs/rls.md names the deliberate differences.
//
// With FAIRGATE_DROPIN_PEER naming an envoyproxy/ratelimit binary built
// from that commit (outside this repository), the same cases run against
// it first, as the control:
//
//	FAIRGATE_DROPIN_PEER=/tmp/rl/ratelimit go test -v ./internal/dropin
package dropin
