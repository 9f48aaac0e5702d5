// Package tokenizer turns token ids back into text, for people reading
// samples: the built-in byte vocabulary of the tiny models, and a model's
// Hugging Face tokenizer.json — byte-level BPE vocabularies (GPT-2, Llama 3,
// Qwen) and SentencePiece-style ones (▁ for spaces, <0xHH> byte fallback;
// BPE or Unigram models: Llama 2, Mistral, Gemma, T5). It decodes only;
// nothing here tokenizes.
//
// Guarantees:
//
//   - Text is what the Hugging Face tokenizers library gives for the same
//     file: Tokenizer.decode(ids, skip_special_tokens=False). The file's
//     decoder chain is run as tokenizers runs it (ByteLevel, Metaspace,
//     Replace, ByteFallback, Fuse, Strip, Sequence; without a decoder the
//     token strings are joined by spaces), added tokens included, so the
//     rules for bytes that form no character are tokenizers' own: ByteLevel
//     replaces each maximal ill-formed subsequence of the joined bytes by
//     one U+FFFD (Rust's from_utf8_lossy), ByteFallback turns a run of
//     <0xHH> tokens that is not valid UTF-8 into one U+FFFD per token.
//     The one difference: an id outside the vocabulary, which tokenizers
//     leaves out, reads "<id N>".
//   - Texts gives one valid UTF-8 string per id and their concatenation is
//     Text: a character whose bytes span several tokens is shown with the
//     last of them (the others show ""), and so is a U+FFFD.
//   - A tokenizer.json with a decoder this package does not run is refused
//     with an error that names it; nothing panics on input.
package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
)

// Kinds of vocabulary.
const (
	KindBytes         = "bytes"          // the built-in byte vocabulary
	KindByteLevelBPE  = "byte-level BPE" // GPT-2 style: bytes mapped to printable characters
	KindSentencePiece = "sentencepiece"  // ▁ for spaces, <0xHH> byte fallback
	KindOther         = "other"          // no decoder that says which: token strings joined by spaces
)

// Decoder maps token ids to their text. It is immutable and safe for
// concurrent use.
type Decoder struct {
	kind    string
	tokens  []string // id → its token string (the vocabulary entry, or an added token's content)
	has     []bool   // id → it has an entry
	special []bool   // id → an added special token
	chain   []step   // the decoder chain
}

// Token ids of the built-in byte vocabulary (the tiny models: docs/model.md):
// ids 0..255 are the bytes themselves.
const (
	ByteBOS    = 256
	ByteEOS    = 257
	BytePad    = 258
	ByteDelete = 259 // "[DELETE]", LAPO's placeholder
	ByteVocab  = 260
)

// Bytes is the built-in byte vocabulary: ids 0..255 are bytes, then <bos>,
// <eos>, <pad> and [DELETE].
func Bytes() *Decoder {
	d := &Decoder{kind: KindBytes, tokens: make([]string, ByteVocab), has: make([]bool, ByteVocab),
		special: make([]bool, ByteVocab), chain: []step{byteLevelStep{identity: true}}}
	for i := 0; i < 256; i++ {
		d.tokens[i], d.has[i] = string([]byte{byte(i)}), true
	}
	for id, s := range map[int]string{ByteBOS: "<bos>", ByteEOS: "<eos>", BytePad: "<pad>", ByteDelete: "[DELETE]"} {
		d.tokens[id], d.has[id], d.special[id] = s, true, true
	}
	return d
}

// Kind is KindBytes, KindByteLevelBPE, KindSentencePiece or KindOther.
func (d *Decoder) Kind() string { return d.kind }

// Size is one more than the largest id with an entry.
func (d *Decoder) Size() int { return len(d.tokens) }

// Piece returns the token string of id as the vocabulary holds it (the
// byte itself in the built-in vocabulary, "Ġworld" in a byte-level one,
// "▁world" or "<0xE2>" in a SentencePiece one, an added token's content); ok
// is false for an id without an entry.
func (d *Decoder) Piece(id int32) (s string, ok bool) {
	if id < 0 || int(id) >= len(d.tokens) || !d.has[id] {
		return "", false
	}
	return d.tokens[id], true
}

// Special reports whether id is an added special token (<bos>, <|im_end|>...).
func (d *Decoder) Special(id int32) bool {
	return id >= 0 && int(id) < len(d.special) && d.special[id]
}

// Text is the decoded text of ids: the concatenation of Texts.
func (d *Decoder) Text(ids []int32) string { return strings.Join(d.Texts(ids), "") }

// Texts returns one valid UTF-8 string per id, concatenating to Text: each
// character (and each U+FFFD) with the id that holds its last byte, and an
// id without an entry reads "<id N>".
func (d *Decoder) Texts(ids []int32) []string {
	out := make([]string, len(ids))
	ts := make([]tok, 0, len(ids))
	for i, id := range ids {
		if s, ok := d.Piece(id); ok {
			ts = append(ts, tok{{s, i}})
		} else {
			out[i] = "<id " + strconv.Itoa(int(id)) + ">"
		}
	}
	for _, st := range d.chain {
		ts = st.apply(ts)
	}
	for _, t := range ts {
		for _, s := range t {
			out[s.owner] += s.s
		}
	}
	return out
}

// String names the vocabulary.
func (d *Decoder) String() string {
	return fmt.Sprintf("%s vocabulary of %d ids", d.kind, len(d.tokens))
}
