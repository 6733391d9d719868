// Package hooks names the points of a forward pass where activations can be
// captured or changed, in the style of TransformerLens, and carries the
// streaming interface through which attention rows reach their consumers
// without a T×T matrix.
//
// A hook point is a string such as "blocks.3.attn.hook_pattern". Users write
// these names in notebooks and papers, so they never change. Every point is an
// identity in the pass: a function registered at a point sees the live value
// as a *tensor.Dense whose backing array is the pass's own buffer, so reading
// it captures and writing to it intervenes — the rest of the pass uses the
// changed value.
package hooks

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gorgonia.org/tensor"

	textnames "github.com/filterlens/probe/internal/names"
)

// The hook points, one constant per name of Points: the names the forward
// passes issue and users write. A per-layer name holds {l} where the layer
// index goes (Name).
const (
	Embed               = "hook_embed"
	PosEmbed            = "hook_pos_embed"
	ResidPre            = "blocks.{l}.hook_resid_pre"
	LN1Normalized       = "blocks.{l}.ln1.hook_normalized"
	AttnQ               = "blocks.{l}.attn.hook_q"
	AttnK               = "blocks.{l}.attn.hook_k"
	AttnV               = "blocks.{l}.attn.hook_v"
	AttnRotQ            = "blocks.{l}.attn.hook_rot_q"
	AttnRotK            = "blocks.{l}.attn.hook_rot_k"
	AttnPattern         = "blocks.{l}.attn.hook_pattern"
	AttnPatternDecayed  = "blocks.{l}.attn.hook_pattern_decayed"
	AttnSinkMass        = "blocks.{l}.attn.hook_sink_mass"
	AttnPhaseGate       = "blocks.{l}.attn.hook_phase_gate"
	AttnAngularVelocity = "blocks.{l}.attn.hook_angular_velocity"
	AttnAngle           = "blocks.{l}.attn.hook_angle"
	AttnGate            = "blocks.{l}.attn.hook_gate"
	AttnZ               = "blocks.{l}.attn.hook_z"
	AttnOut             = "blocks.{l}.hook_attn_out"
	ResidMid            = "blocks.{l}.hook_resid_mid"
	LN2Normalized       = "blocks.{l}.ln2.hook_normalized"
	MLPPre              = "blocks.{l}.mlp.hook_pre"
	MLPPost             = "blocks.{l}.mlp.hook_post"
	MLPRouterLogits     = "blocks.{l}.mlp.hook_router_logits"
	MLPExpertIndices    = "blocks.{l}.mlp.hook_expert_indices"
	MLPExpertWeights    = "blocks.{l}.mlp.hook_expert_weights"
	MLPOut              = "blocks.{l}.hook_mlp_out"
	PerLayerInput       = "hook_per_layer_input"
	PerLayerOut         = "blocks.{l}.hook_per_layer_out"
	ResidPost           = "blocks.{l}.hook_resid_post"
	BFTTau              = "bft.hook_tau"
	BFTLambda           = "blocks.{l}.bft.hook_lambda"
	BFTLambdaObs        = "blocks.{l}.bft.hook_lambda_obs"
	BFTGain             = "blocks.{l}.bft.hook_gain"
	BFTLambdaPost       = "blocks.{l}.bft.hook_lambda_post"
	BFTJacobian         = "blocks.{l}.bft.hook_jacobian"
	BFTQNoise           = "blocks.{l}.bft.hook_q_noise"
	BFTLambdaPred       = "blocks.{l}.bft.hook_lambda_pred"
	RTMagnitude         = "blocks.{l}.rt.hook_magnitude"
	RTLogPrecision      = "blocks.{l}.rt.hook_log_precision"
	RTConsensus         = "blocks.{l}.rt.hook_consensus"
	RTSelfAgreement     = "blocks.{l}.rt.hook_self_agreement"
	AFALogPrecision     = "blocks.{l}.afa.hook_log_precision"
	AFAEstimate         = "blocks.{l}.afa.hook_estimate"
	GDNQ                = "blocks.{l}.gdn.hook_q"
	GDNK                = "blocks.{l}.gdn.hook_k"
	GDNV                = "blocks.{l}.gdn.hook_v"
	GDNBeta             = "blocks.{l}.gdn.hook_beta"
	GDNG                = "blocks.{l}.gdn.hook_g"
	GDNCoreOut          = "blocks.{l}.gdn.hook_core_out"
	GDNFinalState       = "blocks.{l}.gdn.hook_final_state"
	GDNEffAttn          = "blocks.{l}.gdn.hook_eff_attn"
	RWKVR               = "blocks.{l}.rwkv.hook_r"
	RWKVWLog            = "blocks.{l}.rwkv.hook_w_log"
	RWKVW               = "blocks.{l}.rwkv.hook_w"
	RWKVK               = "blocks.{l}.rwkv.hook_k"
	RWKVV               = "blocks.{l}.rwkv.hook_v"
	RWKVA               = "blocks.{l}.rwkv.hook_a"
	RWKVKK              = "blocks.{l}.rwkv.hook_kk"
	RWKVG               = "blocks.{l}.rwkv.hook_g"
	RWKVWKV             = "blocks.{l}.rwkv.hook_wkv"
	RWKVState           = "blocks.{l}.rwkv.hook_state"
	RWKVEffAttn         = "blocks.{l}.rwkv.hook_eff_attn"
	SSMZ                = "blocks.{l}.ssm.hook_z"
	SSMX                = "blocks.{l}.ssm.hook_x"
	SSMB                = "blocks.{l}.ssm.hook_B"
	SSMBGroup           = "blocks.{l}.ssm.hook_B_group"
	SSMC                = "blocks.{l}.ssm.hook_C"
	SSMDt               = "blocks.{l}.ssm.hook_dt"
	SSMA                = "blocks.{l}.ssm.hook_A"
	SSMDecay            = "blocks.{l}.ssm.hook_decay"
	SSMY                = "blocks.{l}.ssm.hook_y"
	SSMFinalState       = "blocks.{l}.ssm.hook_final_state"
	SSMEffAttn          = "blocks.{l}.ssm.hook_eff_attn"
	SSMOut              = "blocks.{l}.ssm.hook_out"
	AttnBranchOut       = "blocks.{l}.hook_attn_branch_out"
	LNFinalNormalized   = "ln_final.hook_normalized"
	Logits              = "logits"
)

// Point documents one hook point: its name pattern ({l} is the layer index)
// and the shape of the value passed to hook functions.
type Point struct {
	Name  string
	Shape string
	Doc   string
}

// Points is the registry of hook points. The model issues no other names.
var Points = []Point{
	{Embed, "[batch,pos,d_model]", "token embedding (GPT-2: before adding positions)"},
	{PosEmbed, "[batch,pos,d_model]", "learned position embedding (GPT-2 only)"},
	{ResidPre, "[batch,pos,d_model]", "residual stream entering block l"},
	{LN1Normalized, "[batch,pos,d_model]", "input of attention after the pre-attention norm"},
	{AttnQ, "[batch,pos,head,d_head] or [batch,pos,head,d_head,re_im] (RFA: complex) or [batch,pos,head,d_head_global] (Gemma 4: full-attention layers)", "query projection (with bias), before QK-norm and RoPE"},
	{AttnK, "[batch,pos,kv_head,d_head] or [batch,pos,kv_head,d_head,re_im] (RFA: complex) or [batch,pos,kv_head_global,d_head_global] (Gemma 4: full-attention layers)", "key projection (with bias), before QK-norm and RoPE"},
	{AttnV, "[batch,pos,kv_head,d_head] or [batch,pos,kv_head,d_head,re_im] (RFA: complex) or [batch,pos,kv_head_global,d_head_global] (Gemma 4: full-attention layers)", "value projection (with bias)"},
	{AttnRotQ, "[batch,pos,head,d_head] or [batch,pos,head,d_head,re_im] (RFA: complex) or [batch,pos,head,d_head_global] (Gemma 4: full-attention layers)", "query after QK-norm and RoPE, as it enters the dot product"},
	{AttnRotK, "[batch,pos,kv_head,d_head] or [batch,pos,kv_head,d_head,re_im] (RFA: complex) or [batch,pos,kv_head_global,d_head_global] (Gemma 4: full-attention layers)", "key after QK-norm and RoPE"},
	{AttnPattern, "[batch,head,query,key]", "post-softmax attention weights, before any output gate; materialized only when hooked"},
	{AttnSinkMass, "[batch,head,query]", "learned attention sinks only (gpt-oss): the weight σ = e^(s_h − m)/Z of head h's sink column, the extra softmax column dropped after the softmax, so that each hook_pattern row sums to 1 − σ; observation only (the output is formed from the rows)"},
	{AttnPatternDecayed, "[batch,head,query,key]", "RFA and AFA only: decayed attention A = Â ⊙ E (Â is hook_pattern); rows sum to ≤ 1; materialized only when hooked"},
	{AttnPhaseGate, "[batch,pos,head] or [batch,pos,head,pair]", "Selective RoPE only: phase gate σ(W_g·xn + b_g) that scales the angle increments (per pair for the gla gate)"},
	{AttnAngularVelocity, "[batch,pos,head,pair]", "Selective RoPE only: angular velocity ω_t = Θ_n·Δφ_t, the per-step increment of hook_angle in radians per token (after the phase gate)"},
	{AttnAngle, "[batch,pos,head,pair]", "Selective RoPE only: cumulative rotation angle a_t = Θ_n·Σ_{s≤t}Δφ_s (radians, unwrapped) applied to q and k before hook_rot_q/k"},
	{AttnGate, "[batch,pos,head] or [batch,pos,head,d_head]", "output gate sigmoid(logit), headwise or elementwise (gated models only)"},
	{AttnZ, "[batch,pos,head,d_head] or [batch,pos,head,d_head,re_im] (RFA: complex) or [batch,pos,head,d_head_global] (Gemma 4: full-attention layers)", "per-head attention output Σ_j α_tj v_j, after the gate, before o_proj"},
	{AttnOut, "[batch,pos,d_model]", "attention block output (after o_proj) added to the residual"},
	{ResidMid, "[batch,pos,d_model]", "residual stream between attention and MLP"},
	{LN2Normalized, "[batch,pos,d_model]", "input of the MLP after the pre-MLP norm"},
	{MLPPre, "[batch,pos,d_mlp] or [batch,pos,d_mlp_wide] (Gemma 4: double-wide layers)", "MLP hidden pre-activation (gate projection for SwiGLU)"},
	{MLPPost, "[batch,pos,d_mlp] or [batch,pos,d_mlp_wide] (Gemma 4: double-wide layers)", "MLP hidden after the activation (act(gate)·up for SwiGLU), before down_proj"},
	{MLPRouterLogits, "[batch,pos,expert]", "mixture-of-experts layers only: router logits z = h·W_routerᵀ (+ bias: gpt-oss) over the experts, before the softmax and top-k; a change here changes the routing"},
	{MLPExpertIndices, "[batch,pos,top_k]", "mixture-of-experts layers only: the k experts each token is routed to, as float32 values of the expert ids 0…expert−1, in torch.topk order (descending weight; ties to the lower id); a change here re-routes the token (each value must stay an id)"},
	{MLPExpertWeights, "[batch,pos,top_k]", "mixture-of-experts layers only: the routing weights multiplied into the outputs of the experts of hook_expert_indices, same order (renormalised to sum 1 where the family does: norm_topk_prob)"},
	{MLPOut, "[batch,pos,d_model]", "MLP output added to the residual"},
	{PerLayerInput, "[batch,pos,layer,d_per_layer]", "Gemma 4 only: the per-layer inputs u = (norm(W_p·embed·d_model^−½) + E_p[id]·√d_per_layer)·2^−½; layer l reads u[:, :, l]"},
	{PerLayerOut, "[batch,pos,d_model]", "Gemma 4 only: the per-layer-input branch added to the residual at the end of block l (before layer_scalar)"},
	{ResidPost, "[batch,pos,d_model]", "residual stream leaving block l"},
	{BFTTau, "[batch,pos]", "BFT only: initial precision τ of each token (Eq. 10/11), λ of layer 0 in every dimension"},
	{BFTLambda, "[batch,pos,d_model]", "BFT only: prior precision λ entering layer l, per token and residual dimension"},
	{BFTLambdaObs, "[batch,pos,head,d_head]", "BFT only: observation precision λobs (Eq. 6, or Eq. 13 sandwich) per head subspace, after the λ_max cap"},
	{BFTGain, "[batch,pos,head,d_head]", "BFT only: Kalman gain K = λobs/(λ+λobs) (Eq. 3) per head subspace; attn.hook_gate runs next on the same buffer"},
	{BFTLambdaPost, "[batch,pos,d_model]", "BFT only: posterior precision λ' = λ + λobs after the update (Eq. 3)"},
	{BFTJacobian, "[batch,pos,d_model]", "BFT only: diagonal of the FFN Jacobian J_FFN at Norm(h') (Eq. 8/9)"},
	{BFTQNoise, "[head,d_head]", "BFT only: process noise Q = softplus(Q_logits)·Q_max of layer l (Eq. 9), per head subspace"},
	{BFTLambdaPred, "[batch,pos,d_model]", "BFT only: predicted precision λ'' (Eq. 9) leaving layer l, the λ of layer l+1"},
	{RTMagnitude, "[batch,pos,head]", "RT only: token magnitude M_i = ‖V_i‖ before normalization (directional confidence, Alg. 1 step 1)"},
	{RTLogPrecision, "[batch,pos,head]", "RT only: log total precision log Σ_j κ̃_ij, κ̃ = κ·(1+κ‖R‖²/ν)^{−(ν+d)/d} (Eqs. 10, 14)"},
	{RTConsensus, "[batch,pos,head,d_head]", "RT only: consensus V̄ = ū_i = e^{iωt}Σ_j A_ij Ṽ_j (Eq. 13), before the tangent projection; ‖ū‖ is the concentration"},
	{RTSelfAgreement, "[batch,pos,head]", "RT only: ρ_i = V_iᵀV̄_i/‖V_i‖², the radial part removed by the tangent projection (Eq. 15)"},
	{AFALogPrecision, "[batch,pos,head]", "AFA only: log total precision log Π_i = log Σ_j (σ_V²(τ_ij) + |R_ij|² + ε)^{−τ_s} (App. B.3)"},
	{AFAEstimate, "[batch,pos,head,d_head]", "AFA only: filtered estimate Z̄_v = Σ_j Â_ij e^{λτ_ij} ⊙ Z_v,j before the residual mix and the prediction step"},
	{GDNQ, "[batch,v_head,pos,d_key]", "Gated DeltaNet only (Qwen3.5 linear-attention layers): query after conv+SiLU, repeated to the value heads and L2-normalised, before the 1/√d_key scale (head-major)"},
	{GDNK, "[batch,v_head,pos,d_key]", "Gated DeltaNet only: key after conv+SiLU, repeated to the value heads and L2-normalised (head-major)"},
	{GDNV, "[batch,v_head,pos,d_value]", "Gated DeltaNet only: value after conv+SiLU (head-major)"},
	{GDNBeta, "[batch,pos,v_head]", "Gated DeltaNet only: write strength (gain) β = σ(b)"},
	{GDNG, "[batch,pos,v_head]", "Gated DeltaNet only: log-decay g = −exp(A_log)·softplus(a + dt_bias); the state is multiplied by exp(g) at each step"},
	{GDNCoreOut, "[batch,v_head,pos,d_value]", "Gated DeltaNet only: recurrence output o_t = S_tᵀq_t/√d_key, before the gated RMSNorm (head-major)"},
	{GDNFinalState, "[batch,v_head,d_key,d_value]", "Gated DeltaNet only: the state S_T after the last token"},
	{GDNEffAttn, "[batch,v_head,query,key]", "Gated DeltaNet only: exact effective attention W with core_out[t] = Σ_s W[t,s]·v[s] (lower triangular; rows need not sum to 1; entries may be negative); materialized only when hooked"},
	{RWKVR, "[batch,pos,head,d_head]", "RWKV-7 only: receptance r = W_r x_r (the query of the state read wkv_t = S_t r_t)"},
	{RWKVWLog, "[batch,pos,head,d_head]", "RWKV-7 only: log-log decay w_log = −softplus(−(w0 + tanh(x_w W1) W2)) − 0.5"},
	{RWKVW, "[batch,pos,head,d_head]", "RWKV-7 only: per-channel decay w = exp(−exp(w_log)) ∈ (exp(−e^−0.5), 1), on the key axis of the state"},
	{RWKVK, "[batch,pos,head,d_head]", "RWKV-7 only: key of the state update, after k ← k ⊙ (1 + (a − 1) ⊙ k_a)"},
	{RWKVV, "[batch,pos,head,d_head]", "RWKV-7 only: value after the value residual (layers > 0: v + (v_first − v) ⊙ σ(v0 + x_v V1 V2))"},
	{RWKVA, "[batch,pos,head,d_head]", "RWKV-7 only: in-context learning rate a = σ(a0 + x_a A1 A2)"},
	{RWKVKK, "[batch,pos,head,d_head]", "RWKV-7 only: removal key κ̂ = normalize(k ⊙ k_k) per head (unit L2)"},
	{RWKVG, "[batch,pos,d_model]", "RWKV-7 only: output gate g = σ(x_g G1) G2"},
	{RWKVWKV, "[batch,pos,head,d_head]", "RWKV-7 only: state read wkv_t = S_t r_t, before the group norm"},
	{RWKVState, "[batch,head,d_head,d_head]", "RWKV-7 only: the state S_T after the last token, S[i,j] with i the value index and j the key index"},
	{RWKVEffAttn, "[batch,head,query,key]", "RWKV-7 only: exact effective attention M with wkv[t] = Σ_s M[t,s]·v[s], M[t,s] = k_sᵀ G_{s+1}…G_t r_t, G_u = diag(w_u) − κ̂_u (a_u ⊙ κ̂_u)ᵀ (lower triangular, signed, not normalised); materialized only when hooked"},
	{SSMZ, "[batch,pos,d_inner]", "Mamba-2 only (mamba2 layers, Falcon-H1's SSM branch): the gate z of in_proj (× the µP multipliers where the release has them), before SiLU"},
	{SSMX, "[batch,pos,ssm_head,ssm_d_head]", "Mamba-2 only: x after the causal conv + SiLU, split per head"},
	{SSMBGroup, "[batch,pos,ssm_group,d_state]", "Mamba-2 only: B after the conv + SiLU, one per group of heads (n_groups), before hook_B repeats it to the heads; hooking it alone does not make the pass repeat B and C per head"},
	{SSMB, "[batch,pos,ssm_head,d_state]", "Mamba-2 only: B after the conv + SiLU, repeated from its group to each head (the input direction of the state)"},
	{SSMC, "[batch,pos,ssm_head,d_state]", "Mamba-2 only: C after the conv + SiLU, repeated to each head (the readout of the state)"},
	{SSMDt, "[batch,pos,ssm_head]", "Mamba-2 only: step dt = clamp(softplus(dt_raw + dt_bias), time_step_limit), the input gain"},
	{SSMA, "[ssm_head]", "Mamba-2 only: A = −exp(A_log) of layer l; the decay below is computed from it"},
	{SSMDecay, "[batch,pos,ssm_head]", "Mamba-2 only: decay exp(dt·A) ∈ (0, 1]; the state is multiplied by it at each step (the recurrence reads this buffer)"},
	{SSMY, "[batch,pos,ssm_head,ssm_d_head]", "Mamba-2 only: y_t = S_t·C_t + D·x_t, the SSM output with the D skip, before the gate and the gated RMSNorm"},
	{SSMFinalState, "[batch,ssm_head,ssm_d_head,d_state]", "Mamba-2 only: the state S_T after the last token (S_t = decay_t·S_{t−1} + dt_t·x_t·B_tᵀ)"},
	{SSMEffAttn, "[batch,ssm_head,query,key]", "Mamba-2 only: exact effective attention M[t,s] = (C_t·B_s)·Π_{r=s+1..t} decay_r·dt_s with y_t = Σ_s M[t,s]·x_s + D·x_t (lower triangular, D skip not included); materialized only when hooked"},
	{SSMOut, "[batch,pos,d_model]", "Mamba-2 only: the mixer's output after out_proj, before Falcon-H1's ssm_out_multiplier"},
	{AttnBranchOut, "[batch,pos,d_model]", "layers whose token mixer is softmax attention beside a second mixer (Falcon-H1): the attention's own output after o_proj, before the attention output multiplier; hook_attn_out is the sum of both branches"},
	{LNFinalNormalized, "[batch,pos,d_model]", "output of the final norm"},
	{Logits, "[batch,pos,vocab]", "unembedding output; computed only when hooked or requested"},
}

// Name returns the concrete name of a per-layer point, e.g.
// Name("blocks.{l}.attn.hook_pattern", 3) = "blocks.3.attn.hook_pattern".
func Name(pattern string, layer int) string {
	return strings.Replace(pattern, "{l}", strconv.Itoa(layer), 1)
}

// Valid reports whether name (which may use * for the layer index) names a
// registered point, and for concrete names whether the layer is below
// nLayers.
func Valid(name string, nLayers int) error {
	if _, ok := lookup(name); ok {
		if l, ok := layerOf(name); ok && (l < 0 || l >= nLayers) {
			return fmt.Errorf("hook %q: layer %d out of range (model has %d layers)", name, l, nLayers)
		}
		return nil
	}
	var names []string
	for _, p := range Points {
		names = append(names, p.Name)
	}
	pattern, layer := name, "{l}" // compared in the registry's {l} form, shown in the name's layer
	if parts := strings.SplitN(name, ".", 3); len(parts) == 3 && parts[0] == "blocks" {
		pattern, layer = "blocks.{l}."+parts[2], parts[1]
	}
	closest := Closest(pattern, names, 3)
	for i, c := range closest {
		closest[i] = strings.Replace(c, "{l}", layer, 1)
	}
	return fmt.Errorf("unknown hook %q; closest: %s (`probe hooks` lists every point, `probe hooks --model <dir>` those of one model)",
		name, strings.Join(closest, ", "))
}

// Shapes returns the documented shapes of the point name (concrete or
// with * for the layer) as axis names: "[batch,pos,head] or
// [batch,pos,head,d_head]" gives two; nil for a name not in Points.
func Shapes(name string) [][]string {
	p, ok := lookup(name)
	if !ok {
		return nil
	}
	var out [][]string
	for _, alt := range strings.Split(p.Shape, " or ") {
		alt, _, _ = strings.Cut(strings.TrimPrefix(alt, "["), "]")
		out = append(out, strings.Split(alt, ","))
	}
	return out
}

// lookup returns the registry entry of the point name (concrete, or with *
// for the layer).
func lookup(name string) (Point, bool) {
	for _, p := range Points {
		if match(strings.Replace(p.Name, "{l}", "*", 1), name) {
			return p, true
		}
	}
	return Point{}, false
}

// layerOf returns the layer index of a concrete per-layer name
// ("blocks.3.attn.hook_z" → 3), or false for other names.
func layerOf(name string) (int, bool) {
	if !strings.HasPrefix(name, "blocks.") {
		return 0, false
	}
	seg := strings.SplitN(name, ".", 3)[1]
	l, err := strconv.Atoi(seg)
	return l, err == nil
}

// match reports whether name matches pattern, where a "*" or "{l}" segment
// of the pattern matches any one dot-separated segment (and anyPoint
// matches every name).
func match(pattern, name string) bool {
	if pattern == anyPoint {
		return true
	}
	ps, ns := strings.Split(pattern, "."), strings.Split(name, ".")
	if len(ps) != len(ns) {
		return false
	}
	for i := range ps {
		if ps[i] != "*" && ps[i] != "{l}" && ps[i] != ns[i] {
			return false
		}
	}
	return true
}

// Func is called at a hook point with the point's concrete name, its layer
// index (−1 for a point outside the blocks: hook_embed, bft.hook_tau,
// ln_final.hook_normalized, logits) and the live value. Writing into x
// changes the value the rest of the pass uses.
type Func func(name string, layer int, x *tensor.Dense) error

type entry struct {
	pattern string
	fn      Func
	watch   bool // Watch: runs where the pass goes, takes it no further (Reach)
}

type stream struct {
	layer int // -1: every layer
	c     AttnConsumer
}

// Set holds the functions and attention consumers registered for one or
// more forward passes. It is safe to register before a pass and to read it
// from the pass's goroutines; do not register while a pass runs.
type Set struct {
	entries []entry
	streams []stream
}

// Add registers fn at every point matching pattern ("*" matches a layer
// index, and so does {l}: Add(AttnGate, fn) registers fn at every layer).
// Functions run in the order they were added. A pattern that the model
// does not issue makes its forward pass fail before it starts, naming the
// closest points it does issue.
func (s *Set) Add(pattern string, fn Func) {
	s.entries = append(s.entries, entry{pattern: pattern, fn: fn})
}

// Watch registers fn as Add does, except that fn does not make the pass run
// further to reach its points (Reach leaves it out): it runs at the points
// the pass reaches for what else is registered. Progress bars use it, so a
// pass that reads layer 0 alone still runs layer 0 alone.
func (s *Set) Watch(pattern string, fn Func) {
	s.entries = append(s.entries, entry{pattern: pattern, fn: fn, watch: true})
}

// anyPoint is the pattern of AddAny.
const anyPoint = "**"

// AddAny registers fn at every point the pass issues (what
// model.Model.HookNames uses to list them).
func (s *Set) AddAny(fn Func) {
	s.entries = append(s.entries, entry{pattern: anyPoint, fn: fn})
}

// Patterns returns the patterns registered with Add and Capture, in order,
// without repeats.
func (s *Set) Patterns() []string {
	if s == nil {
		return nil
	}
	var ps []string
	seen := map[string]bool{}
	for _, e := range s.entries {
		if e.pattern != anyPoint && !seen[e.pattern] {
			seen[e.pattern] = true
			ps = append(ps, e.pattern)
		}
	}
	return ps
}

// Match reports whether name matches pattern, where a "*" or "{l}" segment
// of the pattern matches any one dot-separated segment.
func Match(pattern, name string) bool { return match(pattern, name) }

// Closest returns up to n of names nearest to name in edit distance (ties
// in the order given), for "did you mean" messages.
func Closest(name string, names []string, n int) []string { return textnames.Closest(name, names, n) }

// Stream registers c for the attention rows of layer (or every layer when
// layer < 0).
func (s *Set) Stream(layer int, c AttnConsumer) {
	s.streams = append(s.streams, stream{layer, c})
}

// Has reports whether any function is registered at name. The pass calls it
// to skip work nobody asked for (the T×T pattern, the logits).
func (s *Set) Has(name string) bool {
	if s == nil {
		return false
	}
	for _, e := range s.entries {
		if match(e.pattern, name) {
			return true
		}
	}
	return false
}

// afterHeads are the points of a block after its attention heads' output
// (hook_z): reading one needs the block's o_proj and MLP.
var afterHeads = map[string]bool{AttnOut: true, ResidMid: true, LN2Normalized: true, MLPPre: true, MLPPost: true,
	MLPRouterLogits: true, MLPExpertIndices: true, MLPExpertWeights: true,
	MLPOut: true, PerLayerOut: true, ResidPost: true, BFTLambdaPost: true, BFTJacobian: true, BFTLambdaPred: true,
	AttnBranchOut: true}

// beforeBlocks are the points outside the blocks that come before them.
var beforeBlocks = map[string]bool{Embed: true, PosEmbed: true, BFTTau: true, PerLayerInput: true}

// Reach returns how much of a pass through layers blocks the registered
// functions (Watch's excepted) and attention consumers read: blocks 0 …
// blocks−1, the last of them only up to its heads' output when headsOnly
// (every point before hook_attn_out, and its consumers). A pass can stop
// there and skip the rest, whose values nothing would see. hook_resid_pre
// of block l needs blocks 0 … l−1 whole and nothing of block l; the points
// after the blocks (ln_final.hook_normalized, logits), and a Set with
// nothing registered (a timed pass), need every block.
func (s *Set) Reach(layers int) (blocks int, headsOnly bool) {
	if s == nil {
		return layers, false
	}
	reads := len(s.streams) > 0
	depth := 0 // 2·blocks, less 1 when the last block is read up to its heads only
	for _, st := range s.streams {
		l := st.layer
		if l < 0 || l >= layers {
			l = layers - 1
		}
		depth = max(depth, 2*l+1)
	}
	for _, e := range s.entries {
		if e.watch {
			continue
		}
		reads = true
		if e.pattern == anyPoint {
			return layers, false
		}
		if _, ok := layerOf(e.pattern); !ok && !strings.HasPrefix(e.pattern, "blocks.*.") && !strings.HasPrefix(e.pattern, "blocks.{l}.") {
			if !beforeBlocks[e.pattern] {
				return layers, false // ln_final, logits, or a name Valid will refuse
			}
			continue
		}
		depth = max(depth, e.depth(layers))
	}
	if !reads {
		return layers, false
	}
	return (depth + 1) / 2, depth%2 == 1
}

// depth is Reach's depth of one block pattern: that of the deepest point of
// the deepest layer it matches.
func (e entry) depth(layers int) int {
	for l := layers - 1; l >= 0; l-- {
		d := -1
		for _, p := range Points {
			if !strings.HasPrefix(p.Name, "blocks.{l}.") || !match(e.pattern, Name(p.Name, l)) {
				continue
			}
			switch {
			case afterHeads[p.Name]:
				return 2 * (l + 1)
			case p.Name == ResidPre:
				d = max(d, 2*l)
			default:
				d = max(d, 2*l+1)
			}
		}
		if d >= 0 {
			return d
		}
	}
	return 2 * layers // no point of any layer: Valid refuses it; reach everything meanwhile
}

// Consumers returns the attention consumers registered for layer.
func (s *Set) Consumers(layer int) []AttnConsumer {
	if s == nil {
		return nil
	}
	var cs []AttnConsumer
	for _, st := range s.streams {
		if st.layer < 0 || st.layer == layer {
			cs = append(cs, st.c)
		}
	}
	return cs
}

// Run calls the functions registered at point (one of the constants, {l}
// standing for layer; layer is −1 for a point outside the blocks) on data
// viewed with shape. The view shares data's memory.
func (s *Set) Run(point string, layer int, data []float32, shape ...int) error {
	if s == nil || len(s.entries) == 0 {
		return nil
	}
	name := point
	if layer >= 0 {
		name = Name(point, layer)
	}
	if !s.Has(name) {
		return nil
	}
	x := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))
	for _, e := range s.entries {
		if match(e.pattern, name) {
			if err := e.fn(name, layer, x); err != nil {
				return fmt.Errorf("hook %s: %w", name, err)
			}
		}
	}
	return nil
}

// Capture records copies of the values at the points it was registered for.
type Capture struct {
	mu     sync.Mutex
	values map[string]*tensor.Dense
}

// Capture registers a capture of every point matching each pattern and
// returns it; after the pass, Get returns the captured values.
func (s *Set) Capture(patterns ...string) *Capture {
	c := &Capture{values: map[string]*tensor.Dense{}}
	for _, p := range patterns {
		s.Add(p, c.record)
	}
	return c
}

func (c *Capture) record(name string, _ int, x *tensor.Dense) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.values[name] = x.Clone().(*tensor.Dense)
	return nil
}

// Get returns the captured value at name, or nil.
func (c *Capture) Get(name string) *tensor.Dense {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[name]
}

// Names returns the captured names in pass order of layers, then name.
func (c *Capture) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.values))
	for n := range c.values {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return lessName(names[i], names[j]) })
	return names
}

// lessName orders names by layer number numerically, then lexically.
func lessName(a, b string) bool {
	la, oka := layerOf(a)
	lb, okb := layerOf(b)
	if oka && okb && la != lb {
		return la < lb
	}
	if oka != okb {
		return !oka // embeddings first
	}
	return a < b
}
