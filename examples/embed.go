// Package examples holds fairgate's example config, embedded so that
// `fairgate serve` without --config runs it from any directory.
package examples

import _ "embed"

// Config is examples/fairgate.yaml.
//
//go:embed fairgate.yaml
var Config []byte

// ConfigName is the name errors in Config are reported under.
const ConfigName = "examples/fairgate.yaml"
