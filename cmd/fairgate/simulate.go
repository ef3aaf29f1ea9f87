package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fairgate/fairgate/internal/sim"
)

// policyFlags collects repeated --policy flags.
type policyFlags []sim.Policy

func (p *policyFlags) String() string { return fmt.Sprint(len(*p), " policies") }

func (p *policyFlags) Set(s string) error {
	pol, err := sim.ParsePolicy(s)
	if err != nil {
		return err
	}
	*p = append(*p, pol)
	return nil
}

// simulate runs `fairgate simulate`.
func simulate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fairgate simulate", flag.ContinueOnError)
	var policies policyFlags
	fs.Var(&policies, "policy", "a limit such as 'limit=60,period=1m,burst=60,algorithm=token_bucket', with or without ',concurrency=4' (requests in flight) and ',unit=tokens' (what it counts, for the labels), or 'concurrency=4' alone; repeat to compare")
	traffic := fs.String("traffic", "", "the traffic, such as 'burst 60 at 1s; burst 25 at 30s; steady 0.5/s from 40s to 90s', a clause optionally ending 'hold 200ms' (how long its requests are in flight), 'cost 5' (what each costs), or 'estimate 1000 cost 500..4000' (a measured cost: admission charges the estimate, the request is settled at its true cost when it ends)")
	trafficFile := fs.String("traffic-file", "", "a file holding the traffic, a clause a line")
	out := fs.String("out", "", "write the chart here as SVG")
	until := fs.Duration("until", 0, "how long to run (default: 30s past the last request's end)")
	hold := fs.Duration("hold", 0, "how long each request is in flight (for a concurrency layer; a measured request is settled when it ends) where its clause gives no 'hold D'")
	seed := fs.Uint64("seed", 1, "the seed of the numbers drawn for a range such as 'cost 500..4000': the same seed, the same requests")
	steps := fs.Bool("steps", false, "list every request and settlement, one a line, instead of a line per stretch of time")
	if code, ok := parseFlags(fs, "simulate", args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "simulate", fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	if len(policies) == 0 {
		return usageError(stderr, "simulate", errors.New("give at least one --policy"))
	}
	text := *traffic
	if *trafficFile != "" {
		if text != "" {
			return usageError(stderr, "simulate", errors.New("give --traffic or --traffic-file, not both"))
		}
		b, err := os.ReadFile(*trafficFile)
		if err != nil {
			return usageError(stderr, "simulate", err)
		}
		text = string(b)
	}
	reqs, err := sim.ParseTraffic(text, *seed)
	if err != nil {
		return usageError(stderr, "simulate", err)
	}
	if *hold < 0 {
		return usageError(stderr, "simulate", fmt.Errorf("--hold %v: want a positive duration", *hold))
	}
	holds := false
	for i := range reqs {
		if reqs[i].Hold == 0 {
			reqs[i].Hold = *hold
		}
		holds = holds || reqs[i].Hold > 0
	}
	for _, p := range policies {
		if p.Concurrency > 0 && !holds {
			return usageError(stderr, "simulate", fmt.Errorf("policy %q has a concurrency layer, and no request is ever in flight: give --hold 200ms, or 'hold 200ms' after a traffic clause", p.Text))
		}
		if err := p.CheckTraffic(reqs); err != nil {
			return usageError(stderr, "simulate", err)
		}
	}
	end := *until
	if end <= 0 {
		var last time.Duration
		for _, a := range reqs {
			last = max(last, a.At+a.Hold)
		}
		end = last + 30*time.Second
	}
	step := max(end/2000, time.Millisecond)
	var runs []sim.Run
	for _, p := range policies {
		runs = append(runs, sim.Simulate(p, reqs, end, step))
	}
	table := sim.Table
	if *steps {
		table = func(w io.Writer, runs []sim.Run, _ time.Duration) error { return sim.Steps(w, runs) }
	}
	if err := table(stdout, runs, end); err != nil {
		fmt.Fprintln(stderr, "fairgate simulate:", err)
		return 1
	}
	if *out != "" {
		f, err := os.Create(*out)
		if err == nil {
			err = sim.SVG(f, runs, end)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "fairgate simulate:", err)
			return 1
		}
		fmt.Fprintf(stdout, "\nchart: %s\n", *out)
	}
	return 0
}
