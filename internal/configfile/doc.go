// Package configfile decodes fairgate's config file: a strict YAML
// decoder that reports every problem with its line and records the line of
// every field it visits, and the policy's sections of the file. Package
// policyfile (public) reads the policy with it; internal/config decodes the
// daemon's own sections with the same Decoder. It imports nothing of the
// daemon, so that public packages may use it.
package configfile
