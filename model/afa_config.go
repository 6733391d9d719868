package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
)

// ArchAFA is a language model built from the isotropic Adaptive Filter
// Attention layer of P. Racioppo, "Attention as an Adaptive Filter" (paper
// 001, §3.6 and Algorithm 1 of §4.1, with the corrections of notes 001 §F).
// See afa.go for the pass.
//
// The paper's code release does not match Algorithm 1 (notes §E) and has
// no licence; this layout is the project's. config.json:
// "model_type": "afa", hidden_size (D), num_hidden_layers,
// num_attention_heads (H), head_dim (reals per head: 2d for d complex
// channels, d even for the conjugate frequency pairs; default 2·D/H),
// intermediate_size (SwiGLU width), vocab_size, max_position_embeddings,
// rms_norm_eps [1e-6], hidden_act ["silu"], tie_word_embeddings [true],
// qkv_bias [false] (complex biases of L_Q, L_K, L_V; §3.9 recommends
// affine projections), o_bias [false] (bias of L_P), and an "afa" object
// with the options of AFAConfig. Tensors (complex layers as a real and an
// imaginary tensor, W = W_real + i·W_imag):
//
//	model.embed_tokens.weight                           [V, D]
//	model.layers.{l}.input_layernorm.weight             [D]   RMSNorm before the AFA layer
//	model.layers.{l}.attn.v_proj.weight_{real,imag}     [H·d, D]  L_V (row h·d + c: channel c of head h)
//	model.layers.{l}.attn.v_proj.bias_{real,imag}       [H·d]     (qkv_bias)
//	model.layers.{l}.attn.{q,k}_proj.weight_{real,imag} [H, d, d] per-head L_Q, L_K of Z_v (qk_source "values")
//	                                                    or [H·d, D] of the layer input (qk_source "input")
//	model.layers.{l}.attn.{q,k}_proj.bias_{real,imag}   [H, d] or [H·d] (qkv_bias)
//	model.layers.{l}.attn.o_proj.weight_{real,imag}     [D, H·d]  L_P; the output is Re(L_P(Z⁺))
//	model.layers.{l}.attn.o_proj.bias_{real,imag}       [D] (o_bias; bias_imag is read but cannot reach Re)
//	model.layers.{l}.attn.alpha                         [H]       decay a = α² (Re λ = −α²)
//	model.layers.{l}.attn.omega                         [H, d/2]  ω_m, used as +ω_m on channel 2m, −ω_m on 2m+1
//	model.layers.{l}.attn.sigma, .eta                   [H]       process and measurement noise: σ², η² = square
//	model.layers.{l}.attn.tau_s                         [H]       softmax temperature τ_s, used as stored
//	model.layers.{l}.attn.delta                         [H, d]    residual weight s = sigmoid(δ) per channel
//	model.layers.{l}.post_attention_layernorm.weight    [D]
//	model.layers.{l}.mlp.{gate,up,down}_proj.weight     SwiGLU (no bias)
//	model.norm.weight, lm_head.weight                   final RMSNorm and head
const ArchAFA Arch = "afa"

const afaModelType = "afa"

// AFAConfig holds the AFA options: the choices Algorithm 1 leaves open or
// gets wrong (notes 001 §F), with their JSON names in the "afa" object and
// defaults in brackets.
type AFAConfig struct {
	// QKSource ("qk_source" ["values"]): "values" computes Z_q = L_Q(Z_v),
	// Z_k = L_K(Z_v) with per-head d×d complex maps (Algorithm 1 step 3);
	// "input" projects the layer input like Z_v (Algorithm 3 and the
	// author's code). §F.11.
	QKSource string
	// NormalizeQK ("normalize_qk" [false]): §3.7's normalized queries and
	// keys, ‖q‖ = ‖k‖ = 1 per head after the projection (and before the
	// rotation, which keeps norms).
	NormalizeQK bool
	// KernelForm ("kernel_form" ["exact"]): the integrated decay of the
	// process covariance σ_V²(n) = σ²κ(n) + η²e^{−2anΔt}: "exact" is
	// κ(n) = −expm1(−2anΔt)/(2a), or nΔt when a ≤ ε (§F.3's correction);
	// "paper" is Algorithm 1's literal (1 − e^{−2anΔt} + ε)/(2a + ε), or n
	// when a ≤ ε.
	KernelForm string
	// Dt ("dt" [1]) is the token time step Δt: t_i = Δt·i.
	Dt float64
	// Epsilon ("epsilon" [1e-6]) is Algorithm 1's stability constant: in
	// L = −log(σ_V² + |R|² + ε) and the a ≤ ε branch of κ.
	Epsilon float64
	// MinExponent ("min_exponent" [-50]) clamps −anΔt before exponentials
	// (E and the prediction step; §F.4).
	MinExponent float64
}

type afaOptRaw struct {
	QKSource    *string  `json:"qk_source"`
	NormalizeQK *bool    `json:"normalize_qk"`
	KernelForm  *string  `json:"kernel_form"`
	Dt          *float64 `json:"dt"`
	Epsilon     *float64 `json:"epsilon"`
	MinExponent *float64 `json:"min_exponent"`
}

func isAFAConfig(raw map[string]json.RawMessage) bool { return modelTypeIs(raw, afaModelType) }

// fromAFA fills c from an AFA config.json.
func (c *Config) fromAFA(data []byte, raw map[string]json.RawMessage) error {
	var r filterSizesRaw
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	c.Arch, c.ModelType = ArchAFA, afaModelType
	if err := c.fromFilterSizes(&r); err != nil {
		return err
	}
	if c.DHead%4 != 0 {
		return fmt.Errorf("head_dim %d must be a multiple of 4: d = head_dim/2 complex channels in conjugate pairs (±ω)", c.DHead)
	}
	// The residual weight s = sigmoid(δ) is AFA's gate on the estimate
	// (Z̄ = (1−s)Z_v + sZ̄_v), one value per complex channel.
	c.Gate = GateElementwise
	ac := &AFAConfig{}
	if err := parseAFAOptions(raw["afa"], ac); err != nil {
		return err
	}
	c.AFA = ac
	return nil
}

// parseAFAOptions reads the "afa" options object (of an AFA language model
// or toy filter) with the names, defaults and checks documented above.
func parseAFAOptions(v json.RawMessage, ac *AFAConfig) error {
	var o afaOptRaw
	if err := decodeStrict(v, &o, "afa"); err != nil {
		return err
	}
	*ac = AFAConfig{QKSource: "values", KernelForm: "exact", Dt: 1, Epsilon: 1e-6, MinExponent: -50}
	if err := choice(&ac.QKSource, o.QKSource, "afa.qk_source", "values", "input"); err != nil {
		return err
	}
	if err := choice(&ac.KernelForm, o.KernelForm, "afa.kernel_form", "exact", "paper"); err != nil {
		return err
	}
	if o.NormalizeQK != nil {
		ac.NormalizeQK = *o.NormalizeQK
	}
	for _, f := range []struct {
		dst  *float64
		p    *float64
		name string
		ok   func(float64) bool
		want string
	}{
		{&ac.Dt, o.Dt, "dt", func(x float64) bool { return x > 0 }, "> 0"},
		{&ac.Epsilon, o.Epsilon, "epsilon", func(x float64) bool { return x >= 0 }, "≥ 0"},
		{&ac.MinExponent, o.MinExponent, "min_exponent", func(x float64) bool { return x <= 0 }, "≤ 0"},
	} {
		if f.p == nil {
			continue
		}
		if math.IsNaN(*f.p) || math.IsInf(*f.p, 0) || !f.ok(*f.p) {
			return fmt.Errorf("field afa.%s = %v must be finite and %s", f.name, *f.p, f.want)
		}
		*f.dst = *f.p
	}
	return nil
}

// afaHFConfig returns the config.json fields of an AFA configuration.
func (c *Config) afaHFConfig() map[string]any {
	a := c.AFA
	return map[string]any{
		"model_type": afaModelType, "architectures": []string{"AFAForCausalLM"},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"head_dim": c.DHead, "intermediate_size": c.DMLP, "vocab_size": c.Vocab,
		"max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps, "hidden_act": c.Act,
		"tie_word_embeddings": c.TiedHead, "qkv_bias": c.QKVBias, "o_bias": c.OBias, "torch_dtype": "float32",
		"afa": map[string]any{
			"qk_source": a.QKSource, "normalize_qk": a.NormalizeQK, "kernel_form": a.KernelForm,
			"dt": a.Dt, "epsilon": a.Epsilon, "min_exponent": a.MinExponent,
		},
	}
}

// filterRotations is how RT and AFA encode positions.
const filterRotations = "rotations e^{iωt} with learned decay inside the filter kernel"

// afaFamily is Adaptive Filter Attention (isotropic Algorithm 1).
var afaFamily = &family{
	arch: ArchAFA, modelTypes: afaModelType,
	detect:     func(cf *configFile) bool { return isAFAConfig(cf.raw) },
	parse:      func(c *Config, cf *configFile) error { return c.fromAFA(cf.data, cf.raw) },
	load:       loadAFA,
	headParams: afaHeadTable,
	positions:  filterRotations,
	hfConfig:   (*Config).afaHFConfig,
	// head_dim 2·d_model/heads (a multiple of 4), SwiGLU width 2·d_model,
	// complex biases on, RMSNorm ε 1e-6, tied head, default AFA options.
	small: func(s Size) (map[string]any, error) {
		if (2*s.DModel)%s.Heads != 0 || (2*s.DModel/s.Heads)%4 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d: need head_dim 2·d_model/heads a multiple of 4", s.DModel, s.Heads)
		}
		return map[string]any{
			"model_type": afaModelType, "hidden_size": s.DModel, "num_hidden_layers": s.Layers, "num_attention_heads": s.Heads,
			"intermediate_size": 2 * s.DModel, "vocab_size": s.Vocab, "max_position_embeddings": s.MaxPos,
			"qkv_bias": true, "o_bias": true,
		}, nil
	},
	prefix: "model.",
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) {
		return afaGenerated(rng, c.Heads, c.DHead/2)
	},
}
