// Package docs holds what fairgate serves of its documentation: the
// OpenAPI 3.1 description of its HTTP endpoints (docs/openapi.json), which
// the internal listener serves at /openapi.json.
package docs

import _ "embed"

//go:embed openapi.json
var openAPI []byte

// OpenAPI returns docs/openapi.json: a copy, so that no caller can change
// what the next one reads.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }
