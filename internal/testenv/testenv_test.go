package testenv

import "testing"

func TestShortIsTheFlag(t *testing.T) {
	if Short() != testing.Short() {
		t.Fatalf("Short() = %v, testing.Short() = %v", Short(), testing.Short())
	}
}

// TestSkipsUnderShort: External and Slow skip under -short only.
func TestSkipsUnderShort(t *testing.T) {
	for name, skip := range map[string]func(testing.TB, string){"External": External, "Slow": Slow} {
		var skipped bool
		t.Run(name, func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			skip(t, "something")
		})
		if skipped != testing.Short() {
			t.Errorf("%s skipped: %v, under -short: %v", name, skipped, testing.Short())
		}
	}
}
