package chart

// Running the rendered scorer container (`python3 -m cfpod`) in the smoke
// test: the project's Python environment stands in for the image's, the
// checkout's python/ and scorer/gpupod/ for its installed packages.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

// podPython is how the smoke test runs a rendered `python3 -m cfpod`
// container: the project's Python environment (internal/pyenv, the one
// `creditflow pyenv` builds) with the checkout's packages on PYTHONPATH.
type podPython struct {
	python string   // the environment's interpreter
	path   string   // PYTHONPATH: the creditflow package and the cfpod package of the checkout
	roots  []string // directories the interpreter needs: the environment and its base Python
}

// findPodPython returns the project's Python environment, or nil where it
// cannot be had outside CI (the test then says so and stands `creditflow
// scorer` in for the pod); under CI=true that is a failure.
func findPodPython(t *testing.T) *podPython {
	t.Helper()
	py := pyenvtest.Optional(t)
	if py == "" {
		return nil
	}
	out, err := exec.Command(py, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)").Output()
	if err != nil {
		t.Fatalf("%s: %v", py, err)
	}
	roots := strings.Fields(string(out))
	if len(roots) != 2 {
		t.Fatalf("%s printed %q, want its prefix and base prefix", py, out)
	}
	root, err := filepath.Abs(repoRoot) // the pod runs in its own directory
	if err != nil {
		t.Fatal(err)
	}
	return &podPython{python: py, roots: roots,
		path: filepath.Join(root, "python") + string(os.PathListSeparator) + filepath.Join(root, "scorer", "gpupod")}
}

// env is the environment the pod's process gets on top of the container's.
// PYTHONDONTWRITEBYTECODE: the checkout is not the pod user's to write (the
// image's packages are compiled when it is built).
func (p *podPython) env() []string {
	return []string{"PYTHONPATH=" + p.path, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}
}

// readableBy reports whether uid (with gids) can start the interpreter and
// import what the pod imports. The environment is often built under the
// home directory of the user who ran `creditflow pyenv` (root's is 0700):
// in the image it belongs to the image and every user may read it.
func (p *podPython) readableBy(t *testing.T, uid, gid uint32, groups []uint32) bool {
	t.Helper()
	cmd := exec.Command(p.python, "-c", "import torch, uvicorn, cfpod.server, creditflow")
	cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=/tmp"}, p.env()...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("uid %d cannot run the Python environment in place (%v): %s", uid, err, lastLine(string(out)))
		return false
	}
	return true
}

// asUser wraps argv so that it runs as uid/gid/groups and sees the Python
// environment even where its directories are closed to that user: in a
// private mount namespace (nothing changes outside the process), each
// directory on the way to the environment that others may not search is
// covered with an empty searchable tmpfs holding bind mounts of just the
// environment's directories; then the process drops to the pod's user, as a
// container runtime starts the image's entrypoint. Everything else the pod
// reads (its volumes) keeps its owner and mode, so the pod's secrets are
// still read as the pod's user. Needs root and unshare(1)/setpriv(1) from
// util-linux; it reports why not otherwise.
func (p *podPython) asUser(work string, uid, gid uint32, groups []uint32, argv []string) ([]string, error) {
	for _, tool := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s (util-linux) not found: %w", tool, err)
		}
	}
	needs := append(append([]string{}, p.roots...), strings.Split(p.path, string(os.PathListSeparator))...)
	// The closed directories, outermost first, and the paths under each.
	var closed []string
	under := map[string][]string{}
	for _, n := range needs {
		real, err := filepath.EvalSymlinks(n)
		if err == nil {
			real, err = filepath.Abs(real)
		}
		if err != nil {
			return nil, err
		}
		var chain []string
		for d := filepath.Dir(real); d != "/"; d = filepath.Dir(d) {
			chain = append([]string{d}, chain...)
		}
		for _, d := range chain {
			st, err := os.Stat(d)
			if err != nil {
				return nil, err
			}
			if st.Mode().Perm()&0o001 == 0 {
				if _, ok := under[d]; !ok {
					closed = append(closed, d)
				}
				under[d] = append(under[d], real)
				break // the cover of d makes everything below it searchable
			}
		}
	}
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for i, d := range closed {
		stash := filepath.Join(work, fmt.Sprintf("pyview-%d", i))
		if err := os.MkdirAll(stash, 0o700); err != nil {
			return nil, err
		}
		fmt.Fprintf(&sh, "mount --bind %q %q\nmount -t tmpfs -o mode=0755,size=1m pyview %q\n", d, stash, d)
		for _, n := range under[d] {
			rel, _ := filepath.Rel(d, n)
			fmt.Fprintf(&sh, "mkdir -p %q\nmount --bind %q %q\n", n, filepath.Join(stash, rel), n)
		}
	}
	gs := make([]string, len(groups))
	for i, g := range groups {
		gs[i] = fmt.Sprint(g)
	}
	fmt.Fprintf(&sh, `exec setpriv --reuid=%d --regid=%d --groups=%s --inh-caps=-all --bounding-set=-all -- "$@"`+"\n",
		uid, gid, strings.Join(append(gs, fmt.Sprint(gid)), ","))
	return append([]string{"unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", sh.String(), "cfpod"}, argv...), nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
