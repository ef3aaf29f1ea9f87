package policyfile

import (
	"go.yaml.in/yaml/v3"

	"github.com/fairgate/fairgate/policy"
)

// Load reads the policy of the config file at path: the same file the
// fairgate daemon reads (see docs/config.md), with every problem reported
// at its line. The daemon's own sections (credentials, providers, queues,
// the Envoy service...) are left to the daemon: Load skips them unread.
func Load(path string) (policy.Policy, error) {
	data, err := ReadFile(path)
	if err != nil {
		return policy.Policy{}, err
	}
	return Parse(path, data)
}

// Parse is Load of data, a file named file (for errors).
func Parse(file string, data []byte) (policy.Policy, error) {
	skip := Sections{}
	for _, name := range daemonSections {
		skip[name] = func(*Decoder, *yaml.Node, string) {}
	}
	return ParseWith(file, data, skip, nil, nil)
}
