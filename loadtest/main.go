// Command loadtest holds the reliability and load harnesses of creditflow:
//
//	go run ./loadtest chaos      [--kills 5] [--groups 40] [--method lapo|attnsr] [--graceful] [--scorer-process] [--kill-scorers] [--broker-outages N] [--json]
//	go run ./loadtest rebalance  [--replicas 3] [--groups 60] [--json]
//	go run ./loadtest load       [--groups 60] [--method lapo|attnsr] [--json]
//	go run ./loadtest bench      [--records 2000] [--sizes search-qa,8k,32k,128k,attnsr-k30] [--method lapo|attnsr] [--scaling] [--brokers ...] [--json]
//
// What chaos and rebalance show: the same deterministic input is run once
// through an uninterrupted `creditflow run` (the reference) and once under
// faults, on one embedded broker that outlives every processor; every
// sample of the faulted run is compared byte for byte with the reference.
// A run passes when no expected sample is lost (lost = 0), no sample
// differs from the reference (mismatched = 0) and every sample is valid for
// a trainer; identical duplicate copies are counted, not failed (see
// docs/guarantees.md). chaos SIGKILLs (or, with --graceful, SIGTERMs) and
// restarts the processor at random moments (and optionally scorer processes
// and the broker's connections); rebalance runs several replicas in one
// consumer group that leave (SIGTERM, SIGKILL) and join under load. The processors are child
// processes of the creditflow binary, built once per run.
//
// load runs the embedded demo pipeline and prints throughput, latency and
// the scorer's prefix sharing; it has no pass/fail.
//
// bench measures what the stages themselves cost: a Kafka passthrough, the
// score stage against an instant scorer fixture and the advantage stage, on
// the same records and broker, per trajectory size; the latency the
// advantage stage adds; bytes held per open group member (docs/performance.md).
//
// With --json the last line of stdout is one JSON object. chaos and
// rebalance exit with status 1 when a sample was lost, mismatched or
// invalid.
//
// The bench is package loadtest/bench (this command only dispatches to it);
// what every command shares is in loadtest/internal/cmdutil.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/harness/demo"
	"github.com/creditflow/creditflow/internal/gcpolicy"
	"github.com/creditflow/creditflow/loadtest/bench"
	"github.com/creditflow/creditflow/loadtest/internal/cmdutil"
	"github.com/creditflow/creditflow/vocab"
)

func usage() {
	fmt.Fprintln(os.Stderr, `usage: go run ./loadtest <command> [flags]

commands:
  chaos       kill and restart the processor (and scorers, broker connections) under load; compare with a reference
  rebalance   replicas in one consumer group leave and join under load; compare with a reference
  load        throughput and latency of the embedded pipeline
  bench       what the stages cost against a Kafka passthrough, per trajectory size; memory per open group

Run 'go run ./loadtest <command> -h' for the flags of a command.`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	gcpolicy.Apply() // as the creditflow binary does: the bench runs the stages as deployed
	var code int
	var err error
	switch os.Args[1] {
	case "chaos":
		code, err = chaosCmd(os.Args[2:])
	case "rebalance":
		code, err = rebalanceCmd(os.Args[2:])
	case "bench":
		code, err = bench.Cmd(os.Args[2:])
	case "load":
		code, err = loadCmd(os.Args[2:])
	case bench.ScorerCmd:
		code, err = bench.ServeScorer(os.Args[2:])
	case bench.BrokerCmd:
		code, err = bench.ServeBroker(os.Args[2:])
	case scorerServeCmd:
		code, err = scorerServe(os.Args[2:])
	case "-h", "--help", "help":
		usage()
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "loadtest: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadtest %s: %v\n", os.Args[1], err)
	}
	os.Exit(code)
}

func printWarnings(m map[string]int) {
	if len(m) == 0 {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintln(os.Stdout, "child log warnings/errors (count: message):")
	for _, k := range keys {
		fmt.Fprintf(os.Stdout, "  %5d  %s\n", m[k], k)
	}
}

func nopLog() zerolog.Logger { return zerolog.Nop() }

// Workload is what every harness run shares: the input, the topics' shape,
// the time limit, and where the binary and the logs live.
type Workload struct {
	Groups       int           // prompts of G = 5 trajectories
	Partitions   int           // partitions per topic
	Method       vocab.Method  // lapo | attnsr
	Seed         uint64        // workload and schedule seed
	ProduceEvery time.Duration // one group is produced every ProduceEvery
	Timeout      time.Duration // for each phase (reference, faulted run)
	Bin          string        // prebuilt creditflow binary ("" builds one)
	Dir          string        // scratch directory for the binary and the logs ("" makes one)
	Logf         func(format string, args ...any)
}

func (w *Workload) addFlags(fs *flag.FlagSet) {
	fs.IntVar(&w.Groups, "groups", w.Groups, "prompts of 5 trajectories each")
	fs.IntVar(&w.Partitions, "partitions", w.Partitions, "partitions per topic")
	fs.StringVar((*string)(&w.Method), "method", string(w.Method), "credit assignment: lapo or attnsr")
	fs.Uint64Var(&w.Seed, "seed", w.Seed, "seed of the workload and of the fault schedule")
	fs.DurationVar(&w.ProduceEvery, "produce-every", w.ProduceEvery, "produce one group every this long (steady input rate)")
	fs.DurationVar(&w.Timeout, "timeout", w.Timeout, "give up on each phase (reference, faulted run) after this long")
	fs.StringVar(&w.Bin, "bin", w.Bin, "prebuilt creditflow binary (default: build ./cmd/creditflow)")
	fs.StringVar(&w.Dir, "dir", w.Dir, "scratch directory for the binary and the child logs (default: a new temp dir)")
}

// runCommand parses the flags of a fault harness, runs it, prints the result
// (and with --json one JSON line), and turns the outcome into an exit status.
func runCommand[R any](fs *flag.FlagSet, args []string, w *Workload, name string,
	run func(context.Context) (R, error), print func(R), comparison func(R) Comparison) (int, error) {
	asJSON := fs.Bool("json", false, "end with one JSON object on the last line of stdout")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	w.Logf = cmdutil.Stderrf
	ctx, stop := cmdutil.SignalContext()
	defer stop()
	res, err := run(ctx)
	print(res)
	if *asJSON {
		cmdutil.PrintJSON(res)
	}
	if err != nil {
		return 1, err
	}
	if c := comparison(res); !c.OK() {
		return 1, fmt.Errorf("%s: %d lost, %d mismatched, %d invalid samples", name, c.Lost, c.Mismatched, c.Invalid)
	}
	return 0, nil
}

// printOutcome prints what a faulted run delivered.
func printOutcome(c Comparison, dead int, deadBy map[string]int, unexpectedExits int, children string) {
	w := os.Stdout
	fmt.Fprintf(w, "samples           expected %d, seen %d, lost %d, mismatched %d, duplicates %d, invalid %d, unexpected %d\n",
		c.Expected, c.Seen, c.Lost, c.Mismatched, c.Duplicates, c.Invalid, c.Unexpected)
	fmt.Fprintf(w, "dead letters      %d (%s)\n", dead, demo.FormatCounts(deadBy))
	fmt.Fprintf(w, "unexpected exits  %d (%s that died without being stopped; restarted)\n", unexpectedExits, children)
}

// printTail prints the ids that went wrong, the children's warnings and where their logs are.
func printTail(c Comparison, warnings map[string]int, logs string) {
	w := os.Stdout
	if len(c.LostIDs) > 0 {
		fmt.Fprintf(w, "lost (first)      %v\n", c.LostIDs)
	}
	if len(c.BadIDs) > 0 {
		fmt.Fprintf(w, "mismatched        %v\n", c.BadIDs)
	}
	printWarnings(warnings)
	fmt.Fprintf(w, "logs              %s\n", logs)
}
