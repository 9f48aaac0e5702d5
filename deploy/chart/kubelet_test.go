package chart

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// writeVolume lays out a Secret or ConfigMap volume as the kubelet's atomic
// writer does: the files in a timestamped directory, ..data linking to it,
// and a link per file through ..data. Files get mode (defaultMode, 0644 when
// unset); with fsGroup, group fsGroup and group read added, the directories
// setgid.
func writeVolume(t *testing.T, dir string, src map[string][]byte, items []corev1.KeyToPath, defaultMode *int32, fsGroup *int64) {
	t.Helper()
	files := map[string][]byte{}
	modes := map[string]os.FileMode{}
	mode := os.FileMode(0o644)
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if len(items) == 0 {
		for k, v := range src {
			files[k], modes[k] = v, mode
		}
	}
	for _, it := range items {
		v, ok := src[it.Key]
		if !ok {
			t.Fatalf("volume %s: key %s missing", dir, it.Key)
		}
		files[it.Path], modes[it.Path] = v, mode
		if it.Mode != nil {
			modes[it.Path] = os.FileMode(*it.Mode)
		}
	}
	ts := "..2026_01_01_00_00_00.000000001"
	if err := os.MkdirAll(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	gid := -1
	if fsGroup != nil {
		gid = int(*fsGroup)
	}
	for name, b := range files {
		p := filepath.Join(dir, ts, name)
		m := modes[name]
		if fsGroup != nil {
			m |= 0o440
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
		if gid >= 0 && os.Geteuid() == 0 {
			if err := os.Chown(p, 0, gid); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, ts)} {
		if gid >= 0 && os.Geteuid() == 0 {
			if err := os.Chown(d, 0, gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, 0o755|os.ModeSetgid); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// writeClaim fills a PersistentVolumeClaim's volume with files (paths
// relative to its root), as a writer job running as root leaves it:
// directories 0755, files 0644.
func writeClaim(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// openDir is a temporary directory every user may traverse (the processes
// run as uid 65532).
func openDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/" && p != "."; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
