package synth

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/creditflow/creditflow/schemas"
)

func str(ids []int32) string {
	b := make([]byte, len(ids))
	for i, id := range ids {
		b[i] = byte(id)
	}
	return string(b)
}

// TestSearchQATruth checks the ground truth of the search-QA world on many
// trajectories: 1–3 searches, exactly one observation with the gold answer
// when the trajectory found it (the one Truth names), none otherwise, and
// the gold answer nowhere else but in the prediction and the gold target.
func TestSearchQATruth(t *testing.T) {
	c := Default()
	found, total := 0, 0
	for g := 0; g < 60; g++ {
		for i := 0; i < c.GroupSize; i++ {
			tr, truth := c.Generate(g, i)
			total++
			gold := tr.GoldAnswers[0]
			if truth.Answer != gold || truth.Key != -1 {
				t.Fatalf("%s: truth %+v for gold %q", tr.TrajectoryID, truth, gold)
			}
			searches := len(tr.Turns) - 1
			if searches < 1 || searches > 3 || tr.Turns[searches].Kind != schemas.KindAnswer {
				t.Fatalf("%s: %d turns", tr.TrajectoryID, len(tr.Turns))
			}
			if strings.Contains(str(tr.Prompt), gold) {
				t.Fatalf("%s: prompt contains the gold answer", tr.TrajectoryID)
			}
			with := -1
			for k := 0; k < searches; k++ {
				if tr.Turns[k].Kind != schemas.KindSearch || strings.Contains(str(tr.Turns[k].Action), gold) {
					t.Fatalf("%s turn %d: kind %s or the action names the gold answer", tr.TrajectoryID, k, tr.Turns[k].Kind)
				}
				if n := strings.Count(str(tr.Turns[k].Observation), gold); n > 0 {
					if with >= 0 || n != 1 {
						t.Fatalf("%s: gold answer in more than one place (turn %d)", tr.TrajectoryID, k)
					}
					with = k
				}
			}
			if with != truth.Informative {
				t.Fatalf("%s: gold answer in turn %d, truth says %d", tr.TrajectoryID, with, truth.Informative)
			}
			if with >= 0 {
				found++
			} else if *tr.PredAnswer == gold {
				t.Fatalf("%s: predicted the gold answer without finding it", tr.TrajectoryID)
			}
			if got := str(tr.GoldTarget[tr.GoldSpan[0]:tr.GoldSpan[1]]); got != gold {
				t.Fatalf("%s: gold span covers %q", tr.TrajectoryID, got)
			}
		}
	}
	if found < total/3 || found > total*5/6 {
		t.Fatalf("%d of %d trajectories found the answer; want a mix", found, total)
	}
}

// TestALFWorldTruth: exactly one observation carries the code (the key step),
// the prompt does not, and the reward is 1 exactly when the final action
// uses the code.
func TestALFWorldTruth(t *testing.T) {
	c := Default()
	c.Shape = ALFWorld
	wins := 0
	for g := 0; g < 40; g++ {
		for i := 0; i < c.GroupSize; i++ {
			tr, truth := c.Generate(g, i)
			k := len(tr.Turns)
			if k < 10 || k > 16 || tr.Turns[k-1].Kind != schemas.KindAnswer || len(tr.Turns[k-1].Observation) != 0 {
				t.Fatalf("%s: %d steps", tr.TrajectoryID, k)
			}
			if strings.Contains(str(tr.Prompt), truth.Answer) {
				t.Fatalf("%s: the prompt contains the code", tr.TrajectoryID)
			}
			key := -1
			for s := 0; s < k-1; s++ {
				if strings.Contains(str(tr.Turns[s].Action), truth.Answer) {
					t.Fatalf("%s: step %d's action names the code", tr.TrajectoryID, s)
				}
				if strings.Contains(str(tr.Turns[s].Observation), truth.Answer) {
					if key >= 0 {
						t.Fatalf("%s: code in steps %d and %d", tr.TrajectoryID, key, s)
					}
					key = s
				}
			}
			if key != truth.Key {
				t.Fatalf("%s: code in step %d, truth says %d", tr.TrajectoryID, key, truth.Key)
			}
			uses := strings.HasSuffix(str(tr.Turns[k-1].Action), " with "+truth.Answer)
			if uses != (*tr.Reward == 1) {
				t.Fatalf("%s: final action %q, reward %v", tr.TrajectoryID, str(tr.Turns[k-1].Action), *tr.Reward)
			}
			if uses {
				wins++
			}
		}
	}
	if wins < 60 || wins > 180 {
		t.Fatalf("%d of 200 succeeded; want a mix", wins)
	}
}

// TestDeterministic: same seed and index, same bytes; another seed differs.
func TestDeterministic(t *testing.T) {
	for _, shape := range []string{SearchQA, ALFWorld} {
		c := Default()
		c.Shape = shape
		a, ta := c.Generate(3, 2)
		b, tb := c.Generate(3, 2)
		if !reflect.DeepEqual(a, b) || ta != tb {
			t.Fatalf("%s: two generations differ", shape)
		}
		ea, _ := schemas.Trajectories().Encode(&a)
		c.Seed++
		d := c.Trajectory(3, 2)
		ed, _ := schemas.Trajectories().Encode(&d)
		if bytes.Equal(ea, ed) {
			t.Fatalf("%s: seeds %d and %d give the same trajectory", shape, c.Seed-1, c.Seed)
		}
	}
}
