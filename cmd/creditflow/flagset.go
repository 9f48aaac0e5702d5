package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"

	"github.com/creditflow/creditflow/internal/settings"
)

// Flag groups: the concerns under which `creditflow <command> -h` lists
// flags, in this order. A flag gets its group where it is defined
// (flagSet.inGroup); TestEveryFlagHasAGroup fails for a flag defined
// outside a group, so a new flag cannot land unlisted.
const (
	groupGeneral       = "General"
	groupKafka         = "Kafka"
	groupTopics        = "Topics"
	groupScorer        = "Scorer"
	groupCredit        = "Credit assignment"
	groupLAPO          = "LAPO"
	groupAttnSR        = "AttnSR"
	groupWindows       = "Windows and limits"
	groupPolicy        = "Policy versions"
	groupSecurity      = "Security"
	groupObservability = "Observability"
	groupUngrouped     = "Ungrouped flags (define them inside flagSet.inGroup)"
)

var groupOrder = []string{groupGeneral, groupKafka, groupTopics, groupScorer, groupCredit, groupLAPO, groupAttnSR,
	groupWindows, groupPolicy, groupSecurity, groupObservability}

// flagSet is a command's flag.FlagSet with a usage text and flags listed by
// group. Parse errors (an unknown flag, a bad value) print one short line
// that points to -h instead of the whole flag list, and are usageErrors
// (exit status 2).
type flagSet struct {
	*flag.FlagSet
	usage string            // usage lines and description, printed above the flags
	group map[string]string // flag name → group
	order []string          // flag names in definition order
}

// usageError is a command line the command cannot parse (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef is a usageError with a formatted message: a flag value or a
// combination of flags the command refuses before it starts anything.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// asUsage makes err, when not nil, a usageError: the error of a check that
// looks only at the command line (flag values and their combinations).
func asUsage(err error) error {
	var ue usageError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	return usageError{err}
}

// newFlagSet starts the flags of command name. usage holds the usage
// line(s), a blank line and a short description.
func newFlagSet(name, usage string) *flagSet {
	f := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), usage: strings.TrimRight(usage, "\n"), group: map[string]string{}}
	f.FlagSet.Usage = f.printHelp
	return f
}

// inGroup defines, with define, flags that -h lists under group.
func (f *flagSet) inGroup(group string, define func()) {
	before := map[string]bool{}
	f.VisitAll(func(fl *flag.Flag) { before[fl.Name] = true })
	define()
	var added []string
	f.VisitAll(func(fl *flag.Flag) {
		if !before[fl.Name] {
			added = append(added, fl.Name)
		}
	})
	for _, n := range added {
		f.group[n] = group
	}
	f.order = append(f.order, added...)
}

// printHelp writes the usage text and the flags, grouped, to the output.
func (f *flagSet) printHelp() {
	w := f.Output()
	fmt.Fprintln(w, f.usage)
	byGroup := map[string][]*flag.Flag{}
	seen := map[string]bool{}
	for _, n := range f.order {
		byGroup[f.group[n]] = append(byGroup[f.group[n]], f.Lookup(n))
		seen[n] = true
	}
	f.VisitAll(func(fl *flag.Flag) {
		if !seen[fl.Name] {
			byGroup[groupUngrouped] = append(byGroup[groupUngrouped], fl)
		}
	})
	for _, g := range append(append([]string(nil), groupOrder...), groupUngrouped) {
		if len(byGroup[g]) == 0 {
			continue
		}
		sort.Slice(byGroup[g], func(i, j int) bool { return byGroup[g][i].Name < byGroup[g][j].Name })
		fmt.Fprintf(w, "\n%s:\n", g)
		for _, fl := range byGroup[g] {
			printFlag(w, fl)
		}
	}
}

// printFlag prints one flag the way flag.PrintDefaults does.
func printFlag(w io.Writer, fl *flag.Flag) {
	name, usage := flag.UnquoteUsage(fl)
	line := "  --" + fl.Name
	if name != "" {
		line += " " + name
	}
	line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
	if d := fl.DefValue; d != "" && d != "false" && d != "0" && d != "0s" {
		if name == "string" {
			line += fmt.Sprintf(" (default %q)", d)
		} else {
			line += fmt.Sprintf(" (default %s)", d)
		}
	}
	fmt.Fprintln(w, line)
}

// parse parses args (through settings.Load when withSettings is set: config
// file and environment too). -h prints the help and returns flag.ErrHelp;
// any other error, and an argument that is not a flag, is a usageError with
// one line pointing to -h.
func (f *flagSet) parse(args []string, withSettings bool) error {
	if withSettings {
		return f.parseWith(args, func(a []string) error { return settings.Load(f.FlagSet, a) })
	}
	return f.parseWith(args, f.FlagSet.Parse)
}

// parseWith is parse with a parsing function of the command's own (e.g.
// one that takes an optional flag value).
func (f *flagSet) parseWith(args []string, parse func([]string) error) error {
	out := f.Output()
	f.SetOutput(io.Discard) // the flag package would print the whole list on an error
	err := parse(args)
	f.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		f.printHelp()
		return err
	}
	if err == nil && f.NArg() > 0 { // no command takes positional arguments
		err = fmt.Errorf("unexpected argument %q (flags start with --)", f.Arg(0))
	}
	if err != nil {
		return usageError{fmt.Errorf("%s; run 'creditflow %s -h' for the flags", asGiven(err.Error(), args), f.Name())}
	}
	return nil
}

// flagInError finds the flag the flag package names in its error messages
// ("flag provided but not defined: -x", "invalid value … for flag -x: …",
// "flag needs an argument: -x").
var flagInError = regexp.MustCompile(`(defined: |flag |argument: )-([^\s:=]+)`)

// asGiven rewrites the flag package's error so that the flag reads as the
// user typed it (--bogus, not -bogus), and "unknown flag" for one that does
// not exist.
func asGiven(msg string, args []string) string {
	m := flagInError.FindStringSubmatchIndex(msg)
	if m == nil {
		return msg
	}
	name := msg[m[4]:m[5]]
	given := "-" + name
	for _, a := range args {
		if a == "--" {
			break
		}
		if n, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "="); n == name && strings.HasPrefix(a, "-") {
			given, _, _ = strings.Cut(a, "=")
			break
		}
	}
	if strings.HasPrefix(msg, "flag provided but not defined: ") {
		return "unknown flag " + given
	}
	return msg[:m[3]] + given + msg[m[5]:]
}
