package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fairgate/fairgate/internal/app"
	"github.com/fairgate/fairgate/internal/replay"
)

// replayCommand runs `fairgate replay`.
func replayCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fairgate replay", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "the proposed config (default: the embedded example)")
	format := fs.String("format", "table", "report format: table, csv or json")
	logFormat := fs.String("log-format", "auto", "log format: json (JSON lines), common (common or combined), or auto")
	tenantField := fs.String("tenant-field", "", "where the tenant is: a JSON key (default tenant), or user, ident or host in the common format (default user)")
	top := fs.Int("top", 50, "tenants listed in the table (0: all)")
	window := fs.Duration("reorder-window", replay.DefaultReorderWindow, "how far behind the latest line of its file a line may be and still be decided in time order (nginx writes a line when its request ends); lines further behind are decided where they stand and counted (0: file order)")
	costField := fs.String("cost-field", "", "where each line gives its request's true cost, for classes with a measured cost: a JSON key or dotted path (usage.total_tokens), or bytes or last in the common format; such a request is charged its estimate and settled at that cost (without: charged its class's cap, as a front that does not settle)")
	estimateField := fs.String("estimate-field", "", "where each line gives its request's estimate, as --cost-field names its cost (default: the class's default estimate)")
	if code, ok := parseFlags(fs, "replay", args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() == 0 {
		return usageError(stderr, "replay", errors.New("name at least one access log"))
	}
	switch *format {
	case "table", "csv", "json":
	default:
		return usageError(stderr, "replay", fmt.Errorf("format %q: want table, csv or json", *format))
	}
	if *window < 0 {
		return usageError(stderr, "replay", fmt.Errorf("reorder window %v: want 0 or more, such as 60s", *window))
	}
	if err := checkCostFields(*costField, *estimateField, *logFormat); err != nil {
		return usageError(stderr, "replay", err)
	}
	cfg, _, err := app.LoadConfig(*cfgPath, nil)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *cfgPath == "" {
		// Said on stderr, so that the CSV and JSON on stdout stay clean.
		fmt.Fprintln(stderr, "fairgate replay: no --config given: replaying through the embedded example config (examples/fairgate.yaml); give --config proposed.yaml to try yours")
	}
	var inputs []replay.Input
	var total int64
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(stderr, "fairgate replay:", err)
			return 1
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			total += st.Size()
		}
		inputs = append(inputs, replay.Input{Name: name, R: f})
	}
	clock := &replay.Clock{}
	lim, err := replay.NewLimiter(cfg.Policy, clock)
	if err != nil {
		fmt.Fprintln(stderr, "fairgate replay:", err)
		return 1
	}
	o := replay.Options{Format: replay.Format(*logFormat), TenantField: *tenantField, ReorderWindow: *window, CostField: *costField, EstimateField: *estimateField}
	if *window == 0 {
		o.ReorderWindow = -1 // none: Options' zero is the default
	}
	if isTerminal(stderr) {
		o.Progress = progressBar(stderr, total)
	}
	start := time.Now()
	rep, err := replay.Run(context.Background(), lim, clock, inputs, o)
	if o.Progress != nil {
		fmt.Fprintf(stderr, "\r%s\r", strings.Repeat(" ", 72))
	}
	if err != nil {
		fmt.Fprintln(stderr, "fairgate replay:", err)
		return 1
	}
	switch *format {
	case "csv":
		err = rep.WriteCSV(stdout)
	case "json":
		err = rep.WriteJSON(stdout)
	default:
		err = rep.WriteTable(stdout, *top)
		fmt.Fprintf(stdout, "\nreplayed in %v\n", time.Since(start).Round(time.Millisecond))
	}
	if err != nil {
		fmt.Fprintln(stderr, "fairgate replay:", err)
		return 1
	}
	return 0
}

// checkCostFields checks --cost-field and --estimate-field: a dotted path
// of names, or for common logs bytes or last; an estimate only with a
// cost, and not from the same field.
func checkCostFields(cost, estimate, logFormat string) error {
	switch {
	case estimate != "" && cost == "":
		return errors.New("--estimate-field needs --cost-field: an estimate is settled at the true cost")
	case estimate != "" && estimate == cost:
		return fmt.Errorf("--estimate-field and --cost-field both name %q: the estimate and the true cost are two fields", cost)
	}
	for i, f := range []string{cost, estimate} {
		flag := []string{"cost-field", "estimate-field"}[i]
		if f == "" {
			continue
		}
		if slices.Contains(strings.Split(f, "."), "") {
			return fmt.Errorf("--%s %q: want a key or a dotted path such as usage.total_tokens", flag, f)
		}
		if logFormat == string(replay.FormatCommon) && f != "bytes" && f != "last" {
			return fmt.Errorf("--%s %q: want bytes (the response size) or last (the line's last field) for the common format", flag, f)
		}
	}
	return nil
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar returns a Progress func drawing a bar of bytes read out of
// total on w, at most ten times a second.
func progressBar(w io.Writer, total int64) func(int64) {
	var last time.Time
	return func(read int64) {
		if time.Since(last) < 100*time.Millisecond || total <= 0 {
			return
		}
		last = time.Now()
		frac := min(float64(read)/float64(total), 1)
		n := int(frac * 40)
		fmt.Fprintf(w, "\r[%s%s] %3.0f%%  %d MB", strings.Repeat("#", n), strings.Repeat("-", 40-n), frac*100, read>>20)
	}
}
