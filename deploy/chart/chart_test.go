// Package chart tests the Helm chart in helm/creditflow: lint, rendering with
// every value set into the k8s.io/api types, the restricted Pod Security
// Standard, what the pods can read, the schema, and the smoke test that runs
// the rendered containers (smoke_test.go).
package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

func TestLintStrict(t *testing.T) {
	for name, args := range valueSets(t) {
		if _, err := helm(t, append([]string{"lint", "--strict", chartDir}, args...)...); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestRenderDecodes renders every value set and decodes every manifest into
// its k8s.io/api type, refusing unknown fields.
func TestRenderDecodes(t *testing.T) {
	want := map[string][]string{ // kinds each set must render
		"default":    {"Deployment", "Service", "Secret", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy", "ConfigMap"},
		"production": {"StatefulSet", "PodMonitor", "PrometheusRule", "NetworkPolicy"},
		"keda":       {"ScaledObject", "TriggerAuthentication"},
		"strimzi":    {"KafkaTopic", "KafkaUser"},
	}
	for name, args := range valueSets(t) {
		objs := render(t, args...)
		decodeAll(t, objs)
		if len(podTemplates(t, objs)) == 0 {
			t.Errorf("%s: no workload rendered", name)
		}
		for _, k := range want[name] {
			if len(byKind(objs, k)) == 0 {
				t.Errorf("%s: no %s rendered", name, k)
			}
		}
	}
}

// TestPodSecurityRestricted runs the pod security admission evaluator at the
// restricted level (latest version) on every pod template of every value set,
// the default and production values included.
func TestPodSecurityRestricted(t *testing.T) {
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	lv := api.LevelVersion{Level: api.LevelRestricted, Version: api.LatestVersion()}
	sets := valueSets(t)
	for _, must := range []string{"default", "production"} {
		if _, ok := sets[must]; !ok {
			t.Fatalf("value set %s missing", must)
		}
	}
	for name, args := range sets {
		for id, pod := range podTemplates(t, render(t, args...)) {
			res := policy.AggregateCheckResults(ev.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec))
			if !res.Allowed {
				t.Errorf("%s: %s fails restricted: %s: %s", name, id, res.ForbiddenReason(), res.ForbiddenDetail())
			}
		}
	}
}

// mountedMode is a Secret or ConfigMap file's mode and group as the kubelet
// leaves them: the volume's defaultMode (0644 when unset) and, with fsGroup,
// group fsGroup with group read added.
func mountedMode(defaultMode *int32, fsGroup *int64) (mode os.FileMode, gid int64) {
	mode = 0o644
	if defaultMode != nil {
		mode = os.FileMode(*defaultMode)
	}
	if fsGroup != nil {
		return mode | 0o440, *fsGroup
	}
	return mode, 0
}

func readable(mode os.FileMode, fileGID, uid int64, gids []int64) bool {
	if uid == 0 && mode&0o400 != 0 {
		return true
	}
	for _, g := range gids {
		if g == fileGID && mode&0o040 != 0 {
			return true
		}
	}
	return mode&0o004 != 0
}

// TestSecretsReadableByPodUser: every Secret file a container mounts can be
// read by the user the container runs as (the chart once mounted them with mode 0400,
// files owned by root, read by uid 65532).
func TestSecretsReadableByPodUser(t *testing.T) {
	for name, args := range valueSets(t) {
		for id, pod := range podTemplates(t, render(t, args...)) {
			psc := pod.Spec.SecurityContext
			for _, c := range pod.Spec.Containers {
				uid, gid := int64(0), int64(0)
				if psc != nil && psc.RunAsUser != nil {
					uid = *psc.RunAsUser
				}
				if psc != nil && psc.RunAsGroup != nil {
					gid = *psc.RunAsGroup
				}
				if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
					uid = *c.SecurityContext.RunAsUser
				}
				if uid == 0 {
					t.Errorf("%s: %s container %s runs as root", name, id, c.Name)
				}
				gids := []int64{gid}
				var fsGroup *int64
				if psc != nil {
					fsGroup = psc.FSGroup
					if fsGroup != nil {
						gids = append(gids, *fsGroup)
					}
					gids = append(gids, psc.SupplementalGroups...)
				}
				for _, m := range c.VolumeMounts {
					for _, v := range pod.Spec.Volumes {
						if v.Name != m.Name || v.Secret == nil {
							continue
						}
						mode, fileGID := mountedMode(v.Secret.DefaultMode, fsGroup)
						for _, it := range v.Secret.Items {
							if it.Mode != nil {
								mode, fileGID = mountedMode(it.Mode, fsGroup)
							}
						}
						if !readable(mode, fileGID, uid, gids) {
							t.Errorf("%s: %s container %s (uid %d) cannot read secret volume %s (mode %o, group %d)",
								name, id, c.Name, uid, v.Name, mode, fileGID)
						}
					}
				}
			}
		}
	}
}

// TestPodsHardened: the settings the restricted level does not demand but
// the chart promises: no service-account token, a read-only root filesystem,
// no hostPath anywhere.
func TestPodsHardened(t *testing.T) {
	for name, args := range valueSets(t) {
		for id, pod := range podTemplates(t, render(t, args...)) {
			if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
				t.Errorf("%s: %s mounts the service-account token", name, id)
			}
			if pod.Spec.SecurityContext == nil || pod.Spec.SecurityContext.FSGroup == nil {
				t.Errorf("%s: %s has no fsGroup", name, id)
			}
			for _, v := range pod.Spec.Volumes {
				if v.HostPath != nil {
					t.Errorf("%s: %s has a hostPath volume %s", name, id, v.Name)
				}
			}
			for _, c := range pod.Spec.Containers {
				sc := c.SecurityContext
				if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s: %s container %s has a writable root filesystem", name, id, c.Name)
				}
				if c.ReadinessProbe == nil || c.LivenessProbe == nil || c.StartupProbe == nil {
					t.Errorf("%s: %s container %s lacks a startup, readiness or liveness probe", name, id, c.Name)
				}
			}
		}
	}
}

// TestSchemaRefusesUnknownKeys: a misspelt key fails lint --strict and
// template instead of being ignored.
func TestSchemaRefusesUnknownKeys(t *testing.T) {
	for _, set := range []string{"monitor.enabld=true", "typo=1", "processor.probes.readinesPath=/x", "kafka.tls.caSecret.nam=x", "scorer.model.watchInterval=3"} {
		key := strings.Split(set, "=")[0]
		last := key[strings.LastIndex(key, ".")+1:]
		for _, cmd := range [][]string{{"lint", "--strict", chartDir}, {"template", "cf", chartDir}} {
			_, err := helm(t, append(cmd, "--set", set)...)
			if err == nil || !strings.Contains(err.Error(), "additional properties '"+last+"' not allowed") {
				t.Errorf("helm %s --set %s: want the schema to refuse %q, got %v", cmd[0], set, last, err)
			}
		}
	}
	// Sanity: the schema sets additionalProperties false on every object it describes.
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, n map[string]any)
	walk = func(path string, n map[string]any) {
		if props, ok := n["properties"].(map[string]any); ok {
			if n["additionalProperties"] != false && path != "processor.config" {
				t.Errorf("schema %s: properties without additionalProperties: false", path)
			}
			for k, v := range props {
				if m, ok := v.(map[string]any); ok {
					walk(strings.TrimPrefix(path+"."+k, "."), m)
				}
			}
		}
		if items, ok := n["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
	}
	walk("", s)
}

// TestRenderRefusals: settings that cannot work fail at render with a message
// naming the fix.
func TestRenderRefusals(t *testing.T) {
	cases := []struct {
		set  []string
		want string
	}{
		{[]string{"kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.user=u"}, "no password is configured"},
		{[]string{"kafka.sasl.mechanism=PLAIN"}, "kafka.sasl.user is empty"},
		{[]string{"kafka.tls.enabled=true"}, "kafka.tls.caSecret.name"},
		{[]string{"scorer.model.volume.hostPath.path=/data"}, "hostPath is refused"},
		{[]string{"image.digest=sha256:abc"}, "does not match"},
		{[]string{"scorer.enabled=false"}, "no scorer is configured"},
		{[]string{"secrets.scorerToken=same", "secrets.adminToken=same"}, "adminToken must differ"},
		{[]string{"secrets.create=false"}, "scorer.auth.enabled needs the tokens' Secret"},
		{[]string{"strimzi.enabled=true", "strimzi.users.enabled=true"}, "needs kafka.tls.enabled"},
		{[]string{"scorer.livenessProbe.timeoutSeconds=5"}, "must exceed scorer.health.canaryTimeoutSeconds"},
	}
	for _, c := range cases {
		args := []string{"template", "cf", chartDir}
		for _, s := range c.set {
			args = append(args, "--set", s)
		}
		_, err := helm(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: want a failure containing %q, got %v", c.set, c.want, err)
		}
	}
}

func container(t *testing.T, objs []object, id string) (corev1.PodTemplateSpec, corev1.Container) {
	t.Helper()
	pod, ok := podTemplates(t, objs)[id]
	if !ok {
		t.Fatalf("%s not rendered", id)
	}
	return pod, pod.Spec.Containers[0]
}

func TestProcessorDefaults(t *testing.T) {
	objs := render(t)
	pod, c := container(t, objs, "Deployment/cf-creditflow-main")
	var d struct {
		Spec struct{ Replicas int } `json:"spec"`
	}
	for _, o := range byKind(objs, "Deployment") {
		if o.Name == "cf-creditflow-main" {
			_ = yaml.Unmarshal(o.YAML, &d)
		}
	}
	if d.Spec.Replicas != 2 {
		t.Errorf("processor replicas %d, want 2", d.Spec.Replicas)
	}
	if c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/livez" || c.StartupProbe.HTTPGet.Path != "/livez" {
		t.Errorf("probes: readiness %s liveness %s startup %s", c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, c.StartupProbe.HTTPGet.Path)
	}
	if budget := c.StartupProbe.PeriodSeconds * c.StartupProbe.FailureThreshold; budget < 300 {
		t.Errorf("startup probe allows %d s; the processor waits for brokers, topics and scorers", budget)
	}
	if len(pod.Spec.TopologySpreadConstraints) == 0 || pod.Spec.Affinity == nil || pod.Spec.Affinity.PodAntiAffinity == nil {
		t.Error("no topology spread or anti-affinity")
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--scorers=dns+http://cf-creditflow-scorer-headless.ns.svc:8080", "--scorer-token-file=/etc/creditflow/scorer-token/token"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	pdbs := byKind(objs, "PodDisruptionBudget")
	found := false
	for _, o := range pdbs {
		var p policyv1.PodDisruptionBudget
		strict(t, o, &p)
		if p.Spec.Selector.MatchLabels["creditflow.io/stage"] == "main" {
			found = p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 1
		}
	}
	if !found {
		t.Error("no PDB with maxUnavailable 1 for the main stage")
	}
	// One replica: no PDB (it would protect nothing).
	for _, o := range byKind(render(t, "--set", "processor.stages[0].name=main", "--set", "processor.stages[0].stage=both", "--set", "processor.stages[0].replicas=1"), "PodDisruptionBudget") {
		if strings.HasSuffix(o.Name, "-main") {
			t.Error("a PDB for a one-replica stage")
		}
	}
	// The scorers require tokens by default, the admin token on its own file.
	_, sc := container(t, objs, "Deployment/cf-creditflow-scorer")
	sargs := strings.Join(sc.Args, " ")
	if !strings.Contains(sargs, "--token-file=") || !strings.Contains(sargs, "--admin-token-file=/etc/creditflow/secrets/admin-token") {
		t.Errorf("scorer args %q: want --token-file and --admin-token-file", sargs)
	}
}

func TestImageByDigest(t *testing.T) {
	const dg = "sha256:4a5b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b"
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml"))
	for id, pod := range podTemplates(t, objs) {
		img := pod.Spec.Containers[0].Image
		if !regexp.MustCompile(`^[^:@]+(:\d+)?/[^@:]+@sha256:[0-9a-f]{64}$`).MatchString(img) {
			t.Errorf("%s: image %q is not repository@digest", id, img)
		}
		if strings.Contains(id, "score") && !strings.Contains(id, "scorer") && img != "registry.example.com/creditflow/creditflow@"+dg {
			t.Errorf("%s: image %q", id, img)
		}
	}
}
