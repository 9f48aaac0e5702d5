package credit

import (
	"bytes"
	"strings"
	"testing"
	"unicode"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

// pyClasses prints, for every code point but the surrogates, one character
// per class: assigned (category not Cn), \w, str.isspace, Case_Ignorable and
// Cased (both read off str.lower's Final_Sigma behaviour), and whether
// str.lower of the character equals Go's unicode.ToLower (sent as "1" when it
// is a single character mapped as lowered[i]).
const pyClasses = `
import re, sys, unicodedata
w = re.compile(r"\w")
cols = [[], [], [], [], []]
low = []
for c in range(0x110000):
    if 0xD800 <= c <= 0xDFFF:
        continue
    ch = chr(c)
    x1 = ("\u0391" + ch + "\u03a3").lower().endswith("\u03c2")
    x2 = (ch + "\u03a3").lower().endswith("\u03c2")
    for col, v in zip(cols, (unicodedata.category(ch) != "Cn", w.match(ch) is not None, ch.isspace(), x1 and not x2, x2)):
        col.append("1" if v else "0")
    lo = ch.lower()
    low.append(str(ord(lo)) if len(lo) == 1 else "-1")
for col in cols:
    sys.stdout.write("".join(col) + "\n")
sys.stdout.write(" ".join(low) + "\n")
`

// The Python character classes used by Normalize agree with Python's own on
// every character both know.
func TestPythonCharacterClasses(t *testing.T) {
	out, err := pyenvtest.Command(t, "-c", pyClasses).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	lines := bytes.Split(bytes.TrimRight(out, "\n"), []byte("\n"))
	if len(lines) != 6 {
		t.Fatalf("python printed %d lines, want 6", len(lines))
	}
	low := strings.Fields(string(lines[5]))
	goAssigned := func(r rune) bool {
		return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
	}
	i, checked := 0, 0
	for r := rune(0); r < 0x110000; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		k := i
		i++
		if lines[0][k] != '1' || !goAssigned(r) {
			continue // a character one of the two Unicode versions does not know
		}
		checked++
		want := func(line int) bool { return lines[line][k] == '1' }
		if got := isWordChar(r); got != want(1) {
			t.Errorf("%U: isWordChar %v, Python \\w %v", r, got, want(1))
		}
		if got := isSpace(r); got != want(2) {
			t.Errorf("%U: isSpace %v, Python isspace %v", r, got, want(2))
		}
		ign := caseIgnorable(r)
		if ign != want(3) {
			t.Errorf("%U: caseIgnorable %v, Python %v", r, ign, want(3))
		}
		if got := !ign && cased(r); got != want(4) {
			t.Errorf("%U: cased %v, Python %v", r, got, want(4))
		}
		if wl, gl := low[k], lower(string(r)); wl != "-1" && gl != string(rune(atoi(wl))) {
			t.Errorf("%U: lower %q, Python %q", r, gl, string(rune(atoi(wl))))
		}
		if t.Failed() {
			return
		}
	}
	if lower("\u0130") != "i\u0307" {
		t.Errorf("lower(İ) = %q", lower("\u0130"))
	}
	t.Logf("%d code points checked", checked)
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = 10*n + int(c-'0')
	}
	return n
}
