package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/internal/redistest"
)

// BenchmarkScriptCost measures what Redis spends inside one script call
// (INFO commandstats, on a Redis of its own with nothing else running):
// the merged take of m single-check GCRA batches (take1_multi.lua, as
// one instance's coalescer sends them) for m = 1 to 64, and two empty
// scripts, one reading TIME, for the fixed part. It is the model behind
// docs/redis.md's sizing: a decision costs Redis about fixed/m + per-
// decision µs inside the script, where m is how many decisions one call
// carries (which an instance's concurrency bounds), plus the call's
// network reads and writes outside it.
//
//	go test -run '^$' -bench ScriptCost -benchtime 3000x -count 3 ./store/redisstore
func BenchmarkScriptCost(b *testing.B) {
	redistest.Need(b)
	rs, err := redistest.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer rs.Close()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{rs.Addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	run := func(b *testing.B, sc *rueidis.Lua, keys func(i int) []string, args func(i int) []string, decisions int) {
		if err := sc.Exec(ctx, c, keys(0), args(0)).Error(); err != nil { // loads it
			b.Fatal(err)
		}
		calls0, us0, err := redistest.ScriptStats(rs.Addr)
		if err != nil {
			b.Fatal(err)
		}
		for i := range b.N {
			if err := sc.Exec(ctx, c, keys(i), args(i)).Error(); err != nil {
				b.Fatal(err)
			}
		}
		calls, us, err := redistest.ScriptStats(rs.Addr)
		if err != nil {
			b.Fatal(err)
		}
		per := float64(us-us0) / float64(calls-calls0)
		b.ReportMetric(per, "redis-µs/call")
		b.ReportMetric(per/float64(decisions), "redis-µs/decision")
		b.ReportMetric(0, "ns/op")
	}
	one := func(int) []string { return []string{"x"} }
	b.Run("empty", func(b *testing.B) {
		run(b, rueidis.NewLuaScript("return 1"), one, one, 1)
	})
	b.Run("time", func(b *testing.B) {
		run(b, rueidis.NewLuaScript("local t = redis.call('TIME') return 1"), one, one, 1)
	})
	merged := rueidis.NewLuaScript(script("take1_multi", 1))
	for _, m := range []int{1, 2, 4, 8, 16, 64} {
		b.Run(fmt.Sprintf("take/m=%d", m), func(b *testing.B) {
			keys := func(i int) []string {
				ks := make([]string, m)
				for j := range ks {
					ks[j] = "fg:g:rl:{t" + strconv.Itoa((i*m+j)%100_000) + "}:all"
				}
				return ks
			}
			args := func(int) []string {
				// m batches, one limit (GCRA, 3.6 ms emission, a burst never
				// reached), each batch cost 1 of limit 0.
				a := []string{strconv.Itoa(m), "1", algoArgs[0], "3600", "1000000000", "0"}
				for range m {
					a = append(a, "1")
				}
				return a
			}
			run(b, merged, keys, args, m)
		})
	}
}
