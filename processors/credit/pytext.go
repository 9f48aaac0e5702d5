package credit

import (
	"strings"
	"unicode"
)

// The character classes of the reference's Python answer normalization, on a
// str. Each is checked against Python 3.11 (Unicode 14.0) over every code
// point: they agree on every character Python 3.11 knows; characters
// assigned in later Unicode versions follow Go's tables.

// isWordChar is Python's \w on a str: str.isalnum() or "_", i.e. a Unicode
// letter, number or "_".
func isWordChar(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// isSpace is Python's str.isspace for one character: unicode.IsSpace plus
// the separators U+001C..U+001F.
func isSpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// Blank reports whether s is empty or only whitespace as Python sees it
// (s.strip() == "").
func Blank(s string) bool {
	return strings.TrimFunc(s, isSpace) == ""
}

// lower is Python's str.lower: unicode.ToLower on every character, except
// that İ (U+0130) becomes "i" + U+0307 and a capital sigma in final position
// becomes ς (U+03C2) instead of σ.
func lower(s string) string {
	if !strings.ContainsAny(s, "\u0130\u03a3") {
		return strings.ToLower(s)
	}
	rs := []rune(s)
	var b strings.Builder
	b.Grow(len(s) + 2)
	for i, r := range rs {
		switch {
		case r == 0x130:
			b.WriteString("i\u0307")
		case r == 0x3a3 && finalSigma(rs, i):
			b.WriteRune(0x3c2)
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma is Unicode's Final_Sigma condition for rs[i], as Python applies
// it: a cased character before it and none after it, skipping
// case-ignorable characters on both sides.
func finalSigma(rs []rune, i int) bool {
	j := i - 1
	for j >= 0 && caseIgnorable(rs[j]) {
		j--
	}
	if j < 0 || !cased(rs[j]) {
		return false
	}
	j = i + 1
	for j < len(rs) && caseIgnorable(rs[j]) {
		j++
	}
	return j == len(rs) || !cased(rs[j])
}

// cased is Unicode's Cased property: Lu, Ll, Lt, Other_Lowercase,
// Other_Uppercase.
func cased(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// caseIgnorable is Unicode's Case_Ignorable property: Mn, Me, Cf, Lm, Sk and
// the Word_Break classes MidLetter, MidNumLet and Single_Quote (listed here;
// Go has no Word_Break tables).
func caseIgnorable(r rune) bool {
	switch r {
	case 0x27, 0x2e, 0x3a, 0xb7, 0x387, 0x55f, 0x5f4, 0x2018, 0x2019, 0x2024, 0x2027,
		0xfe13, 0xfe52, 0xfe55, 0xff07, 0xff0e, 0xff1a:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}
