package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
)

func TestValidate(t *testing.T) {
	ok := algo.PerSecond(10)
	tests := []struct {
		name   string
		checks []Check
		is     error
		want   string
	}{
		{"valid", []Check{{Key: "a", Limit: ok, Cost: 1}, {Key: "a", Limit: ok.With(algo.FixedWindow), Cost: 1}}, nil, ""},
		{"empty batch", nil, ErrInvalidCheck, "empty batch"},
		{"empty key", []Check{{Limit: ok, Cost: 1}}, ErrInvalidCheck, "empty key"},
		{"bad limit", []Check{{Key: "a", Limit: algo.Limit{Period: time.Second}, Cost: 1}}, algo.ErrInvalidLimit, "limit 0"},
		{"cost over burst", []Check{{Key: "a", Limit: ok, Cost: 11}}, algo.ErrCostExceedsBurst, "cost 11, burst 10"},
		{"negative cost", []Check{{Key: "a", Limit: ok, Cost: -1}}, algo.ErrNegativeCost, "-1"},
		{"duplicate", []Check{{Key: "a", Limit: ok, Cost: 1}, {Key: "a", Limit: ok.WithBurst(5), Cost: 1}}, ErrDuplicateCheck, "checks 0 and 1"},
		{"too many", make([]Check, MaxBatch+1), ErrInvalidCheck, "at most 64"},
	}
	for _, tt := range tests {
		err := Validate(tt.checks)
		if tt.is == nil {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, tt.is) || !errors.Is(err, ErrInvalidCheck) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want %v containing %q", tt.name, err, tt.is, tt.want)
		}
	}
}

func TestTightest(t *testing.T) {
	r := Result{Decisions: []algo.Decision{
		{Allowed: true, Remaining: 5},
		{Allowed: true, Remaining: 2},
		{Allowed: false, RetryAfter: time.Second},
		{Allowed: false, RetryAfter: 2 * time.Second},
	}}
	if got := r.Tightest(); got != 3 {
		t.Errorf("Tightest() = %d, want 3", got)
	}
	r.Decisions = r.Decisions[:2]
	if got := r.Tightest(); got != 1 {
		t.Errorf("Tightest() = %d, want 1", got)
	}
	if got := r.RetryAfter(); got != 0 {
		t.Errorf("RetryAfter() = %v, want 0", got)
	}
}

func TestValidateAllocs(t *testing.T) {
	checks := []Check{{Key: "a", Limit: algo.PerSecond(10), Cost: 1}, {Key: "b", Limit: algo.PerMinute(5), Cost: 2}}
	if n := testing.AllocsPerRun(100, func() { _ = Validate(checks) }); n != 0 {
		t.Errorf("Validate allocates %v times, want 0", n)
	}
}
