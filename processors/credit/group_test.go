package credit

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/creditflow/creditflow/vocab"
)

// flat lists every number of a result, for bit-exact comparison.
func flat(r Result) []float64 {
	out := []float64{r.Reward, r.OutcomeAdvantage}
	opt := func(p *float64) float64 {
		if p == nil {
			return math.NaN() // compared by bits: a nil matches only a nil
		}
		return *p
	}
	for _, t := range r.Turns {
		out = append(out, opt(t.Delta), opt(t.Z), opt(t.ZNorm), float64(t.Gate), t.ProcessAdvantage, t.Advantage,
			opt(t.P), opt(t.StepReward), opt(t.Weight))
	}
	if a := r.AttnSR; a != nil {
		out = append(out, a.Confidence, a.Focus, a.Consensus, a.Baseline, a.Budget)
	}
	return out
}

// orderMembers makes a group whose sums depend on the order they are formed
// in: rewards and gains of very different magnitudes.
func orderMembers(rng *rand.Rand, n int) []Member {
	var ms []Member
	for i := 0; i < n; i++ {
		r := rng.Float64() * math.Pow(10, float64(rng.Intn(17)-8))
		var turns []Turn
		for t := 0; t < 3; t++ {
			d := (rng.Float64() - 0.3) * math.Pow(10, float64(rng.Intn(9)-4))
			turns = append(turns, Turn{Kind: KindSearch, ActionTokens: 1 + rng.Intn(3), ObservationTokens: 1, Delta: &d})
		}
		turns = append(turns, Turn{Kind: KindAnswer, ActionTokens: 2})
		k := len(turns)
		var att []LayerGraph
		for _, l := range []int{3, 5} {
			aa, ao := make([][]float64, k), make([][]float64, k)
			for j := range aa {
				aa[j], ao[j] = make([]float64, k), make([]float64, k)
				for c := 0; c < j; c++ {
					aa[j][c], ao[j][c] = rng.Float64()/float64(2*j), rng.Float64()/float64(2*j)
				}
			}
			att = append(att, LayerGraph{Layer: l, AA: aa, AO: ao})
		}
		ms = append(ms, Member{TrajectoryID: fmt.Sprintf("t%02d", (i*3)%n), PromptID: "p", GroupSize: n, Reward: &r, Turns: turns, Attention: att})
	}
	return ms
}

// ComputeGroup gives bit-identical numbers whatever order the members come
// in: the stream and `creditflow compute` see the same members in different
// orders, and float64 sums depend on the order they are formed in.
func TestComputeGroupOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for _, method := range []vocab.Method{MethodLAPO, MethodAttnSR} {
		cfg := DefaultConfig()
		cfg.Method = method
		for trial := 0; trial < 20; trial++ {
			ms := orderMembers(rng, 7)
			var e0 EMA
			e0.Update(0.3, cfg.Delta)
			e1 := e0
			base, err := ComputeGroup(ms, false, cfg, &e0)
			if err != nil {
				t.Fatal(err)
			}
			perm := rng.Perm(len(ms))
			shuffled := make([]Member, len(ms))
			for i, p := range perm {
				shuffled[i] = ms[p]
			}
			got, err := ComputeGroup(shuffled, false, cfg, &e1)
			if err != nil {
				t.Fatal(err)
			}
			if math.Float64bits(e0.Value) != math.Float64bits(e1.Value) {
				t.Fatalf("%s trial %d: EMA %v vs %v after a reordering", method, trial, e0.Value, e1.Value)
			}
			for i, p := range perm {
				if got[i].TrajectoryID != ms[p].TrajectoryID {
					t.Fatalf("results not in input order: %s at %d, want %s", got[i].TrajectoryID, i, ms[p].TrajectoryID)
				}
				a, b := flat(base[p]), flat(got[i])
				for j := range a {
					if math.Float64bits(a[j]) != math.Float64bits(b[j]) {
						t.Fatalf("%s trial %d %s value %d: %v vs %v (bits differ) after a reordering", method, trial, ms[p].TrajectoryID, j, a[j], b[j])
					}
				}
			}
		}
	}
}

// ComputeValidatedGroup gives ComputeGroup's numbers and EMA to the bit on
// valid members (it only skips their validation), for both methods.
func TestComputeValidatedGroupMatches(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	for _, method := range []vocab.Method{MethodLAPO, MethodAttnSR} {
		cfg := DefaultConfig()
		cfg.Method = method
		for trial := 0; trial < 20; trial++ {
			ms := orderMembers(rng, 5)
			for _, m := range ms {
				if err := ValidateMember(m, cfg); err != nil {
					t.Fatal(err)
				}
			}
			var e0, e1 EMA
			want, err := ComputeGroup(ms, trial%2 == 0, cfg, &e0)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ComputeValidatedGroup(ms, trial%2 == 0, cfg, &e1)
			if err != nil {
				t.Fatal(err)
			}
			if e0 != e1 {
				t.Fatalf("%s trial %d: EMA %+v vs %+v", method, trial, e1, e0)
			}
			for i := range want {
				a, b := flat(want[i]), flat(got[i])
				for j := range a {
					if math.Float64bits(a[j]) != math.Float64bits(b[j]) {
						t.Fatalf("%s trial %d member %d value %d: %v vs %v", method, trial, i, j, b[j], a[j])
					}
				}
			}
		}
	}
}
