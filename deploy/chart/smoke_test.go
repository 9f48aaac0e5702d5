package chart

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
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
	"github.com/creditflow/creditflow/scorer/cpumodel"
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
// the rendered scorer, processor and monitor containers as Kubernetes would:
// their command and args, as the rendered uid/gid with fsGroup as a
// supplementary group, with ConfigMap and Secret volumes laid out the way the
// kubelet writes them (timestamped directory, ..data link, one link per key;
// mode from defaultMode, group fsGroup, group-read added) against a
// `creditflow broker` (TLS + SCRAM). The scorer is the Python pod (`python3
// -m cfpod`, HTTPS, bearer tokens) on the tiny model in its model volume, run
// with the project's Python environment (scorerpod_test.go); where that
// environment cannot be had outside CI, `creditflow scorer` stands in (under
// CI=true that is a failure). Every process must answer its readiness and
// liveness probes with 200, the stages must turn trajectories into samples
// through the scorer, the monitor must export the processor's group lag
// once every processor has stopped, and each process must exit cleanly
// within its terminationGracePeriodSeconds after SIGTERM.
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

	py := findPodPython(t)
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
  # What a machine without an accelerator needs; everything else as rendered by default.
  device: cpu
  dtype: float32
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

	// The model volume (the PersistentVolumeClaim scorer.model.existingClaim): the tiny model
	// at scorer.model.path, written by root as a weights job would.
	model := filepath.Join(work, "model")
	if err := cpumodel.WriteTiny(model); err != nil {
		t.Fatal(err)
	}
	data["pvc/creditflow-models"] = map[string][]byte{}
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json"} {
		data["pvc/creditflow-models"]["policy/"+f] = readFile(t, filepath.Join(model, f))
	}
	env := podEnv{bin: bin, py: py, data: data, ca: ca.Pool()}
	templates := podTemplates(t, objs)

	// The scorer the chart's Services name, served on localhost (its certificate's name).
	var scorer *proc
	if py != nil {
		scorer = runPod(t, work, "scorer-0", templates["Deployment/cf-creditflow-scorer"], env)
		scorer.waitReady(t, 3*time.Minute) // importing torch takes a while on a small machine
	} else {
		t.Log("the project's Python environment is missing: `creditflow scorer` stands in for the scorer pod")
		tokenFile := filepath.Join(pki, "token")
		writeFile(t, tokenFile, token, 0o600)
		port := freePort(t)
		scorer = start(t, work, "scorer", exec.Command(bin, "scorer", fmt.Sprintf("--listen=127.0.0.1:%d", port),
			"--tls-cert="+scorerCert, "--tls-key="+scorerKey, "--token-file="+tokenFile), nil, nil, false)
		scorer.port = port
	}
	env.hosts = map[string]string{"cf-creditflow-scorer.ns.svc:8080": fmt.Sprintf("localhost:%d", scorer.port),
		"cf-creditflow-scorer-headless.ns.svc:8080": fmt.Sprintf("localhost:%d", scorer.port)}

	// Every processor and monitor pod, replicas times.
	var pods []*proc
	ids := []string{}
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
			pods = append(pods, runPod(t, work, fmt.Sprintf("%s-%d", strings.ToLower(strings.ReplaceAll(id, "/", "-")), r), tmpl, env))
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
	if py != nil { // the rendered scorer pod served them
		m := regexp.MustCompile(`(?m)^creditflow_scorer_server_items_total\{op="score"\} ([0-9.e+]+)$`).FindStringSubmatch(scorer.get(t, "/metrics"))
		if m == nil || m[1] == "0" {
			t.Errorf("the scorer pod served no score request (%v)", m)
		}
	}
	var monitor *proc
	for _, p := range append(pods, scorer) {
		if p.exited() {
			t.Fatalf("%s exited while processing:\n%s", p.name, p.logTail())
		}
		if p.live != "" {
			p.waitLive(t, 30*time.Second) // the scorer's /livez runs its canary when it has been idle
		}
		if p.uid >= 0 {
			if got := procUID(t, p.cmd.Process.Pid); got != p.uid {
				t.Errorf("%s runs as uid %d, rendered %d", p.name, got, p.uid)
			}
		}
		if strings.Contains(p.name, "monitor") {
			monitor = p
		}
	}

	// SIGTERM: each exits cleanly within its grace period; the processors first. With none
	// left, the monitor still exports their groups' lag from the brokers (the lag alerts).
	for _, p := range pods {
		if p != monitor {
			p.stop(t)
		}
	}
	metrics := monitor.get(t, "/metrics")
	for _, g := range []string{"smoke.score", "smoke.advantage"} {
		if !strings.Contains(metrics, `creditflow_consumer_group_lag_records{group="`+g+`"`) {
			t.Errorf("with every processor stopped the monitor exports no lag of group %s", g)
		}
	}
	monitor.stop(t)
	if py != nil {
		scorer.stop(t)
	}
}

// podEnv is what runPod needs besides the pod: the creditflow binary (the
// processor image's entrypoint), the Python environment for a `python3 -m
// cfpod` container, the volumes' contents (ConfigMaps and Secrets by name,
// PersistentVolumeClaims as "pvc/<claim>" with file paths), the cluster DNS
// (rendered host:port to a local one) and the CA the pods' HTTPS probes
// trust.
type podEnv struct {
	bin   string
	py    *podPython
	data  map[string]map[string][]byte
	hosts map[string]string
	ca    *x509.CertPool
}

// runPod starts tmpl's first container as the kubelet would on a node
// where the pod's volumes live under work/pods/name and its ports are
// remapped to free loopback ports (each pod has its own network namespace
// in a cluster; here they share one). hosts maps rendered host:port pairs
// to local ones (the cluster DNS).
func runPod(t *testing.T, work, name string, tmpl corev1.PodTemplateSpec, pe podEnv) *proc {
	t.Helper()
	data, hosts := pe.data, pe.hosts
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
		case v.PersistentVolumeClaim != nil:
			src, ok := data["pvc/"+v.PersistentVolumeClaim.ClaimName]
			if !ok {
				t.Fatalf("%s: volume %s: claim %s unknown to the test", name, v.Name, v.PersistentVolumeClaim.ClaimName)
			}
			writeClaim(t, dir, src)
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
		v := e.Value
		for _, m := range mounts {
			if v == m.from {
				v = m.to // e.g. HOME=/tmp: the pod's own /tmp volume
			}
		}
		env = append(env, e.Name+"="+v)
	}
	// The program: the processor image's entrypoint (creditflow) unless the container
	// names a command; the scorer image's python3 is the project's Python environment.
	prog := pe.bin
	if len(c.Command) > 0 {
		if c.Command[0] != "python3" || pe.py == nil {
			t.Fatalf("%s: command %v: the smoke test runs creditflow and python3 only", name, c.Command)
		}
		prog, args = pe.py.python, args[1:]
		env = append(env, pe.py.env()...)
	}
	argv := append([]string{prog}, args...)
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		cred = &syscall.Credential{Uid: uint32(*psc.RunAsUser), Gid: uint32(*psc.RunAsGroup)}
		if fsGroup != nil {
			cred.Groups = []uint32{uint32(*fsGroup)}
		}
		if prog != pe.bin && !pe.py.readableBy(t, cred.Uid, cred.Gid, cred.Groups) {
			wrapped, err := pe.py.asUser(work, cred.Uid, cred.Gid, cred.Groups, argv)
			if err != nil {
				t.Fatalf("%s: cannot run the Python environment as uid %d: %v", name, cred.Uid, err)
			}
			argv, cred = wrapped, nil
			t.Logf("%s: the Python environment is shown to uid %d through bind mounts in a mount namespace of its own", name, *psc.RunAsUser)
		}
	} else {
		t.Logf("%s: not root, so it runs as uid %d instead of %d", name, os.Geteuid(), *psc.RunAsUser)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = root
	p := start(t, work, name, cmd, env, cred, false)
	p.uid = -1
	if os.Geteuid() == 0 {
		p.uid = int(*psc.RunAsUser)
	}
	url := func(probe *corev1.HTTPGetAction, path string) string {
		scheme, host := "http", "127.0.0.1"
		if probe.Scheme == corev1.URISchemeHTTPS {
			scheme, host = "https", "localhost" // the name the certificate holds
			p.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pe.ca, MinVersion: tls.VersionTLS12}}}
		}
		return fmt.Sprintf("%s://%s:%d%s", scheme, host, ports[probe.Port.String()], path)
	}
	probe := c.ReadinessProbe.HTTPGet
	path := probe.Path
	if o := os.Getenv(readyPathEnv); o != "" && tmpl.Labels["app.kubernetes.io/component"] == "processor" {
		path = o
	}
	p.ready = url(probe, path)
	if lp := c.LivenessProbe; lp != nil && lp.HTTPGet != nil && os.Getenv(readyPathEnv) == "" {
		p.live = url(lp.HTTPGet, lp.HTTPGet.Path)
	}
	p.base = url(probe, "")
	if len(c.Ports) > 0 {
		p.port = ports[fmt.Sprint(c.Ports[0].ContainerPort)]
	}
	p.grace = time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	t.Logf("%s: %s (uid %d, ready at %s)", name, strings.ReplaceAll(strings.Join(args, " "), root+"/volumes", "<volumes>"), *psc.RunAsUser, p.ready)
	return p
}

// procUID is the real uid of a running process.
func procUID(t *testing.T, pid int) int {
	t.Helper()
	for _, l := range strings.Split(string(readFile(t, fmt.Sprintf("/proc/%d/status", pid))), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" {
			var uid int
			fmt.Sscan(f[1], &uid)
			return uid
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return -1
}
