package algo

import (
	"errors"
	"testing"
	"time"
)

func TestHold(t *testing.T) {
	l := Limit{Limit: 100, Period: time.Second, Burst: 5} // em = 10,000 µs
	const now = 1_000_000
	tests := []struct {
		name  string
		st    State
		until int64
	}{
		{"idle key", State{}, now + 2_000_000},
		{"partly used key", State{A: now + 30_000}, now + 500_000},
		{"hold shorter than the key's own wait", State{A: now + 45_000}, now + 1_000},
		{"hold in the past", State{}, now - 5_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held, reset, err := l.Hold(tt.st, now, tt.until)
			if err != nil {
				t.Fatal(err)
			}
			if tt.until <= now && held.A != tt.st.A {
				t.Fatalf("a hold in the past changed the state: %+v -> %+v", tt.st, held)
			}
			if held.A < tt.st.A {
				t.Fatalf("hold moved TAT back: %d -> %d", tt.st.A, held.A)
			}
			if reset != max(0, held.A-now) {
				t.Errorf("reset %d, want %d", reset, held.A-now)
			}
			// The first unit admitted after the hold comes no earlier than
			// until, and exactly at until unless the key's own state is later.
			o, _ := l.Eval(held, now, 1)
			admitAt := int64(now) + o.RetryUs
			own, _ := l.Eval(tt.st, now, 1)
			want := max(tt.until, now+own.RetryUs)
			if admitAt != want {
				t.Errorf("first admission at %d, want %d", admitAt, want)
			}
			if o, _ := l.Eval(held, want, 1); !o.Allowed {
				t.Errorf("not admitted at %d after waiting retry_after", want)
			}
			if want > now {
				if o, _ := l.Eval(held, want-1, 1); o.Allowed {
					t.Errorf("admitted at %d, before the hold ends", want-1)
				}
			}
		})
	}
}

func TestHoldRefusesOtherAlgorithms(t *testing.T) {
	for _, a := range Algorithms {
		if a == GCRA {
			continue
		}
		l := Limit{Limit: 10, Period: time.Second, Algorithm: a}
		if _, _, err := l.Hold(State{}, 0, 1_000); !errors.Is(err, ErrHoldUnsupported) {
			t.Errorf("%v: err = %v, want ErrHoldUnsupported", a, err)
		}
	}
	if _, _, err := (Limit{}).Hold(State{}, 0, 1); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("zero limit: err = %v, want ErrInvalidLimit", err)
	}
}
