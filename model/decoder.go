package model

import (
	"encoding/json"
	"fmt"
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
	if c.RoPE.Type != "" && c.RoPE.Type != "default" {
		rs := map[string]any{"rope_type": c.RoPE.Type, "factor": c.RoPE.Factor}
		if c.RoPE.Type == "llama3" {
			rs["low_freq_factor"], rs["high_freq_factor"] = c.RoPE.LowFreq, c.RoPE.HighFreq
			rs["original_max_position_embeddings"] = c.RoPE.OrigMax
		}
		m["rope_scaling"] = rs
	}
	return m
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

// withRopeParameters reads transformers 5's rope_parameters object into the
// fields fromDecoder reads (rope_theta, rope_scaling), for the families
// whose config.json is written that way (SmolLM3, Granite, Gemma,
// GPT-NeoX): a non-empty rope_scaling object comes first, as in
// transformers' RotaryEmbeddingConfigMixin, then rope_parameters; the base
// is the object's rope_theta, else the top-level rope_theta, else
// defaultTheta (the config class's default_theta: SmolLM3's is 2·10⁶).
// It returns the partial_rotary_factor the object holds (0: none).
func withRopeParameters(r *rawConfig, raw map[string]json.RawMessage, defaultTheta float64) (partial float64, err error) {
	field, obj := "rope_scaling", raw["rope_scaling"]
	if len(obj) == 0 || string(obj) == "null" || string(obj) == "{}" {
		field, obj = "rope_parameters", raw["rope_parameters"]
	}
	if len(obj) == 0 || string(obj) == "null" {
		if r.RopeTheta == nil {
			r.RopeTheta = &defaultTheta
		}
		return 0, nil
	}
	var perType map[string]json.RawMessage
	if json.Unmarshal(obj, &perType) == nil {
		for _, lt := range []string{"full_attention", "sliding_attention"} {
			if _, ok := perType[lt]; ok {
				return 0, fmt.Errorf("field %s: one RoPE per layer type (%s) is not supported for model_type %q; give one set of parameters for all layers", field, lt, r.ModelType)
			}
		}
	}
	var e struct {
		Theta   *float64 `json:"rope_theta"`
		Partial *float64 `json:"partial_rotary_factor"`
		Type    string   `json:"rope_type"`
		OldType string   `json:"type"`
	}
	if err := json.Unmarshal(obj, &e); err != nil {
		return 0, fmt.Errorf("field %s: want an object with numeric rope_theta and partial_rotary_factor: %v", field, err)
	}
	switch {
	case e.Theta != nil:
		r.RopeTheta = e.Theta
	case r.RopeTheta == nil:
		r.RopeTheta = &defaultTheta
	}
	if e.Type == "" {
		e.Type = e.OldType
	}
	switch e.Type {
	case "", "default", "linear", "dynamic", "llama3":
	default:
		return 0, fmt.Errorf("%s.rope_type %q is not supported (supported: default, linear, dynamic, llama3)", field, e.Type)
	}
	r.RopeScaling = nil // the base alone: no scaling
	if e.Type != "" && e.Type != "default" {
		r.RopeScaling = obj
	}
	if e.Partial != nil {
		if !(*e.Partial > 0 && *e.Partial <= 1) {
			return 0, fmt.Errorf("%s.partial_rotary_factor = %v must be in (0, 1]", field, *e.Partial)
		}
		partial = *e.Partial
	}
	return partial, nil
}

// rotaryDims is the number of rotated dimensions of a head of dh for a
// partial_rotary_factor f (0: none given, the whole head; RoPEConfig.Dims
// is then 0): int(dh·f), as Hugging Face truncates it, which must be even
// and at least 2.
func rotaryDims(f float64, dh int, field string) (int, error) {
	if f == 0 {
		return 0, nil
	}
	rd := int(float64(dh) * f)
	if rd < 2 || rd%2 != 0 {
		return 0, fmt.Errorf("%s %v of head_dim %d rotates %d dimensions: need an even number ≥ 2", field, f, dh, rd)
	}
	if rd == dh {
		return 0, nil
	}
	return rd, nil
}
