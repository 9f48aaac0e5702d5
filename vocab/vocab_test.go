package vocab

import "testing"

// The names are the wire's and the docs': changing one breaks every stored record.
func TestNamesAreTheWireNames(t *testing.T) {
	for got, want := range map[string]string{
		string(LAPO): "lapo", string(AttnSR): "attnsr",
		string(Backward): "backward", string(Forward): "forward",
		string(LogProb): "logprob", string(Entropy): "entropy", string(KL): "kl",
		string(OutputGRPO): "grpo", string(OutputPPO): "ppo",
	} {
		if got != want {
			t.Errorf("%q, want %q", got, want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, d := range Directions {
		if got, err := ParseDirection(string(d)); err != nil || got != d {
			t.Errorf("ParseDirection(%q) = %q, %v", d, got, err)
		}
	}
	for _, s := range Statistics {
		if got, err := ParseStatistic(string(s)); err != nil || got != s {
			t.Errorf("ParseStatistic(%q) = %q, %v", s, got, err)
		}
	}
	if got, err := ParseStatistic(""); err != nil || got != LogProb {
		t.Errorf(`ParseStatistic("") = %q, %v; want the default, logprob`, got, err)
	}
	for _, o := range Outputs {
		if got, err := ParseOutput(string(o)); err != nil || got != o {
			t.Errorf("ParseOutput(%q) = %q, %v", o, got, err)
		}
	}
	for _, bad := range []string{"Backward", "sideways", " forward"} {
		if _, err := ParseDirection(bad); err == nil {
			t.Errorf("ParseDirection(%q) accepted", bad)
		}
	}
	if _, err := ParseStatistic("LogProb"); err == nil {
		t.Error(`ParseStatistic("LogProb") accepted`)
	}
	if _, err := ParseOutput("advantages"); err == nil {
		t.Error(`ParseOutput("advantages") accepted`)
	}
	if _, err := ParseDirection("up"); err == nil || err.Error() != `direction "up" is unknown; use backward or forward` {
		t.Errorf("ParseDirection error: %v", err)
	}
}
