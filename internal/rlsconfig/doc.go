// Package rlsconfig is the configuration of fairgate's Envoy rate limit
// service (internal/rls): domains and their descriptor trees in
// envoyproxy/ratelimit's format, each descriptor's rate_limit, and that
// service's settings, as internal/config decodes them from the config file,
// a runtime directory or xDS. It holds the types and the units' lengths
// only, so that the config loader does not import the gRPC service.
//
// Values are plain data: safe for concurrent reads, and never changed
// once handed to the service.
package rlsconfig
