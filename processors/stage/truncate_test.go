package stage

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncateKeepsUTF8: a detail cut to a header's length never splits a
// character, and keeps every byte that fits.
func TestTruncateKeepsUTF8(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"},  // é is 2 bytes: cutting at 2 would split it
		{"aé", 3, "aé"}, // fits whole
		{"€€", 4, "€"},  // € is 3 bytes
		{"€€", 2, ""},   // not even one fits
		{"a😀b", 4, "a"}, // 😀 is 4 bytes
	} {
		got := truncate(tc.s, tc.n)
		if got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
	s := strings.Repeat("żółć ", 300)
	for n := 0; n < 600; n++ {
		got := truncate(s, n)
		if !utf8.ValidString(got) || len(got) > n || len(got) < n-3 {
			t.Fatalf("truncate(…, %d) = %d bytes, valid %v", n, len(got), utf8.ValidString(got))
		}
	}
}
