package chunk

import (
	"bytes"
	"testing"
)

func value(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i * 31)
	}
	return v
}

func TestSplitParseMatches(t *testing.T) {
	v := value(2500)
	own := []Header{{Key: "creditflow-schema", Value: []byte("x")}}
	parts := Split(v, own, 1000)
	if len(parts) != 3 || len(parts[2].Value) != 500 {
		t.Fatalf("%d parts, last %d bytes; want 3 and 500", len(parts), len(parts[2].Value))
	}
	var joined []byte
	var info Info
	for i, p := range parts {
		var ok bool
		var err error
		info, ok, err = Parse(p.Headers)
		if !ok || err != nil || info.Index != i || info.Count != 3 || info.Bytes != 2500 || len(info.Of) != 64 {
			t.Fatalf("part %d: %+v ok %v err %v", i, info, ok, err)
		}
		if got := Strip(p.Headers); len(got) != 1 || got[0].Key != "creditflow-schema" {
			t.Fatalf("part %d: Strip left %v, want the record's one header", i, got)
		}
		joined = append(joined, p.Value...)
	}
	if !bytes.Equal(joined, v) {
		t.Fatal("parts do not add up")
	}
	// The SHA-256 of the 2500 bytes i*31 mod 256, computed outside Go
	// (Python's hashlib).
	if want := "aee501bc0007aafb37dbc75880226acc0f6c925956086cabbef6ec53cfb5736b"; info.Of != want {
		t.Fatalf("creditflow-chunk-of %s, want %s", info.Of, want)
	}
	if !info.Matches(joined) {
		t.Fatal("the reassembled value does not match its headers")
	}
	if info.Matches(joined[:2499]) {
		t.Fatal("a short value matches")
	}
	flipped := bytes.Clone(joined)
	flipped[1234] ^= 1
	if info.Matches(flipped) {
		t.Fatal("a changed byte matches")
	}
}

func TestSplitDeterministicAndSmall(t *testing.T) {
	v := value(3000)
	a, b := Split(v, nil, 1000), Split(v, nil, 1000)
	for i := range a {
		if !bytes.Equal(a[i].Value, b[i].Value) || len(a[i].Headers) != 3 {
			t.Fatalf("part %d differs between two splits or has %d headers", i, len(a[i].Headers))
		}
		for j := range a[i].Headers {
			if a[i].Headers[j].Key != b[i].Headers[j].Key || !bytes.Equal(a[i].Headers[j].Value, b[i].Headers[j].Value) {
				t.Fatal("Split is not deterministic")
			}
		}
	}
	if got := string(a[1].Headers[0].Value); got != "1/3" {
		t.Fatalf("position header %q, want 1/3", got)
	}
	if got := string(a[0].Headers[2].Value); got != "3000" {
		t.Fatalf("bytes header %q, want 3000", got)
	}
	// A value that fits is still one chunk; an empty value is one empty chunk.
	if p := Split(value(10), nil, 0); len(p) != 1 || len(p[0].Value) != 10 {
		t.Fatalf("small value: %d parts", len(p))
	}
	if p := Split(nil, nil, 100); len(p) != 1 || len(p[0].Value) != 0 {
		t.Fatalf("empty value: %d parts", len(p))
	}
	if Strip([]Header{{Key: HeaderPosition}, {Key: HeaderOf}, {Key: HeaderBytes}}) != nil {
		t.Fatal("Strip of only chunk headers is not nil")
	}
}

func TestParseRejects(t *testing.T) {
	of := Split(value(2500), nil, 1000)[0].Headers[1].Value
	if _, ok, _ := Parse([]Header{{Key: "creditflow-schema"}}); ok {
		t.Fatal("a plain message parsed as a chunk")
	}
	for _, bad := range [][]Header{
		{{Key: HeaderPosition, Value: []byte("3/3")}, {Key: HeaderOf, Value: of}, {Key: HeaderBytes, Value: []byte("2500")}},
		{{Key: HeaderPosition, Value: []byte("0/3")}, {Key: HeaderOf, Value: []byte("zz")}, {Key: HeaderBytes, Value: []byte("2500")}},
		{{Key: HeaderPosition, Value: []byte("0/3")}, {Key: HeaderOf, Value: of}, {Key: HeaderBytes, Value: []byte("-1")}},
		{{Key: HeaderPosition, Value: []byte("0/3")}, {Key: HeaderOf, Value: of}, {Key: HeaderBytes, Value: []byte("2")}},
		{{Key: HeaderPosition, Value: []byte("0-3")}},
		{{Key: HeaderPosition, Value: []byte("x/3")}},
		{{Key: HeaderPosition, Value: []byte("0/0")}},
	} {
		if _, ok, err := Parse(bad); !ok || err == nil {
			t.Fatalf("malformed chunk headers %q accepted", bad[0].Value)
		}
	}
}
