package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"unicode/utf8"
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
	Type          string          `json:"type"`
	Decoders      []component     `json:"decoders"`
	Pretoks       []component     `json:"pretokenizers"`
	Pattern       json.RawMessage `json:"pattern"`
	Content       json.RawMessage `json:"content"`
	Replacement   string          `json:"replacement"`
	PrependScheme string          `json:"prepend_scheme"`
	AddPrefix     *bool           `json:"add_prefix_space"`
	Start         int             `json:"start"`
	Stop          int             `json:"stop"`
}

// decoderChain reads the decoder of a tokenizer.json into the steps that
// run it; a decoder type this package does not run is an error naming it.
func decoderChain(raw json.RawMessage) ([]step, []string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return []step{spacesStep{}}, nil, nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("decoder: %w", err)
	}
	var steps []step
	var names []string
	var walk func(c component, at string) error
	walk = func(c component, at string) error {
		names = append(names, c.Type)
		switch c.Type {
		case "Sequence":
			for i, s := range c.Decoders {
				if err := walk(s, fmt.Sprintf("%s.decoders[%d]", at, i)); err != nil {
					return err
				}
			}
		case "ByteLevel":
			steps = append(steps, byteLevelStep{})
		case "ByteFallback":
			steps = append(steps, byteFallbackStep{})
		case "Fuse":
			steps = append(steps, fuseStep{})
		case "Replace":
			var p struct {
				String *string `json:"String"`
				Regex  *string `json:"Regex"`
			}
			var to string
			if json.Unmarshal(c.Pattern, &p) != nil || p.String == nil || json.Unmarshal(c.Content, &to) != nil {
				return fmt.Errorf("%s: a Replace decoder with a pattern other than a string (%s) is not supported", at, c.Pattern)
			}
			if *p.String != "" {
				steps = append(steps, replaceStep{from: *p.String, to: to})
			}
		case "Strip":
			var content string
			if json.Unmarshal(c.Content, &content) != nil || utf8.RuneCountInString(content) != 1 || c.Start < 0 || c.Stop < 0 {
				return fmt.Errorf("%s: a Strip decoder wants one character as content and counts ≥ 0", at)
			}
			r, _ := utf8.DecodeRuneInString(content)
			steps = append(steps, stripStep{content: r, start: c.Start, stop: c.Stop})
		case "Metaspace":
			rep := c.Replacement
			if rep == "" {
				rep = "▁"
			}
			if utf8.RuneCountInString(rep) != 1 {
				return fmt.Errorf("%s: a Metaspace replacement of one character, not %q", at, rep)
			}
			r, _ := utf8.DecodeRuneInString(rep)
			never := c.PrependScheme == "never" || (c.PrependScheme == "" && c.AddPrefix != nil && !*c.AddPrefix)
			steps = append(steps, metaspaceStep{replacement: r, never: never})
		default:
			return fmt.Errorf("%s: decoder type %q is not supported (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence)", at, c.Type)
		}
		return nil
	}
	if err := walk(c, "decoder"); err != nil {
		return nil, nil, err
	}
	return steps, names, nil
}

// preTypes lists the pre-tokenizer types, Sequences flattened.
func preTypes(raw json.RawMessage) []string {
	var c component
	if len(raw) == 0 || json.Unmarshal(raw, &c) != nil {
		return nil
	}
	var ts []string
	var walk func(c component)
	walk = func(c component) {
		ts = append(ts, c.Type)
		for _, s := range c.Pretoks {
			walk(s)
		}
	}
	walk(c)
	return ts
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
	var chain []step
	kind := KindOther
	if t.Model.Type == "bytes" {
		kind, chain = KindBytes, []step{byteLevelStep{identity: true}}
	} else {
		var dec []string
		var err error
		if chain, dec, err = decoderChain(t.Decoder); err != nil {
			return nil, err
		}
		pre := preTypes(t.PreTokenizer)
		switch {
		case has(dec, "ByteLevel") || (len(dec) == 0 && has(pre, "ByteLevel")):
			kind = KindByteLevelBPE
		case has(dec, "Metaspace") || has(pre, "Metaspace") || has(dec, "ByteFallback") || t.Model.ByteFallback || t.Model.Type == "Unigram":
			kind = KindSentencePiece
		}
	}

	tokens := map[int64]string{}
	special := map[int64]bool{}
	switch t.Model.Type {
	case "bytes":
		for i := 0; i < 256; i++ {
			tokens[int64(i)] = string([]byte{byte(i)})
		}
	case "Unigram":
		var vocab [][2]json.RawMessage
		if err := json.Unmarshal(t.Model.Vocab, &vocab); err != nil {
			return nil, fmt.Errorf("model.vocab of a Unigram model: want a list of [piece, score]: %w", err)
		}
		for id, e := range vocab {
			var s string
			if err := json.Unmarshal(e[0], &s); err != nil {
				return nil, fmt.Errorf("model.vocab[%d]: the piece is not a string", id)
			}
			tokens[int64(id)] = s
		}
	default:
		var vocab map[string]int64
		if err := json.Unmarshal(t.Model.Vocab, &vocab); err != nil {
			return nil, fmt.Errorf("model.vocab: want an object of piece → id: %w", err)
		}
		for s, id := range vocab {
			tokens[id] = s
		}
	}
	for _, a := range t.AddedTokens {
		tokens[a.ID] = a.Content
		special[a.ID] = a.Special == nil || *a.Special
	}
	if len(tokens) == 0 {
		return nil, errors.New("the vocabulary is empty")
	}
	ids := make([]int64, 0, len(tokens))
	for id := range tokens {
		if id < 0 || id >= maxVocab {
			return nil, fmt.Errorf("token id %d outside [0, %d)", id, maxVocab)
		}
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	n := ids[len(ids)-1] + 1
	d := &Decoder{kind: kind, tokens: make([]string, n), has: make([]bool, n), special: make([]bool, n), chain: chain}
	for _, id := range ids {
		d.tokens[id], d.has[id], d.special[id] = tokens[id], true, special[id]
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
