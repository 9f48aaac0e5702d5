package cpumodel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/creditflow/creditflow/scorer"
	"github.com/creditflow/creditflow/scorer/cpumodel/safetensors"
)

// This file holds an independent, straightforward float64 implementation of
// the Llama-family forward pass (no cache, no chunking, full causal attention
// per position) that the tests compare the model against.

type refOut struct {
	logp   [][]float64     // [position][vocab] log-probabilities of the next token
	logits [][]float64     // [position][vocab] the logits they come from
	attn   [][][][]float64 // [layer][head][query][key] attention probabilities
}

func refForward(cfg *config, ts []safetensors.Tensor, seq []int32) refOut {
	W := map[string][]float64{}
	for _, t := range ts {
		w := make([]float64, len(t.Data))
		for i, v := range t.Data {
			w[i] = float64(v)
		}
		W[t.Name] = w
	}
	H, nh, nkv, d := cfg.Hidden, cfg.Heads, cfg.KVHeads, cfg.HeadDim
	N := len(seq)
	matvec := func(name string, x []float64, out int) []float64 {
		w := W[name+".weight"]
		in := len(x)
		y := make([]float64, out)
		for o := 0; o < out; o++ {
			for i := 0; i < in; i++ {
				y[o] += w[o*in+i] * x[i]
			}
			if b, ok := W[name+".bias"]; ok {
				y[o] += b[o]
			}
		}
		return y
	}
	rms := func(x, w []float64) []float64 {
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+cfg.RMSNormEps)
		y := make([]float64, len(x))
		for i := range x {
			y[i] = x[i] * r * w[i]
		}
		return y
	}
	rot := func(v []float64, pos int) {
		h := d / 2
		for i := 0; i < h; i++ {
			f := 1 / math.Pow(cfg.RopeTheta, float64(2*i)/float64(d))
			c, s := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
			a, b := v[i], v[i+h]
			v[i] = a*c - b*s
			v[i+h] = b*c + a*s
		}
	}
	x := make([][]float64, N)
	for t, tok := range seq {
		x[t] = append([]float64(nil), W["model.embed_tokens.weight"][int(tok)*H:(int(tok)+1)*H]...)
	}
	var out refOut
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		Q := make([][]float64, N)
		Kk := make([][]float64, N)
		V := make([][]float64, N)
		for t := 0; t < N; t++ {
			xn := rms(x[t], W[p+"input_layernorm.weight"])
			Q[t] = matvec(p+"self_attn.q_proj", xn, nh*d)
			Kk[t] = matvec(p+"self_attn.k_proj", xn, nkv*d)
			V[t] = matvec(p+"self_attn.v_proj", xn, nkv*d)
			for h := 0; h < nh; h++ {
				if qn, ok := W[p+"self_attn.q_norm.weight"]; ok {
					copy(Q[t][h*d:(h+1)*d], rms(Q[t][h*d:(h+1)*d], qn))
				}
				rot(Q[t][h*d:(h+1)*d], t)
			}
			for g := 0; g < nkv; g++ {
				if kn, ok := W[p+"self_attn.k_norm.weight"]; ok {
					copy(Kk[t][g*d:(g+1)*d], rms(Kk[t][g*d:(g+1)*d], kn))
				}
				rot(Kk[t][g*d:(g+1)*d], t)
			}
		}
		A := make([][][]float64, nh)
		for h := 0; h < nh; h++ {
			A[h] = make([][]float64, N)
			g := h * nkv / nh
			for t := 0; t < N; t++ {
				s := make([]float64, N)
				mx := math.Inf(-1)
				for j := 0; j <= t; j++ {
					for i := 0; i < d; i++ {
						s[j] += Q[t][h*d+i] * Kk[j][g*d+i]
					}
					s[j] /= math.Sqrt(float64(d))
					mx = math.Max(mx, s[j])
				}
				var z float64
				for j := 0; j <= t; j++ {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := 0; j <= t; j++ {
					s[j] /= z
				}
				A[h][t] = s
			}
		}
		out.attn = append(out.attn, A)
		for t := 0; t < N; t++ {
			cat := make([]float64, nh*d)
			for h := 0; h < nh; h++ {
				g := h * nkv / nh
				for j := 0; j <= t; j++ {
					for i := 0; i < d; i++ {
						cat[h*d+i] += A[h][t][j] * V[j][g*d+i]
					}
				}
			}
			o := matvec(p+"self_attn.o_proj", cat, H)
			for i := range x[t] {
				x[t][i] += o[i]
			}
			xn := rms(x[t], W[p+"post_attention_layernorm.weight"])
			gt := matvec(p+"mlp.gate_proj", xn, cfg.Intermediate)
			up := matvec(p+"mlp.up_proj", xn, cfg.Intermediate)
			for i := range gt {
				gt[i] = gt[i] / (1 + math.Exp(-gt[i])) * up[i]
			}
			dn := matvec(p+"mlp.down_proj", gt, H)
			for i := range x[t] {
				x[t][i] += dn[i]
			}
		}
	}
	head := W["lm_head.weight"]
	if cfg.TieEmbeddings || head == nil {
		head = W["model.embed_tokens.weight"]
	}
	for t := 0; t < N; t++ {
		xn := rms(x[t], W["model.norm.weight"])
		lg := make([]float64, cfg.Vocab)
		mx := math.Inf(-1)
		for v := range lg {
			for i := 0; i < H; i++ {
				lg[v] += head[v*H+i] * xn[i]
			}
			mx = math.Max(mx, lg[v])
		}
		out.logits = append(out.logits, append([]float64(nil), lg...))
		var z float64
		for _, v := range lg {
			z += math.Exp(v - mx)
		}
		for v := range lg {
			lg[v] -= mx + math.Log(z)
		}
		out.logp = append(out.logp, lg)
	}
	return out
}

// refScore is S for one row from the reference forward pass.
func refScore(cfg *config, ts []safetensors.Tensor, r scorer.Row) float64 {
	seq := append(append([]int32(nil), r.Context...), r.Target...)
	o := refForward(cfg, ts, seq)
	var s float64
	for k := r.Span[0]; k < r.Span[1]; k++ {
		pos := len(r.Context) + k
		s += o.logp[pos-1][seq[pos]]
	}
	return s / float64(r.Span[1]-r.Span[0])
}

// refScoreT is S for one row with the logits divided by temp before the
// softmax, from the reference forward pass.
func refScoreT(cfg *config, ts []safetensors.Tensor, r scorer.Row, temp float64) float64 {
	seq := append(append([]int32(nil), r.Context...), r.Target...)
	o := refForward(cfg, ts, seq)
	var s float64
	for k := r.Span[0]; k < r.Span[1]; k++ {
		pos := len(r.Context) + k
		lg := o.logits[pos-1]
		mx := math.Inf(-1)
		for _, v := range lg {
			mx = math.Max(mx, v/temp)
		}
		var z float64
		for _, v := range lg {
			z += math.Exp(v/temp - mx)
		}
		s += lg[seq[pos]]/temp - mx - math.Log(z)
	}
	return s / float64(r.Span[1]-r.Span[0])
}

type testArch struct {
	arch     string
	tied     bool
	attnBias bool
	mlpBias  bool
	headDim  int // 0: hidden/heads
}

// testModel builds a small random model of the given architecture: its
// config, tensors and the loaded model.
func testModel(t testing.TB, a testArch, seed uint64) (*config, []safetensors.Tensor, *Model) {
	t.Helper()
	h := &hfConfig{
		Architectures:         []string{a.arch},
		HiddenSize:            16,
		NumHiddenLayers:       2,
		NumAttentionHeads:     4,
		NumKeyValueHeads:      ptr(2),
		IntermediateSize:      24,
		VocabSize:             13,
		MaxPositionEmbeddings: 64,
		RMSNormEps:            ptr(1e-5),
		RopeTheta:             ptr(100.0),
		TieWordEmbeddings:     ptr(a.tied),
		AttentionBias:         a.attnBias,
		MLPBias:               a.mlpBias,
	}
	if a.headDim > 0 {
		h.HeadDim = ptr(a.headDim)
	}
	cfg, err := h.toConfig()
	if err != nil {
		t.Fatal(err)
	}
	ts := randomTensors(cfg, seed)
	m, err := fromTensors(cfg, ts)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, ts, m
}

func randomTensors(cfg *config, seed uint64) []safetensors.Tensor {
	r := rand.New(rand.NewPCG(seed, 7))
	var ts []safetensors.Tensor
	add := func(name string, center, scale float64, shape ...int) {
		n := 1
		for _, s := range shape {
			n *= s
		}
		w := make([]float32, n)
		for i := range w {
			w[i] = float32(center + scale*(2*r.Float64()-1))
		}
		ts = append(ts, safetensors.Tensor{Name: name, Shape: shape, Data: w})
	}
	H, d := cfg.Hidden, cfg.HeadDim
	add("model.embed_tokens.weight", 0, 1, cfg.Vocab, H)
	qkvBias := cfg.AttentionBias || cfg.QKVBias
	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("model.layers.%d.", l)
		add(p+"input_layernorm.weight", 1, 0.3, H)
		add(p+"post_attention_layernorm.weight", 1, 0.3, H)
		add(p+"self_attn.q_proj.weight", 0, 0.8, cfg.Heads*d, H)
		add(p+"self_attn.k_proj.weight", 0, 0.8, cfg.KVHeads*d, H)
		add(p+"self_attn.v_proj.weight", 0, 0.6, cfg.KVHeads*d, H)
		add(p+"self_attn.o_proj.weight", 0, 0.6, H, cfg.Heads*d)
		if qkvBias {
			add(p+"self_attn.q_proj.bias", 0, 0.5, cfg.Heads*d)
			add(p+"self_attn.k_proj.bias", 0, 0.5, cfg.KVHeads*d)
			add(p+"self_attn.v_proj.bias", 0, 0.5, cfg.KVHeads*d)
		}
		if cfg.AttentionBias {
			add(p+"self_attn.o_proj.bias", 0, 0.5, H)
		}
		if cfg.QKNorm {
			add(p+"self_attn.q_norm.weight", 1, 0.4, d)
			add(p+"self_attn.k_norm.weight", 1, 0.4, d)
		}
		add(p+"mlp.gate_proj.weight", 0, 0.6, cfg.Intermediate, H)
		add(p+"mlp.up_proj.weight", 0, 0.6, cfg.Intermediate, H)
		add(p+"mlp.down_proj.weight", 0, 0.5, H, cfg.Intermediate)
		if cfg.MLPBias {
			add(p+"mlp.gate_proj.bias", 0, 0.5, cfg.Intermediate)
			add(p+"mlp.up_proj.bias", 0, 0.5, cfg.Intermediate)
			add(p+"mlp.down_proj.bias", 0, 0.5, H)
		}
	}
	add("model.norm.weight", 1, 0.3, H)
	if !cfg.TieEmbeddings {
		add("lm_head.weight", 0, 1, cfg.Vocab, H)
	}
	return ts
}

func randTokens(r *rand.Rand, n, vocab int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(r.IntN(vocab))
	}
	return out
}
