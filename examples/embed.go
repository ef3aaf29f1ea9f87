// Package examples holds fairgate's example config, embedded so that
// `fairgate serve` without --config runs it from any directory.
package examples

import _ "embed"

//go:embed fairgate.yaml
var config []byte

// Config returns examples/fairgate.yaml: a copy, so that no caller can
// change what the next one reads.
func Config() []byte { return append([]byte(nil), config...) }

// ConfigName is the name errors in Config are reported under.
const ConfigName = "examples/fairgate.yaml"
