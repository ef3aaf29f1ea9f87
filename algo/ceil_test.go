package algo_test

import (
	"testing"
	"time"

	"github.com/fairgate/fairgate/algo"
)

func TestCeil(t *testing.T) {
	for _, c := range []struct {
		d           time.Duration
		secs, milli int64
	}{
		{-time.Second, 0, 0},
		{0, 0, 0},
		{1, 1, 1},
		{time.Millisecond, 1, 1},
		{time.Millisecond + 1, 1, 2},
		{time.Second, 1, 1000},
		{time.Second + 1, 2, 1001},
		{90 * time.Second, 90, 90000},
	} {
		if s, m := algo.CeilSeconds(c.d), algo.CeilMillis(c.d); s != c.secs || m != c.milli {
			t.Errorf("%v: %d s, %d ms; want %d s, %d ms", c.d, s, m, c.secs, c.milli)
		}
	}
}
