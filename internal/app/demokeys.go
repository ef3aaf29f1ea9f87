package app

import (
	"context"
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

// warnDemoKeys warns when the config accepts a demo API key ([exposed]);
// it is called at every start and every applied reload, never silenced.
func warnDemoKeys(log *slog.Logger, file string, keys []auth.APIKey) {
	if t := demoKeyTenants(keys); len(t) > 0 {
		exposed(log, "the config accepts a published demo API key of examples/fairgate.yaml (printed in the README, so anyone can present it): replace it under auth.api_keys before real traffic",
			slog.String("config", file), slog.Any("tenants", t))
	}
}

// exposed logs msg, a setting that leaves something open to whoever can
// reach a listener (a published key, an endpoint without a token), at
// WARN, or at ERROR when the logger writes no warnings (--log-level
// error): an operator who asks for errors only still hears it. Each such
// line carries exposure=true.
func exposed(log *slog.Logger, msg string, args ...any) {
	level := slog.LevelWarn
	if !log.Enabled(context.Background(), level) {
		level = slog.LevelError
	}
	log.Log(context.Background(), level, msg, append(args, slog.Bool("exposure", true))...)
}
