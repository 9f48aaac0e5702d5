package hfcheck_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/client"
)

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// creditflowBinary builds cmd/creditflow once per test run.
func creditflowBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "creditflow-hfcheck-bin-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "creditflow")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/creditflow")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/creditflow: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// runCommand runs the creditflow binary with stdin and returns its output
// lines.
func runCommand(t *testing.T, stdin []byte, args ...string) [][]byte {
	t.Helper()
	cmd := exec.Command(creditflowBinary(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("creditflow %v: %v\n%s", args, err, se.String())
	}
	var lines [][]byte
	sc := bufio.NewScanner(&so)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	return lines
}

// TestCommandsMatchTransformers runs the creditflow score (each statistic)
// and creditflow attention commands on two of the models, as a user would,
// and compares their output with transformers'.
func TestCommandsMatchTransformers(t *testing.T) {
	f := getFixture(t)
	for _, name := range []string{"Llama-3.2-1B", "Qwen2.5-7B-Instruct"} {
		t.Run(name, func(t *testing.T) {
			m := f.model(t, name)
			ref := m.ref["float32"]
			base := []string{"--model", m.Dir, "--max-context", strconv.Itoa(maxContext)}
			got := make([][]float64, len(m.cases))
			byStat := map[string][]int{}
			for i, rc := range m.cases {
				byStat[rc.stat] = append(byStat[rc.stat], i)
			}
			for stat, idx := range byStat {
				var in bytes.Buffer
				for _, i := range idx {
					for _, r := range m.cases[i].rows {
						line := map[string]any{"context": r.Context, "target": r.Target, "span": r.Span[:], "temperature": r.Temperature}
						if r.ReferenceContext != nil {
							line["reference_context"] = r.ReferenceContext
						}
						b, _ := json.Marshal(line)
						in.Write(append(b, '\n'))
					}
				}
				out := runCommand(t, in.Bytes(), append([]string{"score", "--statistic", stat}, base...)...)
				k := 0
				for _, i := range idx {
					for range m.cases[i].rows {
						if k >= len(out) {
							t.Fatalf("score --statistic %s: %d lines", stat, len(out))
						}
						var s struct{ Score *float64 }
						if err := json.Unmarshal(out[k], &s); err != nil || s.Score == nil {
							t.Fatalf("score line %q: %v", out[k], err)
						}
						got[i] = append(got[i], *s.Score)
						k++
					}
				}
			}
			checkScores(t, "float32 (creditflow score)", scoreDiffs(t, m.cases, got, ref.Scores), tolScore)

			var in bytes.Buffer
			for _, j := range m.jobs {
				steps := make([]map[string]any, len(j.Steps))
				for k, s := range j.Steps {
					steps[k] = map[string]any{"action": s.Action[:], "observation": s.Observation[:]}
				}
				b, _ := json.Marshal(map[string]any{"tokens": j.Tokens, "steps": steps, "layers": j.Layers})
				in.Write(append(b, '\n'))
			}
			out := runCommand(t, in.Bytes(), append([]string{"attention"}, base...)...)
			if len(out) != len(m.jobs) {
				t.Fatalf("attention: %d lines for %d jobs", len(out), len(m.jobs))
			}
			for j, line := range out {
				var res struct {
					Layers []struct {
						Layer  int
						AA, AO [][]float64
					}
				}
				if err := json.Unmarshal(line, &res); err != nil {
					t.Fatal(err)
				}
				gs := make([]scorer.StepGraph, len(res.Layers))
				for l, L := range res.Layers {
					gs[l] = scorer.StepGraph{Layer: L.Layer, AA: L.AA, AO: L.AO}
				}
				checkGraphs(t, "float32 (creditflow attention)", graphDiff(t, gs, ref, j), tolGraph)
			}
		})
	}
}

// TestScorerCommandMatchesTransformers runs creditflow scorer (the Go
// scorer over HTTP) on one model with --max-context and compares its
// answers, through the protocol client, with transformers'.
func TestScorerCommandMatchesTransformers(t *testing.T) {
	f := getFixture(t)
	m := f.model(t, "Qwen3-8B")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(creditflowBinary(t), "scorer", "--model", m.Dir, "--max-context", strconv.Itoa(maxContext),
		"--listen", addr, "--log-level", "warn")
	exited, logs := startProcess(t, cmd, "scorer")
	url := "http://" + addr
	for deadline := time.Now().Add(time.Minute); ; {
		if resp, err := http.Get(url + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("creditflow scorer exited:\n%s", logs.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("creditflow scorer did not answer /healthz within a minute:\n%s", logs.String())
		}
	}
	c, err := client.New([]string{url}, client.WithRequestTimeout(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	compareHTTP(t, c, m, m.cases, m.ref["float32"], "float32 (creditflow scorer)", tolScore, tolGraph)
}

// startProcess starts cmd with its output kept, and at the end of the test
// stops it (SIGTERM, then SIGKILL after 20 s) and logs its output when the
// test failed. It returns a channel closed when the process has exited, and
// the output.
func startProcess(t *testing.T, cmd *exec.Cmd, what string) (exited chan struct{}, logs *lockedBuffer) {
	t.Helper()
	logs = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", what, logs.String())
		}
	})
	return exited, logs
}
