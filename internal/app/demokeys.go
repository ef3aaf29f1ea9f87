package app

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"strings"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/internal/auth"
)

// demoKeyTenants returns, in the order of keys, the tenants whose API key
// is one of examples.DemoAPIKeys: published credentials, which anyone can
// present.
func demoKeyTenants(keys []auth.APIKey) []string {
	demo := make(map[string]bool, len(examples.DemoAPIKeys))
	for _, k := range examples.DemoAPIKeys {
		sum := sha256.Sum256([]byte(k))
		demo[hex.EncodeToString(sum[:])] = true
	}
	var tenants []string
	for _, k := range keys {
		if demo[strings.ToLower(k.SHA256)] {
			tenants = append(tenants, k.Tenant)
		}
	}
	return tenants
}

// warnDemoKeys logs a WARN when the config accepts a demo API key; it is
// called at every start and every applied reload, never silenced.
func warnDemoKeys(log *slog.Logger, file string, keys []auth.APIKey) {
	if t := demoKeyTenants(keys); len(t) > 0 {
		log.Warn("the config accepts a published demo API key of examples/fairgate.yaml (printed in the README, so anyone can present it): replace it under auth.api_keys before real traffic",
			slog.String("config", file), slog.Any("tenants", t))
	}
}
