package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/creditflow/creditflow/consumers"
	"github.com/creditflow/creditflow/producers"
	"github.com/creditflow/creditflow/schemas"
)

// A floor phase writes, per record read, one whole output record: the
// records in turn, a chunked one as all its chunks, to its own topic.
func TestFloorWriterWritesWholeRecordsInTurn(t *testing.T) {
	hdr := []producers.Header{{Key: schemas.HeaderSchema, Value: []byte("x")}}
	recs := []floorRecord{
		{{Topic: "from", Key: []byte("a"), Value: []byte("A"), Headers: hdr}},
		{{Key: []byte("b"), Value: []byte("B0")}, {Key: []byte("b"), Value: []byte("B1")}},
	}
	w := floorWriter("out", recs, false)
	var msgs []producers.Message
	for seq := 0; seq < 5; seq++ {
		msgs = w(msgs, consumers.Record{Key: []byte("in")}, seq)
	}
	var got []string
	for _, m := range msgs {
		if m.Topic != "out" {
			t.Fatalf("message %+v: want topic out", m)
		}
		got = append(got, string(m.Key)+":"+string(m.Value))
	}
	if want := "a:A b:B0 b:B1 a:A b:B0 b:B1 a:A"; strings.Join(got, " ") != want {
		t.Fatalf("wrote %q, want %q", strings.Join(got, " "), want)
	}
	if len(msgs[0].Headers) != 1 || recs[0][0].Topic != "from" {
		t.Fatalf("headers %v kept, source record's topic %q left alone", msgs[0].Headers, recs[0][0].Topic)
	}
	// With inputKey (the score floor) the output goes under the input's key.
	msgs = floorWriter("out", recs, true)(nil, consumers.Record{Key: []byte("in")}, 1)
	if len(msgs) != 2 || string(msgs[0].Key) != "in" || string(msgs[1].Key) != "in" || string(recs[1][0].Key) != "b" {
		t.Fatalf("with inputKey: %+v (source keys %q)", msgs, recs[1][0].Key)
	}
}

// readFloorRecords puts a record's chunks back under it (they share its checksum;
// the chunk header counts them) and keeps at most floorRecords records.
func TestReadFloorRecordsGroupsChunks(t *testing.T) {
	ctx, b := testBroker(t)
	e := &benchEnv{run: "floor", brokers: b.addrs, partitions: 1, log: zerolog.Nop()}
	topic := e.name("samples")
	if err := producers.EnsureTopics(ctx, e.brokers, benchSec, producers.TopicSpec{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	p, err := producers.New(e.producerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msg := func(k, v string) producers.Message {
		return producers.Message{Topic: topic, Key: []byte(k), Value: []byte(v)}
	}
	// Two records of one key (a group's scored records share their prompt's
	// key) stay two; a chunked one is one.
	msgs := []producers.Message{msg("p0", "s0"), msg("p0", "s1")}
	big := strings.Repeat("x", 3000)
	chunks := producers.Split(msg("t1", big), 1024)
	msgs = append(msgs, chunks...)
	for i := 2; i < floorRecords+10; i++ {
		msgs = append(msgs, msg(fmt.Sprintf("t%d", i), fmt.Sprintf("s%d", i)))
	}
	if err := p.Produce(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	got, err := e.readFloorRecords(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != floorRecords {
		t.Fatalf("%d records, want %d", len(got), floorRecords)
	}
	if len(chunks) != 3 || len(got[0]) != 1 || string(got[1][0].Value) != "s1" || len(got[2]) != 3 || string(got[3][0].Value) != "s2" {
		t.Fatalf("%d chunks; records 0-3: %d, %q, %d messages, %q", len(chunks), len(got[0]), got[1][0].Value, len(got[2]), got[3][0].Value)
	}
	var whole []byte
	for _, m := range got[2] {
		whole = append(whole, m.Value...)
	}
	if string(whole) != big {
		t.Fatalf("the chunked record reads back as %d bytes, want %d", len(whole), len(big))
	}
}
