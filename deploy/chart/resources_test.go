package chart

// Tests of the custom resources the chart renders for operators: Strimzi
// topics and users, KEDA, the Prometheus Operator.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestStrimziResources(t *testing.T) {
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "strimzi-values.yaml"))
	parts := map[string]float64{}
	for _, o := range byKind(objs, "KafkaTopic") {
		var kt struct {
			Spec struct {
				TopicName  string            `json:"topicName"`
				Partitions float64           `json:"partitions"`
				Replicas   float64           `json:"replicas"`
				Config     map[string]string `json:"config"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(o.YAML, &kt); err != nil {
			t.Fatal(err)
		}
		s := kt.Spec
		parts[s.TopicName] = s.Partitions
		if s.Replicas != 3 || s.Config["min.insync.replicas"] != "2" {
			t.Errorf("%s: replicas %v min.insync.replicas %q", s.TopicName, s.Replicas, s.Config["min.insync.replicas"])
		}
		compact := s.TopicName == "creditflow.advantage-state" || s.TopicName == "creditflow.policy"
		if got := s.Config["cleanup.policy"]; (got == "compact") != compact {
			t.Errorf("%s: cleanup.policy %q", s.TopicName, got)
		}
		if !compact && s.Config["retention.ms"] == "" {
			t.Errorf("%s: no retention.ms", s.TopicName)
		}
	}
	if len(parts) != 7 || parts["creditflow.advantage-state"] != parts["creditflow.scored"] || parts["creditflow.scored"] != 24 {
		t.Errorf("topics and partitions: %v", parts)
	}
	users := map[string]string{}
	for _, o := range byKind(objs, "KafkaUser") {
		b, _ := yaml.YAMLToJSON(o.YAML)
		users[o.Name] = string(b)
	}
	want := map[string][]string{
		"cf-creditflow-score":     {`"name":"creditflow.trajectories"`, `"name":"creditflow.score"`},
		"cf-creditflow-advantage": {`"name":"creditflow.samples"`, `"name":"creditflow.advantage"`, `"name":"creditflow.advantage-state"`},
		"cf-creditflow-monitor":   {`"name":"creditflow.samples"`},
	}
	for u, subs := range want {
		for _, s := range subs {
			if !strings.Contains(users[u], s) {
				t.Errorf("KafkaUser %s lacks %s", u, s)
			}
		}
	}
	if strings.Contains(users["cf-creditflow-score"], `"name":"creditflow.samples"`) || strings.Contains(users["cf-creditflow-monitor"], "Write") {
		t.Error("a KafkaUser has more than its stage needs")
	}
	// Each stage authenticates with its own user's secret, under Strimzi's key names.
	pod, c := container(t, objs, "Deployment/cf-creditflow-score")
	var keys []string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			for _, it := range v.Secret.Items {
				keys = append(keys, v.Secret.SecretName+":"+it.Key)
			}
		}
	}
	sort.Strings(keys)
	if got := strings.Join(keys, " "); !strings.Contains(got, "cf-creditflow-score:user.crt") || !strings.Contains(got, "cf-creditflow-score:user.key") || !strings.Contains(got, "data-cluster-ca-cert:ca.crt") {
		t.Errorf("score stage secrets %s", got)
	}
	if !strings.Contains(strings.Join(c.Args, " "), "--kafka-tls-cert=/etc/creditflow/kafka-client/tls.crt") {
		t.Errorf("args %v", c.Args)
	}
}

func TestKEDAScaledObjects(t *testing.T) {
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "keda-values.yaml"))
	got := map[string]string{}
	for _, o := range byKind(objs, "ScaledObject") {
		var so struct {
			Spec struct {
				Max      int `json:"maxReplicaCount"`
				Triggers []struct {
					Type     string            `json:"type"`
					Metadata map[string]string `json:"metadata"`
				} `json:"triggers"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(o.YAML, &so); err != nil {
			t.Fatal(err)
		}
		if so.Spec.Max != 12 {
			t.Errorf("%s: maxReplicaCount %d, want the 12 partitions", o.Name, so.Spec.Max)
		}
		var groups []string
		for _, tr := range so.Spec.Triggers {
			groups = append(groups, tr.Metadata["consumerGroup"]+"@"+tr.Metadata["topic"]+"/"+tr.Metadata["sasl"])
		}
		got[o.Name] = strings.Join(groups, ",")
	}
	want := map[string]string{
		"cf-creditflow-score":     "creditflow.score@creditflow.trajectories/scram_sha256",
		"cf-creditflow-advantage": "creditflow.advantage@creditflow.scored/scram_sha256",
		"cf-creditflow-main":      "creditflow.score@creditflow.trajectories/scram_sha256,creditflow.advantage@creditflow.scored/scram_sha256",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("ScaledObjects\n got %v\nwant %v", got, want)
	}
	for _, o := range byKind(objs, "Deployment") {
		if strings.Contains(string(o.YAML), "\n  replicas:") && !strings.Contains(o.Name, "scorer") {
			t.Errorf("%s: fixed replicas under KEDA", o.Name)
		}
	}
}

func TestPodMonitorVerifiesTLS(t *testing.T) {
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml"))
	pm := byKind(objs, "PodMonitor")
	if len(pm) != 1 {
		t.Fatalf("%d PodMonitors", len(pm))
	}
	s := string(pm[0].YAML)
	if strings.Contains(s, "insecureSkipVerify") || !strings.Contains(s, "key: ca.crt") || !strings.Contains(s, "serverName: cf-creditflow-scorer.ns.svc") {
		t.Errorf("PodMonitor TLS:\n%s", s)
	}
}

// TestPrometheusRule: the seven alerts exist, each links to a runbook
// section of docs/operations.md, and every creditflow_ series they query is
// defined in the project's source (Go or the scorer pod's Python).
func TestPrometheusRule(t *testing.T) {
	rules := alertRules(t, render(t, "-f", filepath.Join(chartDir, "ci", "production-values.yaml")))
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(l, "#") {
			h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
			anchors[regexp.MustCompile(`[^a-z0-9 -]`).ReplaceAllString(h, "")] = true
		}
	}
	defined := sourceMetricNames(t)
	series := regexp.MustCompile(`creditflow_[a-z0-9_]+`)
	var alerts []string
	for _, r := range rules {
		alerts = append(alerts, r.Alert)
		url := r.Annotations["runbook_url"]
		i := strings.LastIndex(url, "#")
		if !strings.HasPrefix(url, "https://github.com/creditflow/creditflow/blob/main/docs/operations.md#") || i < 0 || !anchors[url[i+1:]] {
			t.Errorf("%s: runbook_url %q has no section in docs/operations.md", r.Alert, url)
		}
		for _, s := range series.FindAllString(r.Expr, -1) {
			if !defined[s] {
				t.Errorf("%s queries %s, which no source defines", r.Alert, s)
			}
		}
		if !strings.Contains(r.Expr, `namespace="ns"`) {
			t.Errorf("%s: not limited to the release's namespace", r.Alert)
		}
	}
	sort.Strings(alerts)
	want := "CreditflowConsumerLagGrowing CreditflowDeadLetterRate CreditflowNoProgress CreditflowProducerErrors CreditflowRestarts CreditflowScorerUnhealthy CreditflowStateMissing"
	if strings.Join(alerts, " ") != want {
		t.Errorf("alerts %v, want %s", alerts, want)
	}
}

// sourceMetricNames are the quoted "creditflow_…" names in the non-test Go
// and Python source of the repository.
func sourceMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	quoted := regexp.MustCompile(`"(creditflow_[a-z0-9_]+)"`)
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "deploy") {
			return filepath.SkipDir
		}
		if d.IsDir() || strings.HasSuffix(p, "_test.go") || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".py")) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range quoted.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}
