// Package policyfile reads fairgate's config file, fairgate.yaml, into a
// [policy.Policy]: the very file the daemon reads, so that a Go service
// can embed the same policy instead of rebuilding it in Go.
//
//	p, err := policyfile.Load("fairgate.yaml")
//	if err != nil {
//		log.Fatal(err) // every problem of the file, each with its line
//	}
//	lim, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: p})
//
// Decoding is strict: an unknown field, a field given twice or a value of
// the wrong kind is a [Problem] naming its line, and the decoded policy is
// compiled too, so that one [Error] lists every problem of the file. The
// file's defaults are the Go types' zero values: an omitted class share is
// 1, an omitted route cost 1 (cost 0 is a free route: [policy.Route].Free),
// an omitted fail mode is open for a class and closed for an anonymous
// route. docs/config.md describes every field.
//
// The daemon's own sections (credentials, providers, queues, the Envoy
// service...) are skipped by [Load] unread.
//
// A program whose file holds settings of its own beside the policy
// decodes them with the same strictness and lines: [ParseWith] takes a
// [Sections] entry per top-level field of its own, and each decodes its
// value with the [Decoder]'s readers ([Decoder.Fields], [Decoder.Str],
// [Decoder.Duration]...), which record every problem at its line. The
// fairgate daemon reads its config file so. [Root] and [NewDecoder] decode
// a file that is not a policy the same way.
//
// Functions are safe for concurrent use; a [Decoder] is not.
package policyfile
