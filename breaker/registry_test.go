package breaker

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSecondSetOnARegistry: a Set is one registry's breakers; a second
// Set on the same registry would mix two Sets' states in one gauge, so it
// is refused, and a prefixed registerer tells the two apart.
func TestSecondSetOnARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(map[string]Settings{"billing": {}}, reg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(map[string]Settings{"billing": {}}, reg); err == nil || !strings.Contains(err.Error(), "one Set holds every dependency") {
		t.Errorf("a second Set on one registry: %v, want refused", err)
	}
	if _, err := New(map[string]Settings{"billing": {}}, prometheus.WrapRegistererWithPrefix("b_", reg)); err != nil {
		t.Errorf("a second Set on a prefixed registerer: %v", err)
	}
}
