package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
)

// ArchRT is the RT-Transformer of paper 004 ("RT-Transformer: The
// Transformer Block as a Spherical State Estimator"): Radial–Tangential
// Robust Filter Attention (Algorithm 1) inside the block of Algorithm 2.
// See rt.go for the pass.
//
// The paper releases no code or checkpoint; the layout is this project's.
// config.json: "model_type": "rt_transformer", hidden_size (D),
// num_hidden_layers, num_attention_heads (H), head_dim (reals per head:
// 2C for C complex channels; default 2·D/H, i.e. Algorithm 1's d → 2d),
// intermediate_size (SwiGLU width), vocab_size, max_position_embeddings,
// rms_norm_eps [1e-6], hidden_act ["silu"], tie_word_embeddings [true],
// qkv_bias [false], o_bias [false], and an "rt" object with the options of
// RTConfig. Tensors (a PyTorch module tree model.{embed_tokens, layers,
// norm} + lm_head):
//
//	model.embed_tokens.weight                 [V, D]
//	model.layers.{l}.attn.{q,k,v}_proj.weight [H·2C, D] (+ .bias with qkv_bias): L_q, L_k, L_v (R → C^{HC});
//	                                          output row (h·C + c)·2 + 0 is Re of channel c of head h, + 1 is Im
//	model.layers.{l}.attn.o_proj.weight       [D, H·2C] (+ .bias with o_bias): L_o (C → R), same column layout
//	model.layers.{l}.attn.omega               [H, C]  angular frequencies ω (rad/token), used as stored
//	model.layers.{l}.attn.{mu,sigma,eta,gamma,tau_theta,nu,beta}_raw  [H] each; the pass uses
//	    μ = softplus(mu_raw), σ̃² (or σ² with rt.kernel "prop1") = softplus(sigma_raw),
//	    η² = softplus(eta_raw), γ² = softplus(gamma_raw), τ_θ² = softplus(tau_theta_raw),
//	    ν = softplus(nu_raw), β_s = softplus(beta_raw)        (softplus: β = 1, threshold 20)
//	model.layers.{l}.retract_norm.weight      [D] (rt.retraction "rms" only)
//	model.layers.{l}.mlp.{gate,up,down}_proj.weight   the FFN of Algorithm 2 (SwiGLU, no bias)
//	model.norm.weight                         [D] final RMSNorm before the head
//	lm_head.weight                            [V, D] (absent when tied)
const ArchRT Arch = "rt_transformer"

// rtModelType is config.json's model_type for RT checkpoints.
const rtModelType = "rt_transformer"

// RTConfig holds the RT options: every choice notes 004 §F leaves open,
// with its JSON name in the "rt" object and its default in brackets.
type RTConfig struct {
	// NormScope ("norm_scope" ["head"]): "head" normalizes q, k, v and
	// takes M_i = ‖v_i‖ per head slice (Algorithm 1 read per head); "global"
	// normalizes over all heads and uses the global ‖v_i‖ (App. D.3: each
	// head works on a slice of the globally normalized direction). §F.11.
	NormScope string
	// RobustDim ("robust_dim" ["complex"]): the d of the exponent
	// (ν + d)/d: "complex" C (channels per head, as RFA) or "real" 2C. §F.12.
	RobustDim string
	// Kernel ("kernel" ["alg1"]): the key-side variance Σ(Δt):
	// "alg1" σ̃²(1 − E²) + η²E² + γ² (Algorithm 1 step 3, sigma_raw → σ̃²);
	// "prop1" σ²·φ(μ, Δt) + η²E² + γ², φ = (1 − e^{−2μΔt})/(2μ) (Prop. 1,
	// Eq. 7; sigma_raw → σ²; φ = Δt at μ = 0). They agree for σ̃² = σ²/(2μ).
	Kernel string
	// KappaEps ("kappa_eps" [1e-6]) is Eq. 10's ε in m² + ε (Algorithm 1
	// omits it; §A.16 step 3).
	KappaEps float64
	// MinExponent ("min_exponent" [-50]) clamps −μΔt from below before the
	// exponential (§F.13).
	MinExponent float64
	// TangentProjection ("tangent_projection" [true]): Algorithm 1 step 6
	// (Eq. 15/18), Ū = V̄ − (v̂ᵀV̄/‖v̂‖²)v̂; false adds V̄ itself (the
	// non-projected update of App. D.4, §F.16).
	TangentProjection bool
	// Retraction ("retraction" ["l2"]): step 7's U⁺ = Norm(Z⁺): "l2" the
	// unit sphere, "rms" RMSNorm with the learned gain retract_norm.weight
	// (r = γ√d, Sec. 3.5). §F.10.
	Retraction string
}

type rtOptRaw struct {
	NormScope         *string  `json:"norm_scope"`
	RobustDim         *string  `json:"robust_dim"`
	Kernel            *string  `json:"kernel"`
	KappaEps          *float64 `json:"kappa_eps"`
	MinExponent       *float64 `json:"min_exponent"`
	TangentProjection *bool    `json:"tangent_projection"`
	Retraction        *string  `json:"retraction"`
}

func isRTConfig(raw map[string]json.RawMessage) bool { return modelTypeIs(raw, rtModelType) }

// choice sets *dst to *p when p is given and one of allowed; the error
// names the field.
func choice(dst *string, p *string, field string, allowed ...string) error {
	if p == nil {
		return nil
	}
	for _, a := range allowed {
		if *p == a {
			*dst = a
			return nil
		}
	}
	return fmt.Errorf("field %s = %q is not one of %q", field, *p, allowed)
}

// decodeStrict decodes the options object v into dst, refusing unknown
// fields (a misspelt option must not be ignored).
func decodeStrict(v json.RawMessage, dst any, field string) error {
	if len(v) == 0 || string(v) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return fmt.Errorf("field %s: %v", field, err)
	}
	return nil
}

// fromFilterSizes reads the size fields shared by the RT and AFA configs.
func (c *Config) fromFilterSizes(r *filterSizesRaw) error {
	var err error
	for _, f := range []struct {
		dst  *int
		name string
		p    *int
	}{
		{&c.DModel, "hidden_size", r.Hidden}, {&c.Layers, "num_hidden_layers", r.Layers},
		{&c.Heads, "num_attention_heads", r.Heads}, {&c.DMLP, "intermediate_size", r.Inter},
		{&c.Vocab, "vocab_size", r.Vocab}, {&c.MaxPos, "max_position_embeddings", r.MaxPos},
	} {
		if *f.dst, err = need(f.name, f.p); err != nil {
			return err
		}
	}
	c.KVHeads = c.Heads
	c.DHead = 2 * c.DModel / c.Heads
	if r.HeadDim != nil {
		if c.DHead, err = need("head_dim", r.HeadDim); err != nil {
			return err
		}
	} else if (2*c.DModel)%c.Heads != 0 {
		return fmt.Errorf("head_dim is not given and 2·hidden_size %d is not a multiple of num_attention_heads %d", 2*c.DModel, c.Heads)
	}
	if c.DHead%2 != 0 {
		return fmt.Errorf("head_dim %d must be even: it holds (re, im) pairs of complex channels", c.DHead)
	}
	c.NormEps = 1e-6
	if r.Eps != nil {
		if !(*r.Eps >= 0) {
			return fmt.Errorf("rms_norm_eps %v must be ≥ 0", *r.Eps)
		}
		c.NormEps = *r.Eps
	}
	c.Act = r.Act
	if c.Act == "" {
		c.Act = "silu"
	}
	if _, ok := activations[c.Act]; !ok {
		return fmt.Errorf("hidden_act %q is not supported", c.Act)
	}
	c.TiedHead = r.Tied == nil || *r.Tied
	c.QKVBias, c.OBias = r.QKVBias, r.OBias
	c.Gate, c.DType = GateNone, r.DType
	c.RoPE = RoPEConfig{Type: "default", Factor: 1}
	return nil
}

// fromRT fills c from an RT config.json.
func (c *Config) fromRT(data []byte, raw map[string]json.RawMessage) error {
	var r filterSizesRaw
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	c.Arch, c.ModelType = ArchRT, rtModelType
	if err := c.fromFilterSizes(&r); err != nil {
		return err
	}
	var o rtOptRaw
	if err := decodeStrict(raw["rt"], &o, "rt"); err != nil {
		return err
	}
	rc := &RTConfig{NormScope: "head", RobustDim: "complex", Kernel: "alg1", KappaEps: 1e-6,
		MinExponent: -50, TangentProjection: true, Retraction: "l2"}
	for _, err := range []error{
		choice(&rc.NormScope, o.NormScope, "rt.norm_scope", "head", "global"),
		choice(&rc.RobustDim, o.RobustDim, "rt.robust_dim", "complex", "real"),
		choice(&rc.Kernel, o.Kernel, "rt.kernel", "alg1", "prop1"),
		choice(&rc.Retraction, o.Retraction, "rt.retraction", "l2", "rms"),
	} {
		if err != nil {
			return err
		}
	}
	if o.KappaEps != nil {
		if !(*o.KappaEps >= 0) || math.IsInf(*o.KappaEps, 0) {
			return fmt.Errorf("field rt.kappa_eps = %v must be finite and ≥ 0", *o.KappaEps)
		}
		rc.KappaEps = *o.KappaEps
	}
	if o.MinExponent != nil {
		if !(*o.MinExponent <= 0) {
			return fmt.Errorf("field rt.min_exponent = %v must be ≤ 0", *o.MinExponent)
		}
		rc.MinExponent = *o.MinExponent
	}
	if o.TangentProjection != nil {
		rc.TangentProjection = *o.TangentProjection
	}
	c.RT = rc
	return nil
}

// rtHFConfig returns the config.json fields of an RT configuration.
func (c *Config) rtHFConfig() map[string]any {
	r := c.RT
	return map[string]any{
		"model_type": rtModelType, "architectures": []string{"RTTransformerForCausalLM"},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"head_dim": c.DHead, "intermediate_size": c.DMLP, "vocab_size": c.Vocab,
		"max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps, "hidden_act": c.Act,
		"tie_word_embeddings": c.TiedHead, "qkv_bias": c.QKVBias, "o_bias": c.OBias, "torch_dtype": "float32",
		"rt": map[string]any{
			"norm_scope": r.NormScope, "robust_dim": r.RobustDim, "kernel": r.Kernel, "kappa_eps": r.KappaEps,
			"min_exponent": r.MinExponent, "tangent_projection": r.TangentProjection, "retraction": r.Retraction,
		},
	}
}

// rtFamily is the RT-Transformer (Algorithm 1).
var rtFamily = &family{
	arch: ArchRT, modelTypes: rtModelType,
	detect:     func(cf *configFile) bool { return isRTConfig(cf.raw) },
	parse:      func(c *Config, cf *configFile) error { return c.fromRT(cf.data, cf.raw) },
	load:       loadRT,
	headParams: rtHeadTable,
	positions:  filterRotations,
	hfConfig:   (*Config).rtHFConfig,
	// head_dim 2·d_model/heads (Algorithm 1's d → 2d), SwiGLU width
	// 2·d_model, RMSNorm ε 1e-6, tied head, default RT options.
	small: func(s Size) (map[string]any, error) {
		if (2*s.DModel)%s.Heads != 0 || (2*s.DModel/s.Heads)%2 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d: need an even head_dim 2·d_model/heads", s.DModel, s.Heads)
		}
		return map[string]any{
			"model_type": rtModelType, "hidden_size": s.DModel, "num_hidden_layers": s.Layers, "num_attention_heads": s.Heads,
			"intermediate_size": 2 * s.DModel, "vocab_size": s.Vocab, "max_position_embeddings": s.MaxPos,
		}, nil
	},
	prefix: "model.",
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) {
		return rtGenerated(rng, c.Heads, c.DHead/2)
	},
}
