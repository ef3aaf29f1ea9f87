// Package clients holds no Go code: its tests run the client examples
// beside it (python/, a WSGI middleware on the standard library; node/, an
// Express-style middleware on node:http) against the fairgate binary,
// built for the test and started on the memory store with fairgate.yaml,
// each example's app started on a free port. A test whose runtime
// (python3 3.9 or later, node 18 or later) is not installed skips, saying
// so; under -short they all skip (internal/testenv).
package clients
