package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// OLMoE (Hugging Face OlmoeForCausalLM) is the Llama pre-norm block with
// QK RMSNorm over the whole projection (q_norm [H·dh], k_norm [KV·dh],
// before the split into heads and RoPE) and a mixture of experts (moe.go)
// for every MLP:
//
//	x ← x + attn(rms₁(x))
//	x ← x + Σ_{e∈top-k(p)} w_e·SwiGLU_e(h),  h = rms₂(x), p = softmax(h·W_rᵀ)
//
// with the k probabilities as they are (norm_topk_prob false, the
// released setting: they sum to less than 1), or renormalised when
// norm_topk_prob is true. clip_qkv c > 0 clamps q, k and v to [−c, c]
// after the projections and QK-norm, before RoPE (Config.ClipQKV).
// Names: model.layers.{l}.mlp.gate (router), mlp.experts.{gate_up_proj,
// down_proj} (transformers 5) or mlp.experts.{e}.{gate,up,down}_proj (the
// released checkpoints).

// ArchOLMoE is OLMoE's architecture.
const ArchOLMoE Arch = "olmoe"

// olmoeMoE: norm_topk_prob, experts of intermediate_size.
var olmoeMoE = moeSpec{}

var olmoeFamily = &family{
	arch: ArchOLMoE, modelTypes: "olmoe",
	detect: func(cf *configFile) bool { return cf.modelType() == "olmoe" },
	parse: func(c *Config, cf *configFile) error {
		c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
		if err := c.fromDecoder(&cf.r, false); err != nil {
			return err
		}
		if raw, ok := cf.raw["clip_qkv"]; ok && string(raw) != "null" {
			var clip float64
			if err := json.Unmarshal(raw, &clip); err != nil || !(clip > 0) || math.IsInf(clip, 0) {
				return fmt.Errorf("field clip_qkv %s: want null (no clamping) or a positive number", raw)
			}
			c.ClipQKV = float32(clip)
		}
		c.QKVBias, c.OBias, c.QKNorm = cf.r.AttentionBias, cf.r.AttentionBias, true
		return parseMoE(c, cf, olmoeMoE)
	},
	load: func(m *Model, ld *loader) { loadMoEDecoder(m, ld, true) },
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "olmoe", "OlmoeForCausalLM")
		m["attention_bias"], m["clip_qkv"] = c.QKVBias, nil
		if c.ClipQKV > 0 {
			m["clip_qkv"] = c.ClipQKV
		}
		return moeHFConfig(m, c, "num_experts", olmoeMoE)
	},
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "olmoe", "OlmoeForCausalLM")
		if err != nil {
			return nil, err
		}
		m["num_experts"], m["num_experts_per_tok"], m["intermediate_size"], m["norm_topk_prob"] = 4, 2, s.DModel, false
		return m, nil
	},
	prefix: "model.",
}
