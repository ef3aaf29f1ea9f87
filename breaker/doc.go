// Package breaker keeps one circuit breaker per downstream dependency (a
// billing API, a search cluster, the proxied upstream), built on
// sony/gobreaker: rate limits enforce fairness at a chosen rate, but do not
// protect a backend that is failing right now.
//
// A breaker opens after ConsecutiveFailures failures in a row, or when the
// failure ratio over the rolling Window reaches FailureRatio with at least
// MinRequests calls. While open, calls fail at once with an *OpenError
// carrying how long until the breaker lets a probe through (answer 503 with
// that Retry-After). After Cooldown it is half-open: one probe call goes
// through (others fail fast); its success closes the breaker, its failure
// opens it again.
//
// [Set.Do] wraps a Go call, [Transport] an http.RoundTripper (a 5xx or a
// transport error is a failure; the response is returned as it came). A
// caller's own cancellation is not the dependency's failure and is not
// counted. Every type is safe for concurrent use.
//
// Metrics, labelled by dependency (a name from the config):
// fairgate_dependency_breaker_state (0 closed, 1 half-open, 2 open) and
// fairgate_dependency_rejections_total (calls refused while open).
package breaker
