package producers_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/segmentio/kafka-go"

	"github.com/creditflow/creditflow/chunk"
	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/internal/broker"
	"github.com/creditflow/creditflow/internal/kafkasec"
	"github.com/creditflow/creditflow/producers"
)

// Java client's Utils.murmur2 results (UtilsTest.testMurmur2), as signed
// 32-bit integers.
var javaMurmur2 = map[string]int32{
	"21":                         -973932308,
	"foobar":                     -790332482,
	"a-little-bit-long-string":   -985981536,
	"a-little-bit-longer-string": -1486304829,
	"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	"abc": 479470107,
}

func TestPartitionForMatchesJava(t *testing.T) {
	for key, h := range javaMurmur2 {
		for _, n := range []int{1, 3, 7, 12, 100} {
			// Java: Utils.toPositive(murmur2(key)) % numPartitions.
			want := int((uint32(h) & 0x7fffffff) % uint32(n))
			if got := producers.PartitionFor([]byte(key), n); got != want {
				t.Errorf("PartitionFor(%q, %d) = %d, want %d", key, n, got, want)
			}
		}
	}
	// Java partitions for 12 partitions, worked out by hand from the hashes
	// above: toPositive(h) % 12.
	for key, want := range map[string]int{"21": 0, "foobar": 6, "abc": 3} {
		if got := producers.PartitionFor([]byte(key), 12); got != want {
			t.Errorf("PartitionFor(%q, 12) = %d, want %d", key, got, want)
		}
	}
}

func start(t *testing.T, opts ...broker.Option) []string {
	t.Helper()
	b, err := broker.Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b.Addrs()
}

func readAll(t *testing.T, brokers []string, topic string, part int) []consumers.Record {
	t.Helper()
	var out []consumers.Record
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := consumers.ReadPartitionRange(ctx, brokers, kafkasec.Config{}, topic, part, -2, func(r consumers.Record) error {
		out = append(out, r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestProduceKeyedOrderHeadersPlacement(t *testing.T) {
	brokers := start(t)
	ctx := context.Background()
	const parts = 7
	if err := producers.EnsureTopics(ctx, brokers, kafkasec.Config{}, producers.TopicSpec{Name: "traj", Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	// Idempotent.
	if err := producers.EnsureTopics(ctx, brokers, kafkasec.Config{}, producers.TopicSpec{Name: "traj", Partitions: parts}); err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	reg := prometheus.NewRegistry()
	p, err := producers.New(producers.Config{Brokers: brokers}, producers.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []producers.Message
	keys := []string{"21", "foobar", "abc", "prompt-17", "prompt-4242"}
	for i := 0; i < 500; i++ {
		k := keys[i%len(keys)]
		msgs = append(msgs, producers.Message{Topic: "traj", Key: []byte(k), Value: []byte(strconv.Itoa(i)),
			Headers: []producers.Header{{Key: "seq", Value: []byte(strconv.Itoa(i))}, {Key: "bin", Value: []byte{0, 1, 255}}}})
	}
	if err := p.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	total := 0
	for part := 0; part < parts; part++ {
		last := -1
		for _, r := range readAll(t, brokers, "traj", part) {
			total++
			if want := producers.PartitionFor(r.Key, parts); want != part {
				t.Errorf("key %q in partition %d, murmur2 says %d", r.Key, part, want)
			}
			i, _ := strconv.Atoi(string(r.Value))
			if i <= last {
				t.Errorf("partition %d: value %d after %d (order within a call broken)", part, i, last)
			}
			last = i
			if len(r.Headers) != 2 || r.Headers[0].Key != "seq" || string(r.Headers[0].Value) != string(r.Value) ||
				r.Headers[1].Key != "bin" || !bytes.Equal(r.Headers[1].Value, []byte{0, 1, 255}) {
				t.Errorf("headers did not round trip: %+v", r.Headers)
			}
		}
	}
	if total != 500 {
		t.Fatalf("read %d records, want 500", total)
	}
	if got := testutil.ToFloat64(counterSum(t, reg, "creditflow_producer_records_total")); got != 500 {
		t.Fatalf("creditflow_producer_records_total = %v, want 500", got)
	}
}

func counterSum(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sum"}, func() float64 { return sum })
}

// Many ~100 KB records in one call must be split into batches under the
// broker's 1 MB limit, not rejected.
func TestLargeRecordsBatchedUnderLimit(t *testing.T) {
	brokers := start(t, broker.WithTopics(1, "big"))
	p, err := producers.New(producers.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []producers.Message
	for i := 0; i < 40; i++ {
		v := bytes.Repeat([]byte{byte(i)}, 100_000)
		msgs = append(msgs, producers.Message{Topic: "big", Key: []byte("same"), Value: v})
	}
	if err := p.Produce(context.Background(), msgs...); err != nil {
		t.Fatalf("40 x 100 KB records: %v", err)
	}
	recs := readAll(t, brokers, "big", 0)
	if len(recs) != 40 {
		t.Fatalf("read %d records, want 40", len(recs))
	}
	for i, r := range recs {
		if len(r.Value) != 100_000 || r.Value[0] != byte(i) {
			t.Fatalf("record %d: wrong value (len %d, first byte %d)", i, len(r.Value), r.Value[0])
		}
	}
	// A single record over the limit is written as chunks (3 of 768 KiB)...
	if err := p.Produce(context.Background(), producers.Message{Topic: "big", Key: []byte("same"), Value: make([]byte, 2_000_000)}); err != nil {
		t.Fatalf("2 MB record: %v", err)
	}
	recs = readAll(t, brokers, "big", 0)
	if len(recs) != 43 || len(recs[40].Value) != chunk.DefaultBytes || string(recs[40].Headers[0].Value) != "0/3" {
		t.Fatalf("2 MB record: %d messages on the topic, want 40 + 3 chunks", len(recs))
	}
	// ...and with chunking off it fails with a clear error, fast.
	off, err := producers.New(producers.Config{Brokers: brokers, ChunkBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	err = off.Produce(context.Background(), producers.Message{Topic: "big", Value: make([]byte, 2_000_000)})
	if err == nil {
		t.Fatal("a 2 MB record was accepted")
	}
	t.Logf("oversize error: %v", err)
}

func TestConcurrentProduce(t *testing.T) {
	brokers := start(t, broker.WithTopics(3, "conc"))
	p, err := producers.New(producers.Config{Brokers: brokers})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	errs := make(chan error, 16)
	for g := 0; g < 16; g++ {
		go func(g int) {
			var msgs []producers.Message
			for i := 0; i < 50; i++ {
				msgs = append(msgs, producers.Message{Topic: "conc", Key: []byte(fmt.Sprint("g", g)), Value: []byte(strconv.Itoa(i))})
			}
			errs <- p.Produce(context.Background(), msgs...)
		}(g)
	}
	for g := 0; g < 16; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for part := 0; part < 3; part++ {
		last := map[string]int{}
		for _, r := range readAll(t, brokers, "conc", part) {
			n++
			i, _ := strconv.Atoi(string(r.Value))
			if prev, ok := last[string(r.Key)]; ok && i != prev+1 {
				t.Errorf("key %s: %d after %d", r.Key, i, prev)
			}
			last[string(r.Key)] = i
		}
	}
	if n != 800 {
		t.Fatalf("read %d, want 800", n)
	}
}

// BenchmarkProduce reports records/s for 1 KB records in calls of 100.
func BenchmarkProduce(b *testing.B) {
	br, err := broker.Start(broker.WithTopics(3, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	p, err := producers.New(producers.Config{Brokers: br.Addrs()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	msgs := make([]producers.Message, 100)
	for i := range msgs {
		msgs[i] = producers.Message{Topic: "bench", Key: []byte(strconv.Itoa(i)), Value: make([]byte, 1024)}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := p.Produce(context.Background(), msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(msgs))/time.Since(start).Seconds(), "records/s")
}

// BenchmarkProduceLatency measures one-record Produce latency against a
// kafka-go Writer with its defaults (BatchTimeout 1s) in the same run.
func BenchmarkProduceLatency(b *testing.B) {
	br, err := broker.Start(broker.WithTopics(1, "lat"))
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	ctx := context.Background()
	p, err := producers.New(producers.Config{Brokers: br.Addrs()})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	msg := producers.Message{Topic: "lat", Key: []byte("k"), Value: []byte("v")}
	_ = p.Produce(ctx, msg) // warm up metadata and connections
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := p.Produce(ctx, msg); err != nil {
			b.Fatal(err)
		}
	}
	ours := time.Since(start) / time.Duration(b.N)
	b.StopTimer()
	w := &kafka.Writer{Addr: kafka.TCP(br.Addrs()...), Balancer: &kafka.Murmur2Balancer{}, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	km := kafka.Message{Topic: "lat", Key: []byte("k"), Value: []byte("v")}
	_ = w.WriteMessages(ctx, km)
	const baseN = 3
	bstart := time.Now()
	for i := 0; i < baseN; i++ {
		if err := w.WriteMessages(ctx, km); err != nil {
			b.Fatal(err)
		}
	}
	base := time.Since(bstart) / baseN
	b.ReportMetric(float64(ours.Microseconds()), "us/produce")
	b.ReportMetric(float64(base.Microseconds()), "us/kafka-go-default")
	b.ReportMetric(float64(base)/float64(ours), "speedup")
}

// TestTopicMaxMessageBytes checks that the embedded broker honours a
// topic's max.message.bytes (set through EnsureTopics, as --create-topics
// does), and that a producer whose batches fit it writes larger records as
// chunks that the topic accepts.
func TestTopicMaxMessageBytes(t *testing.T) {
	brokers := start(t)
	ctx := context.Background()
	if err := producers.EnsureTopics(ctx, brokers, kafkasec.Config{}, producers.TopicSpec{
		Name: "small", Partitions: 1, Configs: map[string]string{"max.message.bytes": "200000"}}); err != nil {
		t.Fatal(err)
	}
	// Under the broker's 1 MiB default but over the topic's limit: refused.
	big, err := producers.New(producers.Config{Brokers: brokers, ChunkBytes: -1, RetryFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	err = big.Produce(ctx, producers.Message{Topic: "small", Value: make([]byte, 300_000)})
	if err == nil || producers.Retriable(err) {
		t.Fatalf("a 300 KB record on a topic with max.message.bytes 200000: err %v, want a permanent refusal", err)
	}
	// Batches of 150 KB: the record goes as chunks of at most 150 KB.
	fit, err := producers.New(producers.Config{Brokers: brokers, BatchBytes: 150_000})
	if err != nil {
		t.Fatal(err)
	}
	defer fit.Close()
	v := make([]byte, 500_000)
	for i := range v {
		v[i] = byte(i * 7)
	}
	if err := fit.Produce(ctx, producers.Message{Topic: "small", Key: []byte("k"), Value: v}); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, brokers, "small", 0)
	if len(recs) < 4 {
		t.Fatalf("%d chunks, want at least 4", len(recs))
	}
	var joined []byte
	for _, r := range recs {
		if len(r.Value) > 150_000 {
			t.Fatalf("chunk of %d bytes over the batch limit", len(r.Value))
		}
		joined = append(joined, r.Value...)
	}
	if !bytes.Equal(joined, v) {
		t.Fatal("chunks do not add up to the record")
	}
}

// TestProduceErrorCountsRecords: a failed call counts the caller's
// messages, not the chunks they were written as, and a missing topic is
// named in the error.
func TestProduceErrorCountsRecords(t *testing.T) {
	brokers := start(t)
	p, err := producers.New(producers.Config{Brokers: brokers, BatchBytes: 100_000, RetryFor: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var msgs []producers.Message
	for i := 0; i < 3; i++ { // each about 3 chunks
		msgs = append(msgs, producers.Message{Topic: "no.such.topic", Key: []byte{byte('a' + i)}, Value: make([]byte, 250_000)})
	}
	err = p.Produce(context.Background(), msgs...)
	if err == nil {
		t.Fatal("producing to a topic that does not exist: no error")
	}
	for _, want := range []string{"3 of 3 messages", "no.such.topic"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
