package rls

import (
	"bufio"
	"fmt"
	"io"
)

// Dump writes the domains in force, one line per descriptor with a limit of
// its own, in envoyproxy/ratelimit's /rlconfig format:
//
//	domain.key_value.key2: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false
//
// The first part is the descriptor's full key (its statistics' name: the
// domain, then each key, with "_value" where the rule names a value,
// joined by dots). An unlimited descriptor shows unit=UNKNOWN
// requests_per_unit=0, as there. Domains and descriptors are in the order
// of the config (that service's follows its maps' order). A service with
// no domain writes nothing.
func (s *Service) Dump(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, d := range s.cfg.Load().cfg.Domains {
		dumpDescriptors(bw, d.Name+".", d.Descriptors)
	}
	return bw.Flush()
}

// dumpDescriptors writes ds and their children, their full keys under
// parent (which ends with a dot).
func dumpDescriptors(w *bufio.Writer, parent string, ds []*Descriptor) {
	for _, d := range ds {
		key := d.Key
		if d.Value != "" {
			key += "_" + d.Value
		}
		full := parent + key
		if l := d.Limit; l != nil {
			unit, n := l.Unit, l.RequestsPerUnit
			if l.Unlimited {
				unit, n = 0, 0
			}
			fmt.Fprintf(w, "%s: unit=%s requests_per_unit=%d, shadow_mode: %t, quota_mode: %t\n", full, unit.String(), n, d.Shadow, d.QuotaMode)
		}
		dumpDescriptors(w, full+".", d.Children)
	}
}
