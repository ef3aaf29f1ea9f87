// Package sim runs limits on a virtual clock for `fairgate simulate`: the
// real algorithm code (package algo) against a described traffic pattern,
// drawn as an SVG chart and summed up in a text table. A request may have
// a measured cost: charged an estimate when admitted, settled at its true
// cost when it ends (algo.Limit.Settle), which may leave a debt. It does
// no I/O of its own and reads no clock.
package sim
