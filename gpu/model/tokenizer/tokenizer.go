// Package tokenizer turns token ids back into text, for people reading
// samples: the built-in byte vocabulary of the tiny models, and a model's
// Hugging Face tokenizer.json with a byte-level BPE vocabulary (GPT-2, Llama
// 3, Qwen) or a SentencePiece-style one (▁ for spaces, <0xHH> byte
// fallback; BPE or Unigram models: Llama 2, Mistral, Gemma). It decodes
// only; nothing here tokenizes.
//
// Guarantees:
//
//   - Texts gives one string per id, every one valid UTF-8, and their
//     concatenation is the decoded text: the bytes of a character split over
//     several tokens are shown with the token that completes it, and bytes
//     that never form a valid character become U+FFFD.
//   - An id outside the vocabulary never fails: it reads "<id N>".
//   - A tokenizer.json that is not one of the supported kinds is refused
//     with an error that names what was found; nothing panics on input.
//
// Decoding is per token: the leading-space strip some SentencePiece
// decoders apply to the first token of a text is not applied, so that each
// token shows the space it carries.
package tokenizer

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Kinds of vocabulary.
const (
	KindBytes         = "bytes"          // the built-in byte vocabulary
	KindByteLevelBPE  = "byte-level BPE" // GPT-2 style: bytes mapped to printable characters
	KindSentencePiece = "sentencepiece"  // ▁ for spaces, <0xHH> byte fallback
)

// Decoder maps token ids to their bytes. It is immutable and safe for
// concurrent use.
type Decoder struct {
	kind    string
	pieces  [][]byte // id → bytes; nil where the id has no entry
	special []bool   // id → an added special token (shown as its content)
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
	d := &Decoder{kind: KindBytes, pieces: make([][]byte, ByteVocab), special: make([]bool, ByteVocab)}
	for i := 0; i < 256; i++ {
		d.pieces[i] = []byte{byte(i)}
	}
	for id, s := range map[int]string{ByteBOS: "<bos>", ByteEOS: "<eos>", BytePad: "<pad>", ByteDelete: "[DELETE]"} {
		d.pieces[id], d.special[id] = []byte(s), true
	}
	return d
}

// Kind is KindBytes, KindByteLevelBPE or KindSentencePiece.
func (d *Decoder) Kind() string { return d.kind }

// Size is one more than the largest id with an entry.
func (d *Decoder) Size() int { return len(d.pieces) }

// Piece returns the bytes of id; ok is false for an id without an entry.
func (d *Decoder) Piece(id int32) (b []byte, ok bool) {
	if id < 0 || int(id) >= len(d.pieces) || d.pieces[id] == nil {
		return nil, false
	}
	return d.pieces[id], true
}

// Special reports whether id is an added special token (<bos>, <|im_end|>...).
func (d *Decoder) Special(id int32) bool {
	return id >= 0 && int(id) < len(d.special) && d.special[id]
}

// Text is the decoded text of ids: the concatenation of Texts.
func (d *Decoder) Text(ids []int32) string { return strings.Join(d.Texts(ids), "") }

// Texts returns one valid UTF-8 string per id. A character whose bytes
// span several tokens is shown with the last of them (the others show ""),
// bytes that form no valid character become U+FFFD, and an id without an
// entry reads "<id N>".
func (d *Decoder) Texts(ids []int32) []string {
	out := make([]string, len(ids))
	var pend []byte // bytes of an unfinished character, from earlier tokens
	pendAt := -1    // the token the pending bytes started in
	flush := func() {
		if len(pend) > 0 {
			out[pendAt] += valid(pend)
			pend, pendAt = pend[:0], -1
		}
	}
	for i, id := range ids {
		b, ok := d.Piece(id)
		if !ok || d.Special(id) {
			flush()
			if ok {
				out[i] = string(b)
			} else {
				out[i] = "<id " + strconv.Itoa(int(id)) + ">"
			}
			continue
		}
		if len(pend) == 0 {
			pendAt = i
		}
		buf := append(pend, b...)
		cut := completeUpTo(buf)
		if cut > 0 {
			out[i] += valid(buf[:cut])
		}
		pend = append(pend[:0], buf[cut:]...)
		if len(pend) > 0 {
			pendAt = i
		}
	}
	flush()
	return out
}

// completeUpTo returns the length of the longest prefix of b that does not
// end inside a character that more bytes could still complete.
func completeUpTo(b []byte) int {
	// An unfinished character is at most utf8.UTFMax−1 bytes from the end.
	for k := 1; k < utf8.UTFMax && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 { // ASCII: nothing unfinished after it
			return len(b)
		}
		if c >= 0xC0 { // a lead byte: is its character finished?
			if !utf8.FullRune(b[len(b)-k:]) {
				return len(b) - k
			}
			return len(b)
		}
	}
	return len(b)
}

// valid returns b as a string with every byte that is not part of a valid
// character replaced by U+FFFD.
func valid(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// String names the vocabulary.
func (d *Decoder) String() string {
	return fmt.Sprintf("%s vocabulary of %d ids", d.kind, len(d.pieces))
}
