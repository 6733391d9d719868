package model

import "fmt"

// Qiu et al.'s gated attention ("Gated Attention for Large Language Models",
// the checkpoints behind BFT Appendix I) runs the Qwen3 block with a sigmoid
// gate on each head's attention output, before o_proj:
//
//	z_h = sigmoid(x·W_θ[:, h]) ⊙ Σ_j α_hj v_j
//
// The gate logits come from the same normalized input as the queries and are
// packed inside q_proj: its output, viewed as [KV groups, G·dh + G·g] with
// G = H/KV query heads per group, holds for each group the G·dh query rows of
// heads gG..gG+G−1 followed by their G·g gate rows (g = 1 headwise, g = dh
// elementwise). The gate sees neither q_norm nor RoPE. The configuration
// fields are headwise_attn_output_gate, elementwise_attn_output_gate,
// use_qk_norm and qkv_bias (bias on q, k, v and o_proj); model_type may say
// qwen2.

// unpackGatedQ splits a packed q_proj weight [KV·(G·dh + G·g), in] (or
// bias, in = 1) into query rows [H·dh, in] in head order and gate rows
// [H·g, in]: two views of w's storage, made of its runs of G·dh and G·g
// rows (see Weight).
func unpackGatedQ(w Weight, H, KV, dh, g int) (q, gate Weight) {
	G := H / KV
	group := G*dh + G*g
	return w.runsOf(0, G*dh, group), w.runsOf(G*dh, G*g, group)
}

// ArchGated is Qiu et al. gated attention (Qwen3 code with an output gate packed in q_proj).
const ArchGated Arch = "gated"

// gatedFamily is Qiu et al.'s gated attention: the Qwen3 (or Qwen2) layout
// recognised by its gate fields.
var gatedFamily = &family{
	arch: ArchGated, modelTypes: "qwen3 or qwen2 with headwise_attn_output_gate / elementwise_attn_output_gate (Qiu et al.)",
	detect: func(cf *configFile) bool {
		r := &cf.r
		gated := (r.Headwise != nil && *r.Headwise) || (r.Elementwise != nil && *r.Elementwise)
		return gated && (r.ModelType == "qwen3" || r.ModelType == "qwen2")
	},
	parse: func(c *Config, cf *configFile) error {
		r := &cf.r
		c.ModelType, c.DType = r.ModelType, r.TorchDType
		if err := c.fromDecoder(r, false); err != nil {
			return err
		}
		// Qiu et al.'s attention puts bias on q, k, v and o when qkv_bias.
		b := r.QKVBias != nil && *r.QKVBias
		c.QKVBias, c.OBias = b, b
		c.QKNorm = r.UseQKNorm == nil || *r.UseQKNorm
		if r.Headwise != nil && *r.Headwise && r.Elementwise != nil && *r.Elementwise {
			return fmt.Errorf("headwise_attn_output_gate and elementwise_attn_output_gate are both true")
		}
		c.Gate = GateElementwise
		if r.Headwise != nil && *r.Headwise {
			c.Gate = GateHeadwise
		}
		return nil
	},
	load: loadDecoder,
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "qwen3", "Qwen3ForCausalLM")
		m["headwise_attn_output_gate"] = c.Gate == GateHeadwise
		m["elementwise_attn_output_gate"] = c.Gate == GateElementwise
		m["use_qk_norm"], m["qkv_bias"] = c.QKNorm, c.QKVBias
		return m
	},
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "qwen3", "Qwen3ForCausalLM")
		if err == nil {
			m["headwise_attn_output_gate"], m["elementwise_attn_output_gate"] = true, false
			m["use_qk_norm"], m["qkv_bias"] = true, false
		}
		return m, err
	},
	prefix: "model.",
}
