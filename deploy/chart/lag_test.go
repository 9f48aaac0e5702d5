package chart

// Tests of what the chart renders around the processor's consumer groups:
// the monitor's --lag-groups and its Kafka permissions, and the lag alerts.

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// processorGroups are the consumer groups of the rendered processor pods,
// as "<group>=<topic>", derived as `creditflow run` derives them: --group
// from the pod's config file, .score on --topic-trajectories unless the
// stage is advantage, .advantage on --topic-scored unless it is score.
func processorGroups(t *testing.T, objs []object) []string {
	t.Helper()
	configs := map[string]map[string]any{}
	for _, o := range byKind(objs, "ConfigMap") {
		var cm corev1.ConfigMap
		strict(t, o, &cm)
		if js, ok := cm.Data["config.json"]; ok {
			var c map[string]any
			if err := json.Unmarshal([]byte(js), &c); err != nil {
				t.Fatalf("ConfigMap %s: %v", cm.Name, err)
			}
			configs[cm.Name] = c
		}
	}
	str := func(c map[string]any, k, def string) string {
		if v, ok := c[k].(string); ok && v != "" {
			return v
		}
		return def
	}
	seen := map[string]bool{}
	var pairs []string
	for id, pod := range podTemplates(t, objs) {
		if pod.Labels["app.kubernetes.io/component"] != "processor" {
			continue
		}
		c := pod.Spec.Containers[0]
		var cfg map[string]any
		for _, v := range pod.Spec.Volumes {
			if v.ConfigMap != nil && configs[v.ConfigMap.Name] != nil {
				cfg = configs[v.ConfigMap.Name]
			}
		}
		if cfg == nil {
			t.Fatalf("%s mounts no config.json", id)
		}
		stage := "both"
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--stage="); ok {
				stage = v
			}
		}
		group := str(cfg, "group", "creditflow")
		var ps []string
		if stage != "advantage" {
			ps = append(ps, group+".score="+str(cfg, "topic-trajectories", "creditflow.trajectories"))
		}
		if stage != "score" {
			ps = append(ps, group+".advantage="+str(cfg, "topic-scored", "creditflow.scored"))
		}
		for _, p := range ps {
			if !seen[p] {
				seen[p] = true
				pairs = append(pairs, p)
			}
		}
	}
	sort.Strings(pairs)
	return pairs
}

func monitorLagGroups(t *testing.T, objs []object) []string {
	t.Helper()
	_, c := container(t, objs, "Deployment/cf-creditflow-monitor")
	n := 0
	var got []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--lag-groups="); ok {
			n++
			got = strings.Split(v, ",")
		}
	}
	if n != 1 {
		t.Fatalf("monitor args %v: want one --lag-groups", c.Args)
	}
	sort.Strings(got)
	return got
}

// TestMonitorLagGroupsFollowTheProcessor: the monitor exports the lag of the
// groups the rendered processors use (the production values set
// processor.config.group; a stage may set its own group).
func TestMonitorLagGroupsFollowTheProcessor(t *testing.T) {
	prod := render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml"))
	want := processorGroups(t, prod)
	if strings.Join(want, ",") != "creditflow-prod.advantage=creditflow.scored,creditflow-prod.score=creditflow.trajectories" {
		t.Fatalf("processor groups %v: the production values changed?", want)
	}
	if got := monitorLagGroups(t, prod); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("monitor --lag-groups %v, processor groups %v", got, want)
	}
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	writeFile(t, values, `processor:
  config: {group: base, topic-trajectories: t.in, topic-scored: t.mid}
  stages:
    - {name: score, stage: score, replicas: 2}
    - {name: advantage, stage: advantage, replicas: 2, config: {group: adv}}
    - {name: main, stage: both, replicas: 2}
monitor: {enabled: true}
`, 0o644)
	objs := render(t, "-f", values)
	want = processorGroups(t, objs)
	if got := monitorLagGroups(t, objs); strings.Join(got, ",") != strings.Join(want, ",") || len(want) != 3 {
		t.Errorf("monitor --lag-groups %v, processor groups %v", got, want)
	}
}

// acls are a KafkaUser's ACLs as "type:name:Op,Op" (cluster: "cluster::Op").
func acls(t *testing.T, o object) []string {
	t.Helper()
	var u struct {
		Spec struct {
			Authorization struct {
				ACLs []struct {
					Resource   struct{ Type, Name string } `json:"resource"`
					Operations []string                    `json:"operations"`
				} `json:"acls"`
			} `json:"authorization"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(o.YAML, &u); err != nil {
		t.Fatal(err)
	}
	var r []string
	for _, a := range u.Spec.Authorization.ACLs {
		r = append(r, a.Resource.Type+":"+a.Resource.Name+":"+strings.Join(a.Operations, ","))
	}
	sort.Strings(r)
	return r
}

// TestMonitorKafkaUserACLs: the monitor's KafkaUser may read the topics it
// reads, and describe the processor's groups and their input topics (the
// offset fetch and end offsets of --lag-groups); nothing else.
func TestMonitorKafkaUserACLs(t *testing.T) {
	for name, args := range map[string][]string{
		"creditflow": {"-f", filepath.Join(chartDir, "ci", "strimzi-values.yaml")},
		"prod":       {"-f", filepath.Join(chartDir, "ci", "strimzi-values.yaml"), "--set", "processor.config.group=prod"},
	} {
		objs := render(t, args...)
		var got []string
		for _, o := range byKind(objs, "KafkaUser") {
			if o.Name == "cf-creditflow-monitor" {
				got = acls(t, o)
			}
		}
		want := []string{
			"group:" + name + ".advantage:Describe",
			"group:" + name + ".score:Describe",
			"topic:creditflow.dead-letters:Read,Describe",
			"topic:creditflow.policy:Read,Describe",
			"topic:creditflow.samples:Read,Describe",
			"topic:creditflow.scored:Read,Describe",
			"topic:creditflow.trajectories:Describe",
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: monitor ACLs\n %s\nwant\n %s", name, strings.Join(got, "\n "), strings.Join(want, "\n "))
		}
		var lag []string
		for _, p := range monitorLagGroups(t, objs) {
			lag = append(lag, strings.SplitN(p, "=", 2)[0])
		}
		for _, g := range lag {
			if !strings.Contains(strings.Join(got, " "), "group:"+g+":") {
				t.Errorf("%s: --lag-groups names %s, which the monitor may not describe", name, g)
			}
		}
	}
}

// TestLagAlertsWithoutProcessors: the lag and no-progress alerts query only
// the broker-side group lag series that `creditflow monitor --lag-groups`
// exports (consumers/grouplag.go), so they keep firing when every processor
// replica is down; the monitor is rendered with the production values and
// exports the processor's groups.
func TestLagAlertsWithoutProcessors(t *testing.T) {
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml"))
	exporter := exportedSeries(t, filepath.Join(repoRoot, "consumers", "grouplag.go"))
	if !exporter["creditflow_consumer_group_lag_records"] {
		t.Fatalf("consumers/grouplag.go does not export creditflow_consumer_group_lag_records: %v", exporter)
	}
	series := regexp.MustCompile(`\b[a-z_]+_[a-z0-9_]+\b`)
	found := 0
	for _, r := range alertRules(t, objs) {
		if r.Alert != "CreditflowConsumerLagGrowing" && r.Alert != "CreditflowNoProgress" {
			continue
		}
		found++
		if !strings.Contains(r.Expr, "creditflow_consumer_group_lag_records") {
			t.Errorf("%s does not use the broker-side lag: %s", r.Alert, r.Expr)
		}
		for _, s := range series.FindAllString(r.Expr, -1) {
			if strings.HasPrefix(s, "creditflow_") && !exporter[s] {
				t.Errorf("%s queries %s, which the monitor does not export: with no processor running it is absent", r.Alert, s)
			}
		}
		// Series of the processors would be absent; absent series silence an
		// alert whether joined with and/on or compared.
		for _, bad := range []string{"creditflow_records_in_total", "creditflow_consumer_lag_records", "process_"} {
			if strings.Contains(r.Expr, bad) {
				t.Errorf("%s depends on %s, which only running processors export", r.Alert, bad)
			}
		}
		if !strings.Contains(r.Expr, "group") {
			t.Errorf("%s: not per consumer group: %s", r.Alert, r.Expr)
		}
	}
	if found != 2 {
		t.Fatalf("%d lag alerts found", found)
	}
	if got := monitorLagGroups(t, objs); len(got) != 2 {
		t.Errorf("monitor --lag-groups %v", got)
	}
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T, objs []object) []alertRule {
	t.Helper()
	pr := byKind(objs, "PrometheusRule")
	if len(pr) != 1 {
		t.Fatalf("%d PrometheusRules", len(pr))
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []alertRule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(pr[0].YAML, &rule); err != nil {
		t.Fatal(err)
	}
	var r []alertRule
	for _, g := range rule.Spec.Groups {
		r = append(r, g.Rules...)
	}
	return r
}

// exportedSeries are the quoted creditflow_ names in one source file.
func exportedSeries(t *testing.T, file string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`"(creditflow_[a-z0-9_]+)"`).FindAllStringSubmatch(string(readFile(t, file)), -1) {
		names[m[1]] = true
	}
	return names
}
