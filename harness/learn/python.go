package learn

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/creditflow/creditflow/internal/pyenv"
	"github.com/creditflow/creditflow/python"
)

// writePackage writes the creditflow Python package (with the loop's starting
// checkpoint) under dir/python and returns that folder, for PYTHONPATH.
func writePackage(dir string) (string, error) {
	root := filepath.Join(dir, "python")
	err := fs.WalkDir(python.Package, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(root, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := python.Package.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	return root, err
}

// StartCheckpoint is where writePackage put the starting checkpoint (policy
// version 0) of world below the package root: the world's own
// (creditflow/learn/start-<world>) where it has one, else the shared one
// (creditflow/learn/start).
func startCheckpoint(pkgRoot, world string) string {
	own := filepath.Join(pkgRoot, "creditflow", "learn", "start-"+world)
	if st, err := os.Stat(own); err == nil && st.IsDir() {
		return own
	}
	return filepath.Join(pkgRoot, "creditflow", "learn", "start")
}

// PythonEnvVar names an interpreter to run the loop's Python ends with instead
// of the project's environment; it must import torch, confluent_kafka and numpy.
const PythonEnvVar = "CREDITFLOW_PYTHON"

// FindPython returns the interpreter of the loop's workers, trainer and
// evaluator: $CREDITFLOW_PYTHON when set, else the project's Python environment
// (internal/pyenv, python/requirements.lock), which it builds first when it is
// missing, saying so on log (a few minutes and about 6 GB, once).
func FindPython(ctx context.Context, log io.Writer) (string, error) {
	if p := os.Getenv(PythonEnvVar); p != "" {
		if out, err := exec.CommandContext(ctx, p, "-c", "import torch, confluent_kafka, numpy").CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s=%s cannot import torch, confluent_kafka and numpy: %v\n%s", PythonEnvVar, p, err, out)
		}
		return p, nil
	}
	if py, err := pyenv.Python(); err == nil {
		return py, nil
	}
	fmt.Fprintf(log, "creditflow learn: the project's Python environment is not built yet; building it (set %s to use another interpreter)\n", PythonEnvVar)
	return pyenv.Ensure(ctx, log)
}

// pythonEnv is the environment of the Python children run by python: the
// package on PYTHONPATH, one thread each (the loop's processes share the
// machine). With Debian's /usr/bin/python3 (CREDITFLOW_PYTHON), OpenBLAS is
// preloaded where installed: Debian's torch otherwise computes with the
// reference BLAS, many times slower; PyTorch's own wheels carry their BLAS.
func pythonEnv(pkgRoot, python string) []string {
	env := []string{"PYTHONPATH=" + pkgRoot, "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "PYTHONUNBUFFERED=1",
		// glibc keeps freed memory: fresh pages are slow on small virtual machines
		"MALLOC_MMAP_THRESHOLD_=33554432", "MALLOC_TRIM_THRESHOLD_=100000000000", "MALLOC_TOP_PAD_=268435456"}
	const openblas = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
	if _, err := os.Stat(openblas); err == nil && python == "/usr/bin/python3" && os.Getenv("LD_PRELOAD") == "" {
		env = append(env, "LD_PRELOAD="+openblas)
	}
	return env
}
