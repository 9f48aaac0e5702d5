package pod_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These tests install the pod (and the creditflow package) with pip into fresh virtual
// environments, as scorer/gpupod/README.md tells a user to, and run what they installed from a
// folder outside the repository.
//
// Every fresh environment sees an existing site-packages folder through a .pth file in
// its own site-packages: pip counts the packages there as installed, so torch (about
// 900 MB, and 3 GB of CUDA libraries) is not downloaded again on every run, while
// everything else (setuptools for the isolated builds) comes from the package index as
// it would for a user. The installed cfpod and creditflow land in the fresh
// environment's own site-packages, which the tests check.

// projectSite is the site-packages folder of the project's Python environment.
func projectSite(t *testing.T, py string) string {
	t.Helper()
	out, err := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").Output()
	if err != nil {
		t.Fatalf("site-packages of %s: %v", py, err)
	}
	return strings.TrimSpace(string(out))
}

// freshVenv makes a virtual environment in dir from py's base interpreter that also
// sees the packages in site (see above), and returns its interpreter.
func freshVenv(t *testing.T, py, dir, site string) string {
	t.Helper()
	if out, err := exec.Command(py, "-m", "venv", dir).CombinedOutput(); err != nil {
		t.Fatalf("python -m venv %s: %v\n%s", dir, err, out)
	}
	vpy := filepath.Join(dir, "bin", "python")
	own := projectSite(t, vpy)
	if err := os.WriteFile(filepath.Join(own, "creditflow-seen-packages.pth"), []byte(site+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return vpy
}

// sources copies what pip needs of python/ and scorer/gpupod into a temporary folder (pip builds
// in the source tree; the checkout stays clean) and returns the two folders.
func sources(t *testing.T) (pkg, pod string) {
	t.Helper()
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	dst := t.TempDir()
	pkg, pod = filepath.Join(dst, "python"), filepath.Join(dst, "pod")
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "python"), pkg).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"pyproject.toml", "README.md", "cfpod"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(root, "scorer", "gpupod", f), pod).CombinedOutput(); err != nil {
			t.Fatalf("copy: %v\n%s", err, out)
		}
	}
	return pkg, pod
}

func pipInstall(t *testing.T, vpy string, args ...string) {
	t.Helper()
	cmd := exec.Command(vpy, append([]string{"-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input"}, args...)...)
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runIn runs the command in a folder outside the repository and returns its output.
func runIn(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestPipInstallPodAndPackage: `pip install ./python "./scorer/gpupod[kafka]"` in a fresh
// virtual environment, with pip's isolated build (setuptools from the package index) and
// with --no-build-isolation (the environment's setuptools, upgraded first): `python -m cfpod --help` and
// the cfpod console script run, and cfpod, its policy follower and creditflow import from
// the environment's own site-packages, the package with its schemas.
func TestPipInstallPodAndPackage(t *testing.T) {
	py := findPython(t)
	site := projectSite(t, py)
	pkg, pod := sources(t)
	for _, mode := range []struct {
		name  string
		extra []string
	}{{"isolated build", nil}, {"no build isolation", []string{"--no-build-isolation", "--check-build-dependencies"}}} {
		t.Run(mode.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "venv")
			vpy := freshVenv(t, py, dir, site)
			if mode.extra != nil {
				// The venv's own setuptools (65.5 on Python 3.11) cannot build a wheel without
				// the wheel package; the pyprojects ask for 70.1.
				pipInstall(t, vpy, "-U", "setuptools>=70.1")
			}
			pipInstall(t, vpy, append(mode.extra, pkg, pod+"[kafka]")...)
			for _, c := range [][]string{{vpy, "-m", "cfpod", "--help"}, {filepath.Join(dir, "bin", "cfpod"), "--help"}} {
				if out := runIn(t, c[0], c[1:]...); !strings.HasPrefix(out, "usage: cfpod") || !strings.Contains(out, "--policy-brokers") {
					t.Fatalf("%v printed\n%s", c, out)
				}
			}
			out := runIn(t, vpy, "-c", `import os, sys, sysconfig
import cfpod, cfpod.__main__, cfpod.follow, creditflow
from creditflow import wire
own = sysconfig.get_paths()["purelib"]
for m in (cfpod, cfpod.follow, creditflow):
    assert os.path.dirname(os.path.dirname(m.__file__)) == own, (m.__file__, own)
assert issubclass(cfpod.follow.PolicyFollower, creditflow.kafka.PolicyWatcher)
print(wire.codec("Sample").writers["aeddc48"].fingerprint.hex())`)
			if !strings.Contains(out, "accbea26abfb68c4") {
				t.Fatalf("the installed package lacks the v1 Sample schema: %s", out)
			}
		})
	}
}

// TestPodWithoutNumpy: torch 2 wheels do not bring numpy, and the pod's code must not need
// it. A fresh virtual environment sees every package of the project's environment but numpy
// (through a folder of links to them, as above), installs the pod and the creditflow package
// with pip without their dependencies (the environment has torch and uvicorn; creditflow's own
// numpy is what must stay out: the pod imports only its torch Llama, creditflow.llama, which
// needs torch alone), and runs the pod's tests of everything that reads or writes checkpoints,
// serves, decodes bodies or attends there, with the installed cfpod (the tests are copied out
// of the checkout).
func TestPodWithoutNumpy(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of CPU")
	}
	py := findPython(t)
	site := projectSite(t, py)
	links := filepath.Join(t.TempDir(), "site-without-numpy")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(site)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		n := e.Name()
		if n == "numpy" || strings.HasPrefix(n, "numpy-") || strings.HasPrefix(n, "numpy.") || strings.HasSuffix(n, ".pth") {
			continue
		}
		if err := os.Symlink(filepath.Join(site, n), filepath.Join(links, n)); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "venv")
	vpy := freshVenv(t, py, dir, links)
	pkg, pod := sources(t)
	pipInstall(t, vpy, "--no-deps", pkg, pod)
	out := runIn(t, vpy, "-c", `import torch
try:
    import numpy
except ModuleNotFoundError:
    print("no numpy")
import cfpod.__main__, cfpod.server, cfpod.bench
print("torch", torch.__version__)`)
	if !strings.Contains(out, "no numpy") || !strings.Contains(out, "torch 2.") {
		t.Fatalf("the environment without numpy:\n%s", out)
	}
	tests := filepath.Join(t.TempDir(), "run")
	if err := os.MkdirAll(tests, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", "tests", tests).CombinedOutput(); err != nil {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	var mods []string
	for _, m := range []string{"safetensors", "model", "server", "reload", "binary", "protocol", "precision", "attention"} {
		mods = append(mods, "tests/test_"+m+".py")
	}
	cmd := exec.Command(vpy, append([]string{"-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore::UserWarning"}, mods...)...)
	cmd.Dir = tests
	cmd.Env = append(os.Environ(), "CFPOD_TEST_DEVICE=cpu", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=", "OMP_NUM_THREADS=2")
	res, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(res), " passed") {
		t.Fatalf("the pod's tests without numpy: %v\n%s", err, res)
	}
	t.Logf("%s", lastLines(res, 3))
	// The tests imported the installed cfpod, not a copy next to them.
	where := runIn(t, vpy, "-c", "import cfpod; print(cfpod.__file__)")
	if !strings.HasPrefix(where, dir) {
		t.Fatalf("cfpod imported from %s, want the environment %s", where, dir)
	}
}
