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

// DemoAPIKeys are the API keys of examples/fairgate.yaml, published in the
// README: a config that accepts any of them accepts a credential anyone
// has, so fairgate logs a WARN at every start and reload with one
// (internal/app). This is the one list: a demo key added to the example
// goes here too (a test checks every key of the example is listed).
var DemoAPIKeys = []string{"demo-acme-key", "demo-globex-key"}
