package model

import "fmt"

// Qwen3-MoE (Hugging Face Qwen3MoeForCausalLM) is the Qwen3 block (per-head
// QK RMSNorm before RoPE, GQA) with a mixture of experts (moe.go) for the
// MLP of its sparse layers:
//
//	x ← x + attn(rms₁(x))
//	x ← x + Σ_{e∈top-k(p)} w_e·SwiGLU_e(h),  h = rms₂(x), p = softmax(h·W_rᵀ)
//
// with w = p_S/Σp_S when norm_topk_prob (else the k probabilities as they
// are), experts of moe_intermediate_size. Layer l is sparse unless it is
// in mlp_only_layers or (l+1) is not a multiple of decoder_sparse_step;
// the others have the dense SwiGLU MLP of intermediate_size. Names:
// model.layers.{l}.mlp.gate (router), mlp.experts.{gate_up_proj,
// down_proj} (transformers 5) or mlp.experts.{e}.{gate,up,down}_proj
// (the released checkpoints), mlp.{gate,up,down}_proj in dense layers.

// ArchQwen3MoE is Qwen3-MoE's architecture.
const ArchQwen3MoE Arch = "qwen3_moe"

// qwen3MoE: norm_topk_prob, moe_intermediate_size, dense layers.
var qwen3MoE = moeSpec{expertWidth: true, denseLayers: true}

var qwen3MoEFamily = &family{
	arch: ArchQwen3MoE, modelTypes: "qwen3_moe",
	detect: func(cf *configFile) bool { return cf.modelType() == "qwen3_moe" },
	parse: func(c *Config, cf *configFile) error {
		c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
		if u := cf.r.UseSlidingWindow; u != nil && *u {
			return fmt.Errorf("field use_sliding_window true is not supported for qwen3_moe (Qwen3-MoE's sliding layers are not implemented)")
		}
		if err := c.fromDecoder(&cf.r, false); err != nil {
			return err
		}
		c.QKVBias, c.OBias, c.QKNorm = cf.r.AttentionBias, cf.r.AttentionBias, true
		return parseMoE(c, cf, qwen3MoE)
	},
	load: func(m *Model, ld *loader) { loadMoEDecoder(m, ld, false) },
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "qwen3_moe", "Qwen3MoeForCausalLM")
		m["attention_bias"] = c.QKVBias
		return moeHFConfig(m, c, "num_experts", qwen3MoE)
	},
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "qwen3_moe", "Qwen3MoeForCausalLM")
		if err != nil {
			return nil, err
		}
		// layer 0 dense, the others sparse
		m["num_experts"], m["num_experts_per_tok"], m["moe_intermediate_size"] = 4, 2, s.DModel
		m["norm_topk_prob"], m["mlp_only_layers"], m["decoder_sparse_step"] = true, []int{0}, 1
		return m, nil
	},
	prefix: "model.",
}
