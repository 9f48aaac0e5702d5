package schemas

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// v1Pins are the fingerprints of the schemas first published as
// io.creditflow.v1 (schemas/v1/*.avsc); records with them are on topics
// and must decode forever.
var v1Pins = map[string]string{
	NameTrajectory: "3ba0bd24c70af6b5",
	NameScored:     "988295c3e1787e9c",
	NameSample:     "accbea26abfb68c4",
}

// golden reads hex-encoded records (one a line) from testdata/v1.
func golden(t testing.TB, name string) [][]byte { t.Helper(); return goldenGen(t, "v1", name) }

// goldenGen reads hex-encoded records (one a line) from testdata/<gen>.
func goldenGen(t testing.TB, gen, name string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + gen + "/" + name + ".hex")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, line := range strings.Fields(string(raw)) {
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// laterPins are the fingerprints of the generations after v1, in order
// (schemas/vN/*.avsc): v2 Scored is the one with Trajectory.source and its
// graphs only in attention, before compact graphs; v3 the one with compact
// graphs of G_AA and G_AO only, before the sum form.
var laterPins = map[string][]string{
	NameScored: {"7ccadbc95ab7607d", "fe3c928b94decf4d"},
}

func TestHistoryFingerprintsArePinned(t *testing.T) {
	for name, c := range map[string]*compiled{NameTrajectory: compiledTrajectory(), NameScored: compiledScored(), NameSample: compiledSample()} {
		if c.err != nil {
			t.Fatal(c.err)
		}
		if len(c.older) != 1+len(laterPins[name]) {
			t.Fatalf("%s: %d older schemas, want %d", name, len(c.older), 1+len(laterPins[name]))
		}
		for i, pin := range laterPins[name] {
			w := c.older[1+i]
			if got := hex.EncodeToString(w.fp[:]); got != pin {
				t.Errorf("%s v%d fingerprint %s, pinned %s", name, 2+i, got, pin)
			}
			if w.fp == c.fp {
				t.Errorf("%s: the current schema still has the v%d fingerprint", name, 2+i)
			}
		}
		if got := hex.EncodeToString(c.older[0].fp[:]); got != v1Pins[name] {
			t.Errorf("%s v1 fingerprint %s, pinned %s", name, got, v1Pins[name])
		}
		if c.older[0].fp == c.fp {
			t.Errorf("%s: the current schema still has the v1 fingerprint", name)
		}
	}
}

// TestGoldenV1Decodes decodes bytes written by the v1 schemas (before the
// optional fields source and scorer_policy_version existed) with today's
// codecs: every old field keeps its value, the new ones take their defaults.
func TestGoldenV1Decodes(t *testing.T) {
	wantTraj := sampleTrajectory()
	wantTraj.Source = nil
	wantScored := sampleScored()
	wantScored.Trajectory.Source = nil
	wantSample := sampleSample()
	wantSample.ScorerPolicyVersion, wantSample.Source = nil, nil

	check := func(name string, b []byte, pin string, decode func([]byte) (any, error), want any) {
		t.Helper()
		if got := hex.EncodeToString(b[2:10]); got != pin {
			t.Fatalf("%s golden has fingerprint %s, want %s", name, got, pin)
		}
		got, err := decode(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s decoded\n%+v\nwant\n%+v", name, got, want)
		}
	}
	check("trajectory", golden(t, "trajectory")[0], v1Pins[NameTrajectory],
		func(b []byte) (any, error) { return Trajectories().Decode(b) }, wantTraj)
	check("scored", golden(t, "scored")[0], v1Pins[NameScored],
		func(b []byte) (any, error) { return ScoredRecords().Decode(b) }, wantScored)
	check("sample", golden(t, "sample")[0], v1Pins[NameSample],
		func(b []byte) (any, error) { return Samples().Decode(b) }, wantSample)
	// The dead-letter schema did not change: its golden bytes are still
	// exactly what the codec writes.
	dl, err := DeadLetters().Encode(sampleDeadLetter())
	if err != nil || hex.EncodeToString(dl) != hex.EncodeToString(golden(t, "dead_letter")[0]) {
		t.Fatalf("dead letter bytes changed: %x (%v)", dl, err)
	}
	for _, name := range []string{"trajectory", "scored", "sample"} {
		if SchemaOf(golden(t, name)[0]) == "" {
			t.Errorf("SchemaOf does not recognize the v1 %s", name)
		}
	}
	// The v1 scored record is not a trajectory: still unknown_schema.
	if _, err := Trajectories().Decode(golden(t, "scored")[0]); ReasonOf(err) != ReasonUnknownSchema {
		t.Fatalf("v1 scored decoded as a trajectory: %v", err)
	}
	// The old records re-encode with the current schema (new fingerprint,
	// one null byte per added optional field) and decode to the same value.
	tr, _ := Trajectories().Decode(golden(t, "trajectory")[0])
	b, err := Trajectories().Encode(tr)
	if err != nil {
		t.Fatal(err)
	}
	old := golden(t, "trajectory")[0]
	if len(b) != len(old)+1 || hex.EncodeToString(b[10:len(b)-1]) != hex.EncodeToString(old[10:]) || b[len(b)-1] != 0 {
		t.Fatalf("re-encoded v1 trajectory %x, old %x", b, old)
	}
}

// TestV1WriterRandom writes random records with the v1 writer schemas and
// checks they decode with the current codecs to the same values with the
// new fields at their defaults; corrupting them still gives a DecodeError.
func TestV1WriterRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300; i++ {
		tr := randTrajectory(rng)
		tr.Source = nil
		native := trajectoryToNative(tr)
		delete(native, "source")
		w := compiledTrajectory().older[0]
		b, err := w.avro.BinaryFromNative(append([]byte{magic0, magic1}, w.fp[:]...), native)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Trajectories().Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, tr) {
			t.Fatalf("v1 trajectory decoded\n%+v\nwant\n%+v", got, tr)
		}
		for cut := 10; cut < len(b); cut += 1 + len(b)/7 {
			_, err := Trajectories().Decode(b[:cut])
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("v1 record truncated at %d of %d bytes: %v", cut, len(b), err)
			}
		}
	}
}

func TestResolveRules(t *testing.T) {
	base := `{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"s","type":{"type":"record","name":"S","fields":[{"name":"x","type":"int"}]}},{"name":"l","type":{"type":"array","items":{"type":"record","name":"I","fields":[{"name":"y","type":"int"}]}}}]}`
	cases := []struct {
		name, reader string
		ok           bool
	}{
		{"unchanged", base, true},
		{"appended optional", strings.Replace(base, `]}}}]}`, `]}}},{"name":"n","type":["null","string"],"default":null}]}`, 1), true},
		{"appended with value default", strings.Replace(base, `]}}}]}`, `]}}},{"name":"n","type":"long","default":7},{"name":"m","type":"string","default":"x"}]}`, 1), true},
		{"appended in a nested record", strings.Replace(base, `{"name":"x","type":"int"}`, `{"name":"x","type":"int"},{"name":"z","type":["null","long"],"default":null}`, 1), true},
		{"appended in an array item", strings.Replace(base, `{"name":"y","type":"int"}`, `{"name":"y","type":"int"},{"name":"z","type":"double","default":0.5}`, 1), true},
		{"appended without default", strings.Replace(base, `]}}}]}`, `]}}},{"name":"n","type":"long"}]}`, 1), false},
		{"inserted in the middle", strings.Replace(base, `{"name":"a","type":"long"},`, `{"name":"a","type":"long"},{"name":"n","type":"long","default":0},`, 1), false},
		{"removed", strings.Replace(base, `{"name":"a","type":"long"},`, ``, 1), false},
		{"renamed", strings.Replace(base, `"name":"a"`, `"name":"b"`, 1), false},
		{"retyped", strings.Replace(base, `"name":"a","type":"long"`, `"name":"a","type":"int"`, 1), false},
		{"null default on a non-null-first union", strings.Replace(base, `]}}}]}`, `]}}},{"name":"n","type":["string","null"],"default":null}]}`, 1), false},
	}
	for _, c := range cases {
		f, err := resolveSchemas(base, c.reader)
		if (err == nil) != c.ok {
			t.Errorf("%s: err %v, want ok=%v", c.name, err, c.ok)
		}
		if c.name == "unchanged" && f != nil {
			t.Errorf("unchanged schema has a filler")
		}
		if c.ok && c.name != "unchanged" && f == nil {
			t.Errorf("%s: no filler", c.name)
		}
	}
	// The filler writes the defaults where they belong.
	f, err := resolveSchemas(base, strings.Replace(strings.Replace(base, `{"name":"y","type":"int"}`, `{"name":"y","type":"int"},{"name":"z","type":"double","default":0.5}`, 1),
		`]}}}]}`, `]}}},{"name":"n","type":["long","null"],"default":3}]}`, 1))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{"a": int64(1), "s": map[string]any{"x": int32(2)}, "l": []any{map[string]any{"y": int32(1)}, map[string]any{"y": int32(2)}}}
	f.apply(m)
	if fmt.Sprint(m) != "map[a:1 l:[map[y:1 z:0.5] map[y:2 z:0.5]] n:map[long:3] s:map[x:2]]" {
		t.Fatalf("filled %v", m)
	}
}

// BenchmarkDecodeVersions decodes the same trajectory written with the
// current schema and with the v1 schema (resolved to the current one), and
// the current-schema bytes with a codec that has no older schemas
// registered (the decode path before schema evolution existed), in one
// loop, and reports the time of each and the ratios.
func BenchmarkDecodeVersions(b *testing.B) {
	bare := *compiledTrajectory()
	bare.older = nil
	noHistory := newCodec(&bare, nil, trajectoryToNative, trajectoryFromNative, trajectorySize)
	for _, n := range []int{1024, 8192} {
		tr := bigTrajectory(n, rand.New(rand.NewPCG(uint64(n), 2)))
		cur, err := Trajectories().Encode(tr)
		if err != nil {
			b.Fatal(err)
		}
		native := trajectoryToNative(tr)
		delete(native, "source")
		w := compiledTrajectory().older[0]
		old, err := w.avro.BinaryFromNative(append([]byte{magic0, magic1}, w.fp[:]...), native)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dk", n/1024), func(b *testing.B) {
			var tc, to, tn time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := Trajectories().Decode(cur); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := Trajectories().Decode(old); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if _, err := noHistory.Decode(cur); err != nil {
					b.Fatal(err)
				}
				tc += t1.Sub(t0)
				to += t2.Sub(t1)
				tn += time.Since(t2)
			}
			b.ReportMetric(float64(tc.Nanoseconds())/float64(b.N), "current-ns/op")
			b.ReportMetric(float64(to.Nanoseconds())/float64(b.N), "v1-ns/op")
			b.ReportMetric(float64(tn.Nanoseconds())/float64(b.N), "no-history-ns/op")
			b.ReportMetric(float64(to)/float64(tc), "v1/current")
			b.ReportMetric(float64(tc)/float64(tn), "current/no-history")
		})
	}
}
