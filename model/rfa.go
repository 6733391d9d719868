package model

// Robust Filter Attention (RFA): P. Racioppo, "Robust Filter Attention:
// Self-Attention as a Parallel State Estimator" ("the paper"), isotropic RFA
// (§3.2, Algorithm 1 of App. D.3; the authors' M1), spectrally coupled
// SC-RFA (§3.4; M2 — the same pass, only the fixed μ/ω buffers differ) and
// the total-precision confidence gate of App. C.4 (the authors' M2.7), run
// on checkpoints saved from the authors' PyTorch code
// (github.com/PCR-git/Robust-Filter-Attention) with their state_dict names.
//
// Network (the authors' LanguageModel(RFATransformerNetwork(...))):
//
//	x = input_proj(token_embedding[ids])
//	per block:  x = x + attn(norm1(x));  x = x + ffn(norm2(x))   (LayerNorm, ffn = Linear→ReLU→Linear)
//	logits = output_proj(final_norm(x)) · token_embeddingᵀ + lm_head.bias
//
// Attention, per head, with t_i = i, lag τ = i − j ≥ 0 plus the learned
// prediction shift Δt₊ (App. C.6) and d complex dimensions:
//
//	E(τ)   = exp(clamp(−μ(τ+Δt₊), min_exponent, max_exponent))
//	V(τ)   = σ²(1 − E²)/(2μ) + η²E² + γ² + cov_eps       (Eq. 9 with σ̃² = σ²/2μ; σ²(τ+Δt₊) when μ ≈ 0, App. B.4.2)
//	Q̃, K̃, Ṽ = e^{−iωt} ⊙ (Q, K, V)                         (Φ̃⁻, §3.2)
//	‖R_ij‖² = ‖Q_i‖² + E²‖K_j‖² − 2E·Re(Q̃_i†K̃_j)            (Eq. 10)
//	L_ij   = −log V − κ·log(1 + ‖R_ij‖²/(ν·V)),  κ = (ν+d)/d   (Eq. 11)
//	Â      = softmax_j(τ_s·L + M_causal),  A = Â ⊙ E          (Alg. 1)
//	V̄_i    = e^{+iωt_i} Σ_j A_ij Ṽ_j                          (Φ̃⁺, Alg. 1)
//	g_i    = σ(p_scale·(log p̂_tot,i + log((ν_g−2+ε)/(ν_g+ε))) − log p_prior),
//	         log p̂_tot,i = logsumexp_j(−log V − log(1 + ‖R_ij‖²/(νV)))   (App. C.4, the authors' form)
//	V̄_i    ← g_i V̄_i + (1 − g_i) V_i                           (App. C.4; gate models only)
//	z_i    = e^{+iωΔt₊} V̄_i;  out = W_O [Re z; Im z] + b_O     (App. C.6, D.1)
//
// Hook points (hooks.Points), with RFA's meaning:
//
//	hook_embed                      token_embedding(ids) (before input_proj)
//	blocks.{l}.hook_resid_pre       block input; for l = 0 the input_proj output
//	blocks.{l}.ln1.hook_normalized  norm1 output (the attention input)
//	blocks.{l}.attn.hook_q/k/v      Q, K, V [batch,pos,head,d,2] (last axis re, im)
//	blocks.{l}.attn.hook_rot_q/k    Q̃, K̃ = e^{−iωt} ⊙ Q, K (same layout)
//	blocks.{l}.attn.hook_pattern    Â [batch,head,query,key]: the unattenuated weights (rows sum to 1),
//	                                the authors' attn_mat transposed from their heads-last layout
//	blocks.{l}.attn.hook_pattern_decayed  A = Â ⊙ E (their decayed_attn_mat; rows sum to ≤ 1)
//	blocks.{l}.attn.hook_gate       g [batch,pos,head] (gate models only)
//	blocks.{l}.attn.hook_z          z = e^{iωΔt₊}V̄ [batch,pos,head,d,2], after the gate, as W_O reads it
//	blocks.{l}.hook_attn_out, hook_resid_mid, ln2.hook_normalized, mlp.hook_pre/post,
//	hook_mlp_out, hook_resid_post   as in the standard models (mlp.hook_pre is ffn.0's output)
//	ln_final.hook_normalized        final_norm output (before output_proj)
//	logits                          [batch,pos,vocab]
//
// Writing at hook_pattern changes Â, from which A is then formed; writing
// at hook_pattern_decayed changes A, the weights the values are summed
// with. Neither changes log p̂_tot or the gate, which come from the logits.
// The T×T matrices are built only for layers where one of the two pattern
// hooks is registered; otherwise rows stream in query tiles.
//
// Streaming: consumers registered with hooks.Set.Stream receive Â rows in
// hooks.AttnTile. For RFA the tile's V holds the rotated values Ṽ_j =
// e^{−iωt_j}V_j (DHead = 2d reals per key, layout [d,2]): the vectors that
// A = Â ⊙ E multiplies in the common frame (V̄_i = e^{iωt_i}Σ_j Â_ij E_ij Ṽ_j).
// A consumer that also implements RFAConsumer receives an RFATile instead,
// which adds ‖R_qk‖², log p̂_tot and the head's parameters.

import (
	"fmt"
	"math"

	"github.com/filterlens/probe/hooks"
)

// rfaWeights holds the RFA network's tensors beyond the Layer fields. The
// Layer fields of an RFA model are: Norm1W/B = norm1, Wq/Bq, Wk/Bk, Wv/Bv =
// W_q, W_k, W_v with rows reordered to the interleaved layout
// [head, d, (re, im)], Wo = W_o with columns reordered the same way, Bo,
// Norm2W/B = norm2, WUp/BUp = ffn.0, WDown/BDown = ffn.2.
type rfaWeights struct {
	InW, InB   []float32 // backbone.input_proj [D, D], [D]
	OutW, OutB []float32 // backbone.output_proj [D, D], [D]
	HeadB      []float32 // lm_head.bias [V]
	Layers     []rfaLayer
}

// rfaLayer holds one block's raw filter parameters as stored, one value per
// head (Omega: [head, d/2]). Nil marks a parameter the checkpoint lacks.
type rfaLayer struct {
	Mu, Omega, Sigma, SigmaTilde, Eta, Gamma, Nu, Tau []float32
	TShift, PScaleLog, PPriorLog                      []float32
}

// loadRFA reads the authors' state_dict: token_embedding,
// backbone.input_proj, backbone.blocks.{l}.{norm1, attn, norm2, ffn.0,
// ffn.2}, backbone.final_norm, backbone.output_proj, lm_head. The attention
// module's buffers mu_v, omega_v and t_measure are read (μ and ω are fixed
// buffers in the authors' runs); its persistent [4096,4096] abs_idx and
// causal_mask buffers are accepted and never read (the pass recomputes
// lags and the causal mask).
func loadRFA(m *Model, ld *loader) {
	c := &m.Config
	D, H, d, F, V := c.DModel, c.Heads, c.DHead, c.DMLP, c.Vocab
	W := 2 * H * d
	w := &rfaWeights{Layers: make([]rfaLayer, c.Layers)}
	m.ext = w
	opt := func(name string, shape ...int) []float32 {
		if ld.has(name) {
			return ld.get(name, shape...)
		}
		return nil
	}
	ld.ignore(".attn.abs_idx", ".attn.causal_mask")
	m.Embed = ld.weight32("token_embedding.weight", V, D)
	w.InW, w.InB = ld.get("backbone.input_proj.weight", D, D), ld.get("backbone.input_proj.bias", D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L, P := &m.Layers[l], &w.Layers[l]
		b := fmt.Sprintf("backbone.blocks.%d.", l)
		a := b + "attn."
		L.Norm1W, L.Norm1B = ld.get(b+"norm1.weight", D), ld.get(b+"norm1.bias", D)
		L.Wq, L.Bq = f32Weight(interleaveRows(ld.get(a+"W_q.weight", W, D), D), D), interleaveRows(ld.get(a+"W_q.bias", W), 1)
		L.Wk, L.Bk = f32Weight(interleaveRows(ld.get(a+"W_k.weight", W, D), D), D), interleaveRows(ld.get(a+"W_k.bias", W), 1)
		L.Wv, L.Bv = f32Weight(interleaveRows(ld.get(a+"W_v.weight", W, D), D), D), interleaveRows(ld.get(a+"W_v.bias", W), 1)
		L.Wo, L.Bo = f32Weight(interleaveCols(ld.get(a+"W_o.weight", D, W), D, W), W), ld.get(a+"W_o.bias", D)
		L.Norm2W, L.Norm2B = ld.get(b+"norm2.weight", D), ld.get(b+"norm2.bias", D)
		L.WUp, L.BUp = ld.weight32(b+"ffn.0.weight", F, D), ld.get(b+"ffn.0.bias", F)
		L.WDown, L.BDown = ld.weight32(b+"ffn.2.weight", D, F), ld.get(b+"ffn.2.bias", D)

		P.Mu, P.Omega = ld.get(a+"mu_v", H), ld.get(a+"omega_v", H, d/2)
		P.Sigma, P.Eta, P.Gamma = ld.get(a+"sigma_v", H), ld.get(a+"eta_v", H), ld.get(a+"gamma_v", H)
		P.Nu, P.Tau = ld.get(a+"nu_param", H), ld.get(a+"tau_param", H)
		P.SigmaTilde = opt(a+"sigma_tilde_v", H)
		if c.RFA.LearnTShift {
			P.TShift = ld.get(a+"t_shift_param", 1, H)
		} else if ld.has(a + "t_shift_param") {
			ld.used[a+"t_shift_param"] = true // present but unused without learn_t_shift
		}
		if c.RFA.Gate {
			P.PScaleLog, P.PPriorLog = ld.get(a+"P_scale_log", 1, 1, H, 1, 1), ld.get(a+"P_prior_log", 1, 1, H, 1, 1)
		} else {
			P.PScaleLog, P.PPriorLog = opt(a+"P_scale_log", 1, 1, H, 1, 1), opt(a+"P_prior_log", 1, 1, H, 1, 1)
		}
		if n := readTMeasure(ld, a+"t_measure"); n > 0 {
			c.MaxPos = min(c.MaxPos, n)
		}
	}
	m.FinalW, m.FinalB = ld.get("backbone.final_norm.weight", D), ld.get("backbone.final_norm.bias", D)
	w.OutW, w.OutB = ld.get("backbone.output_proj.weight", D, D), ld.get("backbone.output_proj.bias", D)
	// The head is tied to the embedding (paper App. E.1); the authors'
	// state_dict stores both names. A stored lm_head.weight that differs
	// from the embedding is used as stored.
	m.Head, c.TiedHead = m.Embed, true
	if ld.has("lm_head.weight") {
		if hw := ld.get("lm_head.weight", V, D); !equalF32(hw, m.Embed.F32) {
			m.Head, c.TiedHead = f32Weight(hw, D), false
		} else {
			ld.params -= int64(len(hw)) // tied: counted once
			ld.bytes -= 4 * int64(len(hw))
		}
	}
	w.HeadB = ld.get("lm_head.bias", V)
}

// readTMeasure checks the t_measure buffer (int64 arange(max_len)): the
// pass uses t_i = i. It returns the buffer's length, or 0 when it is absent
// or unusable (the problem is reported by the loader).
func readTMeasure(ld *loader, name string) int {
	info, ok := ld.ck.Info(name)
	if !ok {
		return 0
	}
	ld.used[name] = true
	if len(info.Shape) != 1 {
		ld.errs = append(ld.errs, fmt.Sprintf("tensor %q: expected a 1-D arange buffer, found shape %v", name, info.Shape))
		return 0
	}
	t, err := ld.ck.Int64(name)
	if err != nil {
		ld.errs = append(ld.errs, err.Error())
		return 0
	}
	for i, v := range t {
		if v != int64(i) {
			ld.errs = append(ld.errs, fmt.Sprintf("tensor %q: t_measure[%d] = %d, want %d: only equally spaced times t_i = i are supported", name, i, v, i))
			return 0
		}
	}
	return len(t)
}

// interleaveRows reorders the 2·H·d rows of an R→C projection from the
// authors' [re block | im block] (row c·H·d + h·d + k) to the interleaved
// [h, k, c] layout (row (h·d + k)·2 + c) used by every RFA buffer. Each row
// has width cols.
func interleaveRows(w []float32, cols int) []float32 {
	n := len(w) / cols / 2 // H·d
	out := make([]float32, len(w))
	for c := 0; c < 2; c++ {
		for i := 0; i < n; i++ {
			copy(out[(2*i+c)*cols:(2*i+c+1)*cols], w[(c*n+i)*cols:(c*n+i+1)*cols])
		}
	}
	return out
}

// interleaveCols reorders the input columns of W_o [rows, 2·H·d] the same
// way, so that W_o reads z in the interleaved layout.
func interleaveCols(w []float32, rows, cols int) []float32 {
	n := cols / 2
	out := make([]float32, len(w))
	for r := 0; r < rows; r++ {
		src, dst := w[r*cols:(r+1)*cols], out[r*cols:(r+1)*cols]
		for i := 0; i < n; i++ {
			dst[2*i], dst[2*i+1] = src[i], src[n+i]
		}
	}
	return out
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// RFAHeadParams are one head's filter parameters after the authors'
// transformations: the values their code reports in its metadata
// (_get_output_metadata: mu_v, sigma_sq_v, sigma_tilde_sq_v, eta_sq_v,
// gamma_sq_v, tau, nu_over_d) plus what the pass uses beside them.
type RFAHeadParams struct {
	Layer, Head int
	D           int // complex dimensions per head (the d of κ = (ν+d)/d)

	Mu          float64   // μ, the decay the pass uses: mu_v · DecayScale (metadata mu_v)
	Omega       []float64 // the d/2 distinct frequencies ω′ (omega_v · omega_rescale); channel 2m rotates at +ω′_m, 2m+1 at −ω′_m
	Sigma2      float64   // σ² = softplus(sigma_v), no ε (metadata sigma_sq_v)
	SigmaTilde2 float64   // softplus(sigma_tilde_v) (metadata sigma_tilde_sq_v); NOT σ²/(2μ) and unused by this kernel; NaN if absent
	Eta2        float64   // η² = softplus(eta_v) + ε (metadata eta_sq_v)
	Gamma2      float64   // γ² = softplus(gamma_v) + ε (metadata gamma_sq_v)
	Nu          float64   // ν = d·softplus(nu_param) + 2 + ε (metadata nu_over_d = ν/d)
	Tau         float64   // τ_s = softplus(tau_param) + ε (metadata tau)
	TShift      float64   // Δt₊ = softplus(t_shift_param) (0 without learn_t_shift)

	Gate      bool    // the C.4 gate is applied by the pass
	PScaleLog float64 // P_scale_log: p_scale = exp(P_scale_log); NaN if absent
	PPriorLog float64 // P_prior_log = log p_prior; NaN if absent
	NuGate    float64 // ν_g = d·(softplus(nu_param) + 2 + ε), the gate's ν (differs from Nu in the authors' code)

	// Constants of the kernel (from RFAConfig).
	Epsilon, CovEps, BrownianBelow, MinExponent, MaxExponent float64
}

// NuOverD returns ν/d (the authors' nu_over_d).
func (p *RFAHeadParams) NuOverD() float64 { return p.Nu / float64(p.D) }

// Kappa returns κ = (ν + d)/d (paper Eq. 11).
func (p *RFAHeadParams) Kappa() float64 { return (p.Nu + float64(p.D)) / float64(p.D) }

// Kernel returns the covariance V and the decay E the pass uses at a lag of
// lag tokens (≥ 0): with s = lag + Δt₊ and e = clamp(−μs, MinExponent,
// MaxExponent), E = e^e and V = σ²(1 − E²)/(2μ) + η²E² + γ² + CovEps
// (paper Eq. 9 with σ̃² = σ²/(2μ), λ_C = 1), or σ²s + η²E² + γ² + CovEps for
// |μ| < BrownianBelow (the μ → 0 limit, App. B.4.2).
func (p *RFAHeadParams) Kernel(lag float64) (V, E float64) {
	s := lag + p.TShift
	e := min(max(-p.Mu*s, p.MinExponent), p.MaxExponent)
	E = math.Exp(e)
	var proc float64
	if math.Abs(p.Mu) < p.BrownianBelow {
		proc = p.Sigma2 * s
	} else {
		proc = p.Sigma2 * -math.Expm1(2*e) / (2 * p.Mu)
	}
	return proc + p.Eta2*E*E + p.Gamma2 + p.CovEps, E
}

// GateFrom returns the pass's confidence gate for total precision
// log p̂_tot: σ(p_scale·(log p̂_tot + log(ν_g−2+ε) − log(ν_g+ε)) − log p_prior)
// (App. C.4 as the authors' code computes it).
func (p *RFAHeadParams) GateFrom(logPTot float64) float64 {
	x := math.Exp(p.PScaleLog)*(logPTot+math.Log(p.NuGate-2+p.Epsilon)-math.Log(p.NuGate+p.Epsilon)) - p.PPriorLog
	return 1 / (1 + math.Exp(-x))
}

// brownian reports whether the head uses the μ → 0 kernel.
func (p *RFAHeadParams) brownian() bool { return math.Abs(p.Mu) < p.BrownianBelow }

// Regimes of an RFA head (App. B.4.1).
const (
	RegimeIntegrative = "integrative" // α > 0: precision rises with lag (opening gate)
	RegimeDiffusive   = "diffusive"   // α < 0: precision falls with lag (closing gate)
	RegimeBoundary    = "boundary"    // α = 0: flat precision
	// RegimeBrownian is a μ = 0 head: σ̃² is undefined, V grows linearly
	// with lag and the precision only falls (a closing gate without a
	// floor); Figs. 8 and 10 omit these heads.
	RegimeBrownian = "brownian"
)

// RFARegimeInfo is a head's place in the integrative/diffusive picture.
type RFARegimeInfo struct {
	SteadyState float64 // σ̃² = σ²/(2μ) (λ_C = 1), NaN for a μ = 0 head
	Alpha       float64 // α = η² − σ̃², NaN for a μ = 0 head
	Beta        float64 // β = γ² + σ̃² (V(∞) = β + CovEps), NaN for a μ = 0 head
	Regime      string  // RegimeIntegrative, RegimeDiffusive, RegimeBoundary or RegimeBrownian
}

// Regime returns σ̃² = σ²/(2μ), α = η² − σ̃², β = γ² + σ̃² (RFA paper
// Eq. 9, App. B.4.1) and the regime. σ̃² is the steady-state variance the
// forward pass uses, not the authors' separate sigma_tilde_sq_v report
// (SigmaTilde2), which their default kernel ignores.
func (p *RFAHeadParams) Regime() RFARegimeInfo {
	if p.brownian() {
		nan := math.NaN()
		return RFARegimeInfo{SteadyState: nan, Alpha: nan, Beta: nan, Regime: RegimeBrownian}
	}
	ss := p.Sigma2 / (2 * p.Mu)
	r := RFARegimeInfo{SteadyState: ss, Alpha: p.Eta2 - ss, Beta: p.Gamma2 + ss}
	switch {
	case r.Alpha > 0:
		r.Regime = RegimeIntegrative
	case r.Alpha < 0:
		r.Regime = RegimeDiffusive
	default:
		r.Regime = RegimeBoundary
	}
	return r
}

// ALiBiSlope returns the ALiBi-equivalent slope of a μ = 0 head (RFA
// paper §3.3, App. B.4.2): for unit-norm q and k near orthogonality the
// logit's lag-dependent part is B(τ) = −log V(τ) − (2κ/ν)/V(τ), and with
// V(τ) = σ²τ + V₀ its slope at τ = 0 is −m with
// m = σ²/V₀ − (2κ/ν)·σ²/V₀².
//
// paper uses V₀ = η² + γ² (the paper's kernel) and no temperature. logit is
// the slope the softmax actually sees: τ_s·m with the pass's V₀ = V(0) =
// σ²Δt₊ + η² + γ² + CovEps. Both are NaN for a head with μ ≠ 0.
func (p *RFAHeadParams) ALiBiSlope() (paper, logit float64) {
	if !p.brownian() {
		return math.NaN(), math.NaN()
	}
	c := 2 * p.Kappa() / p.Nu
	slope := func(v0 float64) float64 { return p.Sigma2/v0 - c*p.Sigma2/(v0*v0) }
	v0, _ := p.Kernel(0)
	return slope(p.Eta2 + p.Gamma2), p.Tau * slope(v0)
}

// softplus is torch.nn.functional.softplus (β = 1, threshold 20).
func softplus(x float32) float64 {
	v := float64(x)
	if v > 20 {
		return v
	}
	return math.Log1p(math.Exp(v))
}

// IsRFA reports whether the model runs Robust Filter Attention.
func (m *Model) IsRFA() bool { return m.rfa() != nil }

// RFAParams returns the filter parameters of every (layer, head), layer
// major. It fails for a model that is not RFA.
func (m *Model) RFAParams() ([]RFAHeadParams, error) {
	if m.rfa() == nil {
		return nil, fmt.Errorf("model: %s is a %s checkpoint, not Robust Filter Attention (config.json \"architecture\": %q)", m.Dir, m.Arch, rfaArchitecture)
	}
	var ps []RFAHeadParams
	for l := range m.rfa().Layers {
		for h := 0; h < m.Heads; h++ {
			ps = append(ps, m.rfaHead(l, h))
		}
	}
	return ps, nil
}

// rfaHeadTable is RFA's readout (`probe params`): per head the parameters
// of RFAHeadParams — μ, the band of |ω|, σ², η² and γ² of the kernel V
// (paper Eq. 9), τ_s, ν/d and κ (Eq. 11), Δt₊ (App. C.6) — the regime's
// σ̃² = σ²/2μ, α and β (App. B.4.1, Regime), the ALiBi slopes of a μ = 0
// head (App. B.4.2, ALiBiSlope) and the App. C.4 gate's p_scale and
// log p_prior, which the text shows only where the gate is applied.
func rfaHeadTable(m *Model) *HeadTable {
	ps, _ := m.RFAParams()
	shape := fmt.Sprintf("d = %d complex dims per head", m.DHead)
	if m.RFA.Ablation != "" {
		shape += ", " + m.RFA.Ablation
	}
	t := &HeadTable{Title: "RFA filter parameters", Shape: shape,
		Notes: []string{"σ̃² = σ²/2μ is the steady-state variance the pass uses; α = η² − σ̃², β = γ² + σ̃²; sigma_tilde2 is the authors' separate, unused sigma_tilde_sq_v."},
		Columns: []HeadColumn{{"layer", "layer"}, {"head", "head"}, {"mu", "μ"}, {"omega_min", "ω min"}, {"omega_max", "ω max"},
			{"sigma2", "σ²"}, {"sigma_tilde2", ""}, {"sigma2_over_2mu", "σ²/2μ"}, {"", "sigma_tilde2"}, {"eta2", "η²"}, {"gamma2", "γ²"},
			{"tau", "τ_s"}, {"nu_over_d", "ν/d"}, {"nu", ""}, {"kappa", ""}, {"t_shift", "Δt₊"}, {"alpha", "α"}, {"beta", "β"},
			{"regime", "regime"}, {"alibi_slope", "ALiBi slope"}, {"alibi_slope_logit", ""},
			{"gate", ""}, {"p_scale", ""}, {"log_p_prior", ""}, {"", "gate p_scale"}, {"", "log p_prior"}}}
	for i := range ps {
		p := &ps[i]
		r := p.Regime()
		paper, logit := p.ALiBiSlope()
		lo, hi := absRange(p.Omega)
		pScale := math.Exp(p.PScaleLog)
		gateScale, gatePrior := math.NaN(), math.NaN()
		if p.Gate {
			gateScale, gatePrior = pScale, p.PPriorLog
		}
		t.Rows = append(t.Rows, []any{p.Layer, p.Head, p.Mu, lo, hi, p.Sigma2, p.SigmaTilde2, r.SteadyState, p.SigmaTilde2,
			p.Eta2, p.Gamma2, p.Tau, p.NuOverD(), p.Nu, p.Kappa(), p.TShift, r.Alpha, r.Beta, r.Regime, paper, logit,
			p.Gate, pScale, p.PPriorLog, gateScale, gatePrior})
	}
	return t
}

func (m *Model) rfaHead(l, h int) RFAHeadParams {
	rc, P, d := m.RFA, &m.rfa().Layers[l], m.DHead
	eps, df := rc.Epsilon, float64(d)
	nan := math.NaN()
	p := RFAHeadParams{Layer: l, Head: h, D: d,
		Mu:     float64(P.Mu[h]) * rc.DecayScale,
		Sigma2: softplus(P.Sigma[h]), SigmaTilde2: nan,
		Eta2: softplus(P.Eta[h]) + eps, Gamma2: softplus(P.Gamma[h]) + eps,
		Nu: df*softplus(P.Nu[h]) + 2 + eps, Tau: softplus(P.Tau[h]) + eps,
		Gate: rc.Gate, PScaleLog: nan, PPriorLog: nan, NuGate: df * (softplus(P.Nu[h]) + 2 + eps),
		Epsilon: eps, CovEps: rc.CovEps, BrownianBelow: rc.BrownianBelow,
		MinExponent: rc.MinExponent, MaxExponent: rc.MaxExponent,
	}
	p.Omega = make([]float64, d/2)
	for i := range p.Omega {
		p.Omega[i] = float64(P.Omega[h*d/2+i]) * rc.OmegaRescale
	}
	if P.SigmaTilde != nil {
		p.SigmaTilde2 = softplus(P.SigmaTilde[h])
	}
	if P.TShift != nil {
		p.TShift = softplus(P.TShift[h])
	}
	if P.PScaleLog != nil {
		p.PScaleLog, p.PPriorLog = float64(P.PScaleLog[h]), float64(P.PPriorLog[h])
	}
	return p
}

// RFATile is what an RFAConsumer receives: the streamed tile plus the
// filter's own per-row quantities. Tile.Alpha holds rows of the
// unattenuated Â (rows sum to 1) and Tile.V the rotated values
// Ṽ_j = e^{−iωt_j}V_j, 2·d reals per key in the layout [d, (re, im)]
// (Tile.DHead = 2d): the vectors the decayed weights A = Â ⊙ E multiply in
// the common frame, V̄_t = e^{iωt}Σ_j Â_tj E(t−j) Ṽ_j, with E from
// Params.Kernel. It is valid only during the call.
type RFATile struct {
	Tile *hooks.AttnTile
	// R2 holds ‖R_qk[t, j]‖² (Eq. 10, as the pass used it) in the layout of
	// Tile.Alpha: row r at R2[r*Tile.Stride:], keys j ≤ t = Tile.Q0 + r.
	R2 []float32
	// LogPTot[r] is log p̂_tot of query t = Tile.Q0 + r as the pass
	// computed it for the gate (the authors' form, see the package doc).
	LogPTot []float32
	// Params are the head's parameters.
	Params *RFAHeadParams
}

// RFAConsumer is an attention consumer that wants RFA's extra per-row
// quantities. An RFA model calls ConsumeRFA instead of ConsumeAttn on
// consumers that implement it; other models never call it.
type RFAConsumer interface {
	hooks.AttnConsumer
	ConsumeRFA(tile *RFATile) error
}

// rfaHeadKernel is one head's parameters with its lag kernels tabulated for
// lags 0..T−1 (Toeplitz: entry τ serves every (i, j) with i − j = τ).
type rfaHeadKernel struct {
	p             RFAHeadParams
	kappa         float64
	E, logV, invV []float64 // E(τ), log V(τ), 1/(ν·V(τ))
	omega         []float64 // per complex channel: +ω′_m at 2m, −ω′_m at 2m+1
}

func (m *Model) rfaKernels(l, T int) []rfaHeadKernel {
	ks := make([]rfaHeadKernel, m.Heads)
	for h := range ks {
		k := &ks[h]
		k.p = m.rfaHead(l, h)
		k.kappa = k.p.Kappa()
		k.E, k.logV, k.invV = make([]float64, T), make([]float64, T), make([]float64, T)
		for lag := 0; lag < T; lag++ {
			V, E := k.p.Kernel(float64(lag))
			k.E[lag], k.logV[lag], k.invV[lag] = E, math.Log(V), 1/(k.p.Nu*V)
		}
		k.omega = make([]float64, m.DHead)
		for i, w := range k.p.Omega {
			k.omega[2*i], k.omega[2*i+1] = w, -w
		}
	}
	return ks
}

// rotate writes dst = e^{sign·iω·t} ⊙ src for complex tensors
// [B·T, H, d, 2] at positions t = row mod T (sign −1: Φ̃⁻, +1: Φ̃⁺). With
// shift the angle is ω·Δt₊ of the head for every row instead (the App. C.6
// forward prediction). Angles ω·t and their sines are computed in float64
// (the authors' float32 angles differ by ≤ 2⁻²⁴·ω·t).
func rotate(dst, src []float32, ks []rfaHeadKernel, T int, sign float64, shift bool) {
	H, d := len(ks), len(ks[0].omega)
	rowW := H * d * 2
	for r := 0; r*rowW < len(src); r++ {
		t := float64(r % T)
		for h := range ks {
			if shift {
				t = ks[h].p.TShift
			}
			base := r*rowW + h*d*2
			for c, w := range ks[h].omega {
				s, co := math.Sincos(sign * w * t)
				re, im := float64(src[base+2*c]), float64(src[base+2*c+1])
				dst[base+2*c] = float32(re*co - im*s)
				dst[base+2*c+1] = float32(re*s + im*co)
			}
		}
	}
}

// forwardRFA is Forward for ArchRFA (the equations and hook points are in
// the comment at the top of this file).
func (m *Model) forwardRFA(ids [][]int, opt Options) (*Output, error) {
	T, err := m.checkIDs(ids, opt)
	if err != nil {
		return nil, err
	}
	c, w, hs := &m.Config, m.rfa(), opt.Hooks
	B, D, H, d, F := len(ids), c.DModel, c.Heads, c.DHead, c.DMLP
	n, W := B*T, 2*H*c.DHead // W: reals per position of a complex [head, d] tensor
	run := func(point string, l int, x []float32, shape ...int) {
		if err == nil {
			err = hs.Run(point, l, x, shape...)
		}
	}
	x := make([]float32, n*D) // residual stream [B·T, D]
	h := make([]float32, n*D) // normalized input of a sub-block
	q, k, v := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	qt, kt, vt := make([]float32, n*W), make([]float32, n*W), make([]float32, n*W)
	agg, z := make([]float32, n*W), make([]float32, n*W)
	logPTot, gate := make([]float32, n*H), make([]float32, n*H)
	out := make([]float32, n*D)
	var mlp []float32 // MLP hidden values (mlpBlock)

	// Token embedding, then the input projection.
	for b, seq := range ids {
		for t, id := range seq {
			copy(h[(b*T+t)*D:(b*T+t+1)*D], m.Embed.F32[id*D:(id+1)*D])
		}
	}
	run(hooks.Embed, -1, h, B, T, D)
	linear(x, h, n, D, f32Weight(w.InW, D), D, w.InB)

	for l := range m.Layers {
		L := &m.Layers[l]
		run(hooks.ResidPre, l, x, B, T, D)
		LayerNorm(h, x, D, L.Norm1W, L.Norm1B, c.NormEps)
		run(hooks.LN1Normalized, l, h, B, T, D)

		// Input projections R → C (App. D.1): Q, K, V [B·T, H, d, (re, im)].
		linear(q, h, n, D, L.Wq, W, L.Bq)
		linear(k, h, n, D, L.Wk, W, L.Bk)
		linear(v, h, n, D, L.Wv, W, L.Bv)
		run(hooks.AttnQ, l, q, B, T, H, d, 2)
		run(hooks.AttnK, l, k, B, T, H, d, 2)
		run(hooks.AttnV, l, v, B, T, H, d, 2)

		// Rotations into the common frame: Q̃, K̃, Ṽ = Φ̃⁻ ⊙ (Q, K, V).
		ks := m.rfaKernels(l, T)
		rotate(qt, q, ks, T, -1, false)
		rotate(kt, k, ks, T, -1, false)
		rotate(vt, v, ks, T, -1, false)
		run(hooks.AttnRotQ, l, qt, B, T, H, d, 2)
		run(hooks.AttnRotK, l, kt, B, T, H, d, 2)
		if err != nil {
			return nil, err
		}

		// ‖R‖², logits, Â = softmax(τ_s L), log p̂_tot and Σ_j A_ij Ṽ_j,
		// streamed in query tiles.
		if err := m.rfaAttention(l, B, T, ks, qt, kt, vt, agg, logPTot, hs, opt, run); err != nil {
			return nil, err
		}

		// Counter-rotation back to the query frame: V̄ = Φ̃⁺ ⊙ Σ_j A_ij Ṽ_j.
		rotate(z, agg, ks, T, +1, false)

		// Confidence gate (App. C.4): V̄ ← g V̄ + (1 − g) V.
		if c.RFA.Gate {
			for r := 0; r < n; r++ {
				for hh := range ks {
					gate[r*H+hh] = float32(ks[hh].p.GateFrom(float64(logPTot[r*H+hh])))
				}
			}
			run(hooks.AttnGate, l, gate, B, T, H)
			for r := 0; r < n; r++ {
				for hh := 0; hh < H; hh++ {
					g := gate[r*H+hh]
					o := r*W + hh*2*d
					for i := o; i < o+2*d; i++ {
						z[i] = g*z[i] + (1-g)*v[i]
					}
				}
			}
		}

		// Prediction at the learned horizon (App. C.6): z = e^{iωΔt₊} V̄.
		if c.RFA.LearnTShift {
			rotate(z, z, ks, T, +1, true)
		}
		run(hooks.AttnZ, l, z, B, T, H, d, 2)
		if err == nil {
			err = headFault(z, l, T, H, 2*d)
		}

		// Output projection C → R, outer residual.
		linear(out, z, n, W, L.Wo, D, L.Bo)
		run(hooks.AttnOut, l, out, B, T, D)
		addTo(x, out)
		run(hooks.ResidMid, l, x, B, T, D)

		// Feed-forward: ffn.2(ReLU(ffn.0(norm2(x)))), residual.
		LayerNorm(h, x, D, L.Norm2W, L.Norm2B, c.NormEps)
		run(hooks.LN2Normalized, l, h, B, T, D)
		mlpBlock(out, h, &mlp, L, c.Act, B, T, D, F, ComputeF32, hs, run, l) // Act "relu"
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

	// Final norm, output projection, tied head with bias.
	LayerNorm(h, x, D, m.FinalW, m.FinalB, c.NormEps)
	run(hooks.LNFinalNormalized, -1, h, B, T, D)
	if opt.Logits || opt.LogitRows != nil || hs.Has(hooks.Logits) {
		linear(out, h, n, D, f32Weight(w.OutW, D), D, w.OutB)
	}
	res := m.logits(out, w.HeadB, ComputeF32, B, T, opt, run)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// rfaAttention is RFA's attention in the shared tile loop (attend): per
// tile of query rows t of head h, the squared residuals ‖R_tj‖² (Eq. 10)
// from the cross terms Re(Q̃_t†K̃_j), the Student-t logits τ_s·L (Eq. 11)
// and log p̂_tot,t into logPTot [B·T, H]; Â = softmax_j goes to the
// consumers (an RFAConsumer gets an RFATile), A = Â ⊙ E multiplies Ṽ into
// agg. Lags index the Toeplitz kernels: E[t−j], V[t−j].
func (m *Model) rfaAttention(l, B, T int, ks []rfaHeadKernel, qt, kt, vt, agg, logPTot []float32,
	hs *hooks.Set, opt Options, run hookRun) error {
	H, rw := m.Heads, 2*m.DHead
	qn, kn := make([]float64, B*T*H), make([]float64, B*T*H) // ‖Q̃_t‖², ‖K̃_j‖²
	for r := range qn {
		qn[r], kn[r] = sqNorm(qt[r*rw:(r+1)*rw]), sqNorm(kt[r*rw:(r+1)*rw])
	}
	decay := make([][]float64, H)
	for h := range ks {
		decay[h] = ks[h].E
	}
	args := &attnArgs{layer: l, batch: B, T: T, heads: H, kvHeads: H, dHead: rw, scale: 1,
		q: qt, k: kt, v: vt, z: agg, decay: decay, tileRows: opt.TileRows, threads: opt.Threads}
	// One worker's tile holds one head (only query heads sharing a KV head
	// are stacked): its ‖R‖² and log p̂_tot rows, for the RFAConsumers.
	var own []RFAConsumer
	for _, c := range hs.Consumers(l) {
		if rc, ok := c.(RFAConsumer); ok {
			own = append(own, rc)
		} else {
			args.consumers = append(args.consumers, c)
		}
	}
	r2s, lps := make([][]float32, threadCount(opt.Threads)), make([][]float32, threadCount(opt.Threads))
	if len(own) > 0 {
		args.stream = func(w int, at *hooks.AttnTile) error {
			rt := RFATile{Tile: at, R2: r2s[w], LogPTot: lps[w], Params: &ks[at.Head].p}
			for _, c := range own {
				if err := c.ConsumeRFA(&rt); err != nil {
					return err
				}
			}
			return nil
		}
	}
	clampR2 := m.RFA.ClampResidual
	args.logits = func(w int, en []float64, b, h, q0, rows, ncol int, s []float32) {
		K := &ks[h]
		tau, kappa := K.p.Tau, K.kappa
		if len(own) > 0 {
			r2s[w], lps[w] = grow(r2s[w], rows*ncol), grow(lps[w], rows)
		}
		r2t, lpt := r2s[w], lps[w] // nil without RFAConsumers
		for r := 0; r < rows; r++ {
			t := q0 + r
			ri := (b*T+t)*H + h
			row := s[r*ncol : (r+1)*ncol]
			for j := 0; j <= t; j++ {
				lag := t - j
				e := K.E[lag]
				r2 := qn[ri] + e*e*kn[(b*T+j)*H+h] - 2*e*float64(row[j])
				if clampR2 && r2 < 0 {
					r2 = 0
				}
				if r2t != nil {
					r2t[r*ncol+j] = float32(r2)
				}
				u := math.Log1p(K.invV[lag] * r2)
				en[j] = -K.logV[lag] - u
				row[j] = float32(tau * (-K.logV[lag] - kappa*u))
			}
			lp := logSumExp(en[:t+1])
			logPTot[ri] = float32(lp)
			if lpt != nil {
				lpt[r] = float32(lp)
			}
		}
	}
	return attend(args, hs, run)
}

// rfa returns the model's RFA state, or nil for another family.
func (m *Model) rfa() *rfaWeights { w, _ := m.ext.(*rfaWeights); return w }

func (*rfaWeights) forward(m *Model, ids [][]int, opt Options) (*Output, error) {
	return m.forwardRFA(ids, opt)
}
