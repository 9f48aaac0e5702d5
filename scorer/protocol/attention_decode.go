package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// DecodeAttentionRequest decodes the JSON body of POST /v1/attention into
// req, as json.NewDecoder(bytes.NewReader(data)).Decode(req) does. A body in
// the exact form AppendAttentionRequest writes (no white space, fields in
// its order, ids without escapes) is read by a direct parser that gives the
// same request (TestDecodeAttentionRequestMatchesEncodingJSON); any other
// body, valid or not, goes to encoding/json, so its errors are those of
// encoding/json. The direct parser exists because encoding/json spent a
// third of the reference scorer's CPU on these bodies, most of it scanning
// the base64 token strings byte by byte.
func DecodeAttentionRequest(data []byte, req *AttentionRequest) error {
	if p := (attnParser{b: data}); p.request(req) {
		return nil
	}
	*req = AttentionRequest{}
	return json.NewDecoder(bytes.NewReader(data)).Decode(req)
}

// attnParser reads the form AppendAttentionRequest writes; every method
// reports false at the first byte it does not expect.
type attnParser struct {
	b   []byte
	pos int
}

func (p *attnParser) lit(s string) bool {
	if !bytes.HasPrefix(p.b[p.pos:], []byte(s)) {
		return false
	}
	p.pos += len(s)
	return true
}

func (p *attnParser) peek(c byte) bool { return p.pos < len(p.b) && p.b[p.pos] == c }

// str returns the raw JSON string at pos, quotes included; false when it
// holds an escape (encoding/json then decides).
func (p *attnParser) str() ([]byte, bool) {
	if !p.peek('"') {
		return nil, false
	}
	end := bytes.IndexByte(p.b[p.pos+1:], '"')
	if end < 0 {
		return nil, false
	}
	s := p.b[p.pos : p.pos+end+2]
	if bytes.IndexByte(s, '\\') >= 0 {
		return nil, false
	}
	p.pos += end + 2
	return s, true
}

// plainASCII reports whether s has no control bytes (invalid in JSON) and
// no bytes above ASCII (whose UTF-8 checks are left to encoding/json). A
// token string needs no such check: base64 decoding refuses those bytes.
func plainASCII(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x80 {
			return false
		}
	}
	return true
}

// int reads an optionally negative decimal integer without leading zeros.
func (p *attnParser) int() (int, bool) {
	start := p.pos
	if p.peek('-') {
		p.pos++
	}
	digits := p.pos
	for p.pos < len(p.b) && p.b[p.pos] >= '0' && p.b[p.pos] <= '9' {
		p.pos++
	}
	if p.pos == digits || (p.b[digits] == '0' && p.pos-digits > 1) {
		return 0, false
	}
	v, err := strconv.Atoi(string(p.b[start:p.pos]))
	return v, err == nil
}

func (p *attnParser) span() ([2]int, bool) {
	var sp [2]int
	var ok bool
	if !p.lit("[") {
		return sp, false
	}
	if sp[0], ok = p.int(); !ok || !p.lit(",") {
		return sp, false
	}
	if sp[1], ok = p.int(); !ok || !p.lit("]") {
		return sp, false
	}
	return sp, true
}

func (p *attnParser) request(req *AttentionRequest) bool {
	if !p.lit(`{"jobs":[`) {
		return false
	}
	req.Jobs = []WireJob{} // "jobs":[] decodes to an empty slice, not nil
	for !p.peek(']') {
		if len(req.Jobs) > 0 && !p.lit(",") {
			return false
		}
		var j WireJob
		if !p.job(&j) {
			return false
		}
		req.Jobs = append(req.Jobs, j)
	}
	return p.lit("]}") && p.pos == len(p.b)
}

func (p *attnParser) job(j *WireJob) bool {
	if !p.lit("{") {
		return false
	}
	if p.lit(`"id":`) {
		s, ok := p.str()
		if !ok || !plainASCII(s) || !p.lit(",") {
			return false
		}
		j.ID = string(s[1 : len(s)-1])
	}
	if !p.lit(`"tokens":`) {
		return false
	}
	s, ok := p.str()
	if !ok || j.Tokens.UnmarshalJSON(s) != nil || !p.lit(`,"steps":[`) {
		return false
	}
	j.Steps = []WireStep{}
	for !p.peek(']') {
		if len(j.Steps) > 0 && !p.lit(",") {
			return false
		}
		var st WireStep
		if !p.lit(`{"action":`) {
			return false
		}
		if st.Action, ok = p.span(); !ok || !p.lit(`,"observation":`) {
			return false
		}
		if !p.lit("null") {
			o, ok := p.span()
			if !ok {
				return false
			}
			st.Observation = &o
		}
		if !p.lit("}") {
			return false
		}
		j.Steps = append(j.Steps, st)
	}
	if !p.lit(`],"layers":`) {
		return false
	}
	if !p.lit("null") {
		if !p.lit("[") {
			return false
		}
		j.Layers = []int{}
		for !p.peek(']') {
			if len(j.Layers) > 0 && !p.lit(",") {
				return false
			}
			l, ok := p.int()
			if !ok {
				return false
			}
			j.Layers = append(j.Layers, l)
		}
		p.pos++
	}
	return p.lit("}")
}
