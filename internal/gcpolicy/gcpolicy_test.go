package gcpolicy

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// restore puts the process's GC settings back after a test.
func restore(t *testing.T) {
	pct, lim := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	debug.SetGCPercent(pct)
	debug.SetMemoryLimit(lim)
	t.Cleanup(func() { debug.SetGCPercent(pct); debug.SetMemoryLimit(lim) })
}

func cgroupDir(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCgroupLimit(t *testing.T) {
	for _, c := range []struct {
		name  string
		files map[string]string
		want  int64
		ok    bool
	}{
		{"v2 limit", map[string]string{"memory.max": "4294967296\n"}, 4 << 30, true},
		{"v2 no limit", map[string]string{"memory.max": "max\n"}, 0, false},
		{"v1 limit", map[string]string{"memory/memory.limit_in_bytes": "2147483648\n"}, 2 << 30, true},
		{"v1 no limit", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"v2 before v1", map[string]string{"memory.max": "1073741824", "memory/memory.limit_in_bytes": "2147483648"}, 1 << 30, true},
		{"garbage", map[string]string{"memory.max": "lots"}, 0, false},
		{"zero", map[string]string{"memory.max": "0"}, 0, false},
		{"no cgroup files", nil, 0, false},
	} {
		got, ok := cgroupLimit(cgroupDir(t, c.files))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func env(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

// Without GOGC and GOMEMLIMIT: the default percentage, and 90% of the
// container's limit as the soft limit.
func TestApplyDefaults(t *testing.T) {
	restore(t)
	p := apply(env(nil), cgroupDir(t, map[string]string{"memory.max": "1000000000"}))
	want := Policy{Percent: DefaultPercent, PercentFrom: "default", Limit: 900000000, LimitFrom: "cgroup"}
	if p != want {
		t.Fatalf("policy %+v, want %+v", p, want)
	}
	if got := debug.SetGCPercent(DefaultPercent); got != DefaultPercent {
		t.Fatalf("the runtime's GC percentage is %d, want %d", got, DefaultPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != 900000000 {
		t.Fatalf("the runtime's memory limit is %d, want 900000000", got)
	}
	if s := p.String(); s != "GC percentage 200 (default), memory limit 858 MiB (cgroup)" {
		t.Fatalf("String() = %q", s)
	}
}

// GOGC and GOMEMLIMIT win: Apply reports what the runtime has and changes
// nothing.
func TestApplyOperatorSettingsWin(t *testing.T) {
	restore(t)
	debug.SetGCPercent(75) // what the runtime read from GOGC=75
	debug.SetMemoryLimit(3 << 30)
	p := apply(env(map[string]string{"GOGC": "75", "GOMEMLIMIT": "3GiB"}), cgroupDir(t, map[string]string{"memory.max": "1000000000"}))
	want := Policy{Percent: 75, PercentFrom: "GOGC", Limit: 3 << 30, LimitFrom: "GOMEMLIMIT"}
	if p != want {
		t.Fatalf("policy %+v, want %+v", p, want)
	}
	if got := debug.SetGCPercent(75); got != 75 {
		t.Fatalf("the runtime's GC percentage is %d, want 75", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 3<<30 {
		t.Fatalf("the runtime's memory limit is %d, want %d", got, 3<<30)
	}
	debug.SetGCPercent(-1) // GOGC=off
	if p := apply(env(map[string]string{"GOGC": "off"}), t.TempDir()); p.Percent != -1 || p.LimitFrom != "none" || p.String() != "GC percentage off (GOGC), memory limit none (none)" {
		t.Fatalf("GOGC=off: %+v %q", p, p)
	}
	if got := debug.SetGCPercent(100); got != -1 {
		t.Fatalf("GOGC=off: the runtime's GC percentage became %d", got)
	}
}
