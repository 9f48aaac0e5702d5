package stage

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/vocab"
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

func attnsrGoldenConfig(output vocab.Output) credit.Config {
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

// The files under schemas/testdata/v2 were written by the code of the
// generation before compact graphs (the commit that added them): the scored
// records of attnsrGoldenScored(4) with the schema of that generation, and
// the digests of attnsrGoldenSamples for both outputs.

// goldenV2 reads hex lines from schemas/testdata/v2.
func goldenV2(t testing.TB, name string) [][]byte { t.Helper(); return goldenGen(t, "v2", name) }

// goldenGen reads hex lines from schemas/testdata/<gen>.
func goldenGen(t testing.TB, gen, name string) [][]byte {
	t.Helper()
	raw, err := os.ReadFile("../../schemas/testdata/" + gen + "/" + name + ".hex")
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, l := range strings.Fields(string(raw)) {
		b, err := hex.DecodeString(l)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// groupsOf splits records into groups of their group size, in order.
func groupsOf(recs []schemas.Scored) [][]schemas.Scored {
	var out [][]schemas.Scored
	for len(recs) > 0 {
		n := int(recs[0].Trajectory.GroupSize)
		out = append(out, recs[:n])
		recs = recs[n:]
	}
	return out
}

// compact is s as the score stage now writes it: its graphs below their
// diagonals in Graphs, in the sum form where that is exact, Attention
// empty, through the codec and back.
func compact(t testing.TB, s schemas.Scored) schemas.Scored {
	t.Helper()
	s.Graphs, s.Attention = s.StepGraphs(), nil
	for i := range s.Graphs {
		s.Graphs[i] = schemas.SumForm(s.Graphs[i])
	}
	b, err := schemas.ScoredRecords().Encode(&s)
	if err != nil {
		t.Fatal(err)
	}
	d, err := schemas.ScoredRecords().Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := schemas.ValidateScored(d, schemas.DefaultLimits()); err != nil {
		t.Fatal(err)
	}
	return *d
}

// TestAttnSRGoldenSamples: AttnSR scored records written before compact
// graphs (K×K in attention) and before the sum form (compact pairs,
// schemas/testdata/v3) still decode, and give samples whose bytes are
// those the code of their generation wrote; the same records as the score
// stage writes them now (compact, in the sum form where exact) give the
// same bytes too.
func TestAttnSRGoldenSamples(t *testing.T) {
	var old []schemas.Scored
	for _, b := range goldenV2(t, "scored_attnsr_groups") {
		if got := hex.EncodeToString(b[2:10]); got != "7ccadbc95ab7607d" {
			t.Fatalf("golden scored record has fingerprint %s, want the second generation's", got)
		}
		s, err := schemas.ScoredRecords().Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Attention) == 0 || len(s.Graphs) != 0 {
			t.Fatalf("decoded %d K×K graphs and %d compact ones, want K×K only", len(s.Attention), len(s.Graphs))
		}
		old = append(old, *s)
	}
	var compacted, v3 []schemas.Scored
	summed, pairs := 0, 0
	for _, s := range old {
		c := compact(t, s)
		for _, g := range c.Graphs {
			if g.Summed() {
				summed++
			} else {
				pairs++
			}
		}
		compacted = append(compacted, c)
	}
	if summed == 0 || pairs == 0 {
		t.Fatalf("%d graphs in the sum form and %d pairs: the golden records must give both", summed, pairs)
	}
	for _, b := range goldenGen(t, "v3", "scored_attnsr_groups") {
		s, err := schemas.ScoredRecords().Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Graphs) == 0 || s.Graphs[0].Summed() {
			t.Fatal("a third-generation record did not decode to compact pairs")
		}
		v3 = append(v3, *s)
	}
	for _, output := range vocab.Outputs {
		want := goldenV2(t, "samples_attnsr_"+string(output)+".sha256")
		for name, recs := range map[string][]schemas.Scored{"old": old, "third generation": v3, "compact": compacted} {
			got := sha256s(attnsrGoldenSamples(t, groupsOf(recs), attnsrGoldenConfig(output)))
			if len(got) != len(want) {
				t.Fatalf("%s %s: %d samples, want %d", output, name, len(got), len(want))
			}
			for i := range got {
				if string(got[i]) != string(want[i]) {
					t.Fatalf("%s %s records: sample %d (%s) differs from the golden one", output, name, i, recs[i].Trajectory.TrajectoryID)
				}
			}
		}
	}
}

// allocateSquare is credit.Allocate as it was computed on K×K graphs before
// compact graphs: the reference for the bit-for-bit comparison.
func allocateSquare(layers []credit.LayerGraph, k int, cfg credit.Config) credit.Allocation {
	if k < 2 || len(layers) == 0 {
		return credit.Allocation{}
	}
	per := make([][]float64, len(layers))
	masses := make([]float64, len(layers))
	for i, lg := range layers {
		a := credit.Backtrack(credit.StepGraph(lg.AA, lg.AO), cfg.Rho)
		per[i] = credit.Softmax(credit.Recency(a, cfg.Eta, cfg.Eps), cfg.T)
		masses[i] = credit.FocusMass(lg.AA, lg.AO)
	}
	p := credit.Fuse(per, cfg.Eps)
	f := credit.Focus(masses, cfg.MStar)
	q := credit.Consensus(per, p)
	return credit.Allocation{P: p, PerLayer: per, Masses: masses, Focus: f, Consensus: q, Confidence: f * q}
}

func sameBits(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float64bits(a[i]) != math.Float64bits(b[i]) {
			return false
		}
	}
	return true
}

// TestCompactGraphsBitIdentical: on many random AttnSR groups (K from 1 to
// 30, one to six layers, entries that are zero, tiny, subnormal or a whole
// row's mass, entries on and above the diagonal that are not zero), the
// records with K×K graphs and the same records with compact graphs give
// the same allocations bit for bit, the same as the K×K computation of
// before, and the same sample bytes.
func TestCompactGraphsBitIdentical(t *testing.T) {
	gen := synth.Default()
	gen.Shape, gen.Seed = synth.ALFWorld, 99
	r := rand.New(rand.NewPCG(99, 2))
	groups := 60
	if testing.Short() {
		groups = 15
	}
	var old, compacted []schemas.Scored
	for g := 0; g < groups; g++ {
		k := 1 + r.IntN(30)
		nl := 1 + r.IntN(6)
		for i := 0; i < gen.GroupSize; i++ {
			tr := gen.Trajectory(g, i)
			last := tr.Turns[len(tr.Turns)-1]
			turns := make([]schemas.Turn, 0, k)
			for j := 0; j < k-1; j++ {
				turns = append(turns, tr.Turns[j%max(1, len(tr.Turns)-1)])
			}
			tr.Turns, tr.RolloutLogprobs = append(turns, last), nil
			sc := schemas.Scored{Trajectory: tr, Method: "attnsr", ScorerModel: "m", ScorerPolicyVersion: 1}
			for l := 0; l < nl; l++ {
				lg := schemas.LayerGraph{Layer: int32(3 * l), K: int32(k), AA: make([]float64, k*k), AO: make([]float64, k*k)}
				for j := 0; j < k; j++ {
					for c := 0; c < k; c++ {
						if c < j {
							lg.AA[j*k+c], lg.AO[j*k+c] = goldenMass(r, j), goldenMass(r, j)
						} else if r.IntN(10) == 0 { // never read: must not matter
							lg.AA[j*k+c], lg.AO[j*k+c] = r.Float64(), r.Float64()
						}
					}
				}
				sc.Attention = append(sc.Attention, lg)
			}
			old = append(old, sc)
			compacted = append(compacted, compact(t, sc))
		}
	}
	summed, pairs := 0, 0
	for _, c := range compacted {
		for _, g := range c.Graphs {
			if g.Summed() {
				summed++
			} else if g.K >= 2 {
				pairs++
			}
		}
	}
	if summed == 0 || pairs == 0 {
		t.Fatalf("%d graphs in the sum form and %d pairs: the test must see both", summed, pairs)
	}
	cfg := attnsrGoldenConfig(credit.OutputGRPO)
	for i := range old {
		mo, mc := member(&old[i]), member(&compacted[i])
		if err := credit.ValidateMember(mc, cfg); err != nil {
			t.Fatal(err)
		}
		k := len(mo.Turns)
		ref, ao, ac := allocateSquare(mo.Attention, k, cfg), credit.Allocate(mo.Attention, k, cfg), credit.Allocate(mc.Attention, k, cfg)
		for name, a := range map[string]credit.Allocation{"K×K records": ao, "compact records": ac} {
			same := sameBits(a.P, ref.P) && sameBits(a.Masses, ref.Masses) &&
				sameBits([]float64{a.Focus, a.Consensus, a.Confidence}, []float64{ref.Focus, ref.Consensus, ref.Confidence})
			for l := range ref.PerLayer {
				same = same && sameBits(a.PerLayer[l], ref.PerLayer[l])
			}
			if !same {
				t.Fatalf("record %d (K=%d, %d layers), %s: allocation differs from the K×K computation:\n%+v\n%+v", i, k, len(mo.Attention), name, a, ref)
			}
		}
	}
	for _, output := range vocab.Outputs {
		cfg := attnsrGoldenConfig(output)
		a, b := attnsrGoldenSamples(t, groupsOf(old), cfg), attnsrGoldenSamples(t, groupsOf(compacted), cfg)
		for i := range a {
			if string(a[i]) != string(b[i]) {
				t.Fatalf("%s: sample %d differs between K×K and compact graphs", output, i)
			}
		}
	}
}

// TestLowerGraphsOfScorerAnswer: the score stage's compact graphs from a
// scorer's K×K answer are the record's K×K graphs cut below the diagonal.
func TestLowerGraphsOfScorerAnswer(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, k := range []int{0, 1, 2, 7, 30} {
		var ans []scorer.StepGraph
		var want []schemas.LowerGraph
		for l := 0; l < 3; l++ {
			g := scorer.StepGraph{Layer: 2 * l, AA: make([][]float64, k), AO: make([][]float64, k)}
			sq := schemas.LayerGraph{Layer: int32(2 * l), K: int32(k), AA: make([]float64, k*k), AO: make([]float64, k*k)}
			for j := 0; j < k; j++ {
				g.AA[j], g.AO[j] = make([]float64, k), make([]float64, k)
				for c := 0; c < k; c++ {
					g.AA[j][c], g.AO[j][c] = r.Float64(), r.Float64()
					sq.AA[j*k+c], sq.AO[j*k+c] = g.AA[j][c], g.AO[j][c]
				}
			}
			ans = append(ans, g)
			want = append(want, sq.Lower())
		}
		got := scoring.LowerGraphs(ans)
		for l := range want {
			w := schemas.SumForm(want[l])
			if got[l].Layer != w.Layer || got[l].K != w.K || !sameBits(got[l].AA, w.AA) || !sameBits(got[l].AO, w.AO) || !sameBits(got[l].Sum, w.Sum) {
				t.Fatalf("K=%d layer %d: %+v, want %+v", k, l, got[l], w)
			}
			if k >= 2 && !got[l].Summed() { // random masses in [0, 1): always exact
				t.Fatalf("K=%d layer %d: not in the sum form", k, l)
			}
			for j := 1; j < k; j++ {
				for c := 0; c < j; c++ {
					if got[l].Sum[schemas.LowerIndex(j, c)] != ans[l].AA[j][c]+ans[l].AO[j][c] {
						t.Fatalf("K=%d layer %d entry [%d,%d] misplaced", k, l, j, c)
					}
				}
			}
		}
	}
}
