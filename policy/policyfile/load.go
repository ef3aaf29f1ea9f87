package policyfile

import (
	"github.com/fairgate/fairgate/internal/configfile"
	"github.com/fairgate/fairgate/policy"
)

// Problem is one thing wrong with a file: its line (0 when the file as a
// whole is wrong), the field (such as plans.free[0].burst) and what is
// wrong and what would be right.
type Problem = configfile.Problem

// Error is every problem of one file; its Error method lists them, one
// per line, as file:line: field: message. A file with problems is never
// used.
type Error = configfile.Error

// MaxFileBytes is the largest file Load reads (4 MiB).
const MaxFileBytes = configfile.MaxFileBytes

// Load reads the policy of the config file at path: the same file the
// fairgate daemon reads (see docs/config.md), with every problem reported
// at its line. The daemon's own sections (credentials, providers, queues,
// the Envoy service...) are left to the daemon: Load skips them unread.
func Load(path string) (policy.Policy, error) {
	data, err := configfile.ReadFile(path)
	if err != nil {
		return policy.Policy{}, err
	}
	return Parse(path, data)
}

// Parse is Load of data, a file named file (for errors).
func Parse(file string, data []byte) (policy.Policy, error) {
	return configfile.ParsePolicy(file, data)
}
