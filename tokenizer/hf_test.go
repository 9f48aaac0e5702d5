package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
)

// TestDecodeEqualsTokenizers: a byte-level BPE and a Unigram tokenizer
// trained with the Hugging Face tokenizers library (testdata/hf_decode.py,
// the project's Python environment), the Unigram one saved with six decoder
// chains; for each tokenizer.json, Text equals tokenizers' decode
// (skip_special_tokens=False) on every id alone, on encodings of the corpus
// and random cuts of them, on random id sequences and on runs of byte
// tokens, and Texts are valid UTF-8 and concatenate to Text.
func TestDecodeEqualsTokenizers(t *testing.T) {
	dir := t.TempDir()
	script, err := filepath.Abs(filepath.Join("testdata", "hf_decode.py"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := pyenvtest.Command(t, script, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hf_decode.py: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]struct {
		Path  string
		Cases []struct {
			IDs  []int32
			Text string
		}
	}
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	wantKind := map[string]string{"bpe-byte-level": KindByteLevelBPE, "unigram-none": KindSentencePiece}
	for _, name := range []string{"bpe-byte-level", "unigram-t5", "unigram-llama2", "unigram-gemma",
		"unigram-metaspace-first", "unigram-metaspace-never", "unigram-none"} {
		tc, ok := all[name]
		if !ok || len(tc.Cases) < 1000 {
			t.Fatalf("%s: %d cases", name, len(tc.Cases))
		}
		t.Run(name, func(t *testing.T) {
			d, err := Load(tc.Path)
			if err != nil {
				t.Fatal(err)
			}
			if k := wantKind[name]; k == "" && d.Kind() != KindSentencePiece || k != "" && d.Kind() != k {
				t.Errorf("kind %q", d.Kind())
			}
			bad := 0
			for _, c := range tc.Cases {
				texts := d.Texts(c.IDs)
				got := strings.Join(texts, "")
				if got != c.Text {
					if bad++; bad <= 8 {
						t.Errorf("ids %v: %q, tokenizers %q", c.IDs, got, c.Text)
					}
				}
				for i, s := range texts {
					if !utf8.ValidString(s) {
						t.Fatalf("ids %v: text %d %q is not valid UTF-8", c.IDs, i, s)
					}
				}
				if d.Text(c.IDs) != got {
					t.Fatalf("ids %v: Text is not the concatenation of Texts", c.IDs)
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d sequences differ from tokenizers", bad, len(tc.Cases))
			}
		})
	}
}
