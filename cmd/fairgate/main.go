// Command fairgate is the fairgate service: per-tenant rate limiting for
// multi-tenant APIs. Run `fairgate help` for its commands.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	_ "time/tzdata" // config time zones work on machines without /usr/share/zoneinfo

	"github.com/fairgate/fairgate/internal/app"
	"github.com/fairgate/fairgate/internal/auth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	// The first signal starts the graceful stop (the drain, then the
	// requests in flight); a second one ends the process at once, by the
	// signal's default action, as a second Ctrl-C does elsewhere.
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `fairgate: per-tenant rate limiting for multi-tenant APIs.

Usage:
  fairgate serve [--config FILE] [--config-poll 1s] [--listen 127.0.0.1:8080] [--store memory://|redis://HOST:PORT[/DB]|rediss://…|redis-cluster://H:P,H:P] [--store-timeout 100ms] [--log-format json|text] [--log-level debug|info|warn|error] [more flags: fairgate serve --help]
  fairgate check-config [FILE]
  fairgate simulate --policy 'limit=60,period=1m,burst=60,algorithm=token_bucket' [--policy …] --traffic 'burst 60 at 1s; steady 0.5/s from 40s to 90s' [--out chart.svg]
  fairgate replay --config proposed.yaml [--format table|csv|json] [--log-format json|common] [--tenant-field user] ACCESS_LOG…
  fairgate version
  fairgate help [COMMAND]

fairgate COMMAND --help (or fairgate help COMMAND) prints a command's usage
and flags.

serve runs the decision API until SIGTERM or Ctrl-C (a second one stops it
at once, without the drain), with the policy of the
config file (default: the embedded examples/fairgate.yaml), reloaded when the
file changes and on SIGHUP. Flags default to the environment variables
FAIRGATE_CONFIG, FAIRGATE_CONFIG_POLL, FAIRGATE_LISTEN, FAIRGATE_STORE,
FAIRGATE_STORE_TIMEOUT, FAIRGATE_LOG_FORMAT and FAIRGATE_LOG_LEVEL. Its logs
are JSON lines at level info unless --log-format text or --log-level says
otherwise.

check-config prints every problem of a config file, with its line, and exits
1 if there is any.

simulate runs limits on a virtual clock against described traffic and prints
what each admitted; with --out it draws the remaining capacity as an SVG. A
measured cost ('estimate 1000 cost 500..4000') shows its debt over time.

replay runs recorded traffic through a proposed config on a virtual clock and
reports, per tenant and per policy, how many requests would have been limited;
--cost-field settles measured costs at the cost each line gives.

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
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "-h", "-help", "--help":
		cmd = "help"
	case "--version", "-version":
		cmd = "version"
	}
	if cmd == "help" {
		switch {
		case len(rest) == 0 || len(rest) == 1 && (isHelp(rest[0]) || rest[0] == "help"):
			fmt.Fprint(stdout, usage)
			return 0
		case len(rest) > 1:
			return usageError(stderr, "help", fmt.Errorf("one command at most, not %q", rest))
		case about[rest[0]] == "":
			return usageError(stderr, "help", unknownCommand(rest[0]))
		}
		// fairgate help CMD is fairgate CMD --help.
		cmd, rest = rest[0], []string{"--help"}
	}
	// A command whose only argument asks for help prints its help (the
	// flag commands also take -h among other flags).
	if len(rest) == 1 && isHelp(rest[0]) && cmd != "serve" && cmd != "simulate" && cmd != "replay" && about[cmd] != "" {
		fmt.Fprintln(stdout, about[cmd])
		return 0
	}
	switch cmd {
	case "version":
		if len(rest) > 0 {
			return usageError(stderr, cmd, fmt.Errorf("takes no arguments, not %q", rest))
		}
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "check-config":
		if len(rest) > 1 || len(rest) == 1 && strings.HasPrefix(rest[0], "-") {
			return usageError(stderr, cmd, fmt.Errorf("takes one file and no flags, not %q", rest))
		}
		path := ""
		if len(rest) == 1 {
			path = rest[0]
		}
		c, _, err := app.LoadConfig(path, nil)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok (%d plans, %d classes, %d routes, %d anonymous routes, %d tenants)\n",
			c.File, len(c.Policy.Plans), len(c.Policy.Classes), len(c.Policy.Routes), len(c.Policy.Anonymous), len(c.Policy.Tenants))
		if j := c.Auth.JWT; j != nil && j.JWKSURL != "" {
			fmt.Fprintf(stdout, "note: auth.jwt.jwks_url %s was not fetched: serve fetches it at start, waits up to %v, and refuses to start without it\n", j.JWKSURL, auth.DefaultJWKSTimeout)
		}
		return 0
	case "simulate":
		return simulate(rest, stdout, stderr)
	case "replay":
		return replayCommand(rest, stdout, stderr)
	case "serve":
		var flags strings.Builder
		c, err := app.ParseServe(rest, &flags)
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "%s\n\nFlags:\n%s", about["serve"], flags.String())
			return 0
		}
		if err != nil {
			return usageError(stderr, "serve", err)
		}
		log := app.Logger(stderr, c.LogLevel, c.LogFormat)
		if err := app.Serve(ctx, c, log, ready); err != nil {
			fmt.Fprintln(stderr, "fairgate:", err)
			return 1
		}
		return 0
	}
	return usageError(stderr, "", unknownCommand(cmd))
}

// unknownCommand is the error of a command fairgate does not have.
func unknownCommand(name string) error {
	return fmt.Errorf("unknown command %q: the commands are %s", name, strings.Join(commands, ", "))
}
