package chart

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/testpki"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// readyPathEnv overrides the processor's readiness path read from the
// rendered manifest (e.g. /healthz against a binary that predates /readyz).
const readyPathEnv = "CREDITFLOW_SMOKE_READY_PATH"

// discoveryEnv overrides scorer.discovery (the chart's default, dns, needs a
// binary that follows dns+ endpoints; service works with any).
const discoveryEnv = "CREDITFLOW_SMOKE_DISCOVERY"

// binaryEnv names a creditflow binary to run instead of building this
// checkout's.
const binaryEnv = "CREDITFLOW_SMOKE_BINARY"

// TestSmokeRenderedChart renders the chart with SASL, mutual TLS, scorer TLS,
// chart-made secrets, the monitor and two replicas of each stage, then runs
// every rendered processor and monitor container as Kubernetes would: its
// args, as the rendered uid/gid with fsGroup as a supplementary group, with
// its ConfigMap and Secret volumes laid out the way the kubelet writes them
// (timestamped directory, ..data link, one link per key; mode from
// defaultMode, group fsGroup, group-read added) against a `creditflow broker`
// (TLS + SCRAM) and a `creditflow scorer` (HTTPS, bearer token). Every
// process must answer its readiness probe with 200, the stages must turn
// trajectories into samples, and each process must exit cleanly within its
// terminationGracePeriodSeconds after SIGTERM.
func TestSmokeRenderedChart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker, a scorer and five creditflow processes")
	}
	work := openDir(t)
	bin := filepath.Join(work, "creditflow")
	if b := os.Getenv(binaryEnv); b != "" {
		if err := os.WriteFile(bin, readFile(t, b), 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		build := exec.Command("go", "build", "-o", bin, "./cmd/creditflow")
		build.Dir, build.Env = repoRoot, append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}

	// PKI: one CA for the broker, the clients and the scorer.
	ca := testpki.New(t)
	pki := filepath.Join(work, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	caFile := ca.WriteCA(t, pki)
	brokerCert, brokerKey := testpki.Write(t, pki, "broker", ca.Issue(t, "broker", true))
	clientCert, clientKey := testpki.Write(t, pki, "client", ca.Issue(t, "creditflow", false))
	scorerCert, scorerKey := testpki.Write(t, pki, "scorer", ca.Issue(t, "scorer", true))
	const user, password = "creditflow", "smoke-password"

	topics := []string{"creditflow.trajectories", "creditflow.scored", "creditflow.samples", "creditflow.samples.stale",
		"creditflow.dead-letters", "creditflow.advantage-state", "creditflow.policy"}
	brk := start(t, work, "broker", exec.Command(bin, "broker", "--addr=127.0.0.1:0", "--partitions=4",
		"--topics="+strings.Join(topics, ","), "--tls-cert="+brokerCert, "--tls-key="+brokerKey, "--tls-ca="+caFile,
		"--sasl-user="+user, "--sasl-mechanism=SCRAM-SHA-512"), []string{"CREDITFLOW_SASL_PASSWORD=" + password}, nil, true)
	addr := brk.firstLine(t, 30*time.Second)

	discovery := "" // the chart's default
	if d := os.Getenv(discoveryEnv); d != "" {
		discovery = "discovery: " + d
	}
	values := filepath.Join(work, "values.yaml")
	writeFile(t, values, fmt.Sprintf(`processor:
  config: {brokers: %q, group: smoke, create-topics: 0, log-level: info}
  stages:
    - {name: score, stage: score, replicas: 2}
    - {name: advantage, stage: advantage, replicas: 2}
  shutdownTimeoutSeconds: 20
kafka:
  sasl: {mechanism: SCRAM-SHA-512, user: %s}
  tls: {enabled: true, caSecret: {name: kafka-ca}, clientSecret: {name: kafka-client}}
secrets: {create: true, saslPassword: %s}
scorer:
  %s
  tls: {existingSecret: scorer-tls}
monitor: {enabled: true, from: earliest}
`, addr, user, password, discovery), 0o644)
	objs := render(t, "-f", values)

	// The volumes' contents: rendered ConfigMaps and Secrets, and the
	// Secrets an operator (or Strimzi) would have made.
	data := map[string]map[string][]byte{
		"kafka-ca":     {"ca.crt": readFile(t, caFile)},
		"kafka-client": {"user.crt": readFile(t, clientCert), "user.key": readFile(t, clientKey), "ca.crt": readFile(t, caFile)},
		"scorer-tls":   {"tls.crt": readFile(t, scorerCert), "tls.key": readFile(t, scorerKey), "ca.crt": readFile(t, caFile)},
	}
	for _, o := range objs {
		switch o.Kind {
		case "ConfigMap":
			var cm corev1.ConfigMap
			strict(t, o, &cm)
			data["configmap/"+cm.Name] = map[string][]byte{}
			for k, v := range cm.Data {
				data["configmap/"+cm.Name][k] = []byte(v)
			}
		case "Secret":
			var s corev1.Secret
			strict(t, o, &s)
			data[s.Name] = map[string][]byte{}
			for k, v := range s.StringData {
				data[s.Name][k] = []byte(v)
			}
		}
	}
	token := string(data["cf-creditflow-secrets"]["scorer-token"])
	if token == "" || string(data["cf-creditflow-secrets"]["admin-token"]) == token {
		t.Fatalf("chart secret: scorer token %q, admin token %q", token, data["cf-creditflow-secrets"]["admin-token"])
	}

	// The scorer the chart's Service names, served on localhost (its certificate's name).
	scorerPort := freePort(t)
	tokenFile := filepath.Join(pki, "token")
	writeFile(t, tokenFile, token, 0o600)
	start(t, work, "scorer", exec.Command(bin, "scorer", fmt.Sprintf("--listen=127.0.0.1:%d", scorerPort),
		"--tls-cert="+scorerCert, "--tls-key="+scorerKey, "--token-file="+tokenFile), nil, nil, false)
	hosts := map[string]string{"cf-creditflow-scorer.ns.svc:8080": fmt.Sprintf("localhost:%d", scorerPort),
		"cf-creditflow-scorer-headless.ns.svc:8080": fmt.Sprintf("localhost:%d", scorerPort)}

	// Every processor and monitor pod, replicas times.
	var pods []*proc
	ids := []string{}
	templates := podTemplates(t, objs)
	for id := range templates {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		tmpl := templates[id]
		comp := tmpl.Labels["app.kubernetes.io/component"]
		if comp != "processor" && comp != "monitor" {
			continue
		}
		replicas := 1
		if comp == "processor" {
			replicas = 2
		}
		for r := 0; r < replicas; r++ {
			pods = append(pods, runPod(t, work, bin, fmt.Sprintf("%s-%d", strings.ToLower(strings.ReplaceAll(id, "/", "-")), r), tmpl, data, hosts))
		}
	}
	if len(pods) != 5 {
		t.Fatalf("%d pods started, want 2 score + 2 advantage + 1 monitor", len(pods))
	}
	for _, p := range pods {
		p.waitReady(t, 90*time.Second)
	}

	// Trajectories in, samples out.
	sec := kafkasec.Config{SASLMechanism: "SCRAM-SHA-512", Username: user, Password: password}
	cert, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	sec.TLS = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	brokers := []string{addr}
	prod, err := producers.New(producers.Config{Brokers: brokers, Security: sec})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	gen := synth.Default()
	gen.BaseMs = time.Now().UnixMilli()
	const groups = 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for g := 0; g < groups; g++ {
		var msgs []producers.Message
		for i := 0; i < gen.GroupSize; i++ {
			tr := gen.Trajectory(g, i)
			b, err := schemas.Trajectories().Encode(&tr)
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, producers.Message{Topic: "creditflow.trajectories", Key: []byte(tr.PromptID), Value: b,
				Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.Trajectories().Name())}}})
		}
		if err := prod.Produce(ctx, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	want := int64(groups * gen.GroupSize)
	var samples, dead int64
	for samples < want && ctx.Err() == nil {
		samples, dead = endTotal(ctx, t, brokers, sec, "creditflow.samples"), endTotal(ctx, t, brokers, sec, "creditflow.dead-letters")
		if samples < want {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if samples < want || dead != 0 {
		t.Fatalf("samples %d (want %d), dead letters %d", samples, want, dead)
	}
	for _, p := range pods {
		if p.exited() {
			t.Fatalf("%s exited while processing:\n%s", p.name, p.logTail())
		}
	}

	// SIGTERM: each exits cleanly within its grace period.
	for _, p := range pods {
		p.stop(t)
	}
}

// runPod starts tmpl's first container as the kubelet would on a node
// where the pod's volumes live under work/pods/name and its ports are
// remapped to free loopback ports (each pod has its own network namespace
// in a cluster; here they share one). hosts maps rendered host:port pairs
// to local ones (the cluster DNS).
func runPod(t *testing.T, work, bin, name string, tmpl corev1.PodTemplateSpec, data map[string]map[string][]byte, hosts map[string]string) *proc {
	t.Helper()
	spec := tmpl.Spec
	c := spec.Containers[0]
	psc := spec.SecurityContext
	root := filepath.Join(work, "pods", name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var fsGroup *int64
	if psc != nil {
		fsGroup = psc.FSGroup
	}
	vols := map[string]string{}
	for _, v := range spec.Volumes {
		dir := filepath.Join(root, "volumes", v.Name)
		switch {
		case v.EmptyDir != nil:
			if err := os.MkdirAll(dir, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o777); err != nil {
				t.Fatal(err)
			}
		case v.ConfigMap != nil:
			writeVolume(t, dir, data["configmap/"+v.ConfigMap.Name], v.ConfigMap.Items, v.ConfigMap.DefaultMode, fsGroup)
		case v.Secret != nil:
			src, ok := data[v.Secret.SecretName]
			if !ok {
				t.Fatalf("%s: volume %s: secret %s unknown to the test", name, v.Name, v.Secret.SecretName)
			}
			writeVolume(t, dir, src, v.Secret.Items, v.Secret.DefaultMode, fsGroup)
		default:
			t.Fatalf("%s: volume %s of a kind the smoke test cannot lay out", name, v.Name)
		}
		vols[v.Name] = dir
	}
	// Mount paths become the volumes' directories, longest first.
	type mount struct{ from, to string }
	var mounts []mount
	var tmp string
	for _, m := range c.VolumeMounts {
		mounts = append(mounts, mount{m.MountPath, vols[m.Name]})
		if m.MountPath == "/tmp" {
			tmp = vols[m.Name]
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i].from) > len(mounts[j].from) })
	var pairs []string
	for _, m := range mounts {
		pairs = append(pairs, m.from+"/", m.to+"/")
	}
	for from, to := range hosts {
		pairs = append(pairs, from, to)
	}
	rewrite := strings.NewReplacer(pairs...) // one pass: a replaced path is not rewritten again
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[fmt.Sprint(p.ContainerPort)] = freePort(t)
		ports[p.Name] = ports[fmt.Sprint(p.ContainerPort)]
	}
	listen := regexp.MustCompile(`^(--(?:metrics-addr|addr|listen))=0\.0\.0\.0:(\d+)$`)
	args := make([]string, 0, len(c.Args))
	for _, a := range append(append([]string{}, c.Command...), c.Args...) {
		if m := listen.FindStringSubmatch(a); m != nil {
			a = fmt.Sprintf("%s=127.0.0.1:%d", m[1], ports[m[2]])
		}
		args = append(args, rewrite.Replace(a))
	}
	env := []string{"TMPDIR=" + tmp}
	for _, e := range c.Env {
		env = append(env, e.Name+"="+e.Value)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: uint32(*psc.RunAsUser), Gid: uint32(*psc.RunAsGroup)}
		if fsGroup != nil {
			cred.Groups = []uint32{uint32(*fsGroup)}
		}
	} else {
		t.Logf("%s: not root, so it runs as uid %d instead of %d", name, os.Geteuid(), *psc.RunAsUser)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = root
	p := start(t, work, name, cmd, env, cred, false)
	probe := c.ReadinessProbe.HTTPGet
	path := probe.Path
	if o := os.Getenv(readyPathEnv); o != "" && tmpl.Labels["app.kubernetes.io/component"] == "processor" {
		path = o
	}
	p.ready = fmt.Sprintf("http://127.0.0.1:%d%s", ports[probe.Port.String()], path)
	p.grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	t.Logf("%s: %s (uid %d, ready at %s)", name, strings.ReplaceAll(strings.Join(args, " "), root+"/volumes", "<volumes>"), *psc.RunAsUser, p.ready)
	return p
}
