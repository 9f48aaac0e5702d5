package stage_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/scorer/cpumodel"
	"github.com/creditflow/creditflow/scorer/local"
)

// TestPythonClientsEndToEnd: a rollout worker written with the creditflow
// Python package (librdkafka via confluent-kafka) publishes trajectories; both
// stages process them; a Python trainer reads and checks every sample.
func TestPythonClientsEndToEnd(t *testing.T) {
	py := pyenvtest.Python(t)
	e := newEnv(t, 2, nil)
	e.runStages(t, local.New(cpumodel.Tiny()))
	ctx, b := e.ctx, e.b

	dir, _ := filepath.Abs("../../examples/python")
	addr := strings.Join(b.Addrs(), ",")
	worker := exec.Command(py, "rollout_worker.py", "--brokers", addr, "--groups", "3", "--group-size", "4")
	worker.Dir = dir
	worker.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "..", "..", "python")) // the package from the checkout
	if out, err := worker.CombinedOutput(); err != nil {
		t.Fatalf("rollout worker: %v\n%s", err, out)
	}
	tctx, tcancel := context.WithTimeout(ctx, 150*time.Second)
	defer tcancel()
	trainer := exec.CommandContext(tctx, py, "trainer.py", "--brokers", addr, "--expect", "12", "--timeout", "120")
	trainer.Dir = dir
	trainer.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "..", "..", "python")) // the package from the checkout
	out, err := trainer.CombinedOutput()
	if err != nil {
		t.Fatalf("trainer: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"samples": 12`) || !strings.Contains(string(out), `"invalid": 0`) {
		t.Fatalf("trainer summary: %s", out)
	}
}
