package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/filterlens/probe/hooks"
)

// RWKV-7 "Goose" (x070; Peng et al. 2025, "RWKV-7 Goose with Expressive
// Dynamic State Evolution"), in the layout of its authors' reference
// (BlinkDL/RWKV-LM RWKV-v7/rwkv_v7_demo.py) and of their .pth checkpoints:
// an embedding emb, LayerNorm ln0 on it (block 0's), then per block
// x ← x + TimeMix(ln1(x)), x ← x + ChannelMix(ln2(x)), then ln_out and an
// untied head. Every layer runs on the decoder pass's declared slots: the
// time mix is the layer's token mixer (Layer.mixer), the channel mix its
// channel mixer (Layer.ffn), ln0 the pass's embedding norm.
//
// Time mix of the normalized input x [T, C] of one sequence, with the
// token shift xx_t = x_{t−1} − x_t (x_{−1} = 0) and x_* = x + xx ⊙ μ_*:
//
//	r = W_r x_r,  k = W_k x_k,  v = W_v x_v
//	w_log = −softplus(−(w0 + tanh(x_w W1) W2)) − 0.5,  w = exp(−exp(w_log))
//	a = σ(a0 + x_a A1 A2),  g = σ(x_g G1) G2
//	v ← v + (v_first − v) ⊙ σ(v0 + x_v V1 V2)    (layers > 0; v_first is layer 0's v)
//	κ̂ = normalize(k ⊙ k_k) per head,  k ← k ⊙ (1 + (a − 1) ⊙ k_a)
//
// then per head (N = head_size, S [N value, N key], S_0 = 0)
//
//	S_t = S_{t−1} (diag(w_t) − κ̂_t (a_t ⊙ κ̂_t)ᵀ) + v_t k_tᵀ,  wkv_t = S_t r_t
//
// and out = W_o (g ⊙ (GroupNorm_H(wkv) + (Σ_j r_j k_j r_k[h,j]) v)) with
// one group per head (eps ln_x_group_norm_eps). Channel mix:
// W_v relu(W_k x_k)² with its own token shift.
//
// Given r, w, k, κ̂, a the recurrence is linear in v: wkv_t = Σ_s M[t,s] v_s
// with M[t,s] = k_sᵀ G_{s+1} ⋯ G_t r_t, G_u = diag(w_u) − κ̂_u (a_u ⊙
// κ̂_u)ᵀ, the exact effective attention (rwkvAttention) that the layer
// streams to hooks.DeltaConsumer as Gated DeltaNet streams its W.

// ArchRWKV7 is RWKV-7 (x070) in its authors' layout.
const ArchRWKV7 Arch = "rwkv7"

// RWKV7Config holds the settings of an RWKV-7 model beyond Config's sizes
// (the authors' args; Config.DHead is head_size, Config.Heads is
// n_embd/head_size, Config.DMLP is dim_ffn, Config.NormEps the LayerNorms'
// eps).
type RWKV7Config struct {
	// DecayLoRA, ICLRLoRA, ValueLoRA, GateLoRA are the ranks of the w, a,
	// v and g low-rank projections (D_DECAY_LORA, D_AAA_LORA, D_MV_LORA,
	// D_GATE_LORA).
	DecayLoRA, ICLRLoRA, ValueLoRA, GateLoRA int
	// Layout is the checkpoint's naming: "" for the authors' (BlinkDL
	// .pth names, their args as config.json), "fla" for the Hugging Face
	// port of flash-linear-attention (rwkv7_fla.go).
	Layout string
	// NoEmbedNorm says that the embeddings enter block 0 without ln0
	// (fla's norm_first false).
	NoEmbedNorm bool
	// GroupNormEps is ln_x's eps: ln_x_group_norm_eps, else the
	// reference's 1e-5·head_size_divisor² (head_size_divisor 8 by
	// default: 64e-5).
	GroupNormEps float64
}

// rwkv7Raw is the authors' config.json (their args) as the golden case
// writes it.
type rwkv7Raw struct {
	Architecture *string  `json:"architecture"`
	Version      *string  `json:"my_testing"`
	NEmbd        *int     `json:"n_embd"`
	NLayer       *int     `json:"n_layer"`
	HeadSize     *int     `json:"head_size"`
	NHead        *int     `json:"n_head"`
	DimAtt       *int     `json:"dim_att"`
	DimFFN       *int     `json:"dim_ffn"`
	Vocab        *int     `json:"vocab_size"`
	CtxLen       *int     `json:"ctx_len"`
	DecayLoRA    *int     `json:"D_DECAY_LORA"`
	ICLRLoRA     *int     `json:"D_AAA_LORA"`
	ValueLoRA    *int     `json:"D_MV_LORA"`
	GateLoRA     *int     `json:"D_GATE_LORA"`
	LNEps        *float64 `json:"layer_norm_eps"`
	GNEps        *float64 `json:"ln_x_group_norm_eps"`
	GNDivisor    *float64 `json:"head_size_divisor"`
}

// isRWKV7Config reports whether config.json is the RWKV authors' args: no
// model_type, and their n_embd, n_layer and head_size (GPT-2's n_embd
// comes with model_type gpt2).
func isRWKV7Config(cf *configFile) bool {
	if cf.modelType() != "" {
		return false
	}
	for _, k := range []string{"n_embd", "n_layer", "head_size"} {
		if _, ok := cf.raw[k]; !ok {
			return false
		}
	}
	return true
}

// isRWKV7Version reports whether a value of the authors' version fields
// (architecture, my_testing) names RWKV-7 (x070), the only RWKV generation
// implemented.
func isRWKV7Version(s string) bool {
	s = strings.ToLower(s)
	return strings.Contains(s, "x070") || strings.Contains(s, "rwkv-7") || strings.Contains(s, "rwkv7")
}

// parseRWKV7 fills c from the authors' config.json, refusing other RWKV
// generations and inconsistent head sizes by field.
func parseRWKV7(c *Config, cf *configFile) error {
	var r rwkv7Raw
	if err := json.Unmarshal(cf.data, &r); err != nil {
		return fmt.Errorf("not valid for RWKV-7: %v", err)
	}
	if r.Architecture != nil && !isRWKV7Version(*r.Architecture) {
		return fmt.Errorf("field architecture %q is not supported (supported: RWKV-7 x070)", *r.Architecture)
	}
	if r.Version != nil && !isRWKV7Version(*r.Version) {
		return fmt.Errorf("field my_testing %q is not supported (supported: x070, RWKV-7)", *r.Version)
	}
	rc := &RWKV7Config{GroupNormEps: 64e-5}
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		p    *int
	}{
		{&c.DModel, "n_embd", r.NEmbd}, {&c.Layers, "n_layer", r.NLayer}, {&c.DHead, "head_size", r.HeadSize},
		{&c.Vocab, "vocab_size", r.Vocab},
		{&rc.DecayLoRA, "D_DECAY_LORA", r.DecayLoRA}, {&rc.ICLRLoRA, "D_AAA_LORA", r.ICLRLoRA},
		{&rc.ValueLoRA, "D_MV_LORA", r.ValueLoRA}, {&rc.GateLoRA, "D_GATE_LORA", r.GateLoRA},
	} {
		if *f.dst, err = need(f.name, f.p); err != nil {
			return err
		}
	}
	if r.DimAtt != nil && *r.DimAtt != c.DModel {
		return fmt.Errorf("field dim_att %d differs from n_embd %d (the reference's time mix is n_embd wide)", *r.DimAtt, c.DModel)
	}
	if c.DModel%c.DHead != 0 {
		return fmt.Errorf("field head_size %d does not divide n_embd %d", c.DHead, c.DModel)
	}
	c.Heads = c.DModel / c.DHead
	if r.NHead != nil && *r.NHead != c.Heads {
		return fmt.Errorf("field n_head %d is inconsistent with n_embd %d / head_size %d = %d heads", *r.NHead, c.DModel, c.DHead, c.Heads)
	}
	c.KVHeads = c.Heads
	c.DMLP = 4 * c.DModel // the reference's default dim_ffn
	if r.DimFFN != nil {
		if c.DMLP, err = need("dim_ffn", r.DimFFN); err != nil {
			return err
		}
	}
	// a recurrence has no position table: ctx_len (the training context)
	// bounds sequences only as other families' max_position_embeddings
	// does (--allow-extrapolation runs longer ones)
	c.MaxPos = 4096
	if r.CtxLen != nil {
		if c.MaxPos, err = need("ctx_len", r.CtxLen); err != nil {
			return err
		}
	}
	c.NormEps = 1e-5
	if r.LNEps != nil {
		c.NormEps = *r.LNEps
	}
	if d := r.GNDivisor; d != nil && r.GNEps == nil {
		// the reference's GroupNorm eps = 1e-5·head_size_divisor²
		if !(*d > 0) || math.IsInf(*d, 0) {
			return fmt.Errorf("field head_size_divisor %v must be finite and positive", *d)
		}
		rc.GroupNormEps = 1e-5 * *d * *d
	}
	if r.GNEps != nil {
		if g := *r.GNEps; !(g >= 0) || math.IsInf(g, 0) {
			return fmt.Errorf("field ln_x_group_norm_eps %v must be finite and ≥ 0", g)
		}
		rc.GroupNormEps = *r.GNEps
	}
	c.Act, c.Gate = "relu2", GateNone // the channel mix's relu(·)², read by rwkvChannelMix
	c.DType = cf.dtype()
	c.RWKV7 = rc
	return nil
}

// rwkvTimeMix is one RWKV-7 time-mix layer (names of the authors'
// blocks.{l}.att.* in brackets).
type rwkvTimeMix struct {
	C, H, N  int
	eps      float64      // ln_x's eps
	first    bool         // layer 0: sets v_first (its v0, v1, v2 are unused)
	mu       [6][]float32 // token-shift mixes x_r, x_w, x_k, x_v, x_a, x_g [C]
	w0, a0   []float32    // [C]
	v0       []float32    // [C]
	w1, w2   []float32    // [C, Dw], [Dw, C]
	a1, a2   []float32    // [C, Da], [Da, C]
	v1, v2   []float32    // [C, Dv], [Dv, C]
	g1, g2   []float32    // [C, Dg], [Dg, C]
	kK, kA   []float32    // k_k, k_a [C]
	rK       []float32    // r_k [H, N]
	lnW, lnB []float32    // ln_x [C]
	Wr, Wk   Weight       // receptance, key [C, C]
	Wv, Wo   Weight       // value, output [C, C]
	ranks    [4]int       // Dw, Da, Dv, Dg
}

// rwkvChannelMix is one RWKV-7 channel-mix layer (blocks.{l}.ffn.*).
type rwkvChannelMix struct {
	C, F int
	mu   []float32 // x_k [C]
	Wk   Weight    // key [F, C]
	Wv   Weight    // value [C, F]
}

// tokenShift sets dst_t = x_t + (x_{t−1} − x_t) ⊙ mu per sequence of T
// rows of width C (x_{−1} = 0), as the reference's
// x + (time_shift(x) − x) ⊙ mu.
func tokenShift(dst, x, mu []float32, B, T, C int) {
	for r := 0; r < B*T; r++ {
		xr, dr := x[r*C:(r+1)*C], dst[r*C:(r+1)*C]
		var prev []float32
		if r%T != 0 {
			prev = x[(r-1)*C : r*C]
		}
		for i, v := range xr {
			p := float32(0)
			if prev != nil {
				p = prev[i]
			}
			dr[i] = v + (p-v)*mu[i]
		}
	}
}

// lora sets dst [n, out] = x [n, C] · A [C, rank] (fn applied to the
// hidden values when not nil) · B [rank, out], with tmp [n, rank] scratch.
func lora(dst, x, A, B, tmp []float32, n, C, rank, out int, fn func(float32) float32) {
	sgemm(false, n, rank, C, 1, x, C, A, rank, 0, tmp, rank)
	if fn != nil {
		for i, v := range tmp[:n*rank] {
			tmp[i] = fn(v)
		}
	}
	sgemm(false, n, out, rank, 1, tmp, rank, B, out, 0, dst, out)
}

func tanh32(x float32) float32 { return float32(math.Tanh(float64(x))) }

// scratchFloats is the time mix's share of the pass's scratch: v_first
// [B·T, C] at its start, which layer 0 writes and the later layers read
// (the arena is the pass's own and no other mixer of an RWKV-7 model
// writes it), then the six shifted inputs, r, w_log, w, k, v, a, κ̂, g,
// wkv and the LoRA hidden values.
func (w *rwkvTimeMix) scratchFloats(B, T int) int {
	n := B * T
	return n*w.C*(1+6+9) + n*max(w.ranks[0], w.ranks[1], w.ranks[2], w.ranks[3])
}

// mix runs the time mix of layer l on the normalized input h into out,
// with the hooks blocks.{l}.rwkv.hook_{r, w_log, w, k, v, a, kk, g, wkv,
// state, eff_attn}.
func (w *rwkvTimeMix) mix(m *Model, out, h, scratch []float32, l, B, T int, opt Options, run hookRun) error {
	C, H, N, n := w.C, w.H, w.N, B*T
	need := w.scratchFloats(B, T)
	if len(scratch) < need {
		return fmt.Errorf("model: RWKV-7 layer %d: scratch of %d values, want %d", l, len(scratch), need)
	}
	buf := func(i int) []float32 { return scratch[i*n*C : (i+1)*n*C] }
	vFirst := buf(0)
	var xs [6][]float32
	for i := range xs {
		xs[i] = buf(1 + i)
		tokenShift(xs[i], h, w.mu[i], B, T, C)
	}
	xr, xw, xk, xv, xa, xg := xs[0], xs[1], xs[2], xs[3], xs[4], xs[5]
	r, wlog, dec, k, v, a, kk, g, wkv := buf(7), buf(8), buf(9), buf(10), buf(11), buf(12), buf(13), buf(14), buf(15)
	tmp := scratch[16*n*C : need]
	cmp := opt.Compute

	linearAs(cmp, r, xr, n, C, w.Wr, C, nil)
	linearAs(cmp, k, xk, n, C, w.Wk, C, nil)
	linearAs(cmp, v, xv, n, C, w.Wv, C, nil)
	lora(wlog, xw, w.w1, w.w2, tmp, n, C, w.ranks[0], C, tanh32)
	for i := range wlog {
		x := wlog[i] + w.w0[i%C]
		wlog[i] = float32(-softplus(-x)) - 0.5
		dec[i] = float32(math.Exp(-math.Exp(float64(wlog[i]))))
	}
	lora(a, xa, w.a1, w.a2, tmp, n, C, w.ranks[1], C, nil)
	for i := range a {
		a[i] = sigmoid(w.a0[i%C] + a[i])
	}
	if w.first {
		copy(vFirst, v)
	} else {
		lora(g, xv, w.v1, w.v2, tmp, n, C, w.ranks[2], C, nil) // g's storage, before g
		for i := range v {
			v[i] += (vFirst[i] - v[i]) * sigmoid(w.v0[i%C]+g[i])
		}
	}
	lora(g, xg, w.g1, w.g2, tmp, n, C, w.ranks[3], C, sigmoid)
	for row := 0; row < n*H; row++ {
		kr, kkr, ar := k[row*N:(row+1)*N], kk[row*N:(row+1)*N], a[row*N:(row+1)*N]
		c0 := (row % H) * N
		var ss float64
		for j, x := range kr {
			y := x * w.kK[c0+j]
			kkr[j] = y
			ss += float64(y) * float64(y)
		}
		inv := float32(1 / max(math.Sqrt(ss), 1e-12)) // F.normalize
		for j := range kkr {
			kkr[j] *= inv
			kr[j] *= 1 + (ar[j]-1)*w.kA[c0+j]
		}
	}
	for _, x := range []struct {
		point string
		t     []float32
	}{{hooks.RWKVR, r}, {hooks.RWKVWLog, wlog}, {hooks.RWKVW, dec}, {hooks.RWKVK, k}, {hooks.RWKVV, v}, {hooks.RWKVA, a}, {hooks.RWKVKK, kk}} {
		run(x.point, l, x.t, B, T, H, N)
	}
	run(hooks.RWKVG, l, g, B, T, C)
	if err := rwkvStream(r, dec, k, kk, a, v, B, T, H, N, l, opt); err != nil {
		return err
	}

	state := make([]float32, B*H*N*N)
	parallelRows(B*H, T*N*N, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			b, hd := i/H, i%H
			rwkvRecurrent(wkv, state[i*N*N:(i+1)*N*N], r, dec, k, kk, a, v, b*T*C+hd*N, T, C, N)
		}
	})
	run(hooks.RWKVWKV, l, wkv, B, T, H, N)
	run(hooks.RWKVState, l, state, B, H, N, N)

	// group norm per head, bonus (Σ r⊙k⊙r_k)·v, gate, output projection
	y := xr // the shifted inputs are read
	for row := 0; row < n*H; row++ {
		c0 := (row % H) * N
		o, yo := wkv[row*N:(row+1)*N], y[row*N:(row+1)*N]
		var mean, vr, bonus float64
		for j, x := range o {
			mean += float64(x)
			bonus += float64(r[row*N+j] * k[row*N+j] * w.rK[c0+j])
		}
		mean /= float64(N)
		for _, x := range o {
			d := float64(x) - mean
			vr += d * d
		}
		inv := 1 / math.Sqrt(vr/float64(N)+w.eps)
		for j, x := range o {
			gn := float32((float64(x)-mean)*inv)*w.lnW[c0+j] + w.lnB[c0+j]
			yo[j] = (gn + float32(bonus)*v[row*N+j]) * g[row*N+j]
		}
	}
	linearAs(cmp, out, y, n, C, w.Wo, C, nil)
	return nil
}

// rwkvRecurrent runs the RWKV-7 state recurrence of one sequence and head
// in the reference's order: for t = 0…T−1, with S [N, N] (row i: value
// index, column j: key index; holds S_0 on entry and S_T on return),
//
//	sa = S·(−κ̂_t);  S[i,j] ← S[i,j]·w_t[j] + sa[i]·(κ̂_t ⊙ a_t)[j] + v_t[i]·k_t[j];  wkv_t = S·r_t
//
// reading r, w, k, κ̂, a, v and writing wkv at off + t·stride + [0, N).
func rwkvRecurrent(wkv, S, r, w, k, kk, a, v []float32, off, T, stride, N int) {
	sa := make([]float32, N)
	b := make([]float32, N)
	for t := 0; t < T; t++ {
		o := off + t*stride
		rt, wt, kt, kkt, at, vt := r[o:o+N], w[o:o+N], k[o:o+N], kk[o:o+N], a[o:o+N], v[o:o+N]
		for j := range b {
			b[j] = kkt[j] * at[j]
		}
		for i := 0; i < N; i++ {
			row := S[i*N : (i+1)*N]
			var s float32
			for j, x := range row {
				s -= x * kkt[j]
			}
			sa[i] = s
		}
		out := wkv[o : o+N]
		for i := 0; i < N; i++ {
			row := S[i*N : (i+1)*N]
			si, vi := sa[i], vt[i]
			var y float32
			for j, x := range row {
				x = x*wt[j] + si*b[j] + vi*kt[j]
				row[j] = x
				y += x * rt[j]
			}
			out[i] = y
		}
	}
}

// rwkvAttention streams the exact effective attention M of one sequence
// and head (wkv_t = Σ_s M[t,s] v_s) in tiles of tile query rows: fn(t0,
// n, width, rows) gets rows [n, width] of M, row q at rows[q·width:] for
// query t0+q, width = t0 + n, zeros above the diagonal; rows is valid only
// during the call. r, w, k, kk, a are read at off + t·stride + [0, N).
//
// Method: the key-space rows P_t[s] = k_sᵀ G_{s+1} ⋯ G_t (the state run on
// one-hot values, S_t = Σ_s v_s P_t[s]) advance as P_t[s] = P_{t−1}[s] G_t
// = P_{t−1}[s] ⊙ w_t − (P_{t−1}[s]·κ̂_t)(a_t ⊙ κ̂_t) for s < t and P_t[t] =
// k_t, and M[t,s] = P_t[s]·r_t: 4·N multiply-adds per (t, s), in float64
// (N·T values; never T×T).
func rwkvAttention(r, w, k, kk, a []float32, off, T, stride, N, tile int, fn func(t0, n, width int, rows []float32) error) error {
	P := make([]float64, T*N)
	rows := make([]float32, tile*T)
	b := make([]float64, N)
	for t0 := 0; t0 < T; t0 += tile {
		n := min(tile, T-t0)
		width := t0 + n
		for q := 0; q < n; q++ {
			t := t0 + q
			o := off + t*stride
			wt, kkt := w[o:o+N], kk[o:o+N]
			for j := range b {
				b[j] = float64(kkt[j]) * float64(a[o+j])
			}
			for s := 0; s < t; s++ {
				p := P[s*N : (s+1)*N]
				var d float64
				for j, x := range p {
					d += x * float64(kkt[j])
				}
				for j, x := range p {
					p[j] = x*float64(wt[j]) - d*b[j]
				}
			}
			for j, x := range k[o : o+N] {
				P[t*N+j] = float64(x)
			}
			row := rows[q*width : (q+1)*width]
			clear(row)
			rt := r[o : o+N]
			for s := 0; s <= t; s++ {
				var d float64
				for j, x := range P[s*N : (s+1)*N] {
					d += x * float64(rt[j])
				}
				row[s] = float32(d)
			}
		}
		if err := fn(t0, n, width, rows[:n*width]); err != nil {
			return err
		}
	}
	return nil
}

// rwkvStream streams the effective attention of every (sequence, head) of
// layer l (rwkvAttention, in tiles of opt.TileRows rows) to the layer's
// hooks.DeltaConsumers with the head's values v, and materializes it [B,
// H, T, T] for blocks.{l}.rwkv.hook_eff_attn when hooked (a capture:
// changing it does not change the pass). Nothing is computed when neither
// asks.
func rwkvStream(r, w, k, kk, a, v []float32, B, T, H, N, l int, opt Options) error {
	C := H * N
	base := func(i int) hooks.AttnTile {
		off := (i/H)*T*C + (i%H)*N
		return hooks.AttnTile{DHead: N, VStride: C, V: v[off : off+(T-1)*C+N]}
	}
	return streamEffAttn(opt, hooks.RWKVEffAttn, "", l, B, H, T, T*T*N, base, func() effRows {
		return func(i, tile int, emit tileEmit) error {
			return rwkvAttention(r, w, k, kk, a, (i/H)*T*C+(i%H)*N, T, C, N, tile, emit)
		}
	})
}

// mixChannels runs the channel mix of layer l: out = W_v act(W_k x_k)
// (act = Config.Act, relu2: relu(·)²)
// with x_k = h + (shift(h) − h) ⊙ μ_k, the hidden values through
// mlp.hook_pre (W_k x_k) and mlp.hook_post (relu²).
func (f *rwkvChannelMix) mixChannels(m *Model, out, h []float32, l, B, T int, opt Options, run hookRun) error {
	n, C, F := B*T, f.C, f.F
	xk := make([]float32, n*C)
	tokenShift(xk, h, f.mu, B, T, C)
	hid := make([]float32, n*F)
	linearAs(opt.Compute, hid, xk, n, C, f.Wk, F, nil)
	run(hooks.MLPPre, l, hid, B, T, F)
	act := activations[m.Act]
	for i, x := range hid {
		hid[i] = act(x)
	}
	run(hooks.MLPPost, l, hid, B, T, F)
	linearAs(opt.Compute, out, hid, n, F, f.Wv, C, nil)
	return nil
}

// scratchFloats counts the shifted input and the hidden values.
func (f *rwkvChannelMix) scratchFloats(B, T int) int { return B * T * (f.C + f.F) }

// loadRWKV7 reads the authors' state dict: emb.weight, blocks.{l}.{ln0
// (block 0), ln1, ln2, att.*, ffn.*}, ln_out, head.weight.
func loadRWKV7(m *Model, ld *loader) {
	c, rc := &m.Config, m.RWKV7
	C, H, N, F, V := c.DModel, c.Heads, c.DHead, c.DMLP, c.Vocab
	vec := func(name string) []float32 { return ld.get(name, 1, 1, C) }
	m.Embed = ld.weight("emb.weight", V, C)
	m.EmbedNormW, m.EmbedNormB = ld.get("blocks.0.ln0.weight", C), ld.get("blocks.0.ln0.bias", C)
	m.Layers = make([]Layer, c.Layers)
	ranks := [4]int{rc.DecayLoRA, rc.ICLRLoRA, rc.ValueLoRA, rc.GateLoRA}
	for l := range m.Layers {
		L := &m.Layers[l]
		p := fmt.Sprintf("blocks.%d.", l)
		L.Norm1W, L.Norm1B = ld.get(p+"ln1.weight", C), ld.get(p+"ln1.bias", C)
		L.Norm2W, L.Norm2B = ld.get(p+"ln2.weight", C), ld.get(p+"ln2.bias", C)
		if l > 0 {
			// the reference's Block makes an ln0 in every block and
			// applies block 0's alone: the others are expected, unused
			ld.skip([]string{p + "ln0."})
		}
		a := p + "att."
		tm := &rwkvTimeMix{C: C, H: H, N: N, eps: rc.GroupNormEps, first: l == 0, ranks: ranks,
			w0: vec(a + "w0"), a0: vec(a + "a0"), v0: vec(a + "v0"),
			w1: ld.get(a+"w1", C, ranks[0]), w2: ld.get(a+"w2", ranks[0], C),
			a1: ld.get(a+"a1", C, ranks[1]), a2: ld.get(a+"a2", ranks[1], C),
			v1: ld.get(a+"v1", C, ranks[2]), v2: ld.get(a+"v2", ranks[2], C),
			g1: ld.get(a+"g1", C, ranks[3]), g2: ld.get(a+"g2", ranks[3], C),
			kK: vec(a + "k_k"), kA: vec(a + "k_a"), rK: ld.get(a+"r_k", H, N),
			lnW: ld.get(a+"ln_x.weight", C), lnB: ld.get(a+"ln_x.bias", C),
			Wr: ld.weight(a+"receptance.weight", C, C), Wk: ld.weight(a+"key.weight", C, C),
			Wv: ld.weight(a+"value.weight", C, C), Wo: ld.weight(a+"output.weight", C, C)}
		for i, x := range []string{"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"} {
			tm.mu[i] = vec(a + x)
		}
		L.mixer = tm
		f := p + "ffn."
		L.ffn = &rwkvChannelMix{C: C, F: F, mu: vec(f + "x_k"),
			Wk: ld.weight(f+"key.weight", F, C), Wv: ld.weight(f+"value.weight", C, F)}
	}
	m.FinalW, m.FinalB = ld.get("ln_out.weight", C), ld.get("ln_out.bias", C)
	m.Head = ld.weight("head.weight", V, C)
}

// rwkv7Family is RWKV-7 in its authors' layout.
var rwkv7Family = &family{
	arch: ArchRWKV7, modelTypes: `rwkv7, rwkv7_fla (fla-hub); RWKV-7 authors' args (no model_type; n_embd, n_layer, head_size, D_*_LORA)`,
	detect: func(cf *configFile) bool { return isRWKV7Config(cf) || isRWKV7FlaConfig(cf) },
	parse: func(c *Config, cf *configFile) error {
		if isRWKV7FlaConfig(cf) {
			return parseRWKV7Fla(c, cf)
		}
		return parseRWKV7(c, cf)
	},
	load: func(m *Model, ld *loader) {
		if m.RWKV7.Layout == "fla" {
			loadRWKV7Fla(m, ld)
			return
		}
		loadRWKV7(m, ld)
	},
	positions: "none (token shift and the RWKV-7 state recurrence)",
	hfConfig: func(c *Config) map[string]any {
		rc := c.RWKV7
		if rc.Layout == "fla" {
			return rwkv7FlaConfig(c)
		}
		return map[string]any{
			"architecture": "RWKV-7 x070", "n_embd": c.DModel, "n_layer": c.Layers, "head_size": c.DHead,
			"n_head": c.Heads, "dim_att": c.DModel, "dim_ffn": c.DMLP, "vocab_size": c.Vocab, "ctx_len": c.MaxPos,
			"D_DECAY_LORA": rc.DecayLoRA, "D_AAA_LORA": rc.ICLRLoRA, "D_MV_LORA": rc.ValueLoRA, "D_GATE_LORA": rc.GateLoRA,
			"layer_norm_eps": c.NormEps, "ln_x_group_norm_eps": rc.GroupNormEps, "dtype": "float32",
		}
	},
	// The authors' proportions (RWKV-v7 train_temp): head_size
	// d_model/heads (KVHeads is not used: no grouped heads), dim_ffn
	// 4·d_model, LoRA ranks max(32, round(f·d_model^e / 32)·32) with
	// (f, e) = (1.8, ½) for w and a, (1.3, ½) for v, (0.6, 0.8) for g,
	// LayerNorm eps 1e-5, group-norm eps 64e-5, ctx_len max positions.
	small: func(s Size) (map[string]any, error) {
		if s.DModel%s.Heads != 0 {
			return nil, fmt.Errorf("d_model %d is not divisible by heads %d (head_size = d_model/heads)", s.DModel, s.Heads)
		}
		rank := func(f, e float64) int { return max(32, int(math.Round(f*math.Pow(float64(s.DModel), e)/32))*32) }
		return map[string]any{
			"architecture": "RWKV-7 x070", "n_embd": s.DModel, "n_layer": s.Layers, "head_size": s.DModel / s.Heads,
			"dim_att": s.DModel, "dim_ffn": 4 * s.DModel, "vocab_size": s.Vocab, "ctx_len": s.MaxPos,
			"D_DECAY_LORA": rank(1.8, 0.5), "D_AAA_LORA": rank(1.8, 0.5), "D_MV_LORA": rank(1.3, 0.5), "D_GATE_LORA": rank(0.6, 0.8),
			"layer_norm_eps": 1e-5, "ln_x_group_norm_eps": 64e-5,
		}, nil
	},
	prefix: "blocks.",
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) {
		return rwkv7Generated(rng)
	},
}

// rwkv7Generated moves a generated RWKV-7 model's own parameters into the
// ranges of the golden case's (trained-like) draws: the block LayerNorms'
// weights near 1 (their names escape the generic rule), token-shift mixes
// N(0.5, 0.2²), w0 N(−1.5, 1) (decays spread over (0.6, 1)), k_k and k_a
// N(1, 0.2²), r_k N(0, 0.3²).
func rwkv7Generated(rng *rand.Rand) func(string, []float32) {
	normal := func(x []float32, mean, sd float64) {
		for i := range x {
			x[i] = float32(mean + sd*rng.NormFloat64())
		}
	}
	return func(name string, x []float32) {
		base := name[strings.LastIndex(name, ".")+1:]
		switch {
		case strings.HasSuffix(name, ".ln0.weight") || strings.HasSuffix(name, ".ln1.weight") || strings.HasSuffix(name, ".ln2.weight"):
			normal(x, 1, 0.1)
		case strings.HasPrefix(base, "x_"):
			normal(x, 0.5, 0.2)
		case base == "w0":
			normal(x, -1.5, 1)
		case base == "k_k" || base == "k_a":
			normal(x, 1, 0.2)
		case base == "r_k":
			normal(x, 0, 0.3)
		}
	}
}
