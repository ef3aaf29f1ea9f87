package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the release version, set at build time with
// -ldflags "-X main.version=v1.2.3"; empty means the module's own (a
// development build says "devel").
var version = ""

// versionLine describes the binary: its version, the commit it was built
// from (and whether the tree had changes), the commit's time, and the Go
// version and platform, from the build info.
func versionLine() string {
	v, commit, when, dirty := version, "unknown", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if dirty {
		commit += " (modified)"
	}
	if when != "" {
		commit += ", " + when
	}
	return fmt.Sprintf("fairgate %s (commit %s) %s %s/%s", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
