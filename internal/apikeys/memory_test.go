package apikeys_test

import (
	"testing"

	"github.com/fairgate/fairgate/internal/apikeys"
	"github.com/fairgate/fairgate/internal/apikeys/backendtest"
)

func TestMemory(t *testing.T) {
	backendtest.Run(t, func(*testing.T) (apikeys.Backend, apikeys.Backend) {
		b := apikeys.NewMemory()
		return b, b
	})
}
