// Package jsonwire reads and writes the small, flat JSON objects of the
// decision API (/v1/take, /v1/check) without reflection or allocation.
//
// It is a fast path, never the authority: [Object] reads only the simplest
// form (members whose values are strings without escapes or integers
// without fraction or exponent, each name without escapes) and reports
// anything else as not simple, for the caller to hand the body to
// encoding/json and its strict checks, which name the problem. Whatever it
// accepts, encoding/json accepts with the same values (FuzzObject holds
// it to that). [AppendString] writes exactly what encoding/json writes for
// a string, HTML escaping included (FuzzAppendString).
package jsonwire
