// Package gcpolicy sets the garbage collector of creditflow's processes.
//
// Guarantees: a setting the operator made wins. GOGC, when set, is the GC
// percentage; GOMEMLIMIT, when set, is the soft memory limit; Apply then
// leaves that setting alone. Otherwise:
//
//   - the GC percentage is DefaultPercent (200) instead of Go's 100: the
//     stages allocate fresh memory for every record they read and every
//     request they send, and fewer collections cost less CPU for a larger
//     resident set (measured in docs/performance-passes.md);
//   - inside a container with a memory limit (cgroup v2 memory.max or v1
//     memory.limit_in_bytes of the cgroup mounted at /sys/fs/cgroup) the soft
//     memory limit is LimitFraction (90%) of it, so that a heap that grows
//     toward the container's limit is collected harder instead of being
//     killed; without a limit there is none.
//
// Apply reads the environment and /sys/fs/cgroup once; call it at the start
// of main.
package gcpolicy

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
)

// DefaultPercent is the GC percentage without GOGC.
const DefaultPercent = 200

// LimitFraction is the share of a container's memory limit that becomes the
// soft memory limit without GOMEMLIMIT.
const LimitFraction = 0.9

// Policy is what Apply set, and where each setting came from.
type Policy struct {
	Percent     int    // the GC percentage; -1 when GOGC=off
	PercentFrom string // "GOGC" or "default"
	Limit       int64  // the soft memory limit in bytes; 0 for none
	LimitFrom   string // "GOMEMLIMIT", "cgroup" or "none"
}

func (p Policy) String() string {
	pct := strconv.Itoa(p.Percent)
	if p.Percent < 0 {
		pct = "off"
	}
	lim := "none"
	if p.Limit > 0 {
		lim = fmt.Sprintf("%d MiB", p.Limit>>20)
	}
	return fmt.Sprintf("GC percentage %s (%s), memory limit %s (%s)", pct, p.PercentFrom, lim, p.LimitFrom)
}

// Apply sets the policy for this process and returns it.
func Apply() Policy {
	p := apply(os.Getenv, "/sys/fs/cgroup")
	applied.Store(&p)
	return p
}

// Applied is what the last Apply set; ok is false before any.
func Applied() (p Policy, ok bool) {
	if a := applied.Load(); a != nil {
		return *a, true
	}
	return Policy{}, false
}

var applied atomic.Pointer[Policy]

func apply(getenv func(string) string, cgroupRoot string) Policy {
	var p Policy
	if getenv("GOGC") != "" {
		// The runtime applied it at start: read it back (SetGCPercent
		// returns the setting it replaces) and put it back.
		p.Percent, p.PercentFrom = debug.SetGCPercent(-1), "GOGC"
		debug.SetGCPercent(p.Percent)
	} else {
		debug.SetGCPercent(DefaultPercent)
		p.Percent, p.PercentFrom = DefaultPercent, "default"
	}
	if getenv("GOMEMLIMIT") != "" {
		p.Limit, p.LimitFrom = debug.SetMemoryLimit(-1), "GOMEMLIMIT" // -1 reads without changing
	} else if lim, ok := cgroupLimit(cgroupRoot); ok {
		p.Limit, p.LimitFrom = int64(float64(lim)*LimitFraction), "cgroup"
		debug.SetMemoryLimit(p.Limit)
	} else {
		p.LimitFrom = "none"
	}
	return p
}

// unlimited is where a cgroup v1 limit means none (the kernel reports the
// largest page-aligned int64 then).
const unlimited = int64(1) << 60

// cgroupLimit is the memory limit of this process's cgroup under root, the
// cgroup v2 file first.
func cgroupLimit(root string) (int64, bool) {
	for _, f := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 || n >= unlimited {
			return 0, false
		}
		return n, true
	}
	return 0, false
}
