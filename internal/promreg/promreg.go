package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Reuse registers *c with reg, or points *c at the collector of that name
// already registered. The first error is kept in *errp.
func Reuse[C prometheus.Collector](reg prometheus.Registerer, c *C, errp *error) {
	err := reg.Register(*c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			*c = existing
		} else if *errp == nil {
			*errp = err
		}
	case *errp == nil:
		*errp = err
	}
}
