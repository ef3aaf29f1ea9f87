package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// commands are fairgate's commands in the order `fairgate help` lists them.
var commands = []string{"serve", "check-config", "simulate", "replay", "version", "help"}

// about is each command's help: its usage line and what it does. A command
// with flags has them listed after it.
var about = map[string]string{
	"serve": `usage: fairgate serve [flags]

Runs the decision API until SIGTERM or Ctrl-C, with the policy of the config
file (default: the embedded examples/fairgate.yaml), reloaded when the file
changes and on SIGHUP. Each flag defaults to the FAIRGATE_* environment
variable named in its line; a flag given wins over its variable. Logs go to
stderr: JSON lines at level info unless --log-format and --log-level say
otherwise.`,
	"check-config": `usage: fairgate check-config [FILE]

Validates FILE (default: the embedded examples/fairgate.yaml) and prints every
problem with its line; exits 1 if there is any. It reads the files the config
names (keys, secrets) but does not fetch auth.jwt.jwks_url: serve fetches it at
start, waits up to 5s, and refuses to start without it.`,
	"simulate": `usage: fairgate simulate --policy P [--policy P…] (--traffic T | --traffic-file FILE) [--out chart.svg] [--until D] [--hold D] [--seed N] [--steps]

Runs limits on a virtual clock against described traffic and prints what each
admitted; with --out it draws the remaining capacity as an SVG, with a legend
naming each line. A clause 'estimate E cost N' is a measured cost (an LLM
completion's tokens): admission charges E, and the request is settled at N
when it ends; the table and the chart show the units charged and settled
and the debt (remaining below zero), in the policy's unit=; --steps lists
every admission and settlement (docs/cost.md).`,
	"replay": `usage: fairgate replay [--config proposed.yaml] [--format table|csv|json] [--log-format json|common|auto] [--tenant-field F] [--top N] [--reorder-window 60s] [--cost-field F [--estimate-field F]] ACCESS_LOG…

Runs recorded traffic through a proposed config on a virtual clock and
reports, per tenant and per policy, how many requests would have been limited
(docs/replay.md explains each count). Several logs (one per server) are
merged by time; the lines of each are put in time order within the reorder
window. With --cost-field a request of a class with a measured cost is
charged its estimate and settled at the cost its line gives, and the report
adds each tenant's cost and deepest debt. Flags may come before or after the
logs.`,
	"version": `usage: fairgate version

Prints the version, the commit it was built from and the Go version.`,
	"help": `usage: fairgate help [COMMAND]

Prints fairgate's usage, or a command's (as fairgate COMMAND --help does).`,
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// usageError writes one line to stderr saying what is wrong with a
// command's arguments, and where its help is; it returns the exit code 2.
// A message of several lines (errors.Join) is joined into one with "; ".
func usageError(stderr io.Writer, cmd string, err error) int {
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	help := "fairgate " + cmd + " --help"
	if cmd == "" || cmd == "help" {
		help = "fairgate help"
	}
	prefix := "fairgate " + cmd + ": "
	if cmd == "" {
		prefix = "fairgate: "
	}
	fmt.Fprintf(stderr, "%s%s (see %s)\n", prefix, strings.TrimPrefix(msg, cmd+": "), help)
	return 2
}

// parseFlags parses a command's flags: -h or --help prints the command's
// help to stdout (code 0); a bad flag is one line on stderr (code 2). ok
// is false when the command is to return code. Flags may come after the
// arguments (`replay access.log --format csv`), as they may before; after
// "--" every argument is an argument, even one starting with '-'.
func parseFlags(fs *flag.FlagSet, cmd string, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	switch err := parseInterspersed(fs, args); {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "%s\n\nFlags:\n", about[cmd])
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0, false
	case err != nil:
		return usageError(stderr, cmd, err), false
	}
	return 0, true
}

// parseInterspersed parses args with fs, flags and arguments in any order
// (the flag package stops at the first argument): the flags, each with its
// value when it takes one as the next argument, are parsed first, then
// every other argument; after "--" all are arguments. fs.Args() are the
// arguments, in their order.
func parseInterspersed(fs *flag.FlagSet, args []string) error {
	var flags, rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") || i+1 == len(args) {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				flags, i = append(flags, args[i+1]), i+1 // its value, whatever it looks like
			}
		}
	}
	return fs.Parse(append(append(flags, "--"), rest...))
}
