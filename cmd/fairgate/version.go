package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// version is the release version, set at build time with
// -ldflags "-X main.version=v1.2.3"; empty means the one Go records from
// the module and its commit (a build outside a release says "devel").
var version = ""

// versionLine describes this binary: see describeBuild.
func versionLine() string {
	bi, _ := debug.ReadBuildInfo()
	return describeBuild(version, bi, runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

// describeBuild names a build: the release version set by the linker flag
// (linkerVersion) or else the module version Go recorded, the commit Go
// stamped (vcs.revision, with "(modified)" when the tree had changes, and
// the commit's time), then the Go version and platform. bi may be nil.
//
// `go run` stamps no commit (Go stamps one only for go build and go
// install in a git checkout, and not with -buildvcs=false, which GOFLAGS
// may set); the line then says so and how to get one, rather than
// "unknown".
func describeBuild(linkerVersion string, bi *debug.BuildInfo, goVersion, platform string) string {
	v, commit, when, dirty := linkerVersion, "", "", false
	if bi != nil {
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
	switch {
	case commit == "":
		commit = "none recorded: go run stamps none, nor a build outside a git checkout or with -buildvcs=false (GOFLAGS); make build stamps one"
	default:
		if dirty {
			commit += " (modified)"
		}
		if when != "" {
			commit += ", " + when
		}
	}
	return fmt.Sprintf("fairgate %s (commit %s) %s %s", v, commit, goVersion, platform)
}
