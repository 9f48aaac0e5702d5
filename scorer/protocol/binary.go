package protocol

// Binary bodies (feature "binary", docs/scorer-protocol.md "Binary bodies"):
// the score request and the attention answer as little-endian binary, which
// both ends read and write without parsing text. A binary request decodes to
// exactly the ScoreRequest its JSON form decodes to, so everything after
// decoding is shared; a binary graphs answer carries the JSON answer's
// float64 values bit for bit.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"mime"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/creditflow/creditflow/scorer"
)

// FeatureBinary is the /v1/info feature of a server that accepts binary
// score requests and answers attention requests in binary when asked.
const FeatureBinary = "binary"

// Media types of the binary bodies.
const (
	MediaTypeRows   = "application/vnd.creditflow.rows"   // POST /v1/score request body
	MediaTypeGraphs = "application/vnd.creditflow.graphs" // POST /v1/attention answer body (Accept)
)

const (
	magicRows   = "CFR1"
	magicGraphs = "CFG1"
)

// Set and row flags of the rows request.
// setStatistic and rowReference (FeatureStatistics) are zero in a logprob
// request, which is the bytes it was before the feature.
const (
	setTokens = 1 << iota
	setTarget
	setSpan
	setStatistic // a u32-length UTF-8 statistic name follows the span
)

const (
	rowContext = 1 << iota
	rowPieces
	rowTarget
	rowSpan
	rowTemperature
	rowReference // an id array follows the temperature
)

const graphsPolicyVersion = 1

// IsMediaType reports whether the header value v (Content-Type, or one
// entry of Accept) names the media type t, ignoring parameters and case.
func IsMediaType(v, t string) bool {
	mt, _, err := mime.ParseMediaType(v)
	return err == nil && strings.EqualFold(mt, t)
}

// accepts reports whether an Accept header value lists the media type t.
func Accepts(accept, t string) bool {
	for _, part := range strings.Split(accept, ",") {
		if IsMediaType(strings.TrimSpace(part), t) {
			return true
		}
	}
	return false
}

func appendU32(dst []byte, v int) []byte { return binary.LittleEndian.AppendUint32(dst, uint32(v)) }

func appendIDs(dst []byte, ids []int32) []byte {
	dst = appendU32(dst, len(ids))
	for _, v := range ids {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
	return dst
}

func appendPair(dst []byte, a, b int) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(int32(a)))
	return binary.LittleEndian.AppendUint32(dst, uint32(int32(b)))
}

// AppendRowsRequest appends the binary score request of sets: the same
// fields AppendScoreRequest writes as JSON (compact as there), so that the
// server decodes both to the same ScoreRequest.
func AppendRowsRequest(dst []byte, sets []scorer.RowSet, compact bool) ([]byte, error) {
	dst = append(dst, magicRows...)
	dst = appendU32(dst, len(sets))
	var buf []int32
	for i := range sets {
		s := &sets[i]
		dst = appendU32(dst, len(s.ID))
		dst = append(dst, s.ID...)
		pieces := compact && s.Pieces != nil
		shared := pieces && sharedTarget(s)
		var flags byte
		if pieces {
			flags |= setTokens
		}
		if shared {
			flags |= setTarget | setSpan
		}
		stat := wireStatistic(s.Statistic)
		if stat != "" {
			flags |= setStatistic
		}
		dst = append(dst, flags)
		if pieces {
			dst = appendIDs(dst, s.Tokens)
		}
		if shared {
			dst = appendIDs(dst, s.Rows[0].Target)
			dst = appendPair(dst, s.Rows[0].Span[0], s.Rows[0].Span[1])
		}
		if stat != "" {
			dst = appendU32(dst, len(stat))
			dst = append(dst, stat...)
		}
		dst = appendU32(dst, len(s.Rows))
		for j, r := range s.Rows {
			var flags byte
			ps := s.RowPieces(j)
			ctx := r.Context
			switch {
			case pieces && ps != nil:
				flags |= rowPieces
			case ps != nil:
				var err error
				if buf, err = s.AppendRowContext(buf[:0], j); err != nil {
					return nil, err
				}
				ctx = buf
				fallthrough
			default:
				if len(ctx) > 0 { // as in JSON: an empty context is left out
					flags |= rowContext
				}
			}
			if !shared {
				if len(r.Target) > 0 {
					flags |= rowTarget
				}
				flags |= rowSpan
			}
			if r.Temperature != 0 {
				flags |= rowTemperature
			}
			if len(r.ReferenceContext) > 0 {
				flags |= rowReference
			}
			dst = append(dst, flags)
			if flags&rowContext != 0 {
				dst = appendIDs(dst, ctx)
			}
			if flags&rowPieces != 0 {
				dst = appendU32(dst, len(ps))
				for _, p := range ps {
					if p.Literal != nil {
						dst = appendIDs(append(dst, 1), p.Literal)
					} else {
						dst = appendPair(append(dst, 0), p.Start, p.End)
					}
				}
			}
			if flags&rowTarget != 0 {
				dst = appendIDs(dst, r.Target)
			}
			if flags&rowSpan != 0 {
				dst = appendPair(dst, r.Span[0], r.Span[1])
			}
			if flags&rowTemperature != 0 {
				dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(r.Temperature))
			}
			if flags&rowReference != 0 {
				dst = appendIDs(dst, r.ReferenceContext)
			}
		}
	}
	return dst, nil
}

// binReader reads a binary body; the first error sticks and every later
// read returns zero values. Errors name the place being read (unit index,
// row, piece), formatted only when one occurs.
type binReader struct {
	b       []byte
	err     error
	unit    string // "set" or "job"; "" before the first
	i, j, k int    // unit, row and piece index; -1 when not in one
}

// where names the place being read, then what.
func (r *binReader) where(what string) string {
	var b strings.Builder
	if r.unit != "" && r.i >= 0 {
		fmt.Fprintf(&b, "%s %d", r.unit, r.i)
		if r.j >= 0 {
			fmt.Fprintf(&b, " row %d", r.j)
		}
		if r.k >= 0 {
			fmt.Fprintf(&b, " piece %d", r.k)
		}
	}
	if what != "" {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(what)
	}
	return b.String()
}

var errShort = errors.New("body ends early")

func (r *binReader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *binReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.fail(errShort)
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *binReader) u8() byte {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *binReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (r *binReader) i32() int { return int(int32(r.u32())) }

func (r *binReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// count reads a count of items of at least minBytes each and checks that
// the rest of the body can hold them (so that no count allocates more than
// the body's size).
func (r *binReader) count(what string, minBytes int) int {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(minBytes) > uint64(len(r.b)) {
		r.fail(fmt.Errorf("%s count %d is larger than the %d bytes that follow", r.where(what), n, len(r.b)))
		return 0
	}
	return int(n)
}

// ids reads an id array (present, so never nil).
func (r *binReader) ids(what string) scorer.Tokens {
	n := r.count(what, 4)
	raw := r.take(4 * n)
	if r.err != nil {
		return nil
	}
	out := make(scorer.Tokens, n)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func (r *binReader) pair() *[2]int {
	a := r.i32()
	b := r.i32()
	return &[2]int{a, b}
}

func (r *binReader) flags(what string, known byte) byte {
	f := r.u8()
	if r.err == nil && f&^known != 0 {
		r.fail(fmt.Errorf("%s has unknown flag bits %#x", r.where(what), f&^known))
	}
	return f
}

func (r *binReader) magic(m string) {
	if got := r.take(len(m)); r.err == nil && string(got) != m {
		r.fail(fmt.Errorf("body starts with %q, not %q", got, m))
	}
}

func (r *binReader) end() {
	if r.err == nil && len(r.b) > 0 {
		r.fail(fmt.Errorf("%d bytes follow the end of the body", len(r.b)))
	}
}

// DecodeRowsRequest reads a binary score request into the ScoreRequest its
// JSON form gives: present arrays non-nil (empty ones too), absent ones nil.
// A row takes as little as one byte on the wire and a set nine, but each is
// about a hundred bytes in memory, so the scorer's limits are applied while
// reading: more than maxRows sets or rows, or more than maxPieces pieces in
// all, is a CodeTooLarge rejection before they are allocated.
func DecodeRowsRequest(b []byte, maxRows, maxPieces int) (ScoreRequest, error) {
	r := &binReader{b: b, i: -1, j: -1, k: -1}
	r.magic(magicRows)
	n := r.count("set", 9) // id length, flags, row count
	if r.err == nil && n > maxRows {
		r.fail(overLimit(fmt.Sprintf("request holds %d sets, more than the scorer's limit of %d rows; split it", n, maxRows)))
		n = 0
	}
	req := ScoreRequest{Sets: make([]WireRowSet, 0, n)}
	r.unit = "set"
	rowsLeft, piecesLeft := maxRows, maxPieces
	for i := 0; i < n && r.err == nil; i++ {
		r.i, r.j, r.k = i, -1, -1
		var s WireRowSet
		id := r.take(r.count("id byte", 1))
		if r.err == nil && !utf8.Valid(id) {
			r.fail(fmt.Errorf("%s is not UTF-8", r.where("id")))
		}
		s.ID = string(id)
		f := r.flags("", setTokens|setTarget|setSpan|setStatistic)
		if f&setTokens != 0 {
			s.Tokens = r.ids("tokens")
		}
		if f&setTarget != 0 {
			s.Target = r.ids("target")
		}
		if f&setSpan != 0 {
			s.Span = r.pair()
		}
		if f&setStatistic != 0 {
			stat := r.take(r.count("statistic byte", 1))
			if r.err == nil && !utf8.Valid(stat) {
				r.fail(fmt.Errorf("%s is not UTF-8", r.where("statistic")))
			}
			s.Statistic = string(stat)
		}
		rows := r.count("row", 1)
		if rowsLeft -= rows; r.err == nil && rowsLeft < 0 {
			r.fail(overLimit(fmt.Sprintf("request holds more rows than the scorer's limit of %d; split it", maxRows)))
			break
		}
		s.Rows = make([]WireRow, 0, rows)
		for j := 0; j < rows && r.err == nil; j++ {
			r.j, r.k = j, -1
			s.Rows = append(s.Rows, r.row(&piecesLeft, maxPieces))
		}
		req.Sets = append(req.Sets, s)
	}
	r.end()
	if r.err != nil {
		return ScoreRequest{}, r.err
	}
	return req, nil
}

// overLimit is a request over one of the scorer's limits (413).
func overLimit(msg string) error {
	return &scorer.RejectedError{Code: scorer.CodeTooLarge, Message: msg, Item: -1}
}

// row reads one row, taking its pieces from *piecesLeft (of maxPieces); a
// rejection when they run out.
func (r *binReader) row(piecesLeft *int, maxPieces int) WireRow {
	var w WireRow
	f := r.flags("", rowContext|rowPieces|rowTarget|rowSpan|rowTemperature|rowReference)
	if f&rowContext != 0 {
		w.Context = r.ids("context")
	}
	if f&rowPieces != 0 {
		n := r.count("piece", 5) // kind and a span, or kind and a count and ids (an empty literal: 5 bytes)
		if *piecesLeft -= n; r.err == nil && *piecesLeft < 0 {
			r.fail(overLimit(fmt.Sprintf("request holds more row pieces than the scorer's limit of %d tokens; split it", maxPieces)))
			return w
		}
		w.Pieces = make([]scorer.Piece, 0, n)
		for k := 0; k < n && r.err == nil; k++ {
			r.k = k
			switch kind := r.u8(); kind {
			case 0:
				p := r.pair()
				w.Pieces = append(w.Pieces, scorer.Piece{Start: p[0], End: p[1]})
			case 1:
				w.Pieces = append(w.Pieces, scorer.Piece{Literal: r.ids("")})
			default:
				r.fail(fmt.Errorf("%s has kind %d (0 = span, 1 = literal ids)", r.where(""), kind))
			}
		}
		r.k = -1
	}
	if f&rowTarget != 0 {
		w.Target = r.ids("target")
	}
	if f&rowSpan != 0 {
		w.Span = r.pair()
	}
	if f&rowTemperature != 0 {
		t := math.Float64frombits(r.u64())
		w.Temperature = &t
	}
	if f&rowReference != 0 {
		w.Reference = r.ids("reference")
	}
	return w
}

// AppendGraphs appends the binary form of an attention answer. The form
// holds only K×K graphs, so a graph of another shape (which JSON would
// carry, for the client to reject) is an error here rather than reshaped.
func AppendGraphs(dst []byte, resp AttentionResponse) ([]byte, error) {
	n := len(magicGraphs) + 1 + 8 + 4
	for i, res := range resp.Results {
		n += 4
		for l, g := range res.Graphs {
			if !square(g.AA, len(g.AA)) || !square(g.AO, len(g.AA)) {
				return dst, fmt.Errorf("scorer answered job %d graph %d with attention that is not two %d×%d matrices", i, l, len(g.AA), len(g.AA))
			}
			n += 8 + 16*len(g.AA)*len(g.AA)
		}
	}
	dst = slices.Grow(dst, n)
	dst = appendAnswerHead(dst, magicGraphs, resp.PolicyVersion, len(resp.Results))
	for _, res := range resp.Results {
		dst = appendU32(dst, len(res.Graphs))
		for _, g := range res.Graphs {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(int32(g.Layer)))
			dst = appendU32(dst, len(g.AA))
			for _, m := range [][][]float64{g.AA, g.AO} {
				for _, row := range m {
					for _, v := range row {
						dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
					}
				}
			}
		}
	}
	return dst, nil
}

// appendAnswerHead appends the head both attention answer forms share:
// magic, the flags (graphsPolicyVersion), the version when known, the job
// count.
func appendAnswerHead(dst []byte, magic string, version *int64, jobs int) []byte {
	dst = append(dst, magic...)
	if version != nil {
		dst = append(dst, graphsPolicyVersion)
		dst = binary.LittleEndian.AppendUint64(dst, uint64(*version))
	} else {
		dst = append(dst, 0)
	}
	return appendU32(dst, jobs)
}

// answerHead reads the head appendAnswerHead writes: the policy version
// (nil when absent) and the job count.
func (r *binReader) answerHead(magic string) (*int64, int) {
	r.magic(magic)
	var version *int64
	if r.flags("answer", graphsPolicyVersion)&graphsPolicyVersion != 0 {
		v := int64(r.u64())
		version = &v
	}
	return version, r.count("job", 4)
}

// square reports whether m is k×k.
func square(m [][]float64, k int) bool {
	if len(m) != k {
		return false
	}
	for _, row := range m {
		if len(row) != k {
			return false
		}
	}
	return true
}

// DecodeGraphs reads a binary attention answer. Each graph's rows are
// slices of one allocation.
func DecodeGraphs(b []byte) (AttentionResponse, error) {
	r := &binReader{b: b, i: -1, j: -1, k: -1}
	var resp AttentionResponse
	var n int
	resp.PolicyVersion, n = r.answerHead(magicGraphs)
	resp.Results = make([]WireJobResult, 0, n)
	for i := 0; i < n && r.err == nil; i++ {
		r.unit, r.i = "job", i
		ng := r.count("graph", 8)
		res := WireJobResult{Graphs: make([]WireGraph, 0, ng)}
		for l := 0; l < ng && r.err == nil; l++ {
			g := WireGraph{Layer: r.i32()}
			k := r.u32()
			// k×k×16 > len(r.b), without overflow for any k.
			if r.err == nil && k != 0 && uint64(k) > uint64(len(r.b))/16/uint64(k) {
				r.fail(fmt.Errorf("job %d graph %d: %d×%d graphs are larger than the %d bytes that follow", i, l, k, k, len(r.b)))
				break
			}
			K := int(k)
			flat := make([]float64, 2*K*K)
			raw := r.take(16 * K * K)
			if r.err != nil {
				break
			}
			for x := range flat {
				flat[x] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*x:]))
			}
			g.AA, g.AO = make([][]float64, K), make([][]float64, K)
			for j := 0; j < K; j++ {
				g.AA[j] = flat[j*K : (j+1)*K : (j+1)*K]
				g.AO[j] = flat[K*K+j*K : K*K+(j+1)*K : K*K+(j+1)*K]
			}
			res.Graphs = append(res.Graphs, g)
		}
		resp.Results = append(resp.Results, res)
	}
	r.end()
	if r.err != nil {
		return AttentionResponse{}, r.err
	}
	return resp, nil
}
