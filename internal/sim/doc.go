// Package sim runs limits on a virtual clock for `fairgate simulate`: the
// real algorithm code (package algo) against a described traffic pattern,
// drawn as an SVG chart and summed up in a text table. It does no I/O of
// its own and reads no clock.
package sim
