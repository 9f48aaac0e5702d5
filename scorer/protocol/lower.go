package protocol

// The lower-graphs answer (docs/scorer-protocol.md, "Lower graphs"): an
// attention answer with each layer's graph cut below its diagonal and, where
// that is exact, summed (stepgraph.Cut), which is the form the scored record
// carries. A client that asks for it (Accept: MediaTypeLowerGraphs) receives
// about a quarter of the binary K×K answer's bytes and keeps what it reads
// as it is; a client that cuts a K×K answer itself gets the same bits.

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/creditflow/creditflow/internal/stepgraph"
	"github.com/creditflow/creditflow/scorer"
)

// FeatureLowerGraphs is the /v1/info feature of a server that answers an
// attention request in the lower-graphs form when asked.
const FeatureLowerGraphs = "lower_graphs"

// MediaTypeLowerGraphs is the lower-graphs answer's media type (Accept).
const MediaTypeLowerGraphs = "application/vnd.creditflow.lower-graphs"

const magicLowerGraphs = "CFL1"

// A lower graph's form byte.
const (
	lowerPair = 0 // K(K−1)/2 values of G_AA, then as many of G_AO
	lowerSum  = 1 // K(K−1)/2 values of G_AA + G_AO
)

// LowerResponse is a decoded lower-graphs answer: Results[i] holds job i's
// graphs in the order of its layers.
type LowerResponse struct {
	PolicyVersion *int64
	Results       [][]scorer.LowerGraph
}

// AppendLowerGraphs appends the lower-graphs form of an attention answer:
// each job's K×K graphs cut as stepgraph.Cut cuts them, written straight
// from the K×K rows. A graph that is not two K×K matrices is an error, as
// in AppendGraphs.
func AppendLowerGraphs(dst []byte, version *int64, results [][]scorer.StepGraph) ([]byte, error) {
	n := len(magicLowerGraphs) + 1 + 8 + 4
	for i, gs := range results {
		n += 4
		for l, g := range gs {
			if !square(g.AA, len(g.AA)) || !square(g.AO, len(g.AA)) {
				return dst, fmt.Errorf("scorer answered job %d graph %d with attention that is not two %d×%d matrices", i, l, len(g.AA), len(g.AA))
			}
			n += 9 + 16*stepgraph.Len(len(g.AA))
		}
	}
	dst = slices.Grow(dst, n)
	dst = appendAnswerHead(dst, magicLowerGraphs, version, len(results))
	for _, gs := range results {
		dst = appendU32(dst, len(gs))
		for _, g := range gs {
			k := len(g.AA)
			dst = binary.LittleEndian.AppendUint32(dst, uint32(int32(g.Layer)))
			dst = appendU32(dst, k)
			if k > 1 && lowerSumExact(g.AA, g.AO) {
				dst = append(dst, lowerSum)
				for j := 1; j < k; j++ {
					aa, ao := g.AA[j][:j], g.AO[j][:j]
					for c, a := range aa {
						dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(a+ao[c]))
					}
				}
				continue
			}
			dst = append(dst, lowerPair)
			for _, m := range [][][]float64{g.AA, g.AO} {
				for j := 1; j < k; j++ {
					for _, v := range m[j][:j] {
						dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(v))
					}
				}
			}
		}
	}
	return dst, nil
}

// lowerSumExact is stepgraph.SumExact over the entries below the diagonal
// of two K×K matrices.
func lowerSumExact(aa, ao [][]float64) bool {
	for j := 1; j < len(aa); j++ {
		if !stepgraph.SumExact(aa[j][:j], ao[j][:j]) {
			return false
		}
	}
	return true
}

// DecodeLowerGraphs reads a lower-graphs answer. The answer's values share
// one allocation; a sum-form graph has only Sum, a pair-form graph AA and AO,
// empty (not nil) where K < 2, as stepgraph.Cut gives them.
func DecodeLowerGraphs(b []byte) (LowerResponse, error) {
	r := &binReader{b: b, i: -1, j: -1, k: -1}
	var resp LowerResponse
	var n int
	resp.PolicyVersion, n = r.answerHead(magicLowerGraphs)
	resp.Results = make([][]scorer.LowerGraph, 0, n)
	// Every value of the answer, in one allocation no larger than the body.
	flat := make([]float64, 0, len(r.b)/8)
	for i := 0; i < n && r.err == nil; i++ {
		r.unit, r.i = "job", i
		ng := r.count("graph", 9)
		gs := make([]scorer.LowerGraph, 0, ng)
		for l := 0; l < ng && r.err == nil; l++ {
			layer := int32(r.u32())
			k := r.u32()
			form := r.u8()
			if r.err != nil {
				break
			}
			if form != lowerPair && (form != lowerSum || k < 2) {
				r.fail(fmt.Errorf("job %d graph %d (K = %d) has unknown form %d", i, l, k, form))
				break
			}
			m := uint64(k) * uint64(k-min(k, 1)) / 2 // K(K−1)/2 without overflow
			if form == lowerPair {
				m *= 2
			}
			if k > 1<<20 || m > uint64(len(r.b))/8 {
				r.fail(fmt.Errorf("job %d graph %d: %d×%d graphs are larger than the %d bytes that follow", i, l, k, k, len(r.b)))
				break
			}
			raw := r.take(8 * int(m))
			if r.err != nil {
				break
			}
			o := len(flat)
			flat = flat[:o+int(m)]
			vals := flat[o : o+int(m) : o+int(m)]
			for x := range vals {
				vals[x] = math.Float64frombits(binary.LittleEndian.Uint64(raw[8*x:]))
			}
			g := scorer.LowerGraph{Layer: layer, K: int32(k)}
			if form == lowerSum {
				g.Sum = vals
			} else {
				h := len(vals) / 2
				g.AA, g.AO = vals[:h:h], vals[h:]
			}
			gs = append(gs, g)
		}
		resp.Results = append(resp.Results, gs)
	}
	r.end()
	if r.err != nil {
		return LowerResponse{}, r.err
	}
	return resp, nil
}
