package scorer

// Token arrays and compact-row pieces, with the JSON form they have on the
// wire (docs/scorer-protocol.md).

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Tokens is a token-id array that travels on the wire as base64 (standard
// alphabet, padded) of packed little-endian int32 values, 4 bytes per token.
// In Python: base64.b64encode(np.asarray(ids, dtype="<i4").tobytes()).
type Tokens []int32

// MarshalJSON encodes t as a base64 string of little-endian int32.
func (t Tokens) MarshalJSON() ([]byte, error) {
	raw := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
	}
	out := make([]byte, 0, base64.StdEncoding.EncodedLen(len(raw))+2)
	out = append(out, '"')
	out = base64.StdEncoding.AppendEncode(out, raw)
	out = append(out, '"')
	return out, nil
}

// UnmarshalJSON decodes a base64 string of little-endian int32 (null gives nil).
func (t *Tokens) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*t = nil
		return nil
	}
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("token array must be a base64 string of little-endian int32, got %.20s", b)
	}
	src := b[1 : len(b)-1]
	raw := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	n, err := base64.StdEncoding.Decode(raw, src)
	if err != nil {
		return fmt.Errorf("token array is not valid base64: %v", err)
	}
	raw = raw[:n]
	if len(raw)%4 != 0 {
		return fmt.Errorf("token array has %d bytes, not a multiple of 4 (int32 little-endian)", len(raw))
	}
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	*t = out
	return nil
}

// Piece is one piece of a compact row's context: either a half-open span
// [Start, End) into its set's Tokens (Literal nil) or literal token ids
// (Literal non-nil, e.g. the placeholder). On the wire a span is [s, e] and
// literal ids are a token array string.
type Piece struct {
	Start, End int
	Literal    Tokens
}

// MarshalJSON writes [s, e] or the literal ids' base64 string.
func (p Piece) MarshalJSON() ([]byte, error) {
	if p.Literal != nil {
		return p.Literal.MarshalJSON()
	}
	return []byte(fmt.Sprintf("[%d,%d]", p.Start, p.End)), nil
}

// UnmarshalJSON reads [s, e] or a token array string.
func (p *Piece) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var t Tokens
		if err := t.UnmarshalJSON(b); err != nil {
			return err
		}
		if t == nil {
			t = Tokens{}
		}
		*p = Piece{Literal: t}
		return nil
	}
	var r [2]int
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 2 {
		return fmt.Errorf("a piece must be [start, end] or a base64 token array, got %.30s", b)
	}
	for i := range raw {
		if err := json.Unmarshal(raw[i], &r[i]); err != nil {
			return fmt.Errorf("a piece must be [start, end] with integer bounds, got %.30s", b)
		}
	}
	*p = Piece{Start: r[0], End: r[1]}
	return nil
}
