package learn

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

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

// FindPython returns a Python interpreter that imports torch and
// confluent_kafka: the system one first (Debian's python3-torch and
// python3-confluent-kafka are installed for it), then python3 on PATH.
func FindPython() (string, error) {
	var tried []string
	for _, c := range []string{"/usr/bin/python3", "python3"} {
		p, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		tried = append(tried, p)
		if exec.Command(p, "-c", "import torch, confluent_kafka, numpy").Run() == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Python with torch, confluent_kafka and numpy (tried %v): on Debian, apt-get install python3-torch python3-confluent-kafka python3-numpy", tried)
}

// pythonEnv is the environment of the Python children: the package on
// PYTHONPATH, one thread each (the loop's processes share the machine), and
// OpenBLAS preloaded where installed (Debian's torch otherwise computes with
// the reference BLAS, many times slower; apt-get install libopenblas0-pthread).
func pythonEnv(pkgRoot string) []string {
	env := []string{"PYTHONPATH=" + pkgRoot, "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "PYTHONUNBUFFERED=1",
		// glibc keeps freed memory: fresh pages are slow on small virtual machines
		"MALLOC_MMAP_THRESHOLD_=33554432", "MALLOC_TRIM_THRESHOLD_=100000000000", "MALLOC_TOP_PAD_=268435456"}
	const openblas = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"
	if _, err := os.Stat(openblas); err == nil && os.Getenv("LD_PRELOAD") == "" {
		env = append(env, "LD_PRELOAD="+openblas)
	}
	return env
}
