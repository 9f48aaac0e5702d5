package stage_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/processors/stage"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// testSample is a sample of n tokens (a turn of policy tokens every 400).
func testSample(id string, n int) schemas.Sample {
	s := schemas.Sample{TrajectoryID: id, PromptID: "p", GroupSize: 2, Method: "lapo", Output: "advantages", Reward: 1,
		OutcomeAdvantage: 0.7, Tokens: make([]int32, n), LossMask: make([]uint8, n), Advantages: make([]float32, n)}
	for i := range s.Tokens {
		s.Tokens[i] = int32((i*7919 + 13) % schemas.DefaultVocabSize)
		if i%400 >= 300 {
			s.LossMask[i], s.Advantages[i] = 1, 0.7
		}
	}
	return s
}

// TestOutsideReadersAndChunks writes samples the way the advantage stage
// does (the stages' producer configuration: lz4, Kafka's default 1 MiB
// limit) and reads them with kcat and with Python (confluent-kafka):
// records under the limit are plain single messages, byte-identical to the
// Avro encoding, without chunk headers; a 128k-token sample travels as
// chunks that the Python reassembly (examples/python/creditflow_chunks.py)
// puts back together byte for byte.
func TestOutsideReadersAndChunks(t *testing.T) {
	kcat, _ := exec.LookPath("kcat")
	py := pyenvtest.Optional(t)
	if kcat == "" && py == "" {
		t.Skip("needs kcat or the project's Python environment (creditflow pyenv)")
	}
	b, err := broker.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := stage.DefaultConfig()
	cfg.Brokers = b.Addrs()
	if err := producers.EnsureTopics(ctx, cfg.Brokers, kafkasec.Config{}, cfg.TopicSpecs(1)...); err != nil {
		t.Fatal(err)
	}
	prod, err := producers.New(cfg.ProducerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var values [][]byte
	var msgs []producers.Message
	for i, n := range []int{1300, 131072, 1300} {
		s := testSample([]string{"small-1", "big", "small-2"}[i], n)
		v, err := schemas.Samples().Encode(&s)
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
		msgs = append(msgs, producers.Message{Topic: cfg.Topics.Samples, Key: []byte(s.TrajectoryID), Value: v,
			Headers: []producers.Header{{Key: schemas.HeaderSchema, Value: []byte(schemas.Samples().Name())}}})
	}
	if len(values[1]) <= 1<<20 {
		t.Fatalf("the big sample is %d bytes; the test needs one over 1 MiB", len(values[1]))
	}
	// One partition, so one Produce call keeps the three in order.
	if err := prod.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	chunks := (len(values[1]) + chunk.DefaultBytes - 1) / chunk.DefaultBytes
	addr := strings.Join(cfg.Brokers, ",")
	topic := cfg.Topics.Samples

	if kcat != "" {
		run := func(args ...string) []byte {
			t.Helper()
			out, err := exec.CommandContext(ctx, kcat, append([]string{"-b", addr, "-C", "-t", topic, "-p", "0", "-e", "-q"}, args...)...).Output()
			if err != nil {
				t.Fatalf("kcat %v: %v", args, err)
			}
			return out
		}
		offsets := strings.Fields(string(run("-f", "%o\n")))
		if len(offsets) != 2+chunks {
			t.Fatalf("kcat sees %d messages, want %d (two plain, %d chunks)", len(offsets), 2+chunks, chunks)
		}
		first := run("-o", "0", "-c", "1", "-f", "%s")
		if !bytes.Equal(first, values[0]) {
			t.Fatalf("kcat read %d bytes for the small sample, not the %d bytes of its Avro encoding", len(first), len(values[0]))
		}
		last := run("-o", strconv.Itoa(1+chunks), "-c", "1", "-f", "%s")
		if !bytes.Equal(last, values[2]) {
			t.Fatal("kcat: the second small sample is not byte-identical")
		}
		if h := strings.TrimSpace(string(run("-o", "0", "-c", "1", "-f", "%h"))); h != schemas.HeaderSchema+"="+schemas.Samples().Name() {
			t.Fatalf("kcat: headers of a plain record %q, want only the schema header", h)
		}
		if h := string(run("-o", "1", "-c", "1", "-f", "%h")); !strings.Contains(h, chunk.HeaderPosition+"=0/"+strconv.Itoa(chunks)) {
			t.Fatalf("kcat: headers of the first chunk %q", h)
		}
	}
	if py != "" {
		dir, _ := filepath.Abs("../../examples/python")
		cmd := exec.CommandContext(ctx, py, "creditflow_chunks.py", "--brokers", addr, "--topic", topic)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(dir, "..", "..", "python")) // the package from the checkout
		var stderr bytes.Buffer                                                                // librdkafka's own log lines (a newer one logs more) go there
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("python: %v\n%s%s", err, out, stderr.String())
		}
		var got []map[string]any
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("python output %q: %v", sc.Text(), err)
			}
			if _, ok := m["sha256"]; ok {
				got = append(got, m)
			} else if _, ok := m["broken"]; ok {
				t.Fatalf("python found a broken record: %v", m)
			}
		}
		if len(got) != 3 {
			t.Fatalf("python read %d records, want 3:\n%s", len(got), out)
		}
		for i, m := range got {
			sum := sha256.Sum256(values[i])
			if m["sha256"] != hex.EncodeToString(sum[:]) || int(m["bytes"].(float64)) != len(values[i]) {
				t.Fatalf("python record %d: %v bytes, sha256 %v; want %d bytes", i, m["bytes"], m["sha256"], len(values[i]))
			}
			if hs := m["headers"].([]any); len(hs) != 1 || hs[0] != schemas.HeaderSchema {
				t.Fatalf("python record %d headers %v", i, hs)
			}
		}
		if int(got[1]["offset"].(float64)) != chunks || int(got[2]["offset"].(float64)) != chunks+1 {
			t.Fatalf("python offsets: big %v, small %v; want %d and %d", got[1]["offset"], got[2]["offset"], chunks, chunks+1)
		}

		// The other way: a Python producer (a rollout worker with a long
		// trajectory) writes the big record as chunks; Go reads it back whole.
		if err := producers.EnsureTopics(ctx, cfg.Brokers, kafkasec.Config{}, producers.TopicSpec{Name: "py-chunks", Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "big.bin")
		if err := os.WriteFile(file, values[1], 0o644); err != nil {
			t.Fatal(err)
		}
		pcmd := exec.CommandContext(ctx, py, "creditflow_chunks.py", "--brokers", addr, "--topic", "py-chunks", "--produce", file, "--key", "big")
		pcmd.Dir = dir
		pcmd.Env = cmd.Env
		if out, err := pcmd.CombinedOutput(); err != nil {
			t.Fatalf("python producer: %v\n%s", err, out)
		}
		raw := rawTopic(t, cfg.Brokers, "py-chunks")
		whole := assemble(t, raw)
		if len(raw) != chunks || len(whole) != 1 || !bytes.Equal(whole[0].Value, values[1]) || string(whole[0].Key) != "big" {
			t.Fatalf("python wrote %d messages; Go put together %d records", len(raw), len(whole))
		}
	}
}
