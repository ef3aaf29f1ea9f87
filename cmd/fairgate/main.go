// Command fairgate is the fairgate service: per-tenant rate limiting for
// multi-tenant APIs. Run `fairgate help` for its commands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	_ "time/tzdata" // config time zones work on machines without /usr/share/zoneinfo

	"github.com/fairgate/fairgate/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `fairgate: per-tenant rate limiting for multi-tenant APIs.

Usage:
  fairgate serve [--config FILE] [--config-poll 1s] [--listen 127.0.0.1:8080] [--store memory://|redis://HOST:PORT[/DB]|rediss://…|redis-cluster://H:P,H:P] [--store-timeout 100ms]
  fairgate check-config [FILE]
  fairgate simulate --policy 'limit=60,period=1m,burst=60,algorithm=token_bucket' [--policy …] --traffic 'burst 60 at 1s; steady 0.5/s from 40s to 90s' [--out chart.svg]
  fairgate replay --config proposed.yaml [--format table|csv|json] [--log-format json|common] [--tenant-field user] ACCESS_LOG…
  fairgate version
  fairgate help

serve runs the decision API until SIGTERM or Ctrl-C, with the policy of the
config file (default: the embedded examples/fairgate.yaml), reloaded when the
file changes and on SIGHUP. Flags default to the environment variables
FAIRGATE_CONFIG, FAIRGATE_CONFIG_POLL, FAIRGATE_LISTEN, FAIRGATE_STORE and
FAIRGATE_STORE_TIMEOUT.

check-config prints every problem of a config file, with its line, and exits
1 if there is any.

simulate runs limits on a virtual clock against described traffic and prints
what each admitted; with --out it draws the remaining capacity as an SVG.

replay runs recorded traffic through a proposed config on a virtual clock and
reports, per tenant and per policy, how many requests would have been limited.

version prints the version, the commit it was built from and the Go version.
`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runReady(ctx, args, stdout, stderr, nil)
}

func runReady(ctx context.Context, args []string, stdout, stderr io.Writer, ready func(string)) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "check-config":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "help") {
			fmt.Fprintln(stdout, "usage: fairgate check-config [FILE]\n\nValidates FILE (default: the embedded examples/fairgate.yaml) and prints every problem with its line; exits 1 if there is any.")
			return 0
		}
		if len(args) > 2 || len(args) == 2 && strings.HasPrefix(args[1], "-") {
			fmt.Fprintf(stderr, "fairgate: check-config takes one file and no flags, not %q (fairgate check-config --help)\n", args[1:])
			return 2
		}
		path := ""
		if len(args) == 2 {
			path = args[1]
		}
		c, _, err := app.LoadConfig(path, nil)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok (%d plans, %d classes, %d routes, %d anonymous routes, %d tenants)\n",
			c.File, len(c.Policy.Plans), len(c.Policy.Classes), len(c.Policy.Routes), len(c.Policy.Anonymous), len(c.Policy.Tenants))
		return 0
	case "simulate":
		return simulate(args[1:], stdout, stderr)
	case "replay":
		return replayCommand(args[1:], stdout, stderr)
	case "serve":
		c, err := app.ParseServe(args[1:], stderr)
		if err != nil {
			fmt.Fprintln(stderr, "fairgate:", err)
			return 2
		}
		log := app.Logger(stderr, c.Env.LogLevel, c.Env.LogFormat)
		if err := app.Serve(ctx, c, log, ready); err != nil {
			fmt.Fprintln(stderr, "fairgate:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "fairgate: unknown command %q\n\n%s", args[0], usage)
	return 2
}
