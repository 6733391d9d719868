package model

// RT-Transformer (paper 004, "RT-Transformer: The Transformer Block as a
// Spherical State Estimator"): Radial–Tangential Robust Filter Attention,
// Algorithm 1 (RT-RFA), inside Algorithm 2's block, stacked into a
// language model (layout and options: rt_config.go). Per layer, per head h
// (C complex channels stored as 2C reals (re, im), t_i = i):
//
//	1  Q, K, V = L_{q,k,v}(Z);  M_i = ‖V_i‖;  Q, K, V ← Norm(Q, K, V)         (M before normalizing)
//	2  E_ij = e^{−μ(i−j)};  Q̃, K̃, Ṽ = e^{−iωt} ⊙ (Q, K, V)                    (RoPE rotation)
//	3  Σ_ij = σ̃²(1 − E_ij²) + η²E_ij² + γ²,  Σ₀ = η² + γ²,  M̂_ij = M_j E_ij
//	   κ_ij = ( Σ₀/(M_i² + ε) + Σ_ij/(M̂_ij² + ε) + τ_θ² )⁻¹                   (Eq. 10: directional precision)
//	4  ‖R_ij‖² = ‖Q_i‖² + ‖K_j‖² − 2 Re(Q̃_i†K̃_j)
//	   L_ij = log κ_ij − ((ν + d)/d)·log(1 + κ_ij‖R_ij‖²/ν);  A = softmax_j(β_s L + M_causal)   (Eqs. 11, 14)
//	5  V̄_i = e^{+iωt_i} ⊙ Σ_j A_ij Ṽ_j                                        (consensus ū_i, Eq. 13; no decay on A)
//	6  Ū_i = V̄_i − (V_iᵀV̄_i/‖V_i‖²) V_i;  Z̄ = L_o(Ū);  Z⁺ = Z + Z̄            (tangent-space update, Eq. 15/18)
//	7  U⁺ = Norm(Z⁺)                                                          (retraction)
//	Algorithm 2: Z_out = Z⁺ + FFN(U⁺)
//	logits = lm_head(RMSNorm(Z)) after the last block
//
// Hook points (hooks.Points), with RT's meaning (d_head = 2C, (re, im)
// interleaved per channel):
//
//	hook_embed, blocks.{l}.hook_resid_pre    Z entering the block (no pre-attention norm)
//	blocks.{l}.attn.hook_q/k/v               L_{q,k,v}(Z) before normalization
//	blocks.{l}.attn.hook_rot_q/k             Q̃, K̃: normalized and rotated
//	blocks.{l}.rt.hook_magnitude             M_i [batch,pos,head] (the token's directional confidence)
//	blocks.{l}.attn.hook_pattern             A [batch,head,query,key] (rows sum to 1)
//	blocks.{l}.rt.hook_log_precision         log Σ_j κ̃_ij, κ̃ = κ·(1 + κR²/ν)^{−(ν+d)/d} = e^L  [batch,pos,head]
//	blocks.{l}.rt.hook_consensus             V̄ = ū [batch,pos,head,d_head] (‖ū‖ ≤ 1: concentration)
//	blocks.{l}.rt.hook_self_agreement        ρ_i = V_iᵀV̄_i/‖V_i‖² [batch,pos,head]
//	blocks.{l}.attn.hook_z                   Ū (after the tangent projection), what L_o reads
//	blocks.{l}.hook_attn_out                 Z̄;  blocks.{l}.hook_resid_mid  Z⁺
//	blocks.{l}.ln2.hook_normalized           U⁺ (the FFN input)
//	blocks.{l}.mlp.hook_pre/post, hook_mlp_out, hook_resid_post, ln_final.hook_normalized, logits
//
// Streaming: consumers receive A rows with the rotated unit values Ṽ_j as
// V (hooks.AttnTile.DHead = 2C): the vectors A multiplies in the common
// frame, so a consumer's Σ_j A_ij Ṽ_j has the norm of the consensus ‖ū_i‖.

import (
	"fmt"
	"math"

	"github.com/filterlens/probe/hooks"
)

// rtWeights holds the per-layer RT filter parameters (raw, as stored) and
// retraction gains.
type rtWeights struct {
	Layers []rtLayer
}

type rtLayer struct {
	Omega                                     []float32 // [H, C]
	Mu, Sigma, Eta, Gamma, TauTheta, Nu, Beta []float32 // [H] raw
	RetractW                                  []float32 // [D] (rms retraction)
}

// loadRT reads an RT checkpoint (names in rt_config.go).
func loadRT(m *Model, ld *loader) {
	c := &m.Config
	D, H, W, F, V := c.DModel, c.Heads, c.Heads*c.DHead, c.DMLP, c.Vocab
	C := c.DHead / 2
	w := &rtWeights{Layers: make([]rtLayer, c.Layers)}
	m.ext = w
	bias := func(on bool, name string, n int) []float32 {
		if !on {
			return nil
		}
		return ld.get(name, n)
	}
	m.Embed = ld.weight32("model.embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L, P := &m.Layers[l], &w.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		a := p + "attn."
		L.Wq, L.Bq = ld.weight32(a+"q_proj.weight", W, D), bias(c.QKVBias, a+"q_proj.bias", W)
		L.Wk, L.Bk = ld.weight32(a+"k_proj.weight", W, D), bias(c.QKVBias, a+"k_proj.bias", W)
		L.Wv, L.Bv = ld.weight32(a+"v_proj.weight", W, D), bias(c.QKVBias, a+"v_proj.bias", W)
		L.Wo, L.Bo = ld.weight32(a+"o_proj.weight", D, W), bias(c.OBias, a+"o_proj.bias", D)
		P.Omega = ld.get(a+"omega", H, C)
		for _, f := range []struct {
			dst  *[]float32
			name string
		}{{&P.Mu, "mu_raw"}, {&P.Sigma, "sigma_raw"}, {&P.Eta, "eta_raw"}, {&P.Gamma, "gamma_raw"},
			{&P.TauTheta, "tau_theta_raw"}, {&P.Nu, "nu_raw"}, {&P.Beta, "beta_raw"}} {
			*f.dst = ld.get(a+f.name, H)
		}
		if c.RT.Retraction == "rms" {
			P.RetractW = ld.get(p+"retract_norm.weight", D)
		}
		L.WGate = ld.weight32(p+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight32(p+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight32(p+"mlp.down_proj.weight", D, F)
	}
	m.FinalW = ld.get("model.norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// RTHeadParams are one RT head's parameters after their transformations
// (rt_config.go), with the options of the kernel.
type RTHeadParams struct {
	Layer, Head int
	C           int       // complex channels of the head
	Omega       []float64 // ω per channel (rad/token)
	Mu          float64   // μ, decay of the transported magnitude and of the kernel
	Sigma2      float64   // σ̃² (kernel "alg1") or σ² (kernel "prop1")
	Eta2        float64   // η², key/measurement tangential noise
	Gamma2      float64   // γ², query noise floor
	TauTheta2   float64   // τ_θ², angular noise floor
	Nu          float64   // ν, robustness
	Beta        float64   // β_s, inverse temperature
	RobustD     float64   // the d of the exponent: C or 2C (rt.robust_dim)
	RobustExp   float64   // (ν + d)/d
	Kernel      string
	KappaEps    float64
	MinExponent float64
}

// Decay returns E(Δt) = exp(max(−μΔt, MinExponent)).
func (p *RTHeadParams) Decay(lag float64) float64 {
	return math.Exp(max(-p.Mu*lag, p.MinExponent))
}

// KeyVariance returns Σ(Δt) of Algorithm 1 step 3 ("alg1":
// σ̃²(1 − E²) + η²E² + γ²) or of Prop. 1 ("prop1": σ²φ(μ, Δt) + η²E² + γ²,
// φ = −expm1(−2μΔt)/(2μ), or Δt at μ = 0). Σ(0) = η² + γ² in both.
func (p *RTHeadParams) KeyVariance(lag float64) float64 {
	E := p.Decay(lag)
	var proc float64
	switch {
	case p.Kernel == "prop1" && p.Mu == 0:
		proc = p.Sigma2 * lag
	case p.Kernel == "prop1":
		proc = p.Sigma2 * -math.Expm1(-2*p.Mu*lag) / (2 * p.Mu)
	default:
		proc = p.Sigma2 * (1 - E*E)
	}
	return proc + p.Eta2*E*E + p.Gamma2
}

// Kappa returns the directional precision κ (Eq. 10) of query magnitude²
// mi2 and key magnitude² mj2 at lag Δt:
// (Σ(0)/(mi2 + ε) + Σ(Δt)/(mj2·E² + ε) + τ_θ²)⁻¹.
func (p *RTHeadParams) Kappa(mi2, mj2, lag float64) float64 {
	E := p.Decay(lag)
	return 1 / (p.KeyVariance(0)/(mi2+p.KappaEps) + p.KeyVariance(lag)/(mj2*E*E+p.KappaEps) + p.TauTheta2)
}

// Logit returns L = log κ − ((ν+d)/d)·log(1 + κ·r2/ν) (Algorithm 1 step 4),
// for precision kappa and squared residual r2 = ‖R‖²; A = softmax(β_s L).
func (p *RTHeadParams) Logit(kappa, r2 float64) float64 {
	return math.Log(kappa) - p.RobustExp*math.Log1p(kappa*r2/p.Nu)
}

// IsRT reports whether the model is an RT-Transformer.
func (m *Model) IsRT() bool { return m.rt() != nil }

// RTParams returns the parameters of every (layer, head), layer major.
func (m *Model) RTParams() ([]RTHeadParams, error) {
	if m.rt() == nil {
		return nil, fmt.Errorf("model: %s is a %s checkpoint, not an RT-Transformer (config.json \"model_type\": %q)", m.Dir, m.Arch, rtModelType)
	}
	var ps []RTHeadParams
	for l := range m.rt().Layers {
		for h := 0; h < m.Heads; h++ {
			ps = append(ps, m.rtHead(l, h))
		}
	}
	return ps, nil
}

// rtHeadTable is RT's readout (`probe params`): per head the learned
// parameters of Algorithm 1 (RT-RFA, paper 004) after their softplus
// (RTHeadParams): the decay μ of E = e^{−μ|t_i−t_j|} and the band of the
// frequencies |ω| (step 2), σ̃² (σ² with rt.kernel "prop1"), η² and γ² of
// the key variance Σ_Δt and the angular noise floor τ_θ² of the precision
// P_Δt (step 3, Eq. 10), the robustness ν (step 4, Eq. 11) and the softmax
// inverse temperature β_s (step 4, Eq. 14).
func rtHeadTable(m *Model) *HeadTable {
	ps, _ := m.RTParams()
	sigma := HeadColumn{"sigma_tilde2", "σ̃²"}
	if m.RT.Kernel == "prop1" {
		sigma = HeadColumn{"sigma2", "σ²"}
	}
	t := &HeadTable{Title: "RT filter parameters", Shape: fmt.Sprintf("C = %d complex channels per head, kernel %s", m.DHead/2, m.RT.Kernel),
		Notes: []string{"Σ_Δt = σ̃²(1 − E²) + η²E² + γ² (prop1: σ²φ(μ, Δt) + η²E² + γ²); τ_θ² floors the angular variance of the precision P_Δt; ν sets the robustness, β_s the inverse temperature."},
		Columns: []HeadColumn{{"layer", "layer"}, {"head", "head"}, {"mu", "μ"}, {"omega_min", "ω min"}, {"omega_max", "ω max"},
			sigma, {"eta2", "η²"}, {"gamma2", "γ²"}, {"tau_theta2", "τ_θ²"}, {"nu", "ν"}, {"beta_s", "β_s"}}}
	for i := range ps {
		p := &ps[i]
		lo, hi := absRange(p.Omega)
		t.Rows = append(t.Rows, []any{p.Layer, p.Head, p.Mu, lo, hi, p.Sigma2, p.Eta2, p.Gamma2, p.TauTheta2, p.Nu, p.Beta})
	}
	return t
}

func (m *Model) rtHead(l, h int) RTHeadParams {
	P, rc, C := &m.rt().Layers[l], m.RT, m.DHead/2
	p := RTHeadParams{Layer: l, Head: h, C: C,
		Mu: softplus(P.Mu[h]), Sigma2: softplus(P.Sigma[h]), Eta2: softplus(P.Eta[h]), Gamma2: softplus(P.Gamma[h]),
		TauTheta2: softplus(P.TauTheta[h]), Nu: softplus(P.Nu[h]), Beta: softplus(P.Beta[h]),
		Kernel: rc.Kernel, KappaEps: rc.KappaEps, MinExponent: rc.MinExponent}
	d := float64(C)
	if rc.RobustDim == "real" {
		d = float64(2 * C)
	}
	p.RobustD, p.RobustExp = d, (p.Nu+d)/d
	p.Omega = make([]float64, C)
	for i := range p.Omega {
		p.Omega[i] = float64(P.Omega[h*C+i])
	}
	return p
}

// rotateComplex writes dst = e^{sign·iω_c·t} ⊙ src for complex tensors
// [B·T, H, C, 2] at t = row mod T, with omega [H·C] per channel; angles and
// their sines in float64. dst may be src.
func rotateComplex(dst, src []float32, omega []float64, T int, sign float64) {
	w := 2 * len(omega)
	for r := 0; r*w < len(src); r++ {
		t := float64(r % T)
		for ch, om := range omega {
			s, co := math.Sincos(sign * om * t)
			o := r*w + 2*ch
			re, im := float64(src[o]), float64(src[o+1])
			dst[o] = float32(re*co - im*s)
			dst[o+1] = float32(re*s + im*co)
		}
	}
}

// l2Normalize divides each group of width g of x in place by
// max(‖group‖, 1e-12) (torch.nn.functional.normalize) and returns the norms.
func l2Normalize(x []float32, g int, norms []float32) {
	for r := 0; r*g < len(x); r++ {
		v := x[r*g : (r+1)*g]
		nrm := math.Sqrt(sqNorm(v))
		norms[r] = float32(nrm)
		inv := 1 / max(nrm, 1e-12)
		for i := range v {
			v[i] = float32(float64(v[i]) * inv)
		}
	}
}

// rtLogits returns RT-RFA's logits (Algorithm 1 steps 3–4) for the
// shared tile loop (attnArgs.logits): from the transported cosines
// Re(Q̃_i†K̃_j) of a tile, κ and the Student-t logits L per pair (float64),
// log Σ_j e^{L_ij} into logPrec [B·T, H], and β_s(L − max L) as the
// logits of the causal softmax. qn2, kn2 are ‖Q_i‖², ‖K_j‖² and mag2 the
// magnitudes M_i², [B·T, H].
func rtLogits(ps []RTHeadParams, T int, qn2, kn2, mag2, logPrec []float32) logitsFunc {
	H := len(ps)
	E, Sig := make([][]float64, H), make([][]float64, H) // per head, per lag: E, Σ
	for h := range ps {
		E[h], Sig[h] = make([]float64, T), make([]float64, T)
		for lag := range T {
			E[h][lag], Sig[h][lag] = ps[h].Decay(float64(lag)), ps[h].KeyVariance(float64(lag))
		}
	}
	return func(_ int, lg []float64, b, h, q0, rows, ncol int, s []float32) {
		p, E, Sig := &ps[h], E[h], Sig[h]
		for r := 0; r < rows; r++ {
			i := q0 + r
			ri := (b*T+i)*H + h
			qTerm := Sig[0] / (float64(mag2[ri]) + p.KappaEps)
			row := s[r*ncol : (r+1)*ncol]
			for j := 0; j <= i; j++ {
				rj := (b*T+j)*H + h
				lag := i - j
				kappa := 1 / (qTerm + Sig[lag]/(float64(mag2[rj])*E[lag]*E[lag]+p.KappaEps) + p.TauTheta2)
				r2 := max(float64(qn2[ri])+float64(kn2[rj])-2*float64(row[j]), 0)
				lg[j] = p.Logit(kappa, r2)
			}
			logPrec[ri] = float32(logSumExp(lg[:i+1]))
			mx := math.Inf(-1)
			for _, L := range lg[:i+1] {
				mx = max(mx, L)
			}
			for j, L := range lg[:i+1] {
				row[j] = float32(p.Beta * (L - mx)) // shifted in float64 before the float32 softmax
			}
		}
	}
}

// forwardRT is Forward for ArchRT (algorithm and hook points at the top of
// this file).
func (m *Model) forwardRT(ids [][]int, opt Options) (*Output, error) {
	T, err := m.checkIDs(ids, opt)
	if err != nil {
		return nil, err
	}
	c, rc, hs := &m.Config, m.RT, opt.Hooks
	B, D, H, dw, F := len(ids), c.DModel, c.Heads, c.DHead, c.DMLP
	C, W, n := dw/2, H*dw, B*T
	run := func(point string, l int, x []float32, shape ...int) {
		if err == nil {
			err = hs.Run(point, l, x, shape...)
		}
	}
	x, u := make([]float32, n*D), make([]float32, n*D)
	q, k, v := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	qt, kt, vt := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	agg, z := make([]float32, n*W), make([]float32, n*W)
	qn2, kn2, mag2 := make([]float32, n*H), make([]float32, n*H), make([]float32, n*H)
	mag, logPrec, rho := make([]float32, n*H), make([]float32, n*H), make([]float32, n*H)
	out := make([]float32, n*D)
	var mlp []float32 // MLP hidden values (mlpBlock)
	norms := make([]float32, n*H)

	for bb, seq := range ids {
		for t, id := range seq {
			copy(x[(bb*T+t)*D:(bb*T+t+1)*D], m.Embed.F32[id*D:(id+1)*D])
		}
	}
	run(hooks.Embed, -1, x, B, T, D)

	for l := range m.Layers {
		L := &m.Layers[l]
		run(hooks.ResidPre, l, x, B, T, D)

		// 1 Projections R → C, magnitudes from V, normalization.
		linear(q, x, n, D, L.Wq, W, L.Bq)
		linear(k, x, n, D, L.Wk, W, L.Bk)
		linear(v, x, n, D, L.Wv, W, L.Bv)
		run(hooks.AttnQ, l, q, B, T, H, dw)
		run(hooks.AttnK, l, k, B, T, H, dw)
		run(hooks.AttnV, l, v, B, T, H, dw)
		copy(qt, q)
		copy(kt, k)
		copy(vt, v)
		group := dw // norm_scope "head": one norm per head slice
		if rc.NormScope == "global" {
			group = W
		}
		ng := len(qt) / group
		l2Normalize(vt, group, norms[:ng])
		for r := 0; r < n*H; r++ {
			mag[r] = norms[r*dw/group]
		}
		l2Normalize(qt, group, norms[:ng])
		l2Normalize(kt, group, norms[:ng])
		for r := 0; r < n*H; r++ {
			qn2[r] = float32(sqNorm(qt[r*dw : (r+1)*dw]))
			kn2[r] = float32(sqNorm(kt[r*dw : (r+1)*dw]))
		}
		copy(z, vt) // the unrotated unit values V (step 6 projects against them)
		run(hooks.RTMagnitude, l, mag, B, T, H)
		for i, mv := range mag {
			mag2[i] = mv * mv
		}

		// 2 Rotation into the common frame.
		params := make([]RTHeadParams, H)
		omega := make([]float64, H*C)
		for h := range params {
			params[h] = m.rtHead(l, h)
			copy(omega[h*C:], params[h].Omega)
		}
		rotateComplex(qt, qt, omega, T, -1)
		rotateComplex(kt, kt, omega, T, -1)
		rotateComplex(vt, vt, omega, T, -1)
		run(hooks.AttnRotQ, l, qt, B, T, H, dw)
		run(hooks.AttnRotK, l, kt, B, T, H, dw)
		if err != nil {
			return nil, err
		}

		// 3–5 Precision, robust logits, attention and aggregation Σ_j A_ij Ṽ_j.
		args := &attnArgs{layer: l, batch: B, T: T, heads: H, kvHeads: H, dHead: dw, scale: 1,
			q: qt, k: kt, v: vt, z: agg, logits: rtLogits(params, T, qn2, kn2, mag2, logPrec),
			consumers: hs.Consumers(l), tileRows: opt.TileRows, threads: opt.Threads}
		if err := attend(args, hs, run); err != nil {
			return nil, err
		}
		run(hooks.RTLogPrecision, l, logPrec, B, T, H)
		rotateComplex(agg, agg, omega, T, +1) // V̄ = e^{iωt} ⊙ Σ_j A_ij Ṽ_j
		run(hooks.RTConsensus, l, agg, B, T, H, dw)

		// 6 Tangent projection against the unit value V_i, L_o, residual.
		for r := 0; r < n*H; r++ {
			vh, vb := z[r*dw:(r+1)*dw], agg[r*dw:(r+1)*dw]
			var dot float64
			for i, x := range vh {
				dot += float64(x) * float64(vb[i])
			}
			rho[r] = float32(dot / max(sqNorm(vh), 1e-30))
		}
		run(hooks.RTSelfAgreement, l, rho, B, T, H)
		for r := 0; r < n*H; r++ {
			vh, vb := z[r*dw:(r+1)*dw], agg[r*dw:(r+1)*dw]
			for i := range vh {
				if rc.TangentProjection {
					vh[i] = vb[i] - rho[r]*vh[i]
				} else {
					vh[i] = vb[i]
				}
			}
		}
		run(hooks.AttnZ, l, z, B, T, H, dw)
		if err == nil {
			err = headFault(z, l, T, H, dw)
		}
		linear(out, z, n, W, L.Wo, D, L.Bo)
		run(hooks.AttnOut, l, out, B, T, D)
		addTo(x, out)
		run(hooks.ResidMid, l, x, B, T, D)

		// 7 Retraction U⁺ = Norm(Z⁺); Algorithm 2: Z_out = Z⁺ + FFN(U⁺).
		if rc.Retraction == "rms" {
			rmsNorm(u, x, D, m.rt().Layers[l].RetractW, c.NormEps)
		} else {
			copy(u, x)
			l2Normalize(u, D, norms[:n])
		}
		run(hooks.LN2Normalized, l, u, B, T, D)
		mlpBlock(out, u, &mlp, L, c.Act, B, T, D, F, ComputeF32, hs, run, l)
		run(hooks.MLPOut, l, out, B, T, D)
		addTo(x, out)
		run(hooks.ResidPost, l, x, B, T, D)
		if err != nil {
			return nil, err
		}
		if err := residualFault(x, l, T, D); err != nil {
			return nil, err
		}
	}

	rmsNorm(u, x, D, m.FinalW, c.NormEps)
	run(hooks.LNFinalNormalized, -1, u, B, T, D)
	res := m.logits(u, nil, opt.Compute, B, T, opt, run)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// rt returns the model's RT state, or nil for another family.
func (m *Model) rt() *rtWeights { w, _ := m.ext.(*rtWeights); return w }

func (*rtWeights) forward(m *Model, ids [][]int, opt Options) (*Output, error) {
	return m.forwardRT(ids, opt)
}
