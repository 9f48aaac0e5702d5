package python_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/creditflow/creditflow/harness/synth"
	"github.com/creditflow/creditflow/internal/pyenv/pyenvtest"
	"github.com/creditflow/creditflow/processors/credit"
	"github.com/creditflow/creditflow/processors/stage/scoring"
	"github.com/creditflow/creditflow/schemas"
	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/tokenizer"
)

// TestGoldTargetsFromHFTokenizers: a byte-level BPE and a Unigram tokenizer
// trained with the tokenizers library (tokenizer/testdata), wrapped
// in transformers' PreTrainedTokenizerFast as docs/python.md shows, fill the
// gold target of build_trajectory (python/testdata/hf_gold.py) for ASCII,
// accented, CJK, emoji and space-padded gold answers. On the Go side the
// encoded trajectory decodes and validates, the score stage's LAPO plan
// scores exactly that target and span, the target is tokenizers' own
// encoding of the template, the Go decoder reads it back as the template,
// and the span's text holds the answer (the shortest run of tokens that
// does, for an answer without surrounding spaces, whose tokens count too). A
// blank first gold answer gives no gold target, as the score stage would
// decide. With the built-in byte tokenizer the target is the one the Go
// harness builds (synth.Tokens of synth.Template).
func TestGoldTargetsFromHFTokenizers(t *testing.T) {
	py := pyenvtest.Python(t)
	dir := t.TempDir()
	root := repoRoot(t)
	runPy(t, py, 2*time.Minute, filepath.Join(root, "tokenizer", "testdata", "hf_decode.py"), dir)
	names := []string{"bpe-byte-level", "unigram-metaspace-first", "unigram-llama2"}
	args := []string{filepath.Join(root, "python", "testdata", "hf_gold.py"), filepath.Join(dir, "gold.json")}
	for _, n := range names {
		args = append(args, n+"="+filepath.Join(dir, n, "tokenizer.json"))
	}
	runPy(t, py, 2*time.Minute, args...)
	b, err := os.ReadFile(filepath.Join(dir, "gold.json"))
	if err != nil {
		t.Fatal(err)
	}
	var all map[string][]struct {
		Gold, Text, Avro string
		Target           []int32
		Span             [2]int32
		LibraryIDs       []int32 `json:"library_ids"`
	}
	if err := json.Unmarshal(b, &all); err != nil {
		t.Fatal(err)
	}
	for _, name := range append([]string{"bytes"}, names...) {
		cases := all[name]
		if len(cases) < 8 {
			t.Fatalf("%s: %d cases", name, len(cases))
		}
		dec := tokenizer.Bytes()
		if name != "bytes" {
			if dec, err = tokenizer.Load(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cases {
			where := fmt.Sprintf("%s, gold %q", name, c.Gold)
			raw, err := hex.DecodeString(c.Avro)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := schemas.Trajectories().Decode(raw)
			if err != nil {
				t.Fatalf("%s: decode: %v", where, err)
			}
			if err := schemas.ValidateTrajectory(tr, schemas.DefaultLimits()); err != nil {
				t.Fatalf("%s: the processor would dead-letter it: %v", where, err)
			}
			plan, err := scoring.PlanLAPO(tr, "backward", credit.DefaultConfig(), []int32{3})
			if err != nil {
				t.Fatal(err)
			}
			if credit.Blank(c.Gold) {
				if len(tr.GoldTarget) != 0 || !plan.NoGoldTarget() {
					t.Errorf("%s: blank gold answer: target %v, the stage scores it: %v", where, tr.GoldTarget, !plan.NoGoldTarget())
				}
				continue
			}
			if !reflect.DeepEqual(tr.GoldTarget, c.Target) || tr.GoldSpan != c.Span {
				t.Fatalf("%s: decoded target %v %v, written %v %v", where, tr.GoldTarget, tr.GoldSpan, c.Target, c.Span)
			}
			if !reflect.DeepEqual(c.Target, c.LibraryIDs) {
				t.Errorf("%s: target %v, tokenizers encodes the template as %v", where, c.Target, c.LibraryIDs)
			}
			set, err := scorer.ExpandSet(plan.RowSet("x"))
			if err != nil || plan.NoGoldTarget() || len(set.Rows) != 3 {
				t.Fatalf("%s: the stage's plan: %d rows, %v (want c_full and one per search turn)", where, len(set.Rows), err)
			}
			for _, r := range set.Rows {
				if !reflect.DeepEqual(r.Target, c.Target) || r.Span != [2]int{int(c.Span[0]), int(c.Span[1])} {
					t.Fatalf("%s: row target %v %v, want %v %v", where, r.Target, r.Span, c.Target, c.Span)
				}
			}
			if got := dec.Text(c.Target); got != c.Text {
				t.Errorf("%s: the target reads %q, want the template %q", where, got, c.Text)
			}
			a, z := int(c.Span[0]), int(c.Span[1])
			gold := strings.TrimSpace(c.Gold)
			if !strings.Contains(dec.Text(c.Target[a:z]), gold) || gold == c.Gold &&
				(strings.Contains(dec.Text(c.Target[a+1:z]), gold) || strings.Contains(dec.Text(c.Target[a:z-1]), gold)) {
				t.Errorf("%s: span [%d, %d) reads %q: not the shortest run holding the answer", where, a, z, dec.Text(c.Target[a:z]))
			}
			if name == "bytes" {
				want := synth.Tokens(fmt.Sprintf(synth.Template, c.Gold))
				p := len(strings.SplitN(synth.Template, "%s", 2)[0])
				if !reflect.DeepEqual(c.Target, want) || c.Span != [2]int32{int32(p), int32(p + len(c.Gold))} {
					t.Errorf("%s: target %v %v, the Go harness builds %v [%d, %d)", where, c.Target, c.Span, want, p, p+len(c.Gold))
				}
			}
		}
	}
}
