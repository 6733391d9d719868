package model

// Mixtral (Hugging Face MixtralForCausalLM) is the Llama block with a
// mixture of experts for its MLP (moe.go) and a sliding window on every
// layer when config.json sets sliding_window:
//
//	x ← x + attn(rms₁(x))                  (GQA, RoPE, window sliding_window)
//	x ← x + Σ_{e∈top-k(p)} w_e·SwiGLU_e(h),  h = rms₂(x), p = softmax(h·W_rᵀ), w = p_S/Σp_S
//
// The k weights are always renormalised to sum 1 (Mixtral has no
// norm_topk_prob). Names: model.layers.{l}.mlp.gate (the router) and
// mlp.experts.{gate_up_proj [E, 2F, D], down_proj [E, D, F]} as
// transformers 5 saves them, or block_sparse_moe.gate and
// block_sparse_moe.experts.{e}.{w1 (gate), w3 (up), w2 (down)} as the
// released checkpoints hold them; attention as Llama's.

// ArchMixtral is Mixtral's architecture.
const ArchMixtral Arch = "mixtral"

// mixtralMoE: the weights always renormalised, experts of
// intermediate_size.
var mixtralMoE = moeSpec{normalize: true}

var mixtralFamily = &family{
	arch: ArchMixtral, modelTypes: "mixtral",
	detect: func(cf *configFile) bool { return cf.modelType() == "mixtral" },
	parse: func(c *Config, cf *configFile) error {
		c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
		if err := c.fromDecoder(&cf.r, true); err != nil {
			return err
		}
		return parseMoE(c, cf, mixtralMoE)
	},
	load: func(m *Model, ld *loader) { loadMoEDecoder(m, ld, false) },
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "mixtral", "MixtralForCausalLM")
		m["sliding_window"] = nil
		if c.Sliding > 0 {
			m["sliding_window"] = c.Sliding
		}
		return moeHFConfig(m, c, "num_local_experts", mixtralMoE)
	},
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "mixtral", "MixtralForCausalLM")
		if err != nil {
			return nil, err
		}
		m["num_local_experts"], m["num_experts_per_tok"], m["intermediate_size"] = 4, 2, s.DModel
		return m, nil
	},
	prefix: "model.",
}
