package gpu

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"strconv"
)

// appendScoreRequest appends the JSON of a ScoreRequest for sets: the same
// bytes as json.Marshal(setsToWire(sets)), written directly. encoding/json
// re-scans and compacts the output of every MarshalJSON, which for the
// token arrays (base64 of rows that repeat a trajectory's whole prefix) was
// most of the score stage's client cost.
func appendScoreRequest(dst []byte, sets []RowSet) ([]byte, error) {
	dst = append(dst, `{"sets":[`...)
	for i, s := range sets {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if s.ID != "" {
			id, err := json.Marshal(s.ID)
			if err != nil {
				return nil, err
			}
			dst = append(dst, `"id":`...)
			dst = append(dst, id...)
			dst = append(dst, ',')
		}
		dst = append(dst, `"rows":[`...)
		for j, r := range s.Rows {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"context":`...)
			dst = appendTokens(dst, r.Context)
			dst = append(dst, `,"target":`...)
			dst = appendTokens(dst, r.Target)
			dst = append(dst, `,"span":[`...)
			dst = strconv.AppendInt(dst, int64(r.Span[0]), 10)
			dst = append(dst, ',')
			dst = strconv.AppendInt(dst, int64(r.Span[1]), 10)
			dst = append(dst, ']')
			if r.Temperature != 0 {
				temp, err := json.Marshal(r.Temperature)
				if err != nil {
					return nil, err
				}
				dst = append(dst, `,"temperature":`...)
				dst = append(dst, temp...)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, "]}"...)
	}
	return append(dst, "]}"...), nil
}

// appendTokens appends t as Tokens.MarshalJSON writes it.
func appendTokens(dst []byte, t []int32) []byte {
	dst = append(dst, '"')
	// Whole 3-byte groups per chunk (768 tokens = 3072 bytes) keep the
	// chunks' base64 concatenable without padding in between.
	const chunk = 768
	raw := make([]byte, 0, 4*min(len(t), chunk))
	for len(t) > 0 {
		n := min(len(t), chunk)
		raw = raw[:4*n]
		for i, v := range t[:n] {
			binary.LittleEndian.PutUint32(raw[4*i:], uint32(v))
		}
		dst = base64.StdEncoding.AppendEncode(dst, raw)
		t = t[n:]
	}
	return append(dst, '"')
}
