package broker_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/internal/testpki"
	"github.com/creditflow/creditflow/producers"
)

// These tests drive the embedded broker with outside clients (kcat,
// librdkafka through Python's confluent-kafka in the project's Python
// environment). The kcat ones are skipped where kcat is not installed
// (Debian: kcat).

func run(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %v: %v\nstderr: %s", name, args, err, errb.String())
	}
	return out.String()
}

func readTopic(t *testing.T, brokers []string, topic string, parts int) map[int][]consumers.Record {
	t.Helper()
	out := map[int][]consumers.Record{}
	for p := 0; p < parts; p++ {
		if _, err := consumers.ReadPartitionRange(context.Background(), brokers, kafkasec.Config{}, topic, p, -2, func(r consumers.Record) error {
			out[p] = append(out[p], r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestKcat(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat not installed (.ci/run installs it)")
		}
		t.Skip("kcat not installed")
	}
	b, err := broker.Start(broker.WithTopics(5, "kc"), broker.WithTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bs := strings.Join(b.Addrs(), ",")
	if md := run(t, "", "kcat", "-b", bs, "-L"); !strings.Contains(md, `topic "kc" with 5 partitions`) {
		t.Fatalf("kcat -L does not list the topic:\n%s", md)
	}
	// librdkafka's murmur2 partitioner must agree with ours (the Java one).
	var in strings.Builder
	keys := []string{"21", "foobar", "abc", "prompt-1", "prompt-2", "prompt-3", "p/007"}
	for i, k := range keys {
		fmt.Fprintf(&in, "%s:v%d\n", k, i)
	}
	run(t, in.String(), "kcat", "-b", bs, "-P", "-t", "kc", "-K:", "-X", "topic.partitioner=murmur2_random")
	got := 0
	for p, recs := range readTopic(t, b.Addrs(), "kc", 5) {
		for _, r := range recs {
			got++
			if want := producers.PartitionFor(r.Key, 5); want != p {
				t.Errorf("kcat put key %q in partition %d, PartitionFor says %d", r.Key, p, want)
			}
		}
	}
	if got != len(keys) {
		t.Fatalf("read %d records written by kcat, want %d", got, len(keys))
	}
	// Our producer → kcat consumer, with headers.
	p, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Produce(context.Background(), producers.Message{Topic: "out", Key: []byte("key1"), Value: []byte("from-go"),
		Headers: []producers.Header{{Key: "h", Value: []byte("hv")}}}); err != nil {
		t.Fatal(err)
	}
	out := run(t, "", "kcat", "-b", bs, "-C", "-t", "out", "-e", "-q", "-f", "%k|%s|%h\n")
	if strings.TrimSpace(out) != "key1|from-go|h=hv" {
		t.Fatalf("kcat read %q", out)
	}
}

func TestKcatSASL(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat not installed (.ci/run installs it)")
		}
		t.Skip("kcat not installed")
	}
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run(mech, func(t *testing.T) {
			b, err := broker.Start(broker.WithSASL(mech, "svc", "pw"), broker.WithTopics(1, "s"))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			bs := strings.Join(b.Addrs(), ",")
			auth := []string{"-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=" + mech, "-X", "sasl.username=svc", "-X", "sasl.password=pw"}
			run(t, "hello-sasl\n", "kcat", append([]string{"-b", bs, "-P", "-t", "s"}, auth...)...)
			out := run(t, "", "kcat", append([]string{"-b", bs, "-C", "-t", "s", "-e", "-q"}, auth...)...)
			if strings.TrimSpace(out) != "hello-sasl" {
				t.Fatalf("kcat over SASL read %q", out)
			}
			// And our own client reads what kcat wrote.
			recs := 0
			if _, err := consumers.ReadPartitionRange(context.Background(), b.Addrs(),
				kafkasec.Config{SASLMechanism: mech, Username: "svc", Password: "pw"}, "s", 0, -2,
				func(consumers.Record) error { recs++; return nil }); err != nil || recs != 1 {
				t.Fatalf("read back over SASL: %d records, %v", recs, err)
			}
		})
	}
}

const pyScript = `
import json, sys
from confluent_kafka import Producer, Consumer
bs = sys.argv[1]
p = Producer({"bootstrap.servers": bs, "partitioner": "murmur2_random", "acks": "all"})
for i, k in enumerate(["21", "foobar", "abc", "prompt-9", "x"]):
    p.produce("py", key=k.encode(), value=("py%d" % i).encode(), headers=[("src", b"python")])
assert p.flush(10) == 0
c = Consumer({"bootstrap.servers": bs, "group.id": "pygroup", "auto.offset.reset": "earliest", "enable.auto.commit": False})
c.subscribe(["fromgo"])
got = []
while len(got) < 3:
    m = c.poll(10)
    if m is None:
        break
    if m.error():
        raise SystemExit(str(m.error()))
    got.append({"key": m.key().decode(), "value": m.value().decode(), "partition": m.partition(),
                "headers": {k: v.decode() for k, v in (m.headers() or [])}})
    c.commit(message=m, asynchronous=False)
c.close()
print(json.dumps(got))
`

func TestPythonConfluentKafka(t *testing.T) {
	py := pyenvtest.Python(t)
	b, err := broker.Start(broker.WithTopics(4, "py", "fromgo"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := producers.New(producers.Config{Brokers: b.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := 0; i < 3; i++ {
		if err := p.Produce(context.Background(), producers.Message{Topic: "fromgo", Key: []byte(fmt.Sprint("g", i)),
			Value: []byte(fmt.Sprint("go", i)), Headers: []producers.Header{{Key: "src", Value: []byte("go")}}}); err != nil {
			t.Fatal(err)
		}
	}
	out := run(t, "", py, "-c", pyScript, strings.Join(b.Addrs(), ","))
	var got []struct {
		Key, Value string
		Partition  int
		Headers    map[string]string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("python output %q: %v", out, err)
	}
	if len(got) != 3 {
		t.Fatalf("python consumer got %d records, want 3: %s", len(got), out)
	}
	sort.Slice(got, func(i, j int) bool { return got[i].Key < got[j].Key })
	for i, r := range got {
		if r.Key != fmt.Sprint("g", i) || r.Value != fmt.Sprint("go", i) || r.Headers["src"] != "go" {
			t.Errorf("python read %+v", r)
		}
		if want := producers.PartitionFor([]byte(r.Key), 4); r.Partition != want {
			t.Errorf("key %s in partition %d, want %d", r.Key, r.Partition, want)
		}
	}
	// The Python group's commit is visible to us.
	c, err := consumers.CommittedOffsets(context.Background(), b.Addrs(), kafkasec.Config{}, "pygroup", "fromgo", []int{0, 1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	sum := int64(0)
	for _, o := range c {
		if o > 0 {
			sum += o
		}
	}
	if sum != 3 {
		t.Errorf("python group committed %v, want offsets summing to 3", c)
	}
	// Python's murmur2 placement equals ours.
	n := 0
	for part, recs := range readTopic(t, b.Addrs(), "py", 4) {
		for _, r := range recs {
			n++
			if want := producers.PartitionFor(r.Key, 4); want != part {
				t.Errorf("python put key %q in partition %d, want %d", r.Key, part, want)
			}
			if len(r.Headers) != 1 || string(r.Headers[0].Value) != "python" {
				t.Errorf("python headers: %+v", r.Headers)
			}
		}
	}
	if n != 5 {
		t.Fatalf("read %d python records, want 5", n)
	}
}

// TestKcatMutualTLS connects kcat with a client certificate to a broker
// that requires one.
func TestKcatMutualTLS(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("kcat not installed (.ci/run installs it)")
		}
		t.Skip("kcat not installed")
	}
	dir := t.TempDir()
	pki := testpki.New(t)
	serverCert := pki.Issue(t, "broker", true)
	ca := pki.WriteCA(t, dir)
	cc, ck := testpki.Write(t, dir, "client", pki.Issue(t, "client", false))
	pool := pki.Pool()
	b, err := broker.Start(broker.WithTopics(1, "tls"), broker.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	bs := strings.Join(b.Addrs(), ",")
	sec := []string{"-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + ca,
		"-X", "ssl.certificate.location=" + cc, "-X", "ssl.key.location=" + ck}
	run(t, "over-tls\n", "kcat", append([]string{"-b", bs, "-P", "-t", "tls"}, sec...)...)
	if out := run(t, "", "kcat", append([]string{"-b", bs, "-C", "-t", "tls", "-e", "-q"}, sec...)...); strings.TrimSpace(out) != "over-tls" {
		t.Fatalf("kcat over TLS read %q", out)
	}

	// TLS and SASL together (SASL_SSL).
	b2, err := broker.Start(broker.WithTopics(1, "tls"), broker.WithSASL("SCRAM-SHA-256", "svc", "pw"),
		broker.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert}}))
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	bs2 := strings.Join(b2.Addrs(), ",")
	sec2 := []string{"-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + ca,
		"-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=svc", "-X", "sasl.password=pw"}
	run(t, "sasl-ssl\n", "kcat", append([]string{"-b", bs2, "-P", "-t", "tls"}, sec2...)...)
	if out := run(t, "", "kcat", append([]string{"-b", bs2, "-C", "-t", "tls", "-e", "-q"}, sec2...)...); strings.TrimSpace(out) != "sasl-ssl" {
		t.Fatalf("kcat over SASL_SSL read %q", out)
	}
}
