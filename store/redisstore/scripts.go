package redisstore

import (
	"embed"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/fairgate/fairgate/algo"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// fragments are the sections of one algorithm file: --@helpers, --@eval,
// --@write, --@refund and --@settle (see lua/lib.lua for their contract).
type fragments struct{ helpers, eval, write, refund, settle string }

// readLua returns an embedded script file; its absence is a build defect.
func readLua(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redisstore: missing embedded script " + name)
	}
	return string(src)
}

// parseFragments splits an algorithm file at its --@section lines.
func parseFragments(name string) fragments {
	var f fragments
	var cur *string
	for _, line := range strings.SplitAfter(readLua(name), "\n") {
		switch strings.TrimSpace(line) {
		case "--@helpers":
			cur = &f.helpers
		case "--@eval":
			cur = &f.eval
		case "--@write":
			cur = &f.write
		case "--@refund":
			cur = &f.refund
		case "--@settle":
			cur = &f.settle
		default:
			if cur != nil {
				*cur += line
			}
		}
	}
	if f.eval == "" || f.write == "" || f.refund == "" || f.settle == "" {
		panic("redisstore: " + name + ".lua lacks an --@eval, --@write, --@refund or --@settle section")
	}
	return f
}

// script builds the named driver (take1, take_multi, take1_multi,
// take_node, refund, settle, settle_multi or settle_node) for the
// algorithms in mask
// (bit i for algo.Algorithm i): lib.lua, their helpers, and the driver with
// each --{{section}} replaced by a dispatch on the algorithm code to their
// fragments. A batch runs the script of just the algorithms it uses: Redis
// runs the whole chunk on every call, so what a batch does not use would
// still cost it.
func script(driver string, mask uint8) string {
	var frags []fragments
	var codes []int
	// The script of each algorithm is lua/<its wire name>.lua.
	for _, a := range algo.Algorithms {
		if mask&(1<<a) != 0 {
			frags = append(frags, parseFragments(a.String()))
			codes = append(codes, int(a))
		}
	}
	dispatch := func(pick func(fragments) string) string {
		var b strings.Builder
		for j, f := range frags {
			if j == 0 {
				fmt.Fprintf(&b, "if code == %d then\n", codes[j])
			} else {
				fmt.Fprintf(&b, "elseif code == %d then\n", codes[j])
			}
			b.WriteString(pick(f))
		}
		b.WriteString("end\n")
		return b.String()
	}
	var b strings.Builder
	b.WriteString(readLua("lib"))
	for _, f := range frags {
		b.WriteString(f.helpers)
	}
	body := readLua(driver)
	for section, pick := range map[string]func(fragments) string{
		"eval":   func(f fragments) string { return f.eval },
		"write":  func(f fragments) string { return f.write },
		"refund": func(f fragments) string { return f.refund },
		"settle": func(f fragments) string { return f.settle },
	} {
		body = strings.ReplaceAll(body, "--{{"+section+"}}", dispatch(pick))
	}
	b.WriteString(body)
	return b.String()
}

// TakeScript returns the source of the single-check script the store runs
// (lib.lua, the five algorithm files and take1.lua), for tools and
// benchmarks that want to call it through another client.
func TakeScript() string { return script("take1", allAlgorithms) }

const allAlgorithms = 1<<algo.AlgorithmCount - 1

// take1Scripts and refundScripts hold one script per set of algorithms
// (batches of several checks run take_multi.lua, in coalesce.go).
//
// A take is retried by the client on a fresh connection when its connection
// breaks (a restart or failover leaves every pooled connection to find out
// on its own), within the caller's deadline. If the broken attempt had run,
// the retry charges the batch a second time: that errs toward limiting. A
// refund is never retried, since refunding twice would over-admit.
var take1Scripts, refundScripts = func() (take1, refund [allAlgorithms + 1]*rueidis.Lua) {
	for m := 1; m <= allAlgorithms; m++ {
		take1[m] = rueidis.NewLuaScriptRetryable(script("take1", uint8(m)))
		refund[m] = rueidis.NewLuaScript(script("refund", uint8(m)))
	}
	return take1, refund
}()

// settleScripts and settleMultiScripts hold settle.lua and
// settle_multi.lua (merged parts of one slot), one per set of algorithms.
// A settlement is retried by the client on a fresh connection like a
// take: its id record makes the retry of one that had run apply nothing
// (a merged call's retry: nothing for each of its parts).
var settleScripts, settleMultiScripts = func() (settle, multi [allAlgorithms + 1]*rueidis.Lua) {
	for m := 1; m <= allAlgorithms; m++ {
		settle[m] = rueidis.NewLuaScriptRetryable(script("settle", uint8(m)))
		multi[m] = rueidis.NewLuaScriptRetryable(script("settle_multi", uint8(m)))
	}
	return settle, multi
}()

// holdScript holds a GCRA key (see Hold). Retrying it after a broken
// connection at worst lengthens the hold by the retry's delay.
var holdScript = rueidis.NewLuaScriptRetryable(readLua("lib") + readLua("hold"))
