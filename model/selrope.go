package model

// Selective RoPE (paper 002, "Selective Rotary Position Embedding", Movahedi,
// Carstensen, Afzal, Hutter, Orvieto, Cevher; ICLR 2026) in a causal softmax
// attention layer, exactly as the authors' release computes it
// (github.com/timurcarstensen/selective-rope @ d12e825:
// src/selective_rope/modules/rotary.py SelectiveRoPE inside
// src/selective_rope/layers/attn.py Attention).
//
// The paper writes Selective RoPE as linear attention whose transition is an
// input-dependent rotation (eq. 12),
//
//	S_t = S_{t−1} R_t + v_t k_tᵀ,   o_t = S_t q_t,
//
// and unrolls it (eq. 13) to o_t = Σ_τ v_τ k_τᵀ R_{1:τ}ᵀ R_{1:t} q_t: the
// rotation is applied to q and k with cumulative angles, reusing RoPE
// (Fig. 4). In a softmax layer the same rotated q′, k′ enter softmax(q′k′ᵀ/√d).
// Per layer, with R = d/2 rotation pairs per head, the release computes for
// every position t, head h and pair n (steps of SelRoPERotary.Trace):
//
//  1. xn_t,h  = x_t,h / √(Σ_c x²_t,h,c + ε)          per-head chunk of the layer input, ε = 1e-6
//  2. u_t     = W₂W₁ xn_t  (low rank)  or  u_t,h = g_h·V_h/‖V_h‖ xn_t,h (full rank, weight norm)
//  3. Δφ_t    = act(Σ_j w_j u_{t−W+1+j})  (causal depthwise conv)  or  u_t − u_{t−1} (skip_conv)
//  4. Δφ_t   += exp(b)                                 (use_bias: a learned RoPE frequency)
//  5. Δφ_t   *= σ(W_g xn_t + b_g)                       (use_gate: the phase gate)
//  6. φ̃_t     = Σ_{s≤t} Δφ_s                            (cumsum over time)
//  7. a_t     = Θ_n φ̃_t                                 (temperature Θ, App. A.3.1)
//  8. q′, k′  = rotate (q, k) by a_t, same angle for both
//
// so that q′_tᵀk′_τ = Σ_n Re{Q_n conj(K_n) e^{i(a_t,n − a_τ,n)}} depends on
// the angle accumulated strictly after τ up to t (notes 002 §A.6.1).

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// Pairing says which two components of a head vector form one rotation pair.
type Pairing string

// The pair layouts.
const (
	// PairNeoX pairs component n with n+R (rotate-half), as the release's
	// rotary.py does. This is the default and the layout of every golden case.
	PairNeoX Pairing = "neox_half_split"
	// PairInterleaved pairs 2n with 2n+1, as the paper's eq. 6 and Fig. 9
	// listing write it. Not what the released code computes.
	PairInterleaved Pairing = "interleaved"
)

// SelRoPEConfig holds the options of one Selective-RoPE rotary module: the
// keyword arguments of the authors' SelectiveRoPE (their position_embedding
// dict; JSON names in parentheses) plus the choices their code fixes, made
// explicit here.
type SelRoPEConfig struct {
	// SkipConv (skip_conv): Δφ_t = u_t − u_{t−1} with u_{−1} = 0, the hard
	// shift of the paper's RFF derivation (eq. 20), instead of the conv.
	SkipConv bool
	// DConv (d_conv, default 4): width W of the causal depthwise conv; tap
	// W−1 multiplies the current step.
	DConv int
	// ConvAct (conv_act): "" (none, the default) or "silu" after the conv.
	ConvAct string
	// PhiParam (phi_parametrization): "low-rank" (default; W₂W₁ with rank
	// PhiRank, no bias) or "full-rank" (per-head C×R ChunkedLinear with
	// weight normalisation over the C inputs and a per-head scale).
	PhiParam string
	// PhiRank (phi_proj_rank, default 16): rank of the low-rank projection.
	PhiRank int
	// UseGate (use_gate): multiply the increments by the phase gate.
	UseGate bool
	// GateParam (gate_parametrization): "standard" (Linear D→H with bias),
	// "low-rank" (D→GateRank→H) or "gla" (D→GateRank→H·R, one gate per pair).
	GateParam string
	// GateRank (gate_low_rank_dim, default 16).
	GateRank int
	// UseBias (use_bias): add exp(phi_bias) to every increment, before the
	// gate (so the gate scales it too).
	UseBias bool
	// TempType, TempTheta, TempMax (temp_type, temp_theta, temp_max): the
	// temperature schedule Θ (App. A.3.1; notes 002 §A.3). Only Generate
	// uses them: a loaded model reads Θ from rotary.temperature, which the
	// authors store as a (normally frozen) parameter.
	TempType  string
	TempTheta float64
	TempMax   float64
	// Pairing (pair_layout, an extension of this package; absent in the
	// authors' configs): PairNeoX (default) or PairInterleaved.
	Pairing Pairing
	// L2Eps is the ε inside the square root of step 1 (fla's l2norm kernel:
	// 1e-6; not configurable in the authors' code).
	L2Eps float64
	// QKNorm (the Attention's qk_norm): per-head RMSNorm of q′ and k′ AFTER
	// the rotation (attn.py applies it after Selective RoPE, before plain
	// RoPE). QKNormEps is its ε: 1e-5, fla RMSNorm's default, which
	// Attention does not override (it is not the model's norm_eps).
	QKNorm    bool
	QKNormEps float64
}

// DefaultSelRoPEConfig returns the options of the authors' SelectiveRoPE
// constructor defaults (low-rank φ-projection of rank 16, conv of width 4
// without activation, no gate, no bias, "rope" temperatures with θ = 500000)
// with the NeoX pair layout.
func DefaultSelRoPEConfig() SelRoPEConfig {
	return SelRoPEConfig{DConv: 4, PhiParam: "low-rank", PhiRank: 16, GateParam: "standard", GateRank: 16,
		TempType: "rope", TempTheta: 500000, TempMax: 1, Pairing: PairNeoX, L2Eps: 1e-6, QKNormEps: 1e-5}
}

// parseSelRoPE reads a position_embedding dict with "type":
// "selective_rope". Keys the authors' SelectiveRoPE does not take are
// refused by name, so a misspelt option never runs silently.
func parseSelRoPE(data json.RawMessage) (SelRoPEConfig, error) {
	c := DefaultSelRoPEConfig()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return c, fmt.Errorf("field position_embedding must be an object: %s", strings.TrimSpace(string(data)))
	}
	var typ string
	if err := json.Unmarshal(raw["type"], &typ); err != nil || typ != "selective_rope" {
		return c, fmt.Errorf("position_embedding.type = %s is not supported (supported: \"selective_rope\"; the authors' \"rope\" and \"nope\" baselines are not implemented)", strings.TrimSpace(string(raw["type"])))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := raw[k]
		null := strings.TrimSpace(string(v)) == "null"
		var err error
		bad := func(want string) error {
			return fmt.Errorf("position_embedding.%s = %s: want %s", k, strings.TrimSpace(string(v)), want)
		}
		str := func(dst *string, allowed ...string) error {
			if null {
				*dst = ""
			} else if json.Unmarshal(v, dst) != nil {
				return bad("a string")
			}
			for _, a := range allowed {
				if *dst == a {
					return nil
				}
			}
			return bad("one of " + strings.Join(allowed, ", "))
		}
		flag := func(dst *bool) error {
			if json.Unmarshal(v, dst) != nil {
				return bad("true or false")
			}
			return nil
		}
		num := func(dst *float64) error {
			if json.Unmarshal(v, dst) != nil || math.IsNaN(*dst) {
				return bad("a number")
			}
			return nil
		}
		posInt := func(dst *int) error {
			if json.Unmarshal(v, dst) != nil || *dst <= 0 {
				return bad("a positive integer")
			}
			return nil
		}
		switch k {
		case "type":
		case "skip_conv":
			err = flag(&c.SkipConv)
		case "d_conv":
			err = posInt(&c.DConv)
		case "conv_act":
			err = str(&c.ConvAct, "", "silu", "swish")
			if c.ConvAct == "swish" {
				c.ConvAct = "silu"
			}
		case "phi_parametrization":
			err = str(&c.PhiParam, "low-rank", "full-rank")
		case "phi_proj_rank":
			err = posInt(&c.PhiRank)
		case "use_gate":
			err = flag(&c.UseGate)
		case "gate_parametrization":
			err = str(&c.GateParam, "standard", "low-rank", "gla")
		case "gate_low_rank_dim":
			err = posInt(&c.GateRank)
		case "use_bias":
			err = flag(&c.UseBias)
		case "temp_type":
			err = str(&c.TempType, "rope", "rfa")
		case "temp_theta":
			err = num(&c.TempTheta)
		case "temp_max":
			err = num(&c.TempMax)
		case "temp_grad", "use_triton":
			// Training-only (temp_grad) or a kernel choice with the same
			// arithmetic up to float32 rounding of the running sum (use_triton).
			var b bool
			err = flag(&b)
		case "fuse_gate":
			var b bool
			if err = flag(&b); err == nil && b {
				err = fmt.Errorf("position_embedding.fuse_gate = true is not supported: the authors' full-sequence paths never apply a fused gate (only their Triton decode kernel does), so the result would depend on the kernel")
			}
		case "pair_layout":
			var p string
			if err = str(&p, string(PairNeoX), string(PairInterleaved)); err == nil {
				c.Pairing = Pairing(p)
			}
		default:
			err = fmt.Errorf("position_embedding.%s is not an option of the authors' SelectiveRoPE (known: type, skip_conv, d_conv, conv_act, phi_parametrization, phi_proj_rank, use_gate, gate_parametrization, gate_low_rank_dim, use_bias, temp_type, temp_theta, temp_max, temp_grad, use_triton, fuse_gate, and this package's pair_layout)", k)
		}
		if err != nil {
			return c, err
		}
	}
	switch {
	case c.TempType == "rope" && !(c.TempTheta >= 1):
		return c, fmt.Errorf("position_embedding.temp_theta = %v must be ≥ 1 for temp_type \"rope\"", c.TempTheta)
	case c.TempType == "rfa" && !(c.TempTheta > 0 && c.TempTheta < 1):
		return c, fmt.Errorf("position_embedding.temp_theta = %v must lie in (0, 1) for temp_type \"rfa\"", c.TempTheta)
	}
	return c, nil
}

// gateOutputs is the number of phase-gate values per position: H, or H·R
// for the "gla" parametrisation (0 without a gate).
func (c *SelRoPEConfig) gateOutputs(H, R int) int {
	switch {
	case !c.UseGate:
		return 0
	case c.GateParam == "gla":
		return H * R
	}
	return H
}

// rotaryTemperature returns the temperatures Θ_n, n < d/2, of App. A.3.1 as
// the release's rotary_temperature computes them: "rope" Θ_n = temp_max ·
// theta^(−2n/d) (the RoPE inverse frequencies, float32 as torch, see
// RoPEConfig.invFreq); "rfa" Θ_n = temp_max · tan(ψ_n/2)/max_m tan(ψ_m/2) with
// ψ = linspace(0, theta·π, d/2), the tan schedule of Theorem 1.
func rotaryTemperature(typ string, theta float64, d int, tempMax float64) []float32 {
	R := d / 2
	out := make([]float32, R)
	switch typ {
	case "rfa":
		tan := make([]float64, R)
		var mx float64
		hi := float64(float32(theta * math.Pi))
		for n := range tan {
			psi := 0.0
			if R > 1 {
				psi = hi * float64(n) / float64(R-1)
			}
			tan[n] = math.Sqrt((1 - math.Cos(psi)) / (1 + math.Cos(psi)))
			mx = math.Max(mx, tan[n])
		}
		for n := range out {
			if mx > 0 {
				out[n] = float32(tempMax * tan[n] / mx)
			}
		}
	default:
		inv := RoPEConfig{Theta: theta, Type: "default", Factor: 1}.invFreq(d, 0)
		for n, f := range inv {
			out[n] = float32(tempMax * float64(f))
		}
	}
	return out
}

// SelRoPERotary is one layer's Selective-RoPE module: its options and its
// parameters, named as the authors' module tree (rotary.* under the
// attention module).
type SelRoPERotary struct {
	Cfg SelRoPEConfig
	// DModel is the width of the layer input the angles are computed from,
	// Heads the number of heads, C = DModel/Heads the per-head chunk of
	// the input, DHead the head dimension and R = DHead/2 the pairs.
	DModel, Heads, C, DHead, R int

	PhiW1     []float32 // low rank: phi_proj.0.weight [r, D]
	PhiW2     []float32 // low rank: phi_proj.1.weight [H·R, r]
	PhiV      []float32 // full rank: phi_proj.weight V [H, C, R]
	PhiScalar []float32 // full rank: phi_proj.scalar g [H]
	ConvW     []float32 // phi_conv1d.weight [H·R, 1, W] (not with skip_conv)
	PhiBias   []float32 // phi_bias b [1, 1, H, R] (use_bias)
	Temp      []float32 // temperature Θ [1, 1, 1, R]
	GateW0    []float32 // low-rank and gla gates: phase_gate_proj.0.weight [GateRank, D]
	GateW     []float32 // phase gate: phase_gate_proj.weight [H, D] (standard) or phase_gate_proj.1.weight [G, GateRank]
	GateB     []float32 // phase gate bias [G], G = H or H·R (gla)
	QNorm     []float32 // q_norm.weight [d] (qk_norm)
	KNorm     []float32 // k_norm.weight [d] (qk_norm)

	phiEff []float32 // full rank: the effective weight g_h·V_h[:,n]/‖V_h[:,n]‖, laid out [H, R, C]
}

// loadSelRoPERotary reads a rotary module's tensors below prefix (the
// attention module, e.g. "model.layers.3.attn."), checking every shape.
func loadSelRoPERotary(ld *loader, prefix string, cfg SelRoPEConfig, D, H, dh int) *SelRoPERotary {
	R := dh / 2
	r := &SelRoPERotary{Cfg: cfg, DModel: D, Heads: H, C: D / H, DHead: dh, R: R}
	p := prefix + "rotary."
	if cfg.PhiParam == "full-rank" {
		r.PhiV = ld.get(p+"phi_proj.weight", H, r.C, R)
		r.PhiScalar = ld.get(p+"phi_proj.scalar", H)
		if ld.gen != nil {
			for h := range r.PhiScalar { // the authors initialise g = 1; vary it around that
				r.PhiScalar[h] = float32(1 + 0.5*math.Abs(ld.gen.rng.NormFloat64()))
			}
		}
	} else {
		r.PhiW1 = ld.get(p+"phi_proj.0.weight", cfg.PhiRank, D)
		r.PhiW2 = ld.get(p+"phi_proj.1.weight", H*R, cfg.PhiRank)
	}
	if !cfg.SkipConv {
		r.ConvW = ld.get(p+"phi_conv1d.weight", H*R, 1, cfg.DConv)
	}
	if cfg.UseBias {
		r.PhiBias = ld.get(p+"phi_bias", 1, 1, H, R)
	}
	r.Temp = ld.get(p+"temperature", 1, 1, 1, R)
	if ld.gen != nil {
		copy(r.Temp, rotaryTemperature(cfg.TempType, cfg.TempTheta, dh, cfg.TempMax))
	}
	if G := cfg.gateOutputs(H, R); G > 0 {
		if cfg.GateParam == "standard" {
			r.GateW = ld.get(p+"phase_gate_proj.weight", H, D)
			r.GateB = ld.get(p+"phase_gate_proj.bias", H)
		} else {
			r.GateW0 = ld.get(p+"phase_gate_proj.0.weight", cfg.GateRank, D)
			r.GateW = ld.get(p+"phase_gate_proj.1.weight", G, cfg.GateRank)
			r.GateB = ld.get(p+"phase_gate_proj.1.bias", G)
		}
	}
	if cfg.QKNorm {
		r.QNorm = ld.get(prefix+"q_norm.weight", dh)
		r.KNorm = ld.get(prefix+"k_norm.weight", dh)
	}
	r.prepare()
	return r
}

// prepare computes the full-rank effective weight as ChunkedLinear does in
// float32: W_eff[h][:,n] = g_h · V_h[:,n] / max(‖V_h[:,n]‖₂, 1e-12)
// (F.normalize over the C inputs; the paper's "weight norm on the input
// projection").
func (r *SelRoPERotary) prepare() {
	if r.PhiV == nil {
		return
	}
	H, C, R := r.Heads, r.C, r.R
	r.phiEff = make([]float32, H*R*C)
	for h := 0; h < H; h++ {
		for n := 0; n < R; n++ {
			var ss float64
			for c := 0; c < C; c++ {
				v := float64(r.PhiV[(h*C+c)*R+n])
				ss += v * v
			}
			norm := float32(math.Max(math.Sqrt(ss), 1e-12))
			for c := 0; c < C; c++ {
				r.phiEff[(h*R+n)*C+c] = r.PhiScalar[h] * (r.PhiV[(h*C+c)*R+n] / norm)
			}
		}
	}
}

// SelRoPETrace holds one layer's angle pipeline, every tensor row-major with
// leading dimensions [B, T].
type SelRoPETrace struct {
	B, T, Heads, R int

	XN       []float32 // [B,T,H,C] per-head L2-normalised chunks of the layer input (step 1)
	U        []float32 // [B,T,H,R] φ-projection output (step 2)
	Conv     []float32 // [B,T,H,R] causal conv (with its activation) or first difference (step 3)
	Gate     []float32 // [B,T,H], or [B,T,H,R] for "gla": phase gate σ(·) (step 5); nil without a gate
	DPhi     []float32 // [B,T,H,R] Δφ, the increment entering the cumsum (steps 3–5)
	PhiTilde []float32 // [B,T,H,R] φ̃_t = Σ_{s≤t} Δφ_s (step 6)
	Omega    []float32 // [B,T,H,R] angular velocity ω_t = Θ_n·Δφ_t, radians per token (notes 002 §B.2)
	Angle    []float32 // [B,T,H,R] a_t = Θ_n·φ̃_t, radians, applied to q and k (step 7)

	cos, sin []float32 // float32 cos and sin of Angle, made by the first Rotate
}

// Trace runs steps 1–7 for the layer input x [B·T, DModel] (the attention's
// hidden_states: the pre-norm output in a decoder). hs may be nil; with it,
// the points blocks.{layer}.attn.hook_phase_gate, hook_angular_velocity and
// hook_angle run in that order, and what a hook writes changes everything
// after it: the gate before it scales the increments, ω before the angles
// accumulate it (a_t gains Σ_{s≤t} of the change), the angle before the
// rotation.
//
// Numerics follow the release on CPU: the cumsum accumulates in float64 and
// rounds each φ̃_t to float32 (torch's CPU cumsum), a_t = float32(Θ_n·φ̃_t);
// sums over inputs accumulate in float64.
func (r *SelRoPERotary) Trace(x []float32, B, T int, hs *hooks.Set, layer int) (*SelRoPETrace, error) {
	c, D, H, C, R := &r.Cfg, r.DModel, r.Heads, r.C, r.R
	n, HR := B*T, H*R
	if len(x) != n*D {
		return nil, fmt.Errorf("model: Selective RoPE: input has %d values, want B·T·D = %d·%d·%d", len(x), B, T, D)
	}
	tr := &SelRoPETrace{B: B, T: T, Heads: H, R: R,
		XN: make([]float32, n*D), U: make([]float32, n*HR), Conv: make([]float32, n*HR),
		DPhi: make([]float32, n*HR), PhiTilde: make([]float32, n*HR), Omega: make([]float32, n*HR), Angle: make([]float32, n*HR)}

	// 1. xn = l2_norm(x per head chunk): x / √(Σx² + ε)
	for i := 0; i < n*H; i++ {
		row, out := x[i*C:(i+1)*C], tr.XN[i*C:(i+1)*C]
		var ss float64
		for _, v := range row {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / math.Sqrt(ss+c.L2Eps))
		for j, v := range row {
			out[j] = v * inv
		}
	}

	// 2. u = phi_proj(xn): low rank W₂(W₁ flatten(xn)), or per head W_eff[h]ᵀ xn_h
	if r.phiEff == nil {
		mid := make([]float32, n*c.PhiRank)
		linear(mid, tr.XN, n, D, f32Weight(r.PhiW1, D), c.PhiRank, nil)
		linear(tr.U, mid, n, c.PhiRank, f32Weight(r.PhiW2, c.PhiRank), HR, nil)
	} else {
		for i := 0; i < n*H; i++ {
			h, xn := i%H, tr.XN[i*C:(i+1)*C]
			for m := 0; m < R; m++ {
				w := r.phiEff[(h*R+m)*C : (h*R+m+1)*C]
				var s float64
				for j, v := range xn {
					s += float64(v) * float64(w[j])
				}
				tr.U[i*R+m] = float32(s)
			}
		}
	}

	// 3. Δφ = act(causal depthwise conv of u over time), or u_t − u_{t−1}
	W := c.DConv
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			row := (b*T + t) * HR
			for ch := 0; ch < HR; ch++ {
				if c.SkipConv {
					prev := float32(0)
					if t > 0 {
						prev = tr.U[row-HR+ch]
					}
					tr.Conv[row+ch] = tr.U[row+ch] - prev
					continue
				}
				w := r.ConvW[ch*W : (ch+1)*W]
				var s float64
				for j := max(0, W-1-t); j < W; j++ { // u at negative times is 0
					s += float64(w[j]) * float64(tr.U[row+(j-W+1)*HR+ch])
				}
				v := float32(s)
				if c.ConvAct == "silu" {
					v = silu(v)
				}
				tr.Conv[row+ch] = v
			}
		}
	}
	copy(tr.DPhi, tr.Conv)

	// 4. Δφ += exp(b): a learned constant angular velocity per head and pair
	if r.PhiBias != nil {
		for i := range tr.DPhi {
			tr.DPhi[i] += float32(math.Exp(float64(r.PhiBias[i%HR])))
		}
	}

	// 5. Δφ *= σ(phase_gate_proj(flatten(xn))), per head or per pair (gla)
	if G := c.gateOutputs(H, R); G > 0 {
		tr.Gate = make([]float32, n*G)
		if r.GateW0 == nil {
			linear(tr.Gate, tr.XN, n, D, f32Weight(r.GateW, D), G, r.GateB)
		} else {
			mid := make([]float32, n*c.GateRank)
			linear(mid, tr.XN, n, D, f32Weight(r.GateW0, D), c.GateRank, nil)
			linear(tr.Gate, mid, n, c.GateRank, f32Weight(r.GateW, c.GateRank), G, r.GateB)
		}
		for i, v := range tr.Gate {
			tr.Gate[i] = sigmoid(v)
		}
		if G == H {
			if err := hs.Run(hooks.AttnPhaseGate, layer, tr.Gate, B, T, H); err != nil {
				return nil, err
			}
			for i := range tr.DPhi {
				tr.DPhi[i] *= tr.Gate[i/R]
			}
		} else {
			if err := hs.Run(hooks.AttnPhaseGate, layer, tr.Gate, B, T, H, R); err != nil {
				return nil, err
			}
			for i := range tr.DPhi {
				tr.DPhi[i] *= tr.Gate[i]
			}
		}
	}

	// 6. φ̃ = cumsum(Δφ) over time (float64 running sum, float32 outputs)
	for b := 0; b < B; b++ {
		for ch := 0; ch < HR; ch++ {
			var s float64
			for t := 0; t < T; t++ {
				i := (b*T+t)*HR + ch
				s += float64(tr.DPhi[i])
				tr.PhiTilde[i] = float32(s)
			}
		}
	}

	// angular velocity ω = Θ·Δφ (the per-step increment of the angle)
	for i, d := range tr.DPhi {
		tr.Omega[i] = r.Temp[i%R] * d
	}
	velName := hooks.Name(hooks.AttnAngularVelocity, layer)
	var before []float32
	if hs.Has(velName) {
		before = append([]float32(nil), tr.Omega...)
		if err := hs.Run(hooks.AttnAngularVelocity, layer, tr.Omega, B, T, H, R); err != nil {
			return nil, err
		}
	}

	// 7. a = Θ·φ̃ (plus the accumulated change of ω made at its hook)
	for i, p := range tr.PhiTilde {
		tr.Angle[i] = r.Temp[i%R] * p
	}
	if before != nil {
		for b := 0; b < B; b++ {
			for ch := 0; ch < HR; ch++ {
				var delta float64
				for t := 0; t < T; t++ {
					i := (b*T+t)*HR + ch
					delta += float64(tr.Omega[i]) - float64(before[i])
					if delta != 0 {
						tr.Angle[i] = float32(float64(tr.Angle[i]) + delta)
					}
				}
			}
		}
	}
	if err := hs.Run(hooks.AttnAngle, layer, tr.Angle, B, T, H, R); err != nil {
		return nil, err
	}
	return tr, nil
}

// Rotate applies step 8 in place to head vectors v [B·T, Heads, DHead] with
// the trace's angles: pair (x0, x1) becomes (x0·cos a − x1·sin a,
// x0·sin a + x1·cos a), the complex product (x0 + i·x1)·e^{ia} (eq. 6/15),
// in float32 as the release (it casts q and k to float32 first). Then the
// per-head RMSNorm when qk_norm is set (norm is QNorm or KNorm). The first
// call caches cos and sin of tr.Angle in tr, so the angles must not change
// between the calls for q and k.
func (r *SelRoPERotary) Rotate(v []float32, tr *SelRoPETrace, norm []float32) {
	H, R, dh := r.Heads, r.R, r.DHead
	if tr.cos == nil {
		tr.cos, tr.sin = make([]float32, len(tr.Angle)), make([]float32, len(tr.Angle))
		for i, a := range tr.Angle {
			s, c := math.Sincos(float64(a))
			tr.cos[i], tr.sin[i] = float32(c), float32(s)
		}
	}
	for i := 0; i < tr.B*tr.T*H; i++ {
		x, cs, sn := v[i*dh:(i+1)*dh], tr.cos[i*R:(i+1)*R], tr.sin[i*R:(i+1)*R]
		for m := range cs {
			c, s := cs[m], sn[m]
			i0, i1 := m, m+R
			if r.Cfg.Pairing == PairInterleaved {
				i0, i1 = 2*m, 2*m+1
			}
			x0, x1 := x[i0], x[i1]
			x[i0] = x0*c - x1*s
			x[i1] = x0*s + x1*c
		}
	}
	if r.Cfg.QKNorm && norm != nil {
		rmsNorm(v, v, dh, norm, r.Cfg.QKNormEps)
	}
}

// SelRoPEAttention is the authors' softmax attention layer with Selective
// RoPE (layers/attn.py Attention with position_embedding type
// "selective_rope"): q, k, v projections of the input x, the rotation of
// SelRoPERotary driven by x itself, causal softmax(q′k′ᵀ/√d)·v (flash-attn
// semantics: scale d^−½, optional sliding window) and o_proj (no bias).
type SelRoPEAttention struct {
	DModel, Heads, DHead int
	// Window (window_size): query t sees key j iff t − j < Window (0: all).
	Window     int
	Wq         Weight    // q_proj [H·d, D]
	Bq         []float32 // its bias [H·d] when qkv_bias
	Wk         Weight    // k_proj
	Bk         []float32
	Wv         Weight // v_proj
	Bv         []float32
	Wo         Weight // o_proj [D, H·d]
	Rotary     *SelRoPERotary
	Parameters int64
}

// SelRoPELayerOutput is every intermediate of one SelRoPEAttention.Forward.
type SelRoPELayerOutput struct {
	*SelRoPETrace
	Q, K, V    []float32 // [B,T,H,d] projections, before the rotation
	QRot, KRot []float32 // [B,T,H,d] after the rotation (and QK-norm)
	Attn       []float32 // [B,H,T,T] post-softmax probabilities (zero above the diagonal)
	Z          []float32 // [B,T,H,d] attention output before o_proj
	Y          []float32 // [B,T,D] layer output
}

// Forward runs the layer on hidden states x [B, T, D] (row-major) and
// returns every intermediate. It materializes the [B,H,T,T] pattern; the
// language model (Model.Forward) streams it instead.
func (a *SelRoPEAttention) Forward(x []float32, B, T int) (*SelRoPELayerOutput, error) {
	D, H, dh := a.DModel, a.Heads, a.DHead
	n := B * T
	if B <= 0 || T <= 0 || len(x) != n*D {
		return nil, fmt.Errorf("model: Selective-RoPE layer: input has %d values, want B·T·D with B = %d, T = %d, D = %d", len(x), B, T, D)
	}
	o := &SelRoPELayerOutput{Q: make([]float32, n*H*dh), K: make([]float32, n*H*dh), V: make([]float32, n*H*dh),
		Z: make([]float32, n*H*dh), Y: make([]float32, n*D), Attn: make([]float32, B*H*T*T)}
	// q, k, v projections
	linear(o.Q, x, n, D, a.Wq, H*dh, a.Bq)
	linear(o.K, x, n, D, a.Wk, H*dh, a.Bk)
	linear(o.V, x, n, D, a.Wv, H*dh, a.Bv)
	// angles from the layer input, then rotate q and k by them
	tr, err := a.Rotary.Trace(x, B, T, nil, 0)
	if err != nil {
		return nil, err
	}
	o.SelRoPETrace = tr
	o.QRot, o.KRot = append([]float32(nil), o.Q...), append([]float32(nil), o.K...)
	a.Rotary.Rotate(o.QRot, tr, a.Rotary.QNorm)
	a.Rotary.Rotate(o.KRot, tr, a.Rotary.KNorm)
	// causal softmax attention
	args := &attnArgs{batch: B, T: T, heads: H, kvHeads: H, dHead: dh, scale: float32(1 / math.Sqrt(float64(dh))),
		window: a.Window, q: o.QRot, k: o.KRot, v: o.V, z: o.Z, pattern: o.Attn}
	if err := causalAttention(args); err != nil {
		return nil, err
	}
	patternTimesV(args)
	// o_proj
	linear(o.Y, o.Z, n, H*dh, a.Wo, D, nil)
	return o, nil
}

// selropeLayerArchitecture is the "architecture" field of a single-layer
// config.json (the golden cases): the Attention constructor arguments.
const selropeLayerArchitecture = "selective_rope_softmax_attention_layer"

// attnRaw holds the Attention constructor arguments (layers/attn.py), the
// fields a layer config.json and the authors' TransformerConfig share.
type attnRaw struct {
	HiddenSize *int            `json:"hidden_size"`
	NumHeads   *int            `json:"num_heads"`
	NumKV      *int            `json:"num_kv_heads"`
	QKVBias    bool            `json:"qkv_bias"`
	QKNorm     bool            `json:"qk_norm"`
	Window     *int            `json:"window_size"`
	PosEmb     json.RawMessage `json:"position_embedding"`
}

// parse checks the attention arguments and returns D, H, the head dim and
// the rotary options.
func (r *attnRaw) parse() (D, H, dh int, sc SelRoPEConfig, err error) {
	if D, err = need("hidden_size", r.HiddenSize); err != nil {
		return
	}
	if H, err = need("num_heads", r.NumHeads); err != nil {
		return
	}
	if D%H != 0 {
		err = fmt.Errorf("hidden_size %d is not a multiple of num_heads %d (Attention's head_dim = hidden_size/num_heads)", D, H)
		return
	}
	dh = D / H
	if dh%2 != 0 {
		err = fmt.Errorf("head_dim = hidden_size/num_heads = %d must be even (rotation pairs)", dh)
		return
	}
	if r.NumKV != nil && *r.NumKV != H {
		err = fmt.Errorf("num_kv_heads %d ≠ num_heads %d is not supported: the authors' SelectiveRoPE concatenates one angle set for the q heads and the k heads, which only works without grouped-query attention", *r.NumKV, H)
		return
	}
	if r.Window != nil && *r.Window <= 0 {
		err = fmt.Errorf("window_size = %d must be positive or null", *r.Window)
		return
	}
	if len(r.PosEmb) == 0 {
		err = fmt.Errorf("field position_embedding is missing")
		return
	}
	if sc, err = parseSelRoPE(r.PosEmb); err != nil {
		return
	}
	sc.QKNorm = r.QKNorm
	return
}

// LoadSelRoPELayer reads one Selective-RoPE attention layer saved as the
// golden cases store it: config.json with the Attention constructor
// arguments (hidden_size, num_heads, num_kv_heads, qkv_bias, qk_norm,
// window_size, position_embedding) and model.safetensors holding the
// layer's state_dict (q_proj.weight, …, rotary.temperature, rotary.phi_proj.*,
// rotary.phi_conv1d.weight, rotary.phi_bias, rotary.phase_gate_proj.*).
func LoadSelRoPELayer(dir string) (*SelRoPEAttention, error) {
	path := filepath.Join(dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	var r attnRaw
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("model: %s: not valid JSON: %v", path, err)
	}
	D, H, dh, sc, err := r.parse()
	if err != nil {
		return nil, fmt.Errorf("model: %s: %w", path, err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	ld := newLoader(ck, dir)
	a := loadSelRoPEAttention(ld, "", D, H, dh, r.QKVBias, sc)
	if r.Window != nil {
		a.Window = *r.Window
	}
	if err := ld.finish(false); err != nil {
		return nil, err
	}
	a.Parameters = ld.params
	return a, nil
}

// loadSelRoPEAttention reads the projections and the rotary module of one
// attention layer below prefix.
func loadSelRoPEAttention(ld *loader, prefix string, D, H, dh int, qkvBias bool, sc SelRoPEConfig) *SelRoPEAttention {
	a := &SelRoPEAttention{DModel: D, Heads: H, DHead: dh}
	a.Wq = ld.weight32(prefix+"q_proj.weight", H*dh, D)
	a.Wk = ld.weight32(prefix+"k_proj.weight", H*dh, D)
	a.Wv = ld.weight32(prefix+"v_proj.weight", H*dh, D)
	if qkvBias {
		a.Bq = ld.get(prefix+"q_proj.bias", H*dh)
		a.Bk = ld.get(prefix+"k_proj.bias", H*dh)
		a.Bv = ld.get(prefix+"v_proj.bias", H*dh)
	}
	a.Wo = ld.weight32(prefix+"o_proj.weight", D, H*dh)
	a.Rotary = loadSelRoPERotary(ld, prefix, sc, D, H, dh)
	return a
}
