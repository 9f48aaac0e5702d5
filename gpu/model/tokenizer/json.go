package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maxVocab bounds the ids a tokenizer.json may use (real vocabularies are
// below 300k).
const maxVocab = 1 << 22

// Load reads a Hugging Face tokenizer.json (or a model folder holding one).
func Load(path string) (*Decoder, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = strings.TrimSuffix(path, "/") + "/tokenizer.json"
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w (give --tokenizer a tokenizer.json or a model folder holding one)", err)
	}
	d, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	return d, nil
}

type tokJSON struct {
	AddedTokens []struct {
		ID      int64  `json:"id"`
		Content string `json:"content"`
		Special *bool  `json:"special"`
	} `json:"added_tokens"`
	Model struct {
		Type         string          `json:"type"`
		Vocab        json.RawMessage `json:"vocab"`
		ByteFallback bool            `json:"byte_fallback"`
	} `json:"model"`
	Decoder      json.RawMessage `json:"decoder"`
	PreTokenizer json.RawMessage `json:"pre_tokenizer"`
}

// component is a decoder or pre-tokenizer, possibly a Sequence of them.
type component struct {
	Type        string          `json:"type"`
	Decoders    []component     `json:"decoders"`
	Pretoks     []component     `json:"pretokenizers"`
	Pattern     json.RawMessage `json:"pattern"`
	Content     string          `json:"content"`
	Replacement string          `json:"replacement"`
}

// types lists the component types of raw, Sequences flattened, with the
// Replace patterns' strings.
func types(raw json.RawMessage) (ts []string, replaces []string) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var c component
	if json.Unmarshal(raw, &c) != nil {
		return nil, nil
	}
	var walk func(c component)
	walk = func(c component) {
		ts = append(ts, c.Type)
		if c.Type == "Replace" {
			var p struct{ String string }
			_ = json.Unmarshal(c.Pattern, &p)
			replaces = append(replaces, p.String)
		}
		for _, s := range c.Decoders {
			walk(s)
		}
		for _, s := range c.Pretoks {
			walk(s)
		}
	}
	walk(c)
	return ts, replaces
}

func has(ts []string, t string) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// Parse reads the text of a tokenizer.json.
func Parse(b []byte) (*Decoder, error) {
	var t tokJSON
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %w", err)
	}
	dec, repl := types(t.Decoder)
	pre, _ := types(t.PreTokenizer)
	var kind string
	switch {
	case t.Model.Type == "bytes":
		kind = KindBytes
	case has(dec, "ByteLevel") || (len(dec) == 0 && has(pre, "ByteLevel")):
		kind = KindByteLevelBPE
	case has(dec, "Metaspace") || has(pre, "Metaspace") || has(repl, "▁") || has(dec, "ByteFallback") ||
		t.Model.ByteFallback || t.Model.Type == "Unigram":
		kind = KindSentencePiece
	default:
		return nil, fmt.Errorf("model type %q with decoders %v: supported are byte-level BPE (a ByteLevel decoder) and SentencePiece-style vocabularies (Metaspace or ▁ replacement, byte fallback, Unigram)", t.Model.Type, dec)
	}

	pieces := map[int64][]byte{}
	special := map[int64]bool{}
	switch {
	case kind == KindBytes:
		for i := 0; i < 256; i++ {
			pieces[int64(i)] = []byte{byte(i)}
		}
	case t.Model.Type == "Unigram":
		var vocab [][2]json.RawMessage
		if err := json.Unmarshal(t.Model.Vocab, &vocab); err != nil {
			return nil, fmt.Errorf("model.vocab of a Unigram model: want a list of [piece, score]: %w", err)
		}
		for id, e := range vocab {
			var s string
			if err := json.Unmarshal(e[0], &s); err != nil {
				return nil, fmt.Errorf("model.vocab[%d]: the piece is not a string", id)
			}
			pieces[int64(id)] = spBytes(s)
		}
	default:
		var vocab map[string]int64
		if err := json.Unmarshal(t.Model.Vocab, &vocab); err != nil {
			return nil, fmt.Errorf("model.vocab: want an object of piece → id: %w", err)
		}
		for s, id := range vocab {
			if kind == KindByteLevelBPE {
				pieces[id] = byteLevelBytes(s)
			} else {
				pieces[id] = spBytes(s)
			}
		}
	}
	for _, a := range t.AddedTokens {
		pieces[a.ID] = []byte(a.Content)
		special[a.ID] = a.Special == nil || *a.Special
	}
	if len(pieces) == 0 {
		return nil, errors.New("the vocabulary is empty")
	}
	ids := make([]int64, 0, len(pieces))
	for id := range pieces {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("token id %d outside [0, %d)", id, maxVocab)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	d := &Decoder{kind: kind, pieces: make([][]byte, ids[len(ids)-1]+1), special: make([]bool, ids[len(ids)-1]+1)}
	for _, id := range ids {
		d.pieces[id] = pieces[id]
		if d.pieces[id] == nil {
			d.pieces[id] = []byte{}
		}
		d.special[id] = special[id]
	}
	return d, nil
}

// byteToRune is GPT-2's bytes_to_unicode: printable bytes stand for
// themselves, the others for 256+n in byte order.
var runeToByte = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF) {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}()

// byteLevelBytes maps a byte-level BPE piece back to its bytes; a character
// outside the table keeps its own UTF-8 bytes.
func byteLevelBytes(s string) []byte {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if b, ok := runeToByte[r]; ok {
			out = append(out, b)
		} else {
			out = append(out, string(r)...)
		}
	}
	return out
}

// spBytes maps a SentencePiece piece to its bytes: "<0xHH>" is the byte HH,
// "▁" a space.
func spBytes(s string) []byte {
	if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
		if v, err := strconv.ParseUint(s[3:5], 16, 8); err == nil {
			return []byte{byte(v)}
		}
	}
	return []byte(strings.ReplaceAll(s, "▁", " "))
}
