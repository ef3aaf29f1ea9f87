// Package promshare is the one rule by which fairgate's library packages
// (limiter, quota) register their Prometheus metrics on a caller's
// [prometheus.Registerer]: several instances of one component may share a
// registry, and then share its metrics. [Collect] reads a package's own
// collectors back, so that it can give their values to a program as typed
// numbers (limiter.Stats) instead of the program scraping them by name.
//
// [Register] registers a collector; when the registry already holds an
// identical one (same names, labels and help: the registry answers
// [prometheus.AlreadyRegisteredError]), the caller's collector is replaced
// by the registered one, so that two limiters on one registry count into
// the same series and their counts add up. Any other registration error
// (a name registered with other labels or help) is returned.
//
// The sharing is decided by the registry's answer: a Registerer that
// reports a duplicate with an error other than
// [prometheus.AlreadyRegisteredError] refuses sharing, and the component's
// constructor then fails. The fairgate daemon passes such a Registerer,
// since every part of it registers once and a duplicate there is a wiring
// bug.
//
// Register is safe for concurrent use if the Registerer is; Collect if
// the collector is (every prometheus collector is).
package promshare
