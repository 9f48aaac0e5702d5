// Package helm_test runs the deployment module's tests (deploy/: the chart's
// render, schema, pod security and smoke tests, and the daemonless image
// build) from the main module, so that `go test ./...` covers them. They live
// in a module of their own so that the Kubernetes API types, the pod security
// admission evaluator and go-containerregistry stay out of the main go.mod.
package helm_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestDeployModule(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the deployment module's tests build images and start processes")
	}
	dir, err := filepath.Abs(filepath.Join("..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "test", "./...")
	cmd.Dir = dir
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	t.Logf("go test ./... in deploy/:\n%s", out)
	if err != nil {
		t.Fatalf("the deployment module's tests failed: %v", err)
	}
}
