// Package promreg registers Prometheus collectors so that two users of one
// registry (two limiters, a limiter and a quota set) share a metric instead
// of failing on its second registration.
package promreg
