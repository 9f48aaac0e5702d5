package producers

import (
	"bytes"
	"errors"
	"testing"

	"github.com/creditflow/creditflow/chunk"
)

func TestSplitParseRoundTrip(t *testing.T) {
	v := make([]byte, 2500)
	for i := range v {
		v[i] = byte(i * 31)
	}
	m := Message{Topic: "t", Key: []byte("k"), Value: v, Headers: []Header{{Key: "creditflow-schema", Value: []byte("x")}}}
	parts := Split(m, 1000)
	if len(parts) != 3 || len(parts[2].Value) != 500 {
		t.Fatalf("%d parts, last %d bytes; want 3 and 500", len(parts), len(parts[2].Value))
	}
	var joined []byte
	for i, p := range parts {
		info, ok, err := chunk.Parse(p.Headers)
		if !ok || err != nil || info.Index != i || info.Count != 3 || info.Bytes != 2500 || len(info.Of) != 64 {
			t.Fatalf("chunk %d: %+v ok %v err %v", i, info, ok, err)
		}
		if p.Headers[0].Key != "creditflow-schema" || string(p.Key) != "k" || p.Topic != "t" {
			t.Fatalf("chunk %d lost the record's key, topic or headers", i)
		}
		joined = append(joined, p.Value...)
	}
	if !bytes.Equal(joined, v) {
		t.Fatal("chunks do not add up")
	}
	again := Split(m, 1000)
	for i := range parts {
		if !bytes.Equal(parts[i].Value, again[i].Value) || string(parts[i].Headers[2].Value) != string(again[i].Headers[2].Value) {
			t.Fatal("Split is not deterministic")
		}
	}
	if _, ok, _ := chunk.Parse(m.Headers); ok {
		t.Fatal("a plain message parsed as a chunk")
	}
	for _, bad := range [][]Header{
		{{Key: chunk.HeaderPosition, Value: []byte("3/3")}, {Key: chunk.HeaderOf, Value: parts[0].Headers[2].Value}, {Key: chunk.HeaderBytes, Value: []byte("2500")}},
		{{Key: chunk.HeaderPosition, Value: []byte("0/3")}, {Key: chunk.HeaderOf, Value: []byte("zz")}, {Key: chunk.HeaderBytes, Value: []byte("2500")}},
		{{Key: chunk.HeaderPosition, Value: []byte("0/3")}, {Key: chunk.HeaderOf, Value: parts[0].Headers[2].Value}, {Key: chunk.HeaderBytes, Value: []byte("-1")}},
		{{Key: chunk.HeaderPosition, Value: []byte("0-3")}},
	} {
		if _, ok, err := chunk.Parse(bad); !ok || err == nil {
			t.Fatalf("malformed chunk headers %q accepted", bad[0].Value)
		}
	}
}

// A chunk that failed makes every chunk of its record fail (and be written
// again, in order); other records keep their own outcome.
func TestWholeRecordsRetry(t *testing.T) {
	boom := errors.New("boom")
	owner := []int{0, 1, 1, 1, 2}
	werrs := []error{nil, nil, boom, nil, boom}
	got := wholeRecords(werrs, owner)
	want := []bool{false, true, true, true, true}
	for i := range got {
		if (got[i] != nil) != want[i] {
			t.Fatalf("message %d: failed %v, want %v", i, got[i] != nil, want[i])
		}
	}
	if o := failedOwners(got, owner, 4, true); len(o) != 4 || o[0] != 1 || o[3] != 2 {
		t.Fatalf("owners of the retry %v, want [1 1 1 2]", o)
	}
	if o := failedOwners(nil, owner, 5, false); len(o) != 5 {
		t.Fatalf("a failed call keeps every owner: %v", o)
	}
}
