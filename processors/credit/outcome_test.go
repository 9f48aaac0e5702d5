package credit

import (
	"math"
	"testing"
)

func TestNormalize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"The Eiffel Tower", "eiffel tower"},
		{"  a   cat, an  apple; THE end!  ", "cat apple end"},
		{"U.S.A.", "usa"},
		{"rock-n-roll", "rocknroll"},
		{"theatre anthem", "theatre anthem"}, // articles only as whole words
		{"A", ""},
		{"", ""},
		{"\t\n ", ""},
		{"(a) b", "b"},                    // punctuation goes first, then the lone "a"
		{"Café  Ünïcode", "café ünïcode"}, // non-ASCII letters stay
		{"1,000 $", "1000"},
	}
	for _, c := range cases {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The articles go as Python's re.sub(r"\b(a|an|the)\b", " ", s) removes them
// on a str: on word boundaries, where a word character is a Unicode letter,
// number or "_" (so “the and the—end lose their article, théa does not, and a
// combining mark ends a word). Expected values are Python 3.11's output of
// lower → drop string.punctuation → that re.sub → " ".join(s.split()).
func TestNormalizeArticlesOnWordBoundaries(t *testing.T) {
	cases := []struct{ in, want string }{
		{"“The Eiffel Tower”", "“ eiffel tower”"},
		{"the—end", "—end"},
		{"théa", "théa"},
		{"THE\u00a0END", "end"},
		{"l'an", "lan"},
		{"the_end", "theend"},
		{"a1 b", "a1 b"},
		{"the\u0301 x", "\u0301 x"},
		{"über the top", "über top"},
		{"the\x1cend", "end"},
		{"année an", "année"},
		{"the²", "the²"},
		{"the٣ a", "the٣"},
		{"ⅰthe", "ⅰthe"},
		{"the日本", "the日本"},
		{"a-an-the", "aanthe"},
		{"«the»", "« »"},
		{"the\u200bend", "\u200bend"},
		{"Αthe", "αthe"},
		{"the\u2028an", ""},
		{"ﬁthe", "ﬁthe"},
	}
	for _, c := range cases {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Lowercasing is Python's str.lower: İ becomes i + U+0307 and a capital
// sigma at the end of a word becomes ς (case-ignorable characters such as
// "'", ":" or combining marks skipped). Expected values are Python 3.11's.
func TestNormalizeLowercasesAsPython(t *testing.T) {
	cases := []struct{ in, want string }{
		{"ΟΔΟΣ", "οδος"},
		{"ΟΔΟΣ.", "οδος"},
		{"ΣΑ", "σα"},
		{"Σ", "σ"},
		{"ΑΣ'Β", "ασβ"},
		{"ΑΣ:", "ας"},
		{"İstanbul", "i\u0307stanbul"},
		{"ΑΣ\u0301 x", "ας\u0301 x"},
		{"ΑΣ\u00adΒ", "ασ\u00adβ"},
		{"ΑΣ1", "ας1"},
		{"1Σ", "1σ"},
	}
	for _, c := range cases {
		if got := Normalize(c.in); got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestF1(t *testing.T) {
	cases := []struct {
		pred, gold string
		want       float64
	}{
		{"Paris", "paris", 1},
		{"the", "a", 1}, // both normalize to empty
		{"", "Paris", 0},
		{"Paris", "", 0},
		{"", "", 1},
		{"new york city", "york", 2 * (1.0 / 3) * 1 / (1.0/3 + 1)},
		{"x b b", "b b c", 2.0 / 3},                           // overlap 2 (multiset): P = R = 2/3
		{"a b b", "b b c", 0.8},                               // "a" is dropped: P = 1, R = 2/3
		{"b b b", "b c", 2 * (1.0 / 3) * 0.5 / (1.0/3 + 0.5)}, // overlap 1
		{"x y", "z", 0},
	}
	for _, c := range cases {
		if got := F1(c.pred, c.gold); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("F1(%q, %q) = %v, want %v", c.pred, c.gold, got, c.want)
		}
	}
	p := "new york"
	if got := BestF1(&p, []string{"boston", "New York City", "york"}); math.Abs(got-0.8) > 1e-15 {
		t.Errorf("BestF1 = %v, want 0.8 (best of 0, 0.8, 2/3)", got)
	}
	if got := BestF1(nil, []string{"x"}); got != 0 {
		t.Errorf("missing prediction scores %v, want 0", got)
	}
}

func TestEM(t *testing.T) {
	if !EM("The  Beatles!", []string{"x", "beatles"}) {
		t.Error("EM should match after normalization")
	}
	if EM("beatles band", []string{"beatles"}) {
		t.Error("EM must be exact after normalization")
	}
	if EM("x", nil) {
		t.Error("EM with no golds must be false")
	}
	if !EM("an", []string{""}) {
		t.Error("empty normalized prediction equals an empty gold")
	}
}

func TestOutcomeAdvantagesKnownValues(t *testing.T) {
	// docs/method.md §2.3: rewards [0, 1] in group a, [1] in group b.
	a := OutcomeAdvantages([]float64{0, 1}, 1e-6)
	want := 0.5 / (0.5 + 1e-6)
	if math.Abs(a[0]+want) > 1e-15 || math.Abs(a[1]-want) > 1e-15 {
		t.Errorf("group a: %v, want [-%v, %v]", a, want, want)
	}
	if b := OutcomeAdvantages([]float64{1}, 1e-6); b[0] != 0 {
		t.Errorf("group b: %v, want exactly 0", b)
	}
	// Population std: [1, 2, 3, 4] has std sqrt(1.25).
	c := OutcomeAdvantages([]float64{1, 2, 3, 4}, 0)
	if math.Abs(c[3]-1.5/math.Sqrt(1.25)) > 1e-12 {
		t.Errorf("population std not used: %v", c)
	}
}

// TestBestF1GroupCache checks the group's shared gold words against F1 of
// each pair afresh: members with different predictions and gold lists
// that overlap, share, or differ, in one cache, in every order.
func TestBestF1GroupCache(t *testing.T) {
	preds := []string{"The Eiffel Tower", "eiffel", "Paris, France!", "", "a an the", "Gustave   Eiffel's tower", "théâtre"}
	golds := [][]string{{"Eiffel Tower", "the eiffel tower"}, {"Paris"}, {"Eiffel Tower", "Paris, France"}, {}, {"THÉÂTRE", "an"}}
	for rot := range golds {
		words := map[string][]string{}
		for i, p := range preds {
			gs := golds[(i+rot)%len(golds)]
			want := 0.0
			for _, g := range gs {
				want = max(want, F1(p, g))
			}
			if got := bestF1(&p, gs, words); got != want {
				t.Fatalf("pred %q golds %q: %v with the group's words, %v afresh", p, gs, got, want)
			}
		}
		if len(words) == 0 {
			t.Fatal("no gold answer's words were kept")
		}
	}
}
