package model

import (
	"fmt"
	"math"
)

// loadDecoder reads the weights of the Hugging Face decoder families that
// share the Llama layout: Llama/Mistral (optional attention_bias, mlp_bias),
// Qwen2 (q/k/v bias), Qwen3 (q_norm/k_norm per head) and Qiu et al.'s gated
// attention (gate rows packed in q_proj, see unpackGatedQ).
//
// Names: model.embed_tokens, model.layers.{l}.{input_layernorm,
// self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, post_attention_layernorm,
// mlp.{gate,up,down}_proj}, model.norm, lm_head. A base model saved without
// its LM head class has no "model." prefix; both are accepted.
func loadDecoder(m *Model, ld *loader) {
	c := &m.Config
	D, H, KV, dh, F, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP, c.Vocab
	p := "model."
	if !ld.has(p+"embed_tokens.weight") && ld.has("embed_tokens.weight") {
		p = ""
	}
	bias := func(on bool, name string, n int) []float32 {
		if !on {
			return nil
		}
		return ld.get(name, n)
	}
	ld.ignore("rotary_emb.inv_freq")
	m.Embed = ld.weight(p+"embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		a := fmt.Sprintf("%slayers.%d.self_attn.", p, l)
		mlp := fmt.Sprintf("%slayers.%d.mlp.", p, l)
		L.Norm1W = ld.get(fmt.Sprintf("%slayers.%d.input_layernorm.weight", p, l), D)
		L.Norm2W = ld.get(fmt.Sprintf("%slayers.%d.post_attention_layernorm.weight", p, l), D)

		if gp := c.GatePerHead(); gp > 0 {
			rows := H*dh + H*gp
			L.Wq, L.Wg = unpackGatedQ(ld.weight(a+"q_proj.weight", rows, D), H, KV, dh, gp)
			if c.QKVBias {
				bq, bg := unpackGatedQ(f32Weight(ld.get(a+"q_proj.bias", rows), 1), H, KV, dh, gp)
				L.Bq, L.Bg = bq.widened(), bg.widened()
			}
		} else {
			L.Wq = ld.weight(a+"q_proj.weight", H*dh, D)
			L.Bq = bias(c.QKVBias, a+"q_proj.bias", H*dh)
		}
		L.Wk = ld.weight(a+"k_proj.weight", KV*dh, D)
		L.Bk = bias(c.QKVBias, a+"k_proj.bias", KV*dh)
		L.Wv = ld.weight(a+"v_proj.weight", KV*dh, D)
		L.Bv = bias(c.QKVBias, a+"v_proj.bias", KV*dh)
		L.Wo = ld.weight(a+"o_proj.weight", D, H*dh)
		L.Bo = bias(c.OBias, a+"o_proj.bias", D)
		if c.QKNorm {
			L.QNorm = ld.get(a+"q_norm.weight", dh)
			L.KNorm = ld.get(a+"k_norm.weight", dh)
		}

		L.WGate = ld.weight(mlp+"gate_proj.weight", F, D)
		L.BGate = bias(c.MLPBias, mlp+"gate_proj.bias", F)
		L.WUp = ld.weight(mlp+"up_proj.weight", F, D)
		L.BUp = bias(c.MLPBias, mlp+"up_proj.bias", F)
		L.WDown = ld.weight(mlp+"down_proj.weight", D, F)
		L.BDown = bias(c.MLPBias, mlp+"down_proj.bias", D)
	}
	m.FinalW = ld.get(p+"norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// loadHead sets the unembedding: the embedding matrix when tied (a stored
// lm_head.weight is then accepted but not needed), else lm_head.weight.
func loadHead(m *Model, ld *loader, name string) {
	if m.TiedHead {
		if ld.has(name) {
			ld.used[name] = true
		}
		m.Head = m.Embed
		return
	}
	m.Head = ld.weight(name, m.Vocab, m.DModel)
}

// The architectures of the Llama-layout decoder families.
const (
	ArchLlama Arch = "llama" // Llama 1–3, Mistral without sliding window
	ArchQwen2 Arch = "qwen2" // Qwen2 / Qwen2.5: q/k/v bias
	ArchQwen3 Arch = "qwen3" // Qwen3: per-head QK RMSNorm before RoPE
)

// The Hugging Face decoder families that share the Llama layout
// (loadDecoder) and the decoder pass (forward.go).
var (
	llamaFamily = &family{
		arch: ArchLlama, modelTypes: "llama, mistral",
		detect: func(cf *configFile) bool { return cf.modelType() == "llama" || cf.modelType() == "mistral" },
		parse: func(c *Config, cf *configFile) error {
			c.ModelType, c.DType = cf.r.ModelType, cf.r.TorchDType
			if err := c.fromDecoder(&cf.r, true); err != nil {
				return err
			}
			c.QKVBias, c.OBias, c.MLPBias = cf.r.AttentionBias, cf.r.AttentionBias, cf.r.MLPBias
			return nil
		},
		load: loadDecoder,
		hfConfig: func(c *Config) map[string]any {
			m := decoderHFConfig(c, "llama", "LlamaForCausalLM")
			m["attention_bias"], m["mlp_bias"] = c.QKVBias, c.MLPBias
			return m
		},
		small:  func(s Size) (map[string]any, error) { return smallDecoder(s, "llama", "LlamaForCausalLM") },
		prefix: "model.",
	}
	qwen2Family = &family{
		arch: ArchQwen2, modelTypes: "qwen2",
		detect: func(cf *configFile) bool { return cf.modelType() == "qwen2" },
		parse: func(c *Config, cf *configFile) error {
			c.ModelType, c.DType = cf.r.ModelType, cf.r.TorchDType
			c.QKVBias = true
			return c.fromDecoder(&cf.r, false)
		},
		load:     loadDecoder,
		hfConfig: func(c *Config) map[string]any { return decoderHFConfig(c, "qwen2", "Qwen2ForCausalLM") },
		small:    func(s Size) (map[string]any, error) { return smallDecoder(s, "qwen2", "Qwen2ForCausalLM") },
		prefix:   "model.",
	}
	qwen3Family = &family{
		arch: ArchQwen3, modelTypes: "qwen3",
		detect: func(cf *configFile) bool { return cf.modelType() == "qwen3" },
		parse: func(c *Config, cf *configFile) error {
			c.ModelType, c.DType = cf.r.ModelType, cf.r.TorchDType
			if err := c.fromDecoder(&cf.r, false); err != nil {
				return err
			}
			c.QKVBias, c.OBias, c.MLPBias = cf.r.AttentionBias, cf.r.AttentionBias, cf.r.MLPBias
			c.QKNorm = true
			return nil
		},
		load: loadDecoder,
		hfConfig: func(c *Config) map[string]any {
			m := decoderHFConfig(c, "qwen3", "Qwen3ForCausalLM")
			m["attention_bias"] = c.QKVBias
			return m
		},
		small:  func(s Size) (map[string]any, error) { return smallDecoder(s, "qwen3", "Qwen3ForCausalLM") },
		prefix: "model.",
	}
)

// decoderHFConfig returns the config.json fields every Llama-layout family
// writes, with its model_type and architecture class.
func decoderHFConfig(c *Config, modelType, class string) map[string]any {
	m := map[string]any{
		"model_type": modelType, "architectures": []string{class},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
		"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
		"hidden_act": c.Act, "rope_theta": c.RoPE.Theta, "tie_word_embeddings": c.TiedHead,
		"torch_dtype": "float32", "rope_scaling": nil,
	}
	rc := c.RoPE
	if rc.Dims > 0 {
		m["partial_rotary_factor"] = partialRotaryFactor(rc.Dims, c.DHead)
	}
	if rc.Type == "" || rc.Type == "default" {
		return m
	}
	// rope_scaling as transformers before 5 wrote it (5 reads it too), with
	// every field config.json gave; the pretraining length also at the top
	// level, where Phi-3's config class would otherwise supply its default.
	rs := map[string]any{"rope_type": rc.Type, "factor": rc.Factor}
	switch rc.Type {
	case "llama3":
		rs["low_freq_factor"], rs["high_freq_factor"] = rc.LowFreq, rc.HighFreq
	case "yarn":
		for k, v := range map[string]float64{"beta_fast": rc.BetaFast, "beta_slow": rc.BetaSlow, "mscale": rc.MScale, "mscale_all_dim": rc.MScaleAllDim} {
			if v != 0 {
				rs[k] = v
			}
		}
		if rc.NoTruncate {
			rs["truncate"] = false
		}
	case "longrope":
		rs["short_factor"], rs["long_factor"] = rc.Factors.Short, rc.Factors.Long
	}
	if rc.AttnFactor != 0 {
		rs["attention_factor"] = rc.AttnFactor
	}
	if rc.Type == "llama3" || rc.Type == "yarn" || rc.Type == "longrope" {
		rs["original_max_position_embeddings"] = rc.OrigMax
		m["original_max_position_embeddings"] = rc.OrigMax
	}
	m["rope_scaling"] = rs
	return m
}

// partialRotaryFactor returns the partial_rotary_factor f that a reader
// turns back into rd rotated dimensions of dh, int(dh·f) = rd: rd/dh, or the
// next float64 above it where dh·(rd/dh) rounds below rd (44·(30/44) gives
// 29.999…).
func partialRotaryFactor(rd, dh int) float64 {
	f := float64(rd) / float64(dh)
	if int(float64(dh)*f) != rd {
		f = math.Nextafter(f, 2)
	}
	return f
}

// smallDecoder returns the config.json fields of a small Llama-layout model:
// head_dim d_model/heads (even), MLP 3·d_model, RMSNorm ε 1e-6, SiLU, tied
// head, RoPE θ 10000.
func smallDecoder(s Size, modelType, class string) (map[string]any, error) {
	if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || (s.DModel/s.Heads)%2 != 0 {
		return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", s.DModel, s.Heads, s.KVHeads)
	}
	c := &Config{Layers: s.Layers, DModel: s.DModel, Heads: s.Heads, KVHeads: s.KVHeads, DHead: s.DModel / s.Heads,
		DMLP: 3 * s.DModel, Vocab: s.Vocab, MaxPos: s.MaxPos, NormEps: 1e-6, Act: "silu", TiedHead: true,
		RoPE: RoPEConfig{Theta: 10000, Type: "default", Factor: 1}}
	return decoderHFConfig(c, modelType, class), nil
}
