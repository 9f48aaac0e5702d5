package learn

// The command side of learn: a run with progress lines, comparisons of
// methods over seeds and their reports, and a run's summary as text.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/creditflow/creditflow/harness/demo"
)

// RunWithProgress is Run with a line on stderr at the start and a progress
// line per evaluated version.
func RunWithProgress(ctx context.Context, o Options, stderr io.Writer) (Summary, error) {
	where := "embedded broker"
	if len(o.Brokers) > 0 {
		where = "brokers " + strings.Join(o.Brokers, ",")
	}
	fmt.Fprintf(stderr, "creditflow learn: %s, seed %d, %d steps of %d groups of %d, %d workers, %s\n",
		o.Method, o.Seed, o.Steps, o.GroupsPerStep, o.GroupSize, o.Workers, where)
	o.OnEval = func(e Eval) {
		fmt.Fprintf(stderr, "  version %3d  step %3d  trajectories %5d  held-out success %.3f  reward %.3f  (%.0fs)\n",
			e.PolicyVersion, e.TrainerStep, e.Trajectories, e.SuccessRate, e.RewardMean, e.Seconds)
	}
	return Run(ctx, o)
}

// CompareRuns is a comparison of methods over seeds (`creditflow learn
// --compare`, docs/learn.md).
type CompareRuns struct {
	Methods []string  // arms: METHOD[+VARIANT...] (arms.go)
	Noises  []float64 // a noise sweep: each arm at each of these judge noises (nil: the options' noise)
	Seeds   int       // seeds 1..Seeds of each method
	Earlier []Summary // runs to take instead of running them again, when made with the same method, seed and settings
	Out     string    // write <Out>.json, <Out>.svg and <Out>.md
	Dir     string    // keep each run's files in Dir/<method>-seed<s> ("": a temporary folder)
	JSON    bool      // end with the comparison as one JSON line on stdout
}

// Run runs the comparison from o (each run with its method and seed),
// writes its files, and prints its table to stdout; progress goes to
// stderr.
func (r CompareRuns) Run(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	var c Comparison
	noises := r.Noises
	if len(noises) == 0 {
		noises = []float64{o.JudgeNoise}
	}
	for _, q := range noises {
		o := o
		o.JudgeNoise = q
		if err := r.runArms(ctx, o, &c, len(r.Noises) > 0, stderr); err != nil {
			return err
		}
	}
	return r.write(c, stdout, stderr)
}

// runArms runs (or takes from Earlier) every arm on seeds 1..Seeds with o,
// adding the runs to c; in a sweep each run's folder also names its noise.
func (r CompareRuns) runArms(ctx context.Context, o Options, c *Comparison, sweep bool, stderr io.Writer) error {
	dir := r.Dir
	for _, m := range r.Methods {
	seed:
		for s := 1; s <= r.Seeds; s++ {
			oo, err := WithArm(o, m)
			if err != nil {
				return err
			}
			oo.Seed = s
			var refused []string // why runs of this arm and seed were not taken, said when none is
			for _, e := range r.Earlier {
				ok, why := e.Matches(oo)
				if !ok && e.Arm() == m && e.Seed == s {
					refused = append(refused, why)
				}
				if ok {
					fmt.Fprintf(stderr, "%s seed %d: taken from --from (held-out success %.3f → %.3f)\n", m, s, e.InitialSuccess, e.FinalSuccess)
					c.Runs = append(c.Runs, e)
					continue seed
				}
			}
			for _, why := range refused {
				fmt.Fprintf(stderr, "%s seed %d: not taken from --from: %s\n", m, s, why)
			}
			if dir != "" {
				name := fmt.Sprintf("%s-seed%d", m, s)
				if sweep {
					name = fmt.Sprintf("%s-noise%g-seed%d", m, o.JudgeNoise, s)
				}
				oo.Dir = filepath.Join(dir, name)
			}
			if len(o.Brokers) > 0 { // one run's topics per run on a shared cluster
				oo.Topics = demo.Topics(fmt.Sprintf("creditflow-learn-%d-%s-%d", time.Now().Unix(), m, s))
				oo.GroupID = oo.Topics.Trajectories[:strings.LastIndex(oo.Topics.Trajectories, ".")]
			}
			sum, err := RunWithProgress(ctx, oo, stderr)
			if err != nil {
				return fmt.Errorf("%s seed %d: %w", m, s, err)
			}
			fmt.Fprintf(stderr, "%s seed %d: held-out success %.3f → %.3f in %.0fs\n", m, s, sum.InitialSuccess, sum.FinalSuccess, sum.Seconds)
			c.Runs = append(c.Runs, sum)
		}
	}
	return nil
}

// write writes the comparison's files to r.Out.* and prints its table.
func (r CompareRuns) write(c Comparison, stdout, stderr io.Writer) error {
	out := r.Out
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out+".json", append(js, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeFigures(c, out); err != nil {
		return err
	}
	fmt.Fprint(stdout, c.Markdown())
	fmt.Fprintf(stderr, "wrote %s.svg, %s.md, %s.json\n", out, out, out)
	if r.JSON {
		fmt.Fprintln(stdout, strings.ReplaceAll(string(js), "\n", ""))
	}
	return nil
}

// writeFigures writes <out>.svg and <out>.md of c.
func writeFigures(c Comparison, out string) error {
	for ext, body := range map[string]string{".svg": c.SVG(c.Title()), ".md": c.Markdown()} {
		if err := os.WriteFile(out+ext, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// WriteReports writes the figure and table of each comparison .json again
// from its runs: every published number comes from the JSON by one command
// (`creditflow learn --report`). It says what it wrote on stderr.
func WriteReports(files []string, stderr io.Writer) error {
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("--report: %w", err)
		}
		var c Comparison
		if err := json.Unmarshal(b, &c); err != nil || len(c.Runs) == 0 {
			return fmt.Errorf("--report: %s holds no comparison's runs", f)
		}
		out := strings.TrimSuffix(f, ".json")
		if err := writeFigures(c, out); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s.md, %s.svg from %s\n", out, out, f)
	}
	return nil
}

// WriteText writes the summary of a run as `creditflow learn` prints it.
func (s Summary) WriteText(w io.Writer) {
	fmt.Fprintf(w, "method            %s on %s, seed %d\n", s.Method, s.World, s.Seed)
	fmt.Fprintf(w, "held-out success  %.3f → %.3f (%d policy versions, %d trainer steps, %.0fs)\n",
		s.InitialSuccess, s.FinalSuccess, s.PolicyVersions, s.TrainerSteps, s.Seconds)
	var line []string
	for _, e := range s.Eval {
		line = append(line, fmt.Sprintf("v%d %.2f", e.PolicyVersion, e.SuccessRate))
	}
	fmt.Fprintf(w, "by version        %s\n", strings.Join(line, "  "))
	fmt.Fprintf(w, "trajectories      %d published, %d trained on, lost %d, stale %d (+%d skipped by the trainer), duplicates dropped by the trainer %d\n",
		s.Trajectories, s.TrainerTrajectories, s.Lost, s.StaleSamples, s.StaleSkipped, s.DuplicatesDropped)
	fmt.Fprintf(w, "unused            %d of %d published trajectories were never trained on (%.1f%%)\n",
		s.UnusedTrajectories, s.Trajectories, 100*s.UnusedShare)
	if n := len(s.Steps); n > 0 {
		l := s.Steps[n-1]
		fmt.Fprintf(w, "last step         loss %.4f, clip fraction %.3f, grad norm %.3f (%d clip hits in %d steps), KL to μ %.4f, entropy %.3f",
			l.Loss, l.ClipFraction, l.GradNorm, clipHits(s.Steps), n, l.ApproxKL, l.Entropy)
		if l.ValueLoss != nil {
			fmt.Fprintf(w, ", value loss %.4f", *l.ValueLoss)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "samples by policy_version         %s\n", formatVersionCounts(s.SamplesByPolicyVersion))
	fmt.Fprintf(w, "samples by scorer_policy_version  %s\n", formatVersionCounts(s.SamplesByScorerPolicyVersion))
	if s.ReloadSecondsP50 != nil {
		fmt.Fprintf(w, "reload            p50 %.2fs (announcement → first sample scored with that version at the trainer, %d versions)\n",
			*s.ReloadSecondsP50, len(s.ReloadSeconds))
	}
	fmt.Fprintf(w, "trainer waits     %.0f%% of the time for samples\n", 100*s.TrainerWaitShare)
	fmt.Fprintf(w, "bound by          %s\n", s.Bound)
	if s.ProcessorKills+s.WorkerKills > 0 {
		fmt.Fprintf(w, "chaos             %d SIGKILL of the processor, %d of a worker: lost %d, duplicates dropped %d\n",
			s.ProcessorKills, s.WorkerKills, s.Lost, s.DuplicatesDropped)
	}
}

func clipHits(steps []TrainerStep) int {
	n := 0
	for _, s := range steps {
		n += s.GradClipHits
	}
	return n
}

func formatVersionCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, _ := strconv.Atoi(keys[i])
		b, _ := strconv.Atoi(keys[j])
		return a < b
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("v%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
