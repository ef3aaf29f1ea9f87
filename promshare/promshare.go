package promshare

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers *c with reg. When reg already holds an identical
// collector of the same type, *c is pointed at it and Register returns
// nil: the caller then updates the shared collector. Any other error of
// reg.Register is returned as it came. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c *C) error {
	if reg == nil {
		return nil
	}
	err := reg.Register(*c)
	if err == nil {
		return nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
			return nil
		}
	}
	return err
}
