package stage

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/internal/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/schemas"
)

// attnsrGoldenScored is the AttnSR input of the golden files: groups of
// ALFWorld-shaped trajectories with step graphs drawn at random (seeded),
// every entry below the diagonal a probability mass, a few of them exactly
// zero, tiny or subnormal, so that any change to the arithmetic shows.
func attnsrGoldenScored(groups int) [][]schemas.Scored {
	gen := synth.Default()
	gen.Shape, gen.Seed = synth.ALFWorld, 24
	r := rand.New(rand.NewPCG(24, 1))
	layers := []int32{8, 12}
	out := make([][]schemas.Scored, groups)
	for g := range out {
		for i := 0; i < gen.GroupSize; i++ {
			t := gen.Trajectory(g, i)
			if g%3 == 2 && len(t.Turns) > 1 { // a long one: K up to 24
				last := t.Turns[len(t.Turns)-1]
				k := 12 + r.IntN(13)
				turns := make([]schemas.Turn, 0, k)
				for j := 0; j < k-1; j++ {
					turns = append(turns, t.Turns[j%(len(t.Turns)-1)])
				}
				t.Turns = append(turns, last)
				t.RolloutLogprobs = nil
			}
			k := len(t.Turns)
			sc := schemas.Scored{Trajectory: t, Method: "attnsr", Turns: make([]schemas.TurnScore, k),
				ScorerModel: "golden", ScorerPolicyVersion: int64(g), ScoredAtMs: 1_767_225_600_000 + int64(g)}
			for _, l := range layers {
				lg := schemas.LayerGraph{Layer: l, K: int32(k), AA: make([]float64, k*k), AO: make([]float64, k*k)}
				for j := 0; j < k; j++ {
					for c := 0; c < j; c++ {
						lg.AA[j*k+c] = goldenMass(r, j)
						lg.AO[j*k+c] = goldenMass(r, j)
					}
				}
				sc.Attention = append(sc.Attention, lg)
			}
			out[g] = append(out[g], sc)
		}
	}
	return out
}

func goldenMass(r *rand.Rand, j int) float64 {
	switch r.IntN(40) {
	case 0:
		return 0
	case 1:
		return 1e-300 * r.Float64()
	case 2:
		return math.SmallestNonzeroFloat64 * float64(1+r.IntN(1000)) // subnormal
	case 3:
		return 1 / float64(j) // the whole row's mass on one step
	}
	return r.Float64() / float64(j)
}

// attnsrGoldenSamples computes the samples of the groups as the advantage
// stage does (member, ComputeGroup with one EMA over the groups in order,
// sample) and encodes them.
func attnsrGoldenSamples(t testing.TB, groups [][]schemas.Scored, cfg credit.Config) [][]byte {
	t.Helper()
	var ema credit.EMA
	var out [][]byte
	for _, g := range groups {
		members := make([]credit.Member, len(g))
		for i := range g {
			members[i] = member(&g[i])
		}
		res, err := credit.ComputeGroup(members, false, cfg, &ema)
		if err != nil {
			t.Fatal(err)
		}
		for i := range g {
			s := sample(&g[i], members[i], res[i], cfg, nil)
			b, err := schemas.Samples().Encode(&s)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
	}
	return out
}

func attnsrGoldenConfig(output string) credit.Config {
	cfg := credit.DefaultConfig()
	cfg.Method, cfg.Output = credit.MethodAttnSR, output
	return cfg
}

// sha256s are the SHA-256 digests of recs: the golden samples are kept as
// digests of their bytes (the samples themselves are ten times larger).
func sha256s(recs [][]byte) [][]byte {
	out := make([][]byte, len(recs))
	for i, b := range recs {
		h := sha256.Sum256(b)
		out[i] = h[:]
	}
	return out
}

// TestWriteAttnSRGolden writes the golden files of the scored-record
// generation before compact graphs (schemas/testdata/v2): run once, with
// CREDITFLOW_WRITE_GOLDEN=1, on the code of that generation.
func TestWriteAttnSRGolden(t *testing.T) {
	if os.Getenv("CREDITFLOW_WRITE_GOLDEN") == "" {
		t.Skip("writes golden files; set CREDITFLOW_WRITE_GOLDEN=1")
	}
	groups := attnsrGoldenScored(4)
	var scored [][]byte
	for _, g := range groups {
		for i := range g {
			b, err := schemas.ScoredRecords().Encode(&g[i])
			if err != nil {
				t.Fatal(err)
			}
			scored = append(scored, b)
		}
	}
	write := func(name string, recs [][]byte) {
		var sb strings.Builder
		for _, b := range recs {
			sb.WriteString(hex.EncodeToString(b))
			sb.WriteByte('\n')
		}
		if err := os.MkdirAll("../../schemas/testdata/v2", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("../../schemas/testdata/v2/"+name+".hex", []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("scored_attnsr_groups", scored)
	write("samples_attnsr_grpo.sha256", sha256s(attnsrGoldenSamples(t, groups, attnsrGoldenConfig(credit.OutputGRPO))))
	write("samples_attnsr_ppo.sha256", sha256s(attnsrGoldenSamples(t, groups, attnsrGoldenConfig(credit.OutputPPO))))
}
