package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/promreg"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
)

// LoadResult is what a load run measured. JSON names are stable.
type LoadResult struct {
	demo.Summary
	// TokensForwarded and TokensRowByRow are the scorer's token counts with
	// prefix sharing and without; PrefixSharing is their ratio
	// (row-by-row / forwarded: how many times less work sharing does).
	TokensForwarded float64 `json:"scorer_tokens_forwarded"`
	TokensRowByRow  float64 `json:"scorer_tokens_row_by_row"`
	PrefixSharing   float64 `json:"prefix_sharing_ratio"`
}

func loadCmd(args []string) (int, error) {
	o := demo.Defaults()
	o.Bad = 0
	o.Groups = 60
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.IntVar(&o.Groups, "groups", o.Groups, "prompts (groups) to run")
	fs.IntVar(&o.GroupSize, "group-size", o.GroupSize, "trajectories per prompt (G)")
	fs.StringVar((*string)(&o.Method), "method", string(o.Method), "credit assignment: lapo (search-QA workload) or attnsr (ALFWorld-shaped workload)")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "partitions per topic")
	fs.IntVar(&o.Scorers, "scorers", o.Scorers, "scorer servers behind the client")
	fs.IntVar(&o.MaxAhead, "max-ahead", o.MaxAhead, "groups the rollout producer may run ahead of the trainer")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "workload seed")
	fs.DurationVar(&o.Timeout, "timeout", 10*time.Minute, "give up after this long")
	asJSON := fs.Bool("json", false, "end with one JSON object on the last line of stdout")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	o.Credit.Method = o.Method
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	last := time.Time{}
	o.Progress = func(p demo.Progress) {
		if time.Since(last) > 5*time.Second {
			cmdutil.Stderrf("load: groups in %d, out %d, samples %d/%d (%.0fs)", p.GroupsIn, p.GroupsOut, p.SamplesOut, p.Expected, p.Elapsed.Seconds())
			last = time.Now()
		}
	}
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	sum, err := demo.Run(ctx, o)
	res := LoadResult{Summary: sum}
	res.TokensForwarded = counter(reg, "creditflow_scorer_tokens_forwarded_total")
	res.TokensRowByRow = counter(reg, "creditflow_scorer_tokens_row_by_row_total")
	if res.TokensForwarded > 0 {
		res.PrefixSharing = cmdutil.Round3(res.TokensRowByRow / res.TokensForwarded)
	}
	w := os.Stdout
	fmt.Fprintf(w, "method            %s, %d groups of %d, %d partitions, %d scorer servers\n", o.Method, o.Groups, o.GroupSize, o.Partitions, o.Scorers)
	fmt.Fprintf(w, "samples           %d (lost %d, duplicates %d) in %.1fs\n", sum.SamplesOut, sum.Lost, sum.Duplicates, sum.Seconds)
	fmt.Fprintf(w, "throughput        %.2f trajectories/s, %.0f sample tokens/s\n", sum.TrajPerSecond, sum.TokensPerSec)
	fmt.Fprintf(w, "latency           p50 %.0f ms, p99 %.0f ms (group produced → sample consumed)\n", sum.LatencyP50Ms, sum.LatencyP99Ms)
	if res.TokensForwarded > 0 {
		fmt.Fprintf(w, "prefix sharing    %.0f tokens forwarded for %.0f row-by-row: %.2fx\n", res.TokensForwarded, res.TokensRowByRow, res.PrefixSharing)
	} else {
		fmt.Fprintf(w, "prefix sharing    not reported by the scorer for this method\n")
	}
	fmt.Fprintf(w, "scorer requests   %d\n", sum.ScorerRequests)
	if *asJSON {
		cmdutil.PrintJSON(res)
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// counter sums a counter family of reg (0 when absent).
func counter(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	return promreg.Sum(mfs, name, nil)
}
