package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// The decoder chain of a tokenizer.json, run as the Hugging Face tokenizers
// library runs it (Tokenizer.decode): the ids' token strings (added tokens
// included) go through each step in turn, then are joined. Every piece of
// text carries the index of the id it is shown with, so that Texts can give
// each id its share and their concatenation is exactly the decoded text.

// seg is text shown with id number owner (an index into the ids decoded).
type seg struct {
	s     string
	owner int
}

// tok is one token string of the chain, in pieces of known owners.
type tok []seg

func (t tok) String() string {
	if len(t) == 1 {
		return t[0].s
	}
	var b strings.Builder
	for _, s := range t {
		b.WriteString(s.s)
	}
	return b.String()
}

// step is one decoder of the chain (tokenizers' decode_chain).
type step interface {
	apply(ts []tok) []tok
}

// byteLevelStep is the ByteLevel decoder: each token's characters map back
// to bytes through GPT-2's table (a token with a character outside the table
// keeps its own UTF-8 bytes), the bytes of all tokens are joined and read as
// UTF-8 with each maximal ill-formed subsequence replaced by U+FFFD (Rust's
// String::from_utf8_lossy, Python's errors="replace"). identity reads each
// token's bytes as they are (the built-in byte vocabulary).
type byteLevelStep struct{ identity bool }

func (st byteLevelStep) apply(ts []tok) []tok {
	var buf []byte
	var owners []int
	for _, t := range ts {
		mapped := !st.identity
		if mapped {
			for _, r := range t.String() {
				if _, ok := runeToByte[r]; !ok {
					mapped = false
					break
				}
			}
		}
		for _, s := range t {
			if mapped {
				for _, r := range s.s {
					buf = append(buf, runeToByte[r])
					owners = append(owners, s.owner)
				}
			} else {
				buf = append(buf, s.s...)
				for range len(s.s) {
					owners = append(owners, s.owner)
				}
			}
		}
	}
	return []tok{lossy(buf, owners)}
}

// byteFallbackStep is the ByteFallback decoder: a run of "<0xHH>" tokens
// becomes the text of its bytes when they are valid UTF-8 and otherwise one
// U+FFFD per byte token.
type byteFallbackStep struct{}

func (byteFallbackStep) apply(ts []tok) []tok {
	out := make([]tok, 0, len(ts))
	var run []byte
	var owners []int
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, lossy(run, owners))
		} else {
			for _, o := range owners {
				out = append(out, tok{{"\uFFFD", o}})
			}
		}
		run, owners = run[:0], owners[:0]
	}
	for _, t := range ts {
		if b, ok := byteToken(t.String()); ok {
			run = append(run, b)
			owners = append(owners, lastOwner(t))
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// byteToken reads "<0xHH>".
func byteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | (c - '0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

func lastOwner(t tok) int {
	if len(t) == 0 {
		return 0
	}
	return t[len(t)-1].owner
}

// replaceStep is the Replace decoder with a string pattern: every
// occurrence in each token.
type replaceStep struct{ from, to string }

func (st replaceStep) apply(ts []tok) []tok {
	for _, t := range ts {
		for i := range t {
			t[i].s = strings.ReplaceAll(t[i].s, st.from, st.to)
		}
	}
	return ts
}

// fuseStep is the Fuse decoder: all tokens become one.
type fuseStep struct{}

func (fuseStep) apply(ts []tok) []tok {
	var all tok
	for _, t := range ts {
		all = append(all, t...)
	}
	return []tok{all}
}

// stripStep is the Strip decoder: up to start leading and stop trailing
// characters equal to content are removed from each token.
type stripStep struct {
	content     rune
	start, stop int
}

func (st stripStep) apply(ts []tok) []tok {
	for _, t := range ts {
		n := 0
		for i := 0; i < len(t) && n < st.start; i++ {
			s := t[i].s
			for len(s) > 0 && n < st.start {
				r, size := utf8.DecodeRuneInString(s)
				if r != st.content {
					n = st.start
					break
				}
				s, n = s[size:], n+1
			}
			t[i].s = s
			if len(s) > 0 {
				break
			}
		}
		n = 0
		for i := len(t) - 1; i >= 0 && n < st.stop; i-- {
			s := t[i].s
			for len(s) > 0 && n < st.stop {
				r, size := utf8.DecodeLastRuneInString(s)
				if r != st.content {
					n = st.stop
					break
				}
				s, n = s[:len(s)-size], n+1
			}
			t[i].s = s
			if len(s) > 0 {
				break
			}
		}
	}
	return ts
}

// metaspaceStep is the Metaspace decoder: the replacement character (▁)
// becomes a space, and in the first token it is dropped unless the prepend
// scheme is "never".
type metaspaceStep struct {
	replacement rune
	never       bool
}

func (st metaspaceStep) apply(ts []tok) []tok {
	rep := string(st.replacement)
	for i, t := range ts {
		to := " "
		if i == 0 && !st.never {
			to = ""
		}
		for k := range t {
			t[k].s = strings.ReplaceAll(t[k].s, rep, to)
		}
	}
	return ts
}

// spacesStep is what tokenizers does without a decoder: tokens joined by
// spaces.
type spacesStep struct{}

func (spacesStep) apply(ts []tok) []tok {
	for i := 1; i < len(ts); i++ {
		if len(ts[i]) > 0 {
			ts[i] = append(tok{{" ", ts[i][0].owner}}, ts[i]...)
		} else if len(ts[i-1]) > 0 {
			ts[i] = tok{{" ", lastOwner(ts[i-1])}}
		}
	}
	return ts
}

// lossy reads b as UTF-8 (owners[i] is the id byte i belongs to): each
// character goes to the id holding its last byte, and each maximal
// ill-formed subsequence (the longest start of a well-formed character, or
// one byte) becomes one U+FFFD with the id holding its last byte.
func lossy(b []byte, owners []int) tok {
	var out tok
	add := func(s string, owner int) {
		if n := len(out); n > 0 && out[n-1].owner == owner {
			out[n-1].s += s
			return
		}
		out = append(out, seg{s, owner})
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			size = illFormedPrefix(b[i:])
			add("\uFFFD", owners[i+size-1])
		} else {
			add(string(b[i:i+size]), owners[i+size-1])
		}
		i += size
	}
	return out
}

// illFormedPrefix is the length of the maximal ill-formed subsequence at the
// start of b, which does not start with a well-formed character: the lead
// byte and the continuation bytes a well-formed character could have after
// it (Unicode §3.9, "U+FFFD substitution of maximal subparts").
func illFormedPrefix(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case 0xC2 <= c && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case 0xF1 <= c && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 && (x < lo || x > hi) || k > 0 && (x < 0x80 || x > 0xBF) {
			break
		}
		n++
	}
	return n
}
