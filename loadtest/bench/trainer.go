package bench

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// The trainer's end (docs/performance.md, Method): a trainer reads the
// samples topic with the Python package (SampleStream → to_torch batches);
// a bare confluent_kafka consumer reading the same records in the same run
// is its reference, as the passthroughs are the stages'; the trainer's
// floor is that consumer plus the tensors, built from views of each
// record's arrays (a trainer whose decoding costs nothing), as the stages'
// floors read and write what they do without working. Where fastavro is
// installed, the trainer also runs with fastavro decoding each sample (the
// well-kept library against the package's own decoder, same records).

//go:embed trainer.py
var benchTrainerScript []byte

// benchTrainerBatch is the trainer's batch: 64 samples, whole groups.
const benchTrainerBatch = 64

// trainerResult is what the phase measured, or why it did not run.
type trainerResult struct {
	PerS         float64 `json:"trainer_per_s"`
	ConsumerPerS float64 `json:"trainer_consumer_per_s"`
	FloorPerS    float64 `json:"trainer_floor_per_s"`    // 0 where the samples came as chunks
	FastavroPerS float64 `json:"trainer_fastavro_per_s"` // 0 where fastavro is missing
	// CPU time of the reading thread per sample, over the same spans
	CPUUs         float64 `json:"trainer_cpu_us_per_sample"`
	ConsumerCPUUs float64 `json:"trainer_consumer_cpu_us_per_sample"`
	FloorCPUUs    float64 `json:"trainer_floor_cpu_us_per_sample"`
	FastavroCPUUs float64 `json:"trainer_fastavro_cpu_us_per_sample"`
	Tensors       string  `json:"tensors"` // torch, or numpy where torch is missing
	Rounds        int     `json:"rounds"`  // runs of each reader, pooled
	// trainer / floor of each round (empty where the samples came as chunks)
	VsFloorByRound []float64 `json:"vs_floor_by_round"`
	Note           string    `json:"-"`
}

// pythonPackageDir is the directory holding the creditflow Python package
// (the repository's python/), looked for from the working directory up.
func pythonPackageDir() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "python", "creditflow", "__init__.py")); err == nil {
			return filepath.Join(dir, "python"), true
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", false
		}
		dir = up
	}
}

// trainer reads n samples of topic with the Python package and with a bare
// consumer, repeat times each, in turns. A missing interpreter, package or
// confluent-kafka is a note, not an error.
func (e *benchEnv) trainer(ctx context.Context, python, topic string, n, repeat int) (trainerResult, error) {
	pkg, ok := pythonPackageDir()
	if !ok {
		return trainerResult{Note: "skipped: the creditflow Python package (python/ of the repository) is not under the working directory; run the bench from the repository"}, nil
	}
	probe := exec.CommandContext(ctx, python, "-c", "import confluent_kafka, numpy")
	if out, err := probe.CombinedOutput(); err != nil {
		return trainerResult{Note: fmt.Sprintf("skipped: %s cannot import confluent_kafka and numpy (build the project's Python environment: creditflow pyenv): %s",
			python, strings.TrimSpace(lastLine(string(out), err)))}, nil
	}
	script, err := os.CreateTemp("", "bench_trainer_*.py")
	if err != nil {
		return trainerResult{}, err
	}
	defer os.Remove(script.Name())
	if _, err := script.Write(benchTrainerScript); err != nil {
		script.Close()
		return trainerResult{}, err
	}
	script.Close()
	cmd := exec.CommandContext(ctx, python, script.Name(), strings.Join(e.brokers, ","), topic,
		fmt.Sprint(n), fmt.Sprint(max(1, repeat)), fmt.Sprint(benchTrainerBatch), e.name("trainer"))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkg)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return trainerResult{}, fmt.Errorf("trainer phase (%s): %w: %s", python, err, strings.TrimSpace(lastLine(stderr.String(), err)))
	}
	var r trainerResult
	if err := json.Unmarshal([]byte(lastLine(stdout.String(), nil)), &r); err != nil {
		return trainerResult{}, fmt.Errorf("trainer phase: unreadable result %q: %w", stdout.String(), err)
	}
	return r, nil
}

// printTrainer prints the trainer phase's lines of size s.
func printTrainer(w io.Writer, s SizeResult) {
	switch {
	case s.TrainerNote != "":
		fmt.Fprintf(w, "%-11s trainer: %s\n", "", s.TrainerNote)
	case s.TrainerPerS > 0:
		fmt.Fprintf(w, "%-11s trainer (Python, SampleStream → %s): %.0f samples/s, %.2f of a bare consumer's %.0f/s",
			"", s.TrainerTensors, s.TrainerPerS, s.TrainerVsConsumer, s.TrainerConsumerPerS)
		if s.TrainerFloorPerS > 0 { // none where the samples came as chunks
			fmt.Fprintf(w, "; its floor (views and tensors, no decoding) %.0f/s, %.2f", s.TrainerFloorPerS, s.TrainerFloorVsConsumer)
		}
		fmt.Fprintln(w)
		if s.TrainerFloorPerS > 0 {
			spread := ""
			if by := s.TrainerVsFloorByRound; len(by) > 0 {
				spread = fmt.Sprintf("; %d rounds, each %.2f–%.2f", s.TrainerRounds, slices.Min(by), slices.Max(by))
			}
			fmt.Fprintf(w, "%-11s trainer / its floor: %.2f (target ≥ 0.80%s); in CPU per sample %.2f (%.1f µs, floor %.1f µs)",
				"", s.TrainerVsFloor, spread, s.TrainerVsFloorCPU, s.TrainerCPUUs, s.TrainerFloorCPUUs)
			if s.TrainerFastavroPerS > 0 {
				fmt.Fprintf(w, "; decoding with fastavro instead: %.0f samples/s, %.2f of the floor, %.1f µs CPU",
					s.TrainerFastavroPerS, s.TrainerFastavroVsFloor, s.TrainerFastavroCPUUs)
			}
			fmt.Fprintln(w)
		}
	}
}

// lastLine is the last non-empty line of s (or err's text when s has none).
func lastLine(s string, err error) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if l := lines[len(lines)-1]; l != "" {
		return l
	}
	if err != nil {
		return err.Error()
	}
	return ""
}
