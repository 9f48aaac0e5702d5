// Command creditflow is the one binary of the project: the stream processor
// (run), the embedded demo (demo), the embedded broker (broker), the CPU
// reference scorer (scorer), replays (replay), the offline tools (compute,
// score, attention), the sample printer (inspect) and version.
//
// Each command is a file here (run: run.go and runstages.go): it reads its flags into a checked
// configuration (a command line it refuses is a usage error: one line,
// exit status 2) and runs it through the packages that do the work —
// processors/stage, processors/replay, harness/demo, harness/learn,
// monitor, processors/health, internal/settings, scorer/policyfollow.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/creditflow/creditflow/internal/gcpolicy"
)

// command is one subcommand: a short help line and its entry point.
type command struct {
	help string
	run  func(args []string) error
}

// commands is filled by the files of this package, one file per subcommand.
var commands = map[string]command{}

func register(name, help string, run func(args []string) error) {
	commands[name] = command{help: help, run: run}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: creditflow <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].help)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'creditflow <command> -h' for the flags of a command.")
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		return
	}
	gcpolicy.Apply() // every command; GOGC and GOMEMLIMIT win (README, Running against a real cluster)
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "creditflow: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	err := c.run(os.Args[2:])
	if err == nil || errors.Is(err, flag.ErrHelp) { // -h printed the help already
		return
	}
	var ue usageError
	if errors.As(err, &ue) { // a command line the command refuses: one line, exit status 2
		fmt.Fprintf(os.Stderr, "creditflow %s: %s\n", os.Args[1], strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "creditflow %s: %v\n", os.Args[1], err)
	var stopped interrupted
	if errors.As(err, &stopped) {
		os.Exit(130) // stopped by Ctrl-C (or SIGTERM), as a shell reports SIGINT
	}
	os.Exit(1)
}

// interrupted is the error of a run the user stopped (Ctrl-C or SIGTERM)
// after it had started: exit status 130, after what the command reports
// of the run so far.
type interrupted struct{ err error }

func (e interrupted) Error() string {
	if errors.Is(e.err, context.Canceled) { // stopped while waiting: nothing more to say
		return "interrupted (Ctrl-C)"
	}
	return e.err.Error() + " (Ctrl-C)"
}

func (e interrupted) Unwrap() error { return e.err }

// stoppedBy returns err as interrupted when ctx, a command's signal
// context, has been cancelled (Ctrl-C or SIGTERM), else err.
func stoppedBy(ctx context.Context, err error) error {
	var already interrupted
	if err == nil || ctx.Err() == nil || errors.As(err, &already) {
		return err
	}
	return interrupted{err}
}
