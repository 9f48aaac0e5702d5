package credit

import (
	"testing"

	"github.com/creditflow/creditflow/vocab"
)

// TestGain checks equations (2.4a–c) of docs/method.md §2.4.
func TestGain(t *testing.T) {
	for _, c := range []struct {
		stat          vocab.Statistic
		with, without float64
		want          float64
	}{
		{StatLogProb, -1.5, -4, 2.5},   // S(with) − S(without)
		{"", -1.5, -4, 2.5},            // the default is logprob
		{StatEntropy, 0.5, 2.25, 1.75}, // H(without) − H(with)
		{StatKL, 0.125, 99, 0.125},     // the turn's KL(with ‖ without)
	} {
		if got := Gain(c.stat, c.with, c.without); got != c.want {
			t.Errorf("Gain(%q, %v, %v) = %v, want %v", c.stat, c.with, c.without, got, c.want)
		}
	}
	for _, s := range vocab.Statistics {
		if err := CheckStatistic(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	if CheckStatistic("") == nil || CheckStatistic("KL") == nil {
		t.Error("an empty or unknown statistic was accepted")
	}
}
