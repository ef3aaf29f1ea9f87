package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/examples"
	"github.com/fairgate/fairgate/limiter"
	"github.com/fairgate/fairgate/store/memstore"
)

// FuzzParse: any file is either refused with a *config.Error that names
// its problems, or gives a policy a limiter accepts. Nothing panics.
func FuzzParse(f *testing.F) {
	f.Add(examples.Config())
	f.Add([]byte(strings.Join(base, "\n")))
	f.Add([]byte("plans: {free: [{limit: 1, period: 1s}]}\nclasses: {read: {share: 1}}\ndefault_plan: free\ndefault_class: read\n"))
	f.Add([]byte("queues: {kinds: {a: {warn: 5, refuse: 1}}}\ndependencies: {x: {failure_ratio: 7}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 {
				t.Fatalf("an error that is not a *config.Error with problems: %v", err)
			}
			return
		}
		if _, err := limiter.New(limiter.Config{Store: memstore.New(memstore.Config{}), Policy: c.Policy}); err != nil {
			t.Fatalf("a config that parsed gives a policy the limiter refuses: %v", err)
		}
	})
}

// FuzzParseRLS: envoyproxy/ratelimit config files parse or are refused
// with problems; nothing panics.
func FuzzParseRLS(f *testing.F) {
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: b*\n    rate_limit: {unit: second, requests_per_unit: 5}\n    descriptors: [{key: c}]\n"))
	f.Add([]byte("domain: d\ndescriptors: [{key: a, rate_limit: {unlimited: true, name: x, replaces: [{name: y}]}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ds, err := ParseRLS("fuzz.yaml", data)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("not a *config.Error: %v", err)
			}
			return
		}
		for _, d := range ds {
			if d.Name == "" {
				t.Fatal("a domain without a name was accepted")
			}
		}
	})
}
