package model

// Isotropic Adaptive Filter Attention (AFA): P. Racioppo, "Attention as an
// Adaptive Filter" (paper 001), §3.6 and Algorithm 1 (§4.1) with the
// corrections of notes 001 §F, as the attention of a pre-norm language
// model (layout and options: afa_config.go). Per layer, per head with d
// complex channels, λ_c = −a + iω_c (a = α², ω interleaved ±ω_m),
// t_i = Δt·i, lag n = i − j ≥ 0:
//
//	x = RMSNorm(h);  Z_v = L_V(x);  Z_q, Z_k = L_Q(Z_v), L_K(Z_v)  (or of x)     steps 1–3
//	E(n) = e^{−anΔt};  κ(n) = −expm1(−2anΔt)/(2a)  (nΔt for a ≤ ε)             steps 4, 6 (§F.3)
//	σ_V²(n) = σ²κ(n) + η²E(n)²                                                   step 7 (§3.6)
//	Z̃_{q,k,v} = e^{−iωt} ⊙ Z_{q,k,v}                                             steps 9–10
//	|R_ij|² = ‖Z_q,i‖² + E²‖Z_k,j‖² − 2E·Re(Z̃_q,iᴴZ̃_k,j)   (= ‖q_i − e^{λnΔt}⊙k_j‖², clamped ≥ 0)  step 11 (§F.6)
//	L_ij = −log(σ_V²(n) + |R_ij|² + ε);  A = softmax_j(τ_s L + M_causal)        steps 12–13 (−∞ mask, §F.5)
//	Â = E ⊙ A;  Z̄_v,i = e^{iωt_i} ⊙ Σ_j Â_ij Z̃_v,j   (= Σ_j A_ij e^{λnΔt} ⊙ Z_v,j)  steps 14–15
//	Z̄ = (1 − s) ⊙ Z_v + s ⊙ Z̄_v,  s = sigmoid(δ)                               step 16
//	Z⁺ = e^{(−a + iω)Δt} ⊙ Z̄                      (from Z̄, with e^{−α²Δt}; §F.2, §F.7)  step 17
//	h ← h + Re(L_P(Z⁺));  h ← h + FFN(RMSNorm(h));  logits = lm_head(RMSNorm(h))      step 18 and the block
//
// Identity (§3.8, notes §G.4): with a = 0 and σ = 0, E = 1 and
// σ_V² = η², so with normalized q, k the weights depend on q and k only
// through the RoPE score Re(q̂ᴴe^{iωnΔt}k̂), and as η² → ∞ with
// τ_s = β(η² + 2 + ε)/2 they tend to softmax(β·Re(q̃ᴴk̃)): RoPE attention
// (TestAFAReducesToRoPEAttention).
//
// Hook points (hooks.Points), with AFA's meaning (d_head = 2d reals,
// (re, im) interleaved per channel):
//
//	hook_embed, blocks.{l}.hook_resid_pre, ln1.hook_normalized   as the standard models
//	blocks.{l}.attn.hook_q/k/v               Z_q, Z_k, Z_v (before any normalization)
//	blocks.{l}.attn.hook_rot_q/k             Z̃_q, Z̃_k (normalized first with normalize_qk)
//	blocks.{l}.attn.hook_pattern             A [batch,head,query,key] (rows sum to 1)
//	blocks.{l}.attn.hook_pattern_decayed     Â = E ⊙ A (rows sum to ≤ 1): the weights the values get
//	blocks.{l}.afa.hook_log_precision        log Π_i = log Σ_j e^{τ_s L_ij}, the total precision (App. B.3)
//	blocks.{l}.afa.hook_estimate             Z̄_v [batch,pos,head,d_head], the filtered estimate
//	blocks.{l}.attn.hook_gate                s = sigmoid(δ) [batch,pos,head,d_head] (both parts of a channel)
//	blocks.{l}.attn.hook_z                   Z⁺, what L_P reads
//	blocks.{l}.hook_attn_out, hook_resid_mid, ln2.hook_normalized, mlp.*, hook_mlp_out, hook_resid_post,
//	ln_final.hook_normalized, logits         as the standard models
//
// Streaming: consumers receive rows of A with the rotated values Z̃_v as V
// (DHead = 2d), the vectors Â = A ⊙ E multiplies in the common frame (as
// RFA, its successor).

import (
	"fmt"
	"math"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"

	"github.com/filterlens/probe/hooks"
)

// afaWeights holds the AFA filter parameters beyond the Layer fields. In
// an AFA model's Layer, Wv/Bv (and Wq/Bq, Wk/Bk with qk_source "input")
// are the complex projections as real matrices producing (re, im)
// interleaved rows; with qk_source "values" Wq/Wk are per-head real
// [H, 2d, 2d] block matrices [[W_r, −W_i], [W_i, W_r]] (interleaved) and
// Bq/Bk [H, 2d]; Wo/Bo map the interleaved Z⁺ to Re(L_P(Z⁺)).
type afaWeights struct {
	Layers []afaLayer
}

type afaLayer struct {
	Alpha, Sigma, Eta, TauS []float32 // [H]
	Omega                   []float32 // [H, d/2]
	Delta                   []float32 // [H, d]
}

// complexRows interleaves the rows of a complex matrix given as re and im
// [rows, cols] into [2·rows, cols]: row 2r is Re, 2r+1 is Im (the
// (re, im) layout of every complex activation).
func complexRows(re, im []float32, cols int) []float32 {
	out := make([]float32, 2*len(re))
	for r := 0; r*cols < len(re); r++ {
		copy(out[2*r*cols:], re[r*cols:(r+1)*cols])
		copy(out[(2*r+1)*cols:], im[r*cols:(r+1)*cols])
	}
	return out
}

// complexBlocks turns per-head complex d×d maps (re, im [H, d, d]) into
// real [H, 2d, 2d] matrices acting on interleaved vectors:
// (W_r + iW_i)(x_r + ix_i) = (W_r x_r − W_i x_i) + i(W_i x_r + W_r x_i).
func complexBlocks(re, im []float32, H, d int) []float32 {
	out := make([]float32, H*4*d*d)
	for h := 0; h < H; h++ {
		o := out[h*4*d*d:]
		for r := 0; r < d; r++ {
			for c := 0; c < d; c++ {
				wr, wi := re[(h*d+r)*d+c], im[(h*d+r)*d+c]
				o[(2*r)*2*d+2*c], o[(2*r)*2*d+2*c+1] = wr, -wi
				o[(2*r+1)*2*d+2*c], o[(2*r+1)*2*d+2*c+1] = wi, wr
			}
		}
	}
	return out
}

// complexToReal turns L_P (re, im [rows, n]) into the real [rows, 2n]
// matrix giving Re(L_P z) from interleaved z: Re = W_r z_r − W_i z_i.
func complexToReal(re, im []float32, rows, n int) []float32 {
	out := make([]float32, rows*2*n)
	for r := 0; r < rows; r++ {
		for c := 0; c < n; c++ {
			out[r*2*n+2*c], out[r*2*n+2*c+1] = re[r*n+c], -im[r*n+c]
		}
	}
	return out
}

// loadAFA reads an AFA checkpoint (names in afa_config.go).
func loadAFA(m *Model, ld *loader) {
	c := &m.Config
	D, H, F, V := c.DModel, c.Heads, c.DMLP, c.Vocab
	d := c.DHead / 2
	w := &afaWeights{Layers: make([]afaLayer, c.Layers)}
	m.ext = w
	// cplx reads name.{weight,bias}_{real,imag} of shape as a complex pair.
	cplx := func(name, part string, shape ...int) (re, im []float32) {
		return ld.get(name+"."+part+"_real", shape...), ld.get(name+"."+part+"_imag", shape...)
	}
	m.Embed = ld.weight32("model.embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L, P := &m.Layers[l], &w.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		a := p + "attn."
		L.Norm1W = ld.get(p+"input_layernorm.weight", D)
		L.Norm2W = ld.get(p+"post_attention_layernorm.weight", D)
		re, im := cplx(a+"v_proj", "weight", H*d, D)
		L.Wv = f32Weight(complexRows(re, im, D), D)
		if c.QKVBias {
			re, im = cplx(a+"v_proj", "bias", H*d)
			L.Bv = complexRows(re, im, 1)
		}
		for _, qk := range []struct {
			W    *Weight
			B    *[]float32
			name string
		}{{&L.Wq, &L.Bq, "q_proj"}, {&L.Wk, &L.Bk, "k_proj"}} {
			if c.AFA.QKSource == "values" {
				re, im := cplx(a+qk.name, "weight", H, d, d)
				*qk.W = f32Weight(complexBlocks(re, im, H, d), 2*d)
				if c.QKVBias {
					re, im = cplx(a+qk.name, "bias", H, d)
					*qk.B = complexRows(re, im, 1)
				}
			} else {
				re, im := cplx(a+qk.name, "weight", H*d, D)
				*qk.W = f32Weight(complexRows(re, im, D), D)
				if c.QKVBias {
					re, im = cplx(a+qk.name, "bias", H*d)
					*qk.B = complexRows(re, im, 1)
				}
			}
		}
		re, im = cplx(a+"o_proj", "weight", D, H*d)
		L.Wo = f32Weight(complexToReal(re, im, D, H*d), 2*H*d)
		if c.OBias {
			L.Bo, _ = cplx(a+"o_proj", "bias", D) // Im(b) cannot reach Re(L_P z)
		}
		P.Alpha, P.Sigma, P.Eta, P.TauS = ld.get(a+"alpha", H), ld.get(a+"sigma", H), ld.get(a+"eta", H), ld.get(a+"tau_s", H)
		P.Omega, P.Delta = ld.get(a+"omega", H, d/2), ld.get(a+"delta", H, d)
		L.WGate = ld.weight32(p+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight32(p+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight32(p+"mlp.down_proj.weight", D, F)
		L.mixer = P
	}
	m.FinalW = ld.get("model.norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// AFAHeadParams are one AFA head's parameters as the pass uses them.
type AFAHeadParams struct {
	Layer, Head int
	D           int       // complex channels d
	A           float64   // decay a = α² (Re λ = −a)
	Omega       []float64 // per channel: +ω_m on 2m, −ω_m on 2m+1 (rad per unit time)
	Sigma2      float64   // σ², process noise
	Eta2        float64   // η², measurement noise
	TauS        float64   // softmax temperature τ_s
	S           []float64 // residual weight sigmoid(δ) per channel
	Dt          float64
	Epsilon     float64
	KernelForm  string
	MinExponent float64
}

// Decay returns E(n) = exp(max(−a·n·Δt, MinExponent)).
func (p *AFAHeadParams) Decay(n float64) float64 {
	return math.Exp(max(-p.A*n*p.Dt, p.MinExponent))
}

// Kappa returns the integrated decay κ(n) of the process covariance:
// −expm1(−2anΔt)/(2a), or nΔt for a ≤ ε ("exact", §F.3); Algorithm 1's
// literal (1 − E(n)² + ε)/(2a + ε), or n for a ≤ ε ("paper").
func (p *AFAHeadParams) Kappa(n float64) float64 {
	if p.KernelForm == "paper" {
		if p.A > p.Epsilon {
			E := p.Decay(n)
			return (1 - E*E + p.Epsilon) / (2*p.A + p.Epsilon)
		}
		return n
	}
	if p.A > p.Epsilon {
		return -math.Expm1(max(-2*p.A*n*p.Dt, 2*p.MinExponent)) / (2 * p.A)
	}
	return n * p.Dt
}

// Covariance returns σ_V²(n) = σ²κ(n) + η²E(n)² (§3.6 with λ_C = 1): the
// variance of a measurement pulled forward by n tokens; 1/σ_V² is its
// prior precision.
func (p *AFAHeadParams) Covariance(n float64) float64 {
	E := p.Decay(n)
	return p.Sigma2*p.Kappa(n) + p.Eta2*E*E
}

// IsAFA reports whether the model is an AFA model.
func (m *Model) IsAFA() bool { return m.afa() != nil }

// AFAParams returns the parameters of every (layer, head), layer major.
func (m *Model) AFAParams() ([]AFAHeadParams, error) {
	if m.afa() == nil {
		return nil, fmt.Errorf("model: %s is a %s checkpoint, not AFA (config.json \"model_type\": %q)", m.Dir, m.Arch, afaModelType)
	}
	var ps []AFAHeadParams
	for l := range m.afa().Layers {
		for h := 0; h < m.Heads; h++ {
			ps = append(ps, m.afaHead(l, h))
		}
	}
	return ps, nil
}

// afaHeadTable is AFA's readout (`probe params`): per head the learned
// dynamics and noise of Algorithm 1 (paper 001 §4.1) as the pass uses
// them (AFAHeadParams): the decay a = α² of K_α[τ] = e^{−α²Δtτ}, the band
// of the frequencies |ω| of K_ω[τ] = e^{iωΔtτ}, the process and
// measurement noise σ², η² of the covariance kernel
// σ_V²(τ) = σ²κ[τ] + η²K_α²[τ], the softmax temperature τ_s of
// A = softmax_j(τ_s L) and the band of the residual weights s = sigmoid(δ)
// of Z̄ = (1 − s)Z_v + sZ̄_v over the head's channels.
func afaHeadTable(m *Model) *HeadTable {
	ps, _ := m.AFAParams()
	t := &HeadTable{Title: "AFA filter parameters", Shape: fmt.Sprintf("d = %d complex channels per head, Δt = %g", m.DHead/2, m.AFA.Dt),
		Notes: []string{"a = α² is the decay e^{−aΔtτ}; σ², η² are the process and measurement noise of σ_V²(τ) = σ²κ(τ) + η²e^{−2aΔtτ}; s = sigmoid(δ) weighs the filtered estimate against Z_v, per channel."},
		Columns: []HeadColumn{{"layer", "layer"}, {"head", "head"}, {"a", "a"}, {"omega_min", "ω min"}, {"omega_max", "ω max"},
			{"sigma2", "σ²"}, {"eta2", "η²"}, {"tau", "τ_s"}, {"s_min", "s min"}, {"s_max", "s max"}}}
	for i := range ps {
		p := &ps[i]
		olo, ohi := absRange(p.Omega)
		slo, shi := absRange(p.S)
		t.Rows = append(t.Rows, []any{p.Layer, p.Head, p.A, olo, ohi, p.Sigma2, p.Eta2, p.TauS, slo, shi})
	}
	return t
}

func (m *Model) afaHead(l, h int) AFAHeadParams {
	P, ac, d := &m.afa().Layers[l], m.AFA, m.DHead/2
	sq := func(x float32) float64 { return float64(x) * float64(x) }
	p := AFAHeadParams{Layer: l, Head: h, D: d, A: sq(P.Alpha[h]), Sigma2: sq(P.Sigma[h]), Eta2: sq(P.Eta[h]),
		TauS: float64(P.TauS[h]), Dt: ac.Dt, Epsilon: ac.Epsilon, KernelForm: ac.KernelForm, MinExponent: ac.MinExponent,
		Omega: make([]float64, d), S: make([]float64, d)}
	for i := 0; i < d/2; i++ {
		om := float64(P.Omega[h*d/2+i])
		p.Omega[2*i], p.Omega[2*i+1] = om, -om
	}
	for i := range p.S {
		p.S[i] = float64(sigmoid(P.Delta[h*d+i]))
	}
	return p
}

// afaLogits returns AFA's logits (steps 11–13) for the shared tile loop
// (attnArgs.logits) and the decay E_h(n) of each head (step 14: the values
// get Â = E ⊙ A): per pair |R|² from the cross terms Re(Z̃_qᴴZ̃_k) and
// τ_s L (float64), log Π = log Σ_j e^{τ_s L_ij} into logPrec [B·T, H], and
// τ_s L − log Π as the logits of the causal softmax. qn2, kn2 are ‖Z_q,i‖²,
// ‖Z_k,j‖² [B·T, H].
func afaLogits(ps []AFAHeadParams, T int, qn2, kn2, logPrec []float32) (logitsFunc, [][]float64) {
	H := len(ps)
	E, cov := make([][]float64, H), make([][]float64, H) // per head, per lag n: E(n), σ_V²(n)
	for h := range ps {
		E[h], cov[h] = make([]float64, T), make([]float64, T)
		for n := range T {
			E[h][n], cov[h][n] = ps[h].Decay(float64(n)), ps[h].Covariance(float64(n))
		}
	}
	return func(_ int, lg []float64, b, h, q0, rows, ncol int, s []float32) {
		p, E, cov := &ps[h], E[h], cov[h]
		for r := 0; r < rows; r++ {
			i := q0 + r
			qn := float64(qn2[(b*T+i)*H+h])
			row := s[r*ncol : (r+1)*ncol]
			for j := 0; j <= i; j++ {
				n := i - j
				e := E[n]
				r2 := max(qn+e*e*float64(kn2[(b*T+j)*H+h])-2*e*float64(row[j]), 0)
				lg[j] = -p.TauS * math.Log(cov[n]+r2+p.Epsilon)
			}
			lse := logSumExp(lg[:i+1])
			logPrec[(b*T+i)*H+h] = float32(lse)
			for j, x := range lg[:i+1] {
				row[j] = float32(x - lse) // shifted in float64: τ_s·L can be far beyond float32's integer range
			}
		}
	}, E
}

// headLinear computes, for every head h, dst_h = w_h·x_h + b_h with
// per-head square matrices w [H, k, k] and biases b [H, k] (nil: none) on
// the head slices of x, dst [n, H·k].
func headLinear(dst, x []float32, n, H, k int, w, b []float32) {
	for h := 0; h < H; h++ {
		xs := blas32.General{Rows: n, Cols: k, Stride: H * k, Data: x[h*k:]}
		ws := blas32.General{Rows: k, Cols: k, Stride: k, Data: w[h*k*k : (h+1)*k*k]}
		ds := blas32.General{Rows: n, Cols: k, Stride: H * k, Data: dst[h*k:]}
		blas32.Gemm(blas.NoTrans, blas.Trans, 1, xs, ws, 0, ds)
		if b != nil {
			for r := 0; r < n; r++ {
				addTo(dst[r*H*k+h*k:][:k], b[h*k:(h+1)*k])
			}
		}
	}
}

// scratchFloats is 0: AFA's mixer keeps its own buffers.
func (P *afaLayer) scratchFloats(B, T int) int { return 0 }

// mix is AFA's attention sub-block (steps 1–18, hook points at the top of
// this file) as the token mixer of layer l in the decoder pass: from the
// normalized input hn to Re(L_P(Z⁺)) in out.
func (P *afaLayer) mix(m *Model, out, hn, _ []float32, l, B, T int, opt Options, run hookRun) error {
	c, ac, hs, L := &m.Config, m.AFA, opt.Hooks, &m.Layers[l]
	D, H, dw := c.DModel, c.Heads, c.DHead
	d, W, n := dw/2, H*dw, B*T
	var err error
	run = func(point string, l int, x []float32, shape ...int) {
		if err == nil {
			err = hs.Run(point, l, x, shape...)
		}
	}
	q, k, v := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	qt, kt, vt := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	agg, gate := make([]float32, n*W), make([]float32, n*W)
	qn2, kn2, logPrec, norms := make([]float32, n*H), make([]float32, n*H), make([]float32, n*H), make([]float32, n*H)

	// Steps 1–3: Z_v = L_V(x); Z_q, Z_k from Z_v (or x).
	linear(v, hn, n, D, L.Wv, W, L.Bv)
	if ac.QKSource == "values" {
		headLinear(q, v, n, H, dw, L.Wq.F32, L.Bq)
		headLinear(k, v, n, H, dw, L.Wk.F32, L.Bk)
	} else {
		linear(q, hn, n, D, L.Wq, W, L.Bq)
		linear(k, hn, n, D, L.Wk, W, L.Bk)
	}
	run(hooks.AttnQ, l, q, B, T, H, dw)
	run(hooks.AttnK, l, k, B, T, H, dw)
	run(hooks.AttnV, l, v, B, T, H, dw)
	copy(qt, q)
	copy(kt, k)
	if ac.NormalizeQK {
		l2Normalize(qt, dw, norms)
		l2Normalize(kt, dw, norms)
	}
	for r := 0; r < n*H; r++ {
		qn2[r] = float32(sqNorm(qt[r*dw : (r+1)*dw]))
		kn2[r] = float32(sqNorm(kt[r*dw : (r+1)*dw]))
	}

	// Steps 9–10: rotation into the common frame (angles ω·Δt·i).
	params := make([]AFAHeadParams, H)
	omegaDt := make([]float64, H*d)
	for h := range params {
		params[h] = m.afaHead(l, h)
		for i, om := range params[h].Omega {
			omegaDt[h*d+i] = om * ac.Dt
		}
	}
	rotateComplex(qt, qt, omegaDt, T, -1)
	rotateComplex(kt, kt, omegaDt, T, -1)
	rotateComplex(vt, v, omegaDt, T, -1)
	run(hooks.AttnRotQ, l, qt, B, T, H, dw)
	run(hooks.AttnRotK, l, kt, B, T, H, dw)
	if err != nil {
		return err
	}

	// Steps 11–15, streamed in query tiles.
	args := &attnArgs{layer: l, batch: B, T: T, heads: H, kvHeads: H, dHead: dw, scale: 1, q: qt, k: kt, v: vt, z: agg,
		consumers: hs.Consumers(l), tileRows: opt.TileRows, threads: opt.Threads}
	args.logits, args.decay = afaLogits(params, T, qn2, kn2, logPrec)
	if err := attend(args, hs, run); err != nil {
		return err
	}
	run(hooks.AFALogPrecision, l, logPrec, B, T, H)
	rotateComplex(agg, agg, omegaDt, T, +1) // Z̄_v = e^{iωt} ⊙ Σ_j Â_ij Z̃_v,j
	run(hooks.AFAEstimate, l, agg, B, T, H, dw)

	// Step 16: Z̄ = (1 − s) Z_v + s Z̄_v.
	for r := 0; r < n; r++ {
		for h := range params {
			for i, s := range params[h].S {
				o := (r*H+h)*dw + 2*i
				gate[o], gate[o+1] = float32(s), float32(s)
			}
		}
	}
	run(hooks.AttnGate, l, gate, B, T, H, dw)
	// Step 17: Z⁺ = e^{(−a + iω)Δt} ⊙ Z̄, into agg.
	for r := 0; r < n; r++ {
		for h := range params {
			p := &params[h]
			dec := p.Decay(1)
			for i, om := range p.Omega {
				o := (r*H+h)*dw + 2*i
				s0, s1 := float64(gate[o]), float64(gate[o+1])
				re := (1-s0)*float64(v[o]) + s0*float64(agg[o])
				im := (1-s1)*float64(v[o+1]) + s1*float64(agg[o+1])
				sn, cs := math.Sincos(om * p.Dt)
				agg[o] = float32(dec * (re*cs - im*sn))
				agg[o+1] = float32(dec * (re*sn + im*cs))
			}
		}
	}
	run(hooks.AttnZ, l, agg, B, T, H, dw)
	if err == nil {
		err = headFault(agg, l, T, H, dw)
	}

	// Step 18: Re(L_P(Z⁺)); the decoder pass adds it to the residual.
	linear(out, agg, n, W, L.Wo, D, L.Bo)
	return err
}

// afa returns the model's AFA state, or nil for another family.
func (m *Model) afa() *afaWeights { w, _ := m.ext.(*afaWeights); return w }
