package tokenizer

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBytesVocabulary(t *testing.T) {
	d := Bytes()
	ids := []int32{ByteBOS, 'H', 'i', ' ', 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80, '!', ByteDelete, 0xFF, ByteEOS, 999, -1}
	got := d.Texts(ids)
	want := []string{"<bos>", "H", "i", " ", "", "é", "", "", "", "😀", "!", "[DELETE]", "\uFFFD", "<eos>", "<id 999>", "<id -1>"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Texts = %q\nwant    %q", got, want)
	}
	if d.Text(ids) != strings.Join(want, "") {
		t.Fatal("Text is not the concatenation of Texts")
	}
	// Each maximal ill-formed subsequence is one U+FFFD (Python's errors="replace"):
	// E2 82 is the start of a character, F0 80 is not.
	if got := d.Text([]int32{0xE2, 0x82, 'A', 0xF0, 0x80, 0xED, 0xA0, 0x80}); got != "\uFFFDA\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD" {
		t.Fatalf("ill-formed bytes: %q", got)
	}
	// A character cut short by a special token is not carried past it.
	got = d.Texts([]int32{'a', 0xE2, 0x82, ByteEOS, 'b'})
	if want := []string{"a", "", "\uFFFD", "<eos>", "b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cut character: %q, want %q", got, want)
	}
}

// TestBytesRoundTrip: random valid UTF-8 text, one token per byte, decodes
// to itself, and every token's text is valid UTF-8.
func TestBytesRoundTrip(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	alphabet := []rune("abc XYZ\n\té€😀中文ßñ")
	d := Bytes()
	for n := 0; n < 200; n++ {
		var sb strings.Builder
		for k := r.Intn(40); k >= 0; k-- {
			sb.WriteRune(alphabet[r.Intn(len(alphabet))])
		}
		s := sb.String()
		ids := make([]int32, len(s))
		for i := 0; i < len(s); i++ {
			ids[i] = int32(s[i])
		}
		texts := d.Texts(ids)
		for _, x := range texts {
			if !utf8.ValidString(x) {
				t.Fatalf("%q: token text %q is not valid UTF-8", s, x)
			}
		}
		if got := strings.Join(texts, ""); got != s {
			t.Fatalf("decoded %q, want %q", got, s)
		}
	}
}

// TestEmbeddedTinyTokenizer: the tiny model's tokenizer.json reads as the
// built-in byte vocabulary.
func TestEmbeddedTinyTokenizer(t *testing.T) {
	d, err := Load(filepath.Join("..", "scorer", "cpumodel", "tiny"))
	if err != nil {
		t.Fatal(err)
	}
	b := Bytes()
	if d.Kind() != KindBytes || d.Size() != b.Size() {
		t.Fatalf("tiny tokenizer.json: %v, want %v", d, b)
	}
	for id := int32(0); id < ByteVocab; id++ {
		p, _ := d.Piece(id)
		q, _ := b.Piece(id)
		if string(p) != string(q) || d.Special(id) != b.Special(id) {
			t.Fatalf("id %d: %q (special %v), built-in %q (special %v)", id, p, d.Special(id), q, b.Special(id))
		}
	}
}

func writeJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestByteLevelBPE writes a GPT-2/Qwen style vocabulary: bytes mapped to
// printable characters (Ġ = space, Ċ = newline, Ã© = é), merges irrelevant
// to decoding, special added tokens.
func TestByteLevelBPE(t *testing.T) {
	vocab := map[string]int{"Hello": 0, "Ġworld": 1, "Ċ": 2, "Ã©": 3, "Ã": 4, "©": 5, "ĠcafÃ©": 6, "!": 7, "ðŁĺ": 8, "Ģ": 9}
	path := writeJSON(t, map[string]any{
		"version":        "1.0",
		"added_tokens":   []map[string]any{{"id": 10, "content": "<|im_end|>", "special": true}, {"id": 12, "content": " plain", "special": false}},
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false},
		"decoder":        map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true},
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{"H e", "l l"}},
		"post_processor": nil,
	})
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != KindByteLevelBPE || d.Size() != 13 {
		t.Fatalf("%v", d)
	}
	ids := []int32{0, 1, 7, 2, 6, 4, 5, 3, 8, 9, 10, 12, 11}
	got := d.Texts(ids)
	want := []string{"Hello", " world", "!", "\n", " café", "", "é", "é", "", "😀", "<|im_end|>", " plain", "<id 11>"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Texts = %q\nwant    %q", got, want)
	}
	if d.Special(12) || !d.Special(10) {
		t.Fatal("special flags of the added tokens")
	}
}

// TestSentencePieceBPE writes a Llama-2 style vocabulary: ▁ for spaces,
// <0xHH> byte-fallback pieces, a Sequence decoder.
func TestSentencePieceBPE(t *testing.T) {
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xE2>": 4, "<0x82>": 5, "<0xAC>": 6, "▁Hello": 7, "▁world": 8, "▁": 9, "5": 10}
	path := writeJSON(t, map[string]any{
		"added_tokens": []map[string]any{{"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true}, {"id": 2, "content": "</s>", "special": true}},
		"decoder": map[string]any{"type": "Sequence", "decoders": []map[string]any{
			{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			{"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}}},
		"model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}, "byte_fallback": true},
	})
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != KindSentencePiece {
		t.Fatalf("%v", d)
	}
	got := d.Texts([]int32{1, 7, 8, 3, 9, 10, 4, 5, 6, 2})
	want := []string{"<s>", " Hello", " world", "\n", " ", "5", "", "", "€", "</s>"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Texts = %q\nwant    %q", got, want)
	}
}

// TestSentencePieceUnigram writes a T5/Gemma style Unigram vocabulary (a
// list of [piece, score]) with a Metaspace decoder.
func TestSentencePieceUnigram(t *testing.T) {
	path := writeJSON(t, map[string]any{
		"added_tokens": []map[string]any{{"id": 0, "content": "<pad>", "special": true}},
		"decoder":      map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
		"model": map[string]any{"type": "Unigram", "unk_id": 2, "vocab": []any{
			[]any{"<pad>", 0.0}, []any{"</s>", 0.0}, []any{"<unk>", 0.0}, []any{"▁the", -1.5}, []any{"▁cat", -3.25}, []any{"s", -2.0}}},
	})
	d, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	// Metaspace drops the ▁ of the first token (prepend scheme "always"), as tokenizers does.
	if got := d.Text([]int32{3, 4, 5, 0}); got != "the cats<pad>" {
		t.Fatalf("Text = %q", got)
	}
}

func TestUnsupported(t *testing.T) {
	for name, v := range map[string]any{
		"wordpiece": map[string]any{"decoder": map[string]any{"type": "WordPiece", "prefix": "##"}, "model": map[string]any{"type": "WordPiece", "vocab": map[string]int{"a": 0}}},
		"empty":     map[string]any{"decoder": map[string]any{"type": "ByteLevel"}, "model": map[string]any{"type": "BPE", "vocab": map[string]int{}}},
		"negative":  map[string]any{"decoder": map[string]any{"type": "ByteLevel"}, "model": map[string]any{"type": "BPE", "vocab": map[string]int{"a": -3}}},
		"vocab":     map[string]any{"decoder": map[string]any{"type": "ByteLevel"}, "model": map[string]any{"type": "BPE", "vocab": []int{1}}},
	} {
		if _, err := Load(writeJSON(t, v)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Parse([]byte("{not json")); err == nil {
		t.Error("broken JSON accepted")
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}
