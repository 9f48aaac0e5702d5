package cpumodel

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// kvCache holds the keys and values of the positions forwarded so far, per
// layer and KV head, each as a contiguous [position][head_dim] slice.
// Truncating it back to a shorter prefix is free (the trie walk of ScoreRows
// relies on that).
type kvCache struct {
	k, v [][][]float32 // [layer][kv head] → n*headDim floats
	n    int
	d    int
}

func (m *Model) newCache(capTokens, layers int) *kvCache {
	c := &kvCache{d: m.cfg.HeadDim}
	c.k = make([][][]float32, layers)
	c.v = make([][][]float32, layers)
	for l := range c.k {
		c.k[l] = make([][]float32, m.cfg.KVHeads)
		c.v[l] = make([][]float32, m.cfg.KVHeads)
		for g := range c.k[l] {
			c.k[l][g] = make([]float32, 0, capTokens*c.d)
			c.v[l][g] = make([]float32, 0, capTokens*c.d)
		}
	}
	return c
}

func (c *kvCache) truncate(n int) {
	c.n = n
	for l := range c.k {
		for g := range c.k[l] {
			c.k[l][g] = c.k[l][g][:n*c.d]
			c.v[l][g] = c.v[l][g][:n*c.d]
		}
	}
}

func (c *kvCache) grow(t int) {
	c.n += t
	for l := range c.k {
		for g := range c.k[l] {
			c.k[l][g] = growLen(c.k[l][g], c.n*c.d)
			c.v[l][g] = growLen(c.v[l][g], c.n*c.d)
		}
	}
}

func growLen(s []float32, n int) []float32 {
	if n <= cap(s) {
		return s[:n]
	}
	ns := make([]float32, n, n+n/2)
	copy(ns, s)
	return ns
}

// fwdOpts selects what a forward pass computes.
type fwdOpts struct {
	// out marks the chunk positions whose final-norm hidden state is wanted.
	out []bool
	// layers is how many decoder layers to run (the rest are skipped).
	layers int
	// onQ, when set, is called for every layer after the layer's keys and
	// values are in the cache, with the rotated queries of all chunk positions
	// ([position][heads*head_dim]).
	onQ func(layer int, q []float32)
}

// forward appends toks to the cache at positions c.n, c.n+1, … and returns,
// for every position i with o.out[i], the final-norm hidden state.
//
// The arithmetic done for one position depends only on its token, its
// position and the cached keys and values, never on how the sequence was cut
// into chunks: shared-prefix and row-by-row scoring give identical numbers.
func (m *Model) forward(c *kvCache, toks []int32, o fwdOpts) [][]float32 {
	cfg := m.cfg
	T, H, D, HD := len(toks), cfg.Hidden, cfg.HeadDim, cfg.Heads*cfg.HeadDim
	pos0 := c.n
	c.grow(T)
	x := make([]float32, T*H)
	for t, id := range toks {
		copy(x[t*H:(t+1)*H], m.embed[int(id)*H:(int(id)+1)*H])
	}
	half := D / 2
	cos := make([]float32, T*half)
	sin := make([]float32, T*half)
	for t := 0; t < T; t++ {
		p := float32(pos0 + t)
		for i, f := range cfg.invFreq {
			a := float64(p * f)
			cos[t*half+i] = float32(math.Cos(a))
			sin[t*half+i] = float32(math.Sin(a))
		}
	}
	xn := make([]float32, T*H)
	q := make([]float32, T*HD)
	attn := make([]float32, T*HD)
	I := cfg.Intermediate
	workers := numWorkers()
	mlpScratch := make([][]float32, workers)
	attnScratch := make([][]float32, workers)
	for w := range mlpScratch {
		mlpScratch[w] = make([]float32, 2*I+H)
	}
	all := make([]int, T)
	for i := range all {
		all[i] = i
	}
	var outIdx []int
	for i, w := range o.out {
		if w {
			outIdx = append(outIdx, i)
		}
	}
	nl := o.layers
	if nl <= 0 || nl > cfg.Layers {
		nl = cfg.Layers
	}
	group := cfg.Heads / cfg.KVHeads
	scale := float32(1 / math.Sqrt(float64(D)))
	for l := 0; l < nl; l++ {
		L := &m.layers[l]
		// Positions that need this layer's full output: all of them, except in
		// the very last layer of the network, where only the wanted outputs do.
		active := all
		if l == cfg.Layers-1 && o.onQ == nil {
			active = outIdx
		}
		// Norm, K, V (all positions), Q (active or all when observed).
		qAll := o.onQ != nil
		parallelFor(T, T*H*(2*cfg.KVHeads*D+HD), func(w, lo, hi int) {
			kb := make([]float32, cfg.KVHeads*D)
			vb := make([]float32, cfg.KVHeads*D)
			for t := lo; t < hi; t++ {
				xt := xn[t*H : (t+1)*H]
				rmsNorm(xt, x[t*H:(t+1)*H], L.inNorm, cfg.RMSNormEps)
				L.k.apply(kb, xt)
				L.v.apply(vb, xt)
				ct, st := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
				p := pos0 + t
				for g := 0; g < cfg.KVHeads; g++ {
					kh := kb[g*D : (g+1)*D]
					if L.kNorm != nil {
						rmsNorm(kh, kh, L.kNorm, cfg.RMSNormEps)
					}
					rope(kh, ct, st)
					copy(c.k[l][g][p*D:(p+1)*D], kh)
					copy(c.v[l][g][p*D:(p+1)*D], vb[g*D:(g+1)*D])
				}
			}
		})
		computeQ := func(t int) {
			qt := q[t*HD : (t+1)*HD]
			L.q.apply(qt, xn[t*H:(t+1)*H])
			ct, st := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
			for h := 0; h < cfg.Heads; h++ {
				qh := qt[h*D : (h+1)*D]
				if L.qNorm != nil {
					rmsNorm(qh, qh, L.qNorm, cfg.RMSNormEps)
				}
				rope(qh, ct, st)
			}
		}
		if qAll {
			parallelFor(T, T*H*HD, func(w, lo, hi int) {
				for t := lo; t < hi; t++ {
					computeQ(t)
				}
			})
			o.onQ(l, q)
			if l == nl-1 && len(outIdx) == 0 {
				break // only the attention of this layer was wanted
			}
		}
		// Attention, output projection and MLP for the active positions.
		na := len(active)
		if na == 0 {
			continue
		}
		parallelFor(na, na*(pos0+T)*HD*2, func(w, lo, hi int) {
			sc := attnScratch[w]
			if cap(sc) < group*(pos0+T) {
				sc = make([]float32, group*(pos0+T))
				attnScratch[w] = sc
			}
			ms := mlpScratch[w]
			for _, t := range active[lo:hi] {
				if !qAll {
					computeQ(t)
				}
				p := pos0 + t
				qt := q[t*HD : (t+1)*HD]
				at := attn[t*HD : (t+1)*HD]
				for g := 0; g < cfg.KVHeads; g++ {
					hs := g * group * D
					attendGroup(at[hs:hs+group*D], qt[hs:hs+group*D], c.k[l][g][:(p+1)*D], c.v[l][g][:(p+1)*D], sc[:group*(p+1)], group, scale)
				}
				xt := x[t*H : (t+1)*H]
				ob := ms[2*I : 2*I+H]
				L.o.apply(ob, at)
				for i := range xt {
					xt[i] += ob[i]
				}
				xt2 := xn[t*H : (t+1)*H]
				rmsNorm(xt2, xt, L.postNorm, cfg.RMSNormEps)
				gb, ub := ms[:I], ms[I:2*I]
				L.gate.apply(gb, xt2)
				L.up.apply(ub, xt2)
				for i, gv := range gb {
					gb[i] = gv / (1 + float32(math.Exp(float64(-gv)))) * ub[i]
				}
				L.down.apply(ob, gb)
				for i := range xt {
					xt[i] += ob[i]
				}
			}
		})
	}
	if len(outIdx) == 0 {
		return nil
	}
	res := make([][]float32, len(outIdx))
	for i, t := range outIdx {
		res[i] = make([]float32, H)
		rmsNorm(res[i], x[t*H:(t+1)*H], m.norm, cfg.RMSNormEps)
	}
	return res
}

// attendOne computes one head's causal attention for one query over the
// keys/values given (all positions ≤ the query's), softmax in float32 with a
// float64 normalizer, as Hugging Face's eager attention does.
func attendOne(out, q, keys, vals, s []float32, scale float32) {
	D := len(q)
	n := len(s)
	attentionProbs(s, q, keys, scale)
	for i := range out {
		out[i] = 0
	}
	for j := 0; j < n; j++ {
		axpy(out, s[j], vals[j*D:(j+1)*D])
	}
}

// attentionProbs writes one head's causal attention probabilities for one
// query into s (len = number of keys); attendOne and the step graphs share it.
func attentionProbs(s, q, keys []float32, scale float32) {
	D := len(q)
	n := len(s)
	mx := float32(math.Inf(-1))
	for j := 0; j < n; j++ {
		v := dot(q, keys[j*D:(j+1)*D]) * scale
		s[j] = v
		if v > mx {
			mx = v
		}
	}
	softmaxFrom(s[:n], mx)
}

// softmaxFrom turns the scores s, whose maximum is mx, into probabilities in
// place; every attention path uses it, so all give the same numbers.
func softmaxFrom(s []float32, mx float32) {
	var sum float64
	for j, v := range s {
		e := expNeg(v - mx)
		s[j] = e
		sum += float64(e)
	}
	inv := 1 / sum
	for j, v := range s {
		s[j] = float32(float64(v) * inv)
	}
}

// expNeg is exp(x) in float32 for x <= 0 (Cephes expf: range reduction by
// ln 2 and a degree-6 polynomial; within 2 ulp of the exact value), flushing
// results below the normal range to zero.
func expNeg(x float32) float32 {
	if x < -87 {
		return 0
	}
	n := float32(math.Floor(float64(x*1.44269504088896341 + 0.5)))
	r := x - n*0.693359375 + n*2.12194440e-4
	z := r * r
	y := ((((1.9875691500e-4*r+1.3981999507e-3)*r+8.3334519073e-3)*r+4.1665795894e-2)*r+1.6666665459e-1)*r + 5.0000001201e-1
	y = y*z + r + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}

func (l *linear) apply(y, x []float32) {
	in := l.in
	w := l.w
	for o := 0; o < l.out; o++ {
		y[o] = dot(w[o*in:(o+1)*in], x)
	}
	if l.b != nil {
		for o, b := range l.b {
			y[o] += b
		}
	}
}

// rmsNorm writes x * rsqrt(mean(x²) + eps) * w into y (y may alias x).
func rmsNorm(y, x, w []float32, eps float64) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := float32(1 / math.Sqrt(ss/float64(len(x))+eps))
	for i, v := range x {
		y[i] = w[i] * (v * r)
	}
}

// rope rotates v in place (rotate_half convention: pairs (i, i+d/2)).
func rope(v, cos, sin []float32) {
	h := len(v) / 2
	for i := 0; i < h; i++ {
		a, b := v[i], v[i+h]
		v[i] = a*cos[i] - b*sin[i]
		v[i+h] = b*cos[i] + a*sin[i]
	}
}

func dot(a, b []float32) float32 {
	if len(a) == 16 {
		return dot16((*[16]float32)(a), (*[16]float32)(b))
	}
	n := len(a)
	b = b[:n]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= n; i += 4 {
		aa, bb := (*[4]float32)(a[i:i+4]), (*[4]float32)(b[i:i+4])
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dot16 is dot for 16 elements, with the same association as dot.
func dot16(a, b *[16]float32) float32 {
	s0 := a[0]*b[0] + a[4]*b[4]
	s1 := a[1]*b[1] + a[5]*b[5]
	s2 := a[2]*b[2] + a[6]*b[6]
	s3 := a[3]*b[3] + a[7]*b[7]
	s0 += a[8] * b[8]
	s1 += a[9] * b[9]
	s2 += a[10] * b[10]
	s3 += a[11] * b[11]
	s0 += a[12] * b[12]
	s1 += a[13] * b[13]
	s2 += a[14] * b[14]
	s3 += a[15] * b[15]
	return (s0 + s1) + (s2 + s3)
}

func axpy(y []float32, a float32, x []float32) {
	if len(y) == 16 {
		yy, xx := (*[16]float32)(y), (*[16]float32)(x)
		yy[0] += a * xx[0]
		yy[1] += a * xx[1]
		yy[2] += a * xx[2]
		yy[3] += a * xx[3]
		yy[4] += a * xx[4]
		yy[5] += a * xx[5]
		yy[6] += a * xx[6]
		yy[7] += a * xx[7]
		yy[8] += a * xx[8]
		yy[9] += a * xx[9]
		yy[10] += a * xx[10]
		yy[11] += a * xx[11]
		yy[12] += a * xx[12]
		yy[13] += a * xx[13]
		yy[14] += a * xx[14]
		yy[15] += a * xx[15]
		return
	}
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

// logProbs computes the logits W·h of every vocabulary entry and returns
// log p(tok) = log softmax(logits / temp)[tok] for each tok in toks (float64
// log-sum-exp; temp > 0).
func (m *Model) logProbs(h []float32, toks []int32, temp float64) []float64 {
	V, H := m.cfg.Vocab, m.cfg.Hidden
	logits := make([]float32, V)
	mx := float32(math.Inf(-1))
	for v := 0; v < V; v++ {
		z := dot(m.lmHead[v*H:(v+1)*H], h)
		logits[v] = z
		if z > mx {
			mx = z
		}
	}
	// The float32 logits are divided by temp in float64 (exact for temp = 1);
	// the maximum of z/temp is max(z)/temp since temp > 0.
	mxT := float64(mx) / temp
	var sum float64
	for _, z := range logits {
		sum += math.Exp(float64(z)/temp - mxT)
	}
	lse := mxT + math.Log(sum)
	out := make([]float64, len(toks))
	for i, t := range toks {
		out[i] = float64(logits[t])/temp - lse
	}
	return out
}

// minParallelWork is the smallest amount of work (multiply-adds) worth
// splitting across goroutines.
const minParallelWork = 1 << 16

func numWorkers() int { return runtime.GOMAXPROCS(0) }

// parallelFor runs fn over [0, n) in pieces pulled by up to numWorkers()
// goroutines; w is the worker's index (for per-worker scratch).
func parallelFor(n, work int, fn func(w, lo, hi int)) {
	workers := numWorkers()
	if workers > n {
		workers = n
	}
	if workers <= 1 || work < minParallelWork {
		if n > 0 {
			fn(0, 0, n)
		}
		return
	}
	pieces := workers * 4
	if pieces > n {
		pieces = n
	}
	size := (n + pieces - 1) / pieces
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				lo := int(next.Add(int64(size))) - size
				if lo >= n {
					return
				}
				fn(w, lo, min(lo+size, n))
			}
		}(w)
	}
	wg.Wait()
}

// attendGroup is attendOne for the query heads that share one KV head: it
// computes their scores in one pass over the keys. Each head's arithmetic is
// exactly attendOne's.
func attendGroup(out, q, keys, vals, s []float32, heads int, scale float32) {
	D := len(q) / heads
	n := len(s) / heads
	if heads != 2 {
		for h := 0; h < heads; h++ {
			attendOne(out[h*D:(h+1)*D], q[h*D:(h+1)*D], keys, vals, s[h*n:(h+1)*n], scale)
		}
		return
	}
	q0, q1 := q[:D], q[D:2*D]
	s0, s1 := s[:n], s[n:2*n]
	mx0, mx1 := float32(math.Inf(-1)), float32(math.Inf(-1))
	for j := 0; j < n; j++ {
		k := keys[j*D : (j+1)*D]
		v0 := dot(q0, k) * scale
		v1 := dot(q1, k) * scale
		s0[j], s1[j] = v0, v1
		if v0 > mx0 {
			mx0 = v0
		}
		if v1 > mx1 {
			mx1 = v1
		}
	}
	for h, sh := range [][]float32{s0, s1} {
		mx := mx0
		if h == 1 {
			mx = mx1
		}
		softmaxFrom(sh[:n], mx)
		o := out[h*D : (h+1)*D]
		for i := range o {
			o[i] = 0
		}
	}
	o0, o1 := out[:D], out[D:2*D]
	for j := 0; j < n; j++ {
		v := vals[j*D : (j+1)*D]
		axpy(o0, s0[j], v)
		axpy(o1, s1[j], v)
	}
}
