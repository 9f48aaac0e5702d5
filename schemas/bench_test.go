package schemas

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/linkedin/goavro/v2"
)

// arraySchema is trajectory.avsc with every packed field replaced by the
// plain Avro array layout (array<int> for ids, array<float> for log-probs):
// the alternative the packed layout is measured against.
func arraySchema() string {
	s := trajectorySchema
	s = strings.ReplaceAll(s, `"name": "Trajectory"`, `"name": "TrajectoryArrays"`)
	for _, f := range []string{"prompt", "action", "observation"} {
		s = strings.Replace(s, `{"name": "`+f+`", "type": "bytes"`, `{"name": "`+f+`", "type": {"type": "array", "items": "int"}`, 1)
	}
	s = strings.Replace(s, `{"name": "gold_target", "type": "bytes", "default": ""`, `{"name": "gold_target", "type": {"type": "array", "items": "int"}, "default": []`, 1)
	s = strings.Replace(s, `{"name": "rollout_logprobs", "type": ["null", "bytes"]`, `{"name": "rollout_logprobs", "type": ["null", {"type": "array", "items": "float"}]`, 1)
	return s
}

func intsToNative(v []int32) []any {
	out := make([]any, len(v))
	for i, x := range v {
		out[i] = x
	}
	return out
}

func nativeToInts(v any) []int32 {
	a, _ := v.([]any)
	out := make([]int32, len(a))
	for i, x := range a {
		out[i], _ = x.(int32)
	}
	return out
}

func arrayNative(t *Trajectory) map[string]any {
	m := trajectoryToNative(t)
	m["prompt"] = intsToNative(t.Prompt)
	m["gold_target"] = intsToNative(t.GoldTarget)
	turns := m["turns"].([]any)
	for i, tu := range t.Turns {
		turns[i] = map[string]any{"kind": tu.Kind, "action": intsToNative(tu.Action), "observation": intsToNative(tu.Observation)}
	}
	lp := make([]any, len(t.RolloutLogprobs))
	for i, x := range t.RolloutLogprobs {
		lp[i] = x
	}
	m["rollout_logprobs"] = goavro.Union("array", lp)
	return m
}

// decodeArrays decodes the array layout all the way to a Trajectory's token
// slices, so both layouts are measured to the same end result.
func decodeArrays(c *goavro.Codec, b []byte) (int, error) {
	v, _, err := c.NativeFromSingle(b)
	if err != nil {
		return 0, err
	}
	m := v.(map[string]any)
	n := len(nativeToInts(m["prompt"])) + len(nativeToInts(m["gold_target"]))
	for _, tu := range m["turns"].([]any) {
		tm := tu.(map[string]any)
		n += len(nativeToInts(tm["action"])) + len(nativeToInts(tm["observation"]))
	}
	if u, ok := m["rollout_logprobs"].(map[string]any); ok {
		a := u["array"].([]any)
		f := make([]float32, len(a))
		for i, x := range a {
			f[i], _ = x.(float32)
		}
		n += len(f)
	}
	return n, nil
}

// BenchmarkDecodeLayout measures decoding a realistic trajectory (8k and 32k
// tokens over 8 turns, with rollout log-probs) in the packed-bytes layout the
// wire format uses and in the plain Avro array layout, and reports the
// array/packed time ratio measured in the same run.
func BenchmarkDecodeLayout(b *testing.B) {
	ac, err := goavro.NewCodec(arraySchema())
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{8192, 32768} {
		tr := bigTrajectory(n, rand.New(rand.NewPCG(uint64(n), 1)))
		packed, err := Trajectories().Encode(tr)
		if err != nil {
			b.Fatal(err)
		}
		arr, err := ac.SingleFromNative(nil, arrayNative(tr))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeArrays(ac, arr); err != nil {
			b.Fatal(err)
		}
		runPacked := func(b *testing.B) {
			b.SetBytes(int64(len(packed)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := Trajectories().Decode(packed); err != nil {
					b.Fatal(err)
				}
			}
		}
		runArray := func(b *testing.B) {
			b.SetBytes(int64(len(arr)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := decodeArrays(ac, arr); err != nil {
					b.Fatal(err)
				}
			}
		}
		name := fmt.Sprintf("%dk", n/1024)
		b.Run(name+"/packed", runPacked)
		b.Run(name+"/array", runArray)
		b.Run(name+"/ratio", func(b *testing.B) {
			// Both layouts in the same loop, timed separately, so the ratio
			// comes from one run on one machine state.
			var tp, ta time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if _, err := Trajectories().Decode(packed); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := decodeArrays(ac, arr); err != nil {
					b.Fatal(err)
				}
				tp += t1.Sub(t0)
				ta += time.Since(t1)
			}
			b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "packed-ns/op")
			b.ReportMetric(float64(ta.Nanoseconds())/float64(b.N), "array-ns/op")
			b.ReportMetric(float64(ta)/float64(tp), "array/packed")
			b.ReportMetric(float64(len(packed)), "packed-bytes")
			b.ReportMetric(float64(len(arr)), "array-bytes")
		})
	}
}

// BenchmarkEncode measures encoding of each record type.
func BenchmarkEncode(b *testing.B) {
	tr := bigTrajectory(32768, rand.New(rand.NewPCG(9, 9)))
	b.Run("trajectory32k", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := Trajectories().Encode(tr); err != nil {
				b.Fatal(err)
			}
		}
	})
	s := sampleScored()
	b.Run("scored-small", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if _, err := ScoredRecords().Encode(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
