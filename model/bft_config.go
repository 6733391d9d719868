package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
)

// ArchBFT is the Bayesian Filtering Transformer of Long et al., "Precision
// Tracked Transformer via Kalman Filtering, Kriging and Process Noise"
// (paper 003): a pre-norm decoder whose layers carry a precision vector
// λ_t ∈ R^d per token (Algorithm 1, App. C). See bft.go for the pass.
//
// No BFT code or checkpoint has been released, so the checkpoint layout is
// this project's: config.json says "model_type": "bft" and otherwise holds
// the fields of a Hugging Face Llama config (hidden_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
// intermediate_size, vocab_size, max_position_embeddings, rms_norm_eps,
// hidden_act, rope_theta, rope_scaling, tie_word_embeddings,
// attention_bias, mlp_bias) plus "use_qk_norm" (Qwen3-style per-head
// RMSNorm of q and k before RoPE) and a "bft" object with the options of
// BFTConfig. The weights use the Llama module tree, so a Llama or Qwen3
// checkpoint becomes a BFT one by adding the BFT tensors (the paper's
// LLM-SFT experiment grafts BFT onto TinyLlama, App. O):
//
//	model.embed_tokens.weight                  [V, D]
//	model.layers.{l}.input_layernorm.weight    [D]
//	model.layers.{l}.self_attn.{q,k,v}_proj.weight (+ .bias with attention_bias)
//	model.layers.{l}.self_attn.o_proj.weight   [D, H·dh]  (only with bft.output_proj)
//	model.layers.{l}.self_attn.{q,k}_norm.weight [dh]     (only with use_qk_norm)
//	model.layers.{l}.post_attention_layernorm.weight [D]
//	model.layers.{l}.mlp.{gate,up,down}_proj.weight (+ .bias with mlp_bias)
//	model.layers.{l}.bft.q_logits              [D]   process noise Q = softplus(q_logits)·q_max (Eq. 9)
//	model.layers.{l}.bft.rho_logit            [1]   recency decay ρ = sigmoid(rho_logit) (bft.recency_decay only)
//	model.bft.tau_logits                       [V]   p_i of Eq. 10 (bft.initial_precision "table")
//	model.bft.tau_mlp.0.weight, .0.bias        [hid, D], [hid]   MLP_τ of Eq. 11 ("mlp")
//	model.bft.tau_mlp.2.weight, .2.bias        [1, hid], [1]
//	model.bft.tau_range                        [1]   τ_range of Eq. 11 ("mlp")
//	model.bft.tau_base                         [V]   τ_base,i (bft.tau_base_per_token only)
//	model.norm.weight, lm_head.weight          as Llama
const ArchBFT Arch = "bft"

// bftModelType is config.json's model_type for BFT checkpoints.
const bftModelType = "bft"

// BFTConfig holds the BFT options. Every choice the paper leaves open
// (notes 003 §F.3) is a field here with its JSON name in the "bft" object
// of config.json; absent fields take the default in brackets.
type BFTConfig struct {
	// OutputProj ("output_proj" [false]): false is the paper's layout (App.
	// C: "No W_O output projection"): head h's estimate and precision own
	// the residual coordinates [h·dh, (h+1)·dh) and h' = h + K ⊙ e. True
	// keeps the Llama o_proj (the LLM-SFT graft, App. O, which the paper
	// does not specify; notes §F.3.22): the gain acts in head space, where
	// coordinate i of the concatenated heads is identified with residual
	// coordinate i, and h' = h + W_O(K ⊙ e) + b_O. Both need H·dh = D.
	OutputProj bool
	// Observation ("observation" ["reml"]): the observation precision:
	// "reml" is Eq. 6, λobs = (n_eff + ν)/(S + ν·σ0²) per dimension;
	// "sandwich" is Eq. 13 (App. D), λobs = (Σα̃)²/Σα̃²(v − e)².
	Observation string
	// PriorNu and PriorSigma2 ("prior_nu" [1], "prior_sigma2" [1/head_dim])
	// are ν and σ0² of Eq. 6's inverse-χ² prior.
	PriorNu, PriorSigma2 float64
	// Kriging ("kriging" ["mean_precision"]): "mean_precision" adds
	// log λ̄_j, λ̄_j = mean over all D dimensions of λ_j, to every head's
	// logits (Eq. 2, Remark 1, App. C); "none" uses α̃ = α.
	Kriging string
	// RecencyDecay ("recency_decay" [false]) adds (t − j)·log ρ_l to the
	// logits, ρ_l = sigmoid(rho_logit) one scalar per layer shared by the
	// heads: this project's reading of the undefined "recency decay" of
	// App. J/L (ρ0 = 0.99 ↔ rho_logit = logit(0.99)).
	RecencyDecay bool
	// Jacobian ("jacobian" ["exact"]): "exact" uses the exact diagonal of
	// the FFN Jacobian at Norm(h') (App. G; the rank-16 SVD and the running
	// average of §3.2 are training-time approximations of it); "none" sets
	// J = 0 (pure process noise).
	Jacobian string
	// JacobianClip ("jacobian_clip" ["square"]) and JacobianEps
	// ("jacobian_eps" [0.01]): the §3.2 clip "at ε = 0.01" applied as
	// (1+J)² ≥ ε ("square") or |1+J| ≥ ε ("abs").
	JacobianClip string
	JacobianEps  float64
	// QMax ("q_max" [1]): Q = softplus(q_logits)·Q_max (Eq. 9).
	QMax float64
	// LambdaMax ("lambda_max" [100], the App. J reference configuration; 0:
	// no cap) caps the precisions named in LambdaMaxOn ("lambda_max_on"
	// [["obs", "posterior", "predicted"]]: λobs, λ' and λ''), notes §F.3.20.
	LambdaMax                          float64
	CapObs, CapPosterior, CapPredicted bool
	// InitialPrecision ("initial_precision" ["mlp"]): λ at layer 0,
	// broadcast over the D dimensions: "constant" τ_i = τ_base,i;
	// "table" τ_i = τ_base,i + softplus(p_i) (Eq. 10); "mlp"
	// τ_i = τ_range·τ_base,i + softplus(MLP_τ(x_i)) (Eq. 11, the paper's
	// experiments), x_i the token embedding, MLP_τ = Linear(D, hid) → GELU
	// (erf) → Linear(hid, 1).
	InitialPrecision string
	// TauBase ("tau_base" [1]) is τ_base,i for every token unless
	// TauBasePerToken ("tau_base_per_token" [false]), which reads it per
	// token from model.bft.tau_base.
	TauBase         float64
	TauBasePerToken bool
	// TauHidden ("tau_mlp_hidden" [16]) is MLP_τ's hidden width.
	TauHidden int
}

// bftRaw is the "bft" object of config.json.
type bftRaw struct {
	OutputProj       *bool    `json:"output_proj"`
	Observation      *string  `json:"observation"`
	PriorNu          *float64 `json:"prior_nu"`
	PriorSigma2      *float64 `json:"prior_sigma2"`
	Kriging          *string  `json:"kriging"`
	RecencyDecay     *bool    `json:"recency_decay"`
	Jacobian         *string  `json:"jacobian"`
	JacobianClip     *string  `json:"jacobian_clip"`
	JacobianEps      *float64 `json:"jacobian_eps"`
	QMax             *float64 `json:"q_max"`
	LambdaMax        *float64 `json:"lambda_max"`
	LambdaMaxOn      []string `json:"lambda_max_on"`
	InitialPrecision *string  `json:"initial_precision"`
	TauBase          *float64 `json:"tau_base"`
	TauBasePerToken  *bool    `json:"tau_base_per_token"`
	TauHidden        *int     `json:"tau_mlp_hidden"`
}

// modelTypeIs reports whether config.json's model_type is want.
func modelTypeIs(raw map[string]json.RawMessage, want string) bool {
	var mt string
	return raw["model_type"] != nil && json.Unmarshal(raw["model_type"], &mt) == nil && mt == want
}

// isBFTConfig reports whether config.json says "model_type": "bft".
func isBFTConfig(raw map[string]json.RawMessage) bool { return modelTypeIs(raw, bftModelType) }

// fromBFT fills c from a BFT config.json: the Llama fields through
// fromDecoder, then the "bft" object.
func (c *Config) fromBFT(r *rawConfig, raw map[string]json.RawMessage) error {
	c.Arch, c.ModelType = ArchBFT, bftModelType
	if err := c.fromDecoder(r, true); err != nil {
		return err
	}
	c.QKVBias, c.OBias, c.MLPBias = r.AttentionBias, r.AttentionBias, r.MLPBias
	c.QKNorm = r.UseQKNorm != nil && *r.UseQKNorm
	// The Kalman gain is BFT's output gate (Sec. 4.2: K = σ(log(λobs/λ)) has
	// the form of a sigmoid gate), one value per head dimension.
	c.Gate, c.GainGate = GateElementwise, true
	if c.Sliding > 0 {
		return fmt.Errorf("sliding_window %d: BFT has no sliding-window attention", c.Sliding)
	}
	if c.Heads*c.DHead != c.DModel {
		return fmt.Errorf("num_attention_heads·head_dim = %d·%d ≠ hidden_size %d: BFT identifies head dimension h·head_dim+i with residual dimension h·head_dim+i (App. C)",
			c.Heads, c.DHead, c.DModel)
	}
	if _, ok := activationSlopes[c.Act]; !ok {
		return fmt.Errorf("hidden_act %q: BFT needs the activation's derivative for the FFN Jacobian (supported: silu, swish, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu)", c.Act)
	}
	var br bftRaw
	if err := decodeStrict(raw["bft"], &br, "bft"); err != nil {
		return err
	}
	b := &BFTConfig{
		Observation: "reml", PriorNu: 1, PriorSigma2: 1 / float64(c.DHead), Kriging: "mean_precision",
		Jacobian: "exact", JacobianClip: "square", JacobianEps: 0.01, QMax: 1, LambdaMax: 100,
		CapObs: true, CapPosterior: true, CapPredicted: true,
		InitialPrecision: "mlp", TauBase: 1, TauHidden: 16,
	}
	setB := func(dst *bool, p *bool) {
		if p != nil {
			*dst = *p
		}
	}
	setB(&b.OutputProj, br.OutputProj)
	setB(&b.RecencyDecay, br.RecencyDecay)
	setB(&b.TauBasePerToken, br.TauBasePerToken)
	for _, err := range []error{
		choice(&b.Observation, br.Observation, "bft.observation", "reml", "sandwich"),
		choice(&b.Kriging, br.Kriging, "bft.kriging", "mean_precision", "none"),
		choice(&b.Jacobian, br.Jacobian, "bft.jacobian", "exact", "none"),
		choice(&b.JacobianClip, br.JacobianClip, "bft.jacobian_clip", "square", "abs"),
		choice(&b.InitialPrecision, br.InitialPrecision, "bft.initial_precision", "constant", "table", "mlp"),
	} {
		if err != nil {
			return err
		}
	}
	for _, f := range []struct {
		dst  *float64
		p    *float64
		name string
		min  float64 // the value must be > min, or ≥ min when zero
		zero bool
	}{
		{&b.PriorNu, br.PriorNu, "prior_nu", 0, false},
		{&b.PriorSigma2, br.PriorSigma2, "prior_sigma2", 0, false},
		{&b.JacobianEps, br.JacobianEps, "jacobian_eps", 0, false},
		{&b.QMax, br.QMax, "q_max", 0, true},
		{&b.LambdaMax, br.LambdaMax, "lambda_max", 0, true},
		{&b.TauBase, br.TauBase, "tau_base", 0, true},
	} {
		if f.p == nil {
			continue
		}
		v := *f.p
		if math.IsNaN(v) || math.IsInf(v, 0) || v < f.min || (!f.zero && v == f.min) {
			rel := "> 0"
			if f.zero {
				rel = "≥ 0"
			}
			return fmt.Errorf("field bft.%s = %v must be finite and %s", f.name, v, rel)
		}
		*f.dst = v
	}
	if br.LambdaMaxOn != nil {
		b.CapObs, b.CapPosterior, b.CapPredicted = false, false, false
		for _, s := range br.LambdaMaxOn {
			switch s {
			case "obs":
				b.CapObs = true
			case "posterior":
				b.CapPosterior = true
			case "predicted":
				b.CapPredicted = true
			default:
				return fmt.Errorf("field bft.lambda_max_on: %q is not one of \"obs\", \"posterior\", \"predicted\"", s)
			}
		}
	}
	if br.TauHidden != nil {
		if *br.TauHidden <= 0 {
			return fmt.Errorf("field bft.tau_mlp_hidden = %d must be positive", *br.TauHidden)
		}
		b.TauHidden = *br.TauHidden
	}
	c.BFT = b
	return nil
}

// bftHFConfig returns the config.json fields of a BFT configuration.
func (c *Config) bftHFConfig() map[string]any {
	b := c.BFT
	var on []string
	for _, x := range []struct {
		on   bool
		name string
	}{{b.CapObs, "obs"}, {b.CapPosterior, "posterior"}, {b.CapPredicted, "predicted"}} {
		if x.on {
			on = append(on, x.name)
		}
	}
	if on == nil {
		on = []string{}
	}
	m := map[string]any{
		"model_type": bftModelType, "architectures": []string{"BFTForCausalLM"},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
		"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
		"hidden_act": c.Act, "rope_theta": c.RoPE.Theta, "tie_word_embeddings": c.TiedHead,
		"attention_bias": c.QKVBias, "mlp_bias": c.MLPBias, "use_qk_norm": c.QKNorm,
		"torch_dtype": "float32",
		"bft": map[string]any{
			"output_proj": b.OutputProj, "observation": b.Observation, "prior_nu": b.PriorNu,
			"prior_sigma2": b.PriorSigma2, "kriging": b.Kriging, "recency_decay": b.RecencyDecay,
			"jacobian": b.Jacobian, "jacobian_clip": b.JacobianClip, "jacobian_eps": b.JacobianEps,
			"q_max": b.QMax, "lambda_max": b.LambdaMax, "lambda_max_on": on,
			"initial_precision": b.InitialPrecision, "tau_base": b.TauBase,
			"tau_base_per_token": b.TauBasePerToken, "tau_mlp_hidden": b.TauHidden,
		},
	}
	return m
}

// bftFamily is the Bayesian Filtering Transformer (Algorithm 1).
var bftFamily = &family{
	arch: ArchBFT, modelTypes: bftModelType,
	detect:   func(cf *configFile) bool { return isBFTConfig(cf.raw) },
	parse:    func(c *Config, cf *configFile) error { return c.fromBFT(&cf.r, cf.raw) },
	load:     loadBFT,
	hfConfig: (*Config).bftHFConfig,
	// head_dim d_model/heads, SwiGLU width 2·d_model, RMSNorm ε 1e-6, RoPE
	// θ 10000, tied head, default BFT options (change cfg.BFT's fields
	// before Generate).
	small: func(s Size) (map[string]any, error) {
		if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || (s.DModel/s.Heads)%2 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", s.DModel, s.Heads, s.KVHeads)
		}
		return map[string]any{
			"model_type": bftModelType, "hidden_size": s.DModel, "num_hidden_layers": s.Layers,
			"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": s.DModel / s.Heads,
			"intermediate_size": 2 * s.DModel, "vocab_size": s.Vocab, "max_position_embeddings": s.MaxPos,
			"rms_norm_eps": 1e-6, "hidden_act": "silu", "rope_theta": 10000.0, "tie_word_embeddings": true,
		}, nil
	},
	prefix:    "model.",
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) { return bftGenerated(rng) },
}
