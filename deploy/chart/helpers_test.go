package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// helmVersion is the helm that renders the chart here and in helm/check.sh.
const helmVersion = "v3.22.0"

var (
	repoRoot = filepath.Join("..", "..")
	chartDir = filepath.Join(repoRoot, "helm", "creditflow")
)

var helmOnce struct {
	sync.Once
	path string
	err  error
}

// helmBin is helm v3.22.0: $HELM, or the binary helm/check.sh caches, built
// once with `go install` when missing. Without a Go toolchain able to fetch
// it the test skips, except under CI=true where it fails.
func helmBin(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		if h := os.Getenv("HELM"); h != "" {
			helmOnce.path = h
			return
		}
		cache := os.Getenv("CREDITFLOW_CACHE")
		if cache == "" {
			base, err := os.UserCacheDir()
			if err != nil {
				helmOnce.err = err
				return
			}
			cache = filepath.Join(base, "creditflow")
		}
		dir := filepath.Join(cache, "helm-"+helmVersion)
		bin := filepath.Join(dir, "helm")
		if _, err := os.Stat(bin); err == nil {
			helmOnce.path = bin
			return
		}
		cmd := exec.Command("go", "install", "helm.sh/helm/v3/cmd/helm@"+helmVersion)
		cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			helmOnce.err = fmt.Errorf("go install helm %s: %v\n%s", helmVersion, err, out)
			return
		}
		helmOnce.path = bin
	})
	if helmOnce.err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(helmOnce.err)
		}
		t.Skip(helmOnce.err)
	}
	return helmOnce.path
}

// helm runs helm with args and returns its stdout; stderr is in the error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(helmBin(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %v: %s\n%s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()), out.String())
	}
	return out.String(), nil
}

// valueSets are the chart's checked value sets: the defaults and every
// helm/creditflow/ci/*-values.yaml (also rendered by helm/check.sh).
func valueSets(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) < 6 {
		t.Fatalf("ci value sets: %v %v", files, err)
	}
	sets := map[string][]string{"default": nil}
	for _, f := range files {
		sets[strings.TrimSuffix(filepath.Base(f), "-values.yaml")] = []string{"-f", f}
	}
	return sets
}

// object is one rendered manifest: its kind, name and YAML.
type object struct {
	Kind, Name string
	YAML       []byte
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// render runs helm template with args (and release name cf in namespace ns)
// and splits the output into objects.
func render(t *testing.T, args ...string) []object {
	t.Helper()
	out, err := helm(t, append([]string{"template", "cf", chartDir, "--namespace", "ns"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return split(t, out)
}

func split(t *testing.T, out string) []object {
	t.Helper()
	var objs []object
	for _, doc := range docSep.Split(out, -1) {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // comments only
		}
		objs = append(objs, object{Kind: head.Kind, Name: head.Metadata.Name, YAML: []byte(doc)})
	}
	return objs
}

// strict decodes o into v, refusing fields v's type does not have.
func strict(t *testing.T, o object, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(o.YAML, v); err != nil {
		t.Fatalf("%s %s does not decode into %T: %v", o.Kind, o.Name, v, err)
	}
}

// podTemplates decodes every workload and returns its pod template by
// "<Kind>/<name>".
func podTemplates(t *testing.T, objs []object) map[string]corev1.PodTemplateSpec {
	t.Helper()
	pods := map[string]corev1.PodTemplateSpec{}
	for _, o := range objs {
		switch o.Kind {
		case "Deployment":
			var d appsv1.Deployment
			strict(t, o, &d)
			pods[o.Kind+"/"+o.Name] = d.Spec.Template
		case "StatefulSet":
			var s appsv1.StatefulSet
			strict(t, o, &s)
			pods[o.Kind+"/"+o.Name] = s.Spec.Template
		}
	}
	return pods
}

// decodeAll decodes every object of a built-in kind into its k8s.io/api type
// (strictly) and every custom resource into a map; it fails on a kind it does
// not know.
func decodeAll(t *testing.T, objs []object) {
	t.Helper()
	for _, o := range objs {
		var v any
		switch o.Kind {
		case "Deployment":
			v = &appsv1.Deployment{}
		case "StatefulSet":
			v = &appsv1.StatefulSet{}
		case "Service":
			v = &corev1.Service{}
		case "ConfigMap":
			v = &corev1.ConfigMap{}
		case "Secret":
			v = &corev1.Secret{}
		case "ServiceAccount":
			v = &corev1.ServiceAccount{}
		case "PodDisruptionBudget":
			v = &policyv1.PodDisruptionBudget{}
		case "NetworkPolicy":
			v = &networkingv1.NetworkPolicy{}
		case "PodMonitor", "PrometheusRule", "ScaledObject", "TriggerAuthentication", "KafkaTopic", "KafkaUser":
			v = &map[string]any{}
		default:
			t.Fatalf("rendered kind %s (%s) has no decoder here", o.Kind, o.Name)
		}
		strict(t, o, v)
	}
}

func byKind(objs []object, kind string) []object {
	var r []object
	for _, o := range objs {
		if o.Kind == kind {
			r = append(r, o)
		}
	}
	return r
}
