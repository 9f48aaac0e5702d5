package chart

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestScorerProbes: the liveness probe asks the model (/livez, the pod's
// canary), startup and readiness ask /healthz (no model call), and the
// liveness probe waits longer than the canary may take.
func TestScorerProbes(t *testing.T) {
	for _, vals := range [][]string{nil, {"-f", filepath.Join(chartDir, "ci", "production-values.yaml")}} {
		objs := render(t, vals...)
		id := "Deployment/cf-creditflow-scorer"
		if len(vals) > 0 {
			id = "StatefulSet/cf-creditflow-scorer"
		}
		_, c := container(t, objs, id)
		if p := c.LivenessProbe.HTTPGet.Path; p != "/livez" {
			t.Errorf("%v: liveness probe on %s, want /livez (the model's canary)", vals, p)
		}
		if s, r := c.StartupProbe.HTTPGet.Path, c.ReadinessProbe.HTTPGet.Path; s != "/healthz" || r != "/healthz" {
			t.Errorf("%v: startup probe on %s, readiness on %s, want /healthz", vals, s, r)
		}
		flags := map[string]float64{}
		for _, a := range c.Args {
			for _, f := range []string{"--liveness-interval", "--canary-timeout", "--stall-timeout"} {
				if v, ok := strings.CutPrefix(a, f+"="); ok {
					x, err := strconv.ParseFloat(v, 64)
					if err != nil {
						t.Fatalf("%s: %v", a, err)
					}
					flags[f] = x
				}
			}
		}
		if len(flags) != 3 {
			t.Fatalf("%v: scorer args %v lack the health flags", vals, c.Args)
		}
		lp := c.LivenessProbe
		if float64(lp.TimeoutSeconds) <= flags["--canary-timeout"] {
			t.Errorf("liveness timeout %d s, canary timeout %v s: the kubelet gives up before the canary", lp.TimeoutSeconds, flags["--canary-timeout"])
		}
		if flags["--stall-timeout"] <= flags["--canary-timeout"] {
			t.Errorf("--stall-timeout %v within the canary's timeout", flags["--stall-timeout"])
		}
	}
}
