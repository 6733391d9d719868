package model

import (
	"encoding/json"
	"fmt"
)

// GPT-NeoX / Pythia (GPTNeoXForCausalLM) runs the decoder pass with
// LayerNorm (weight and bias, layer_norm_eps) before attention and before
// the MLP, in the parallel residual layout by default
// (use_parallel_residual, Config.Residual):
//
//	x ← x + attn(ln₁(x)) + mlp(ln₂(x))      (use_parallel_residual true)
//	x ← x + attn(ln₁(x)); x ← x + mlp(ln₂(x))  (false)
//
// with mlp(h) = dense_4h_to_h(gelu(dense_h_to_4h(h))) (hidden_act, exact
// erf GELU by default), biases on every projection (the attention's only
// with attention_bias, default true), scores scaled by head_dim^−½, and
// rotate-half RoPE on the first int(head_dim·partial_rotary_factor)
// dimensions of each head (rotary_pct in the earlier configs, default
// 0.25; base rotary_emb_base or rope_theta, default 10⁴). The fused
// query_key_value projection is laid out per head: rows [h·3dh, h·3dh+dh)
// are head h's query, the next dh its key, the next dh its value (the
// [B, T, H, 3·dh] view Hugging Face splits), read here in place as three
// matrices of row runs (Weight.runsOf).
//
// Names: gpt_neox.embed_in, gpt_neox.layers.{l}.{input_layernorm,
// post_attention_layernorm, attention.query_key_value, attention.dense,
// mlp.dense_h_to_4h, mlp.dense_4h_to_h}, gpt_neox.final_layer_norm,
// embed_out (untied by default). A base model saved without the LM head
// class has no "gpt_neox." prefix. The buffers of earlier checkpoints
// (attention.bias, attention.masked_bias: the causal mask;
// rotary_emb.inv_freq) are ignored.

// ArchGPTNeoX is GPT-NeoX (Pythia).
const ArchGPTNeoX Arch = "gpt_neox"

var gptNeoXFamily = &family{
	arch: ArchGPTNeoX, modelTypes: "gpt_neox",
	detect:   func(cf *configFile) bool { return cf.modelType() == "gpt_neox" },
	parse:    parseGPTNeoX,
	load:     loadGPTNeoX,
	hfConfig: gptNeoXHFConfig,
	// small: head_dim d_model/heads, MLP 4·d_model, exact GELU, a quarter
	// of each head rotated, parallel residual, every bias, untied head;
	// GPT-NeoX has no grouped-query attention: KVHeads is not used.
	small: func(s Size) (map[string]any, error) {
		if s.DModel%s.Heads != 0 || (s.DModel/s.Heads)%8 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d: need d_model divisible by heads and a head dim divisible by 8 (a quarter of it rotated, in pairs)", s.DModel, s.Heads)
		}
		dh := s.DModel / s.Heads
		c := &Config{Layers: s.Layers, DModel: s.DModel, Heads: s.Heads, KVHeads: s.Heads, DHead: dh,
			DMLP: 4 * s.DModel, Vocab: s.Vocab, MaxPos: s.MaxPos, NormEps: 1e-5, Act: "gelu",
			QKVBias: true, OBias: true, MLPBias: true, Residual: ResidualParallel,
			RoPE: RoPEConfig{Theta: 10000, Type: "default", Factor: 1, Dims: dh / 4}}
		return gptNeoXHFConfig(c), nil
	},
	prefix: "gpt_neox.",
}

// parseGPTNeoX fills c from a GPT-NeoX config.json (GPTNeoXConfig's
// defaults for absent fields).
func parseGPTNeoX(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	r := cf.r
	// the earlier names of the RoPE base and of the rotated fraction
	var old struct {
		Base *float64 `json:"rotary_emb_base"`
		Pct  *float64 `json:"rotary_pct"`
		Eps  *float64 `json:"layer_norm_eps"`
		Par  *bool    `json:"use_parallel_residual"`
		Bias *bool    `json:"attention_bias"`
	}
	if err := json.Unmarshal(cf.data, &old); err != nil {
		return fmt.Errorf("GPT-NeoX fields (rotary_emb_base, rotary_pct, partial_rotary_factor, layer_norm_eps, use_parallel_residual, attention_bias): %v", err)
	}
	if old.Base != nil {
		r.RopeTheta = old.Base
	}
	// the rotated fraction: rope_parameters' (fromDecoder), else
	// partial_rotary_factor, else rotary_pct, else 0.25
	if len(r.PartialRotary) == 0 || string(r.PartialRotary) == "null" {
		r.PartialRotary = json.RawMessage("0.25")
		if old.Pct != nil {
			if !(*old.Pct > 0 && *old.Pct <= 1) {
				return fmt.Errorf("rotary_pct = %v must be in (0, 1]", *old.Pct)
			}
			r.PartialRotary, _ = json.Marshal(*old.Pct)
		}
	}
	if r.HiddenAct == "" {
		r.HiddenAct = "gelu"
	}
	// GPT-NeoX has neither grouped-query attention, nor a head_dim of its
	// own, nor a window
	r.NumKVHeads, r.HeadDim, r.SlidingWindow = nil, nil, nil
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	c.NormEps = 1e-5
	if old.Eps != nil {
		c.NormEps = *old.Eps
	}
	c.TiedHead = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	c.QKVBias = old.Bias == nil || *old.Bias
	c.OBias, c.MLPBias = c.QKVBias, true
	if old.Par == nil || *old.Par {
		c.Residual = ResidualParallel
	}
	return nil
}

// loadGPTNeoX reads a GPT-NeoX checkpoint (names in the comment at the top
// of this file).
func loadGPTNeoX(m *Model, ld *loader) {
	c := &m.Config
	D, H, dh, F, V := c.DModel, c.Heads, c.DHead, c.DMLP, c.Vocab
	p := "gpt_neox."
	if !ld.has(p+"embed_in.weight") && ld.has("embed_in.weight") {
		p = ""
	}
	ld.ignore(".attention.bias", ".attention.masked_bias", "rotary_emb.inv_freq")
	bias := func(on bool, name string, n int) []float32 {
		if !on {
			return nil
		}
		return ld.get(name, n)
	}
	m.Embed = ld.weight(p+"embed_in.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("%slayers.%d.", p, l)
		L.Norm1W, L.Norm1B = ld.get(b+"input_layernorm.weight", D), ld.get(b+"input_layernorm.bias", D)
		L.Norm2W, L.Norm2B = ld.get(b+"post_attention_layernorm.weight", D), ld.get(b+"post_attention_layernorm.bias", D)
		// per head [q; k; v], dh rows each
		qkv := ld.weight(b+"attention.query_key_value.weight", 3*H*dh, D)
		L.Wq, L.Wk, L.Wv = qkv.runsOf(0, dh, 3*dh), qkv.runsOf(dh, dh, 3*dh), qkv.runsOf(2*dh, dh, 3*dh)
		if qb := bias(c.QKVBias, b+"attention.query_key_value.bias", 3*H*dh); qb != nil {
			L.Bq, L.Bk, L.Bv = make([]float32, H*dh), make([]float32, H*dh), make([]float32, H*dh)
			for h := 0; h < H; h++ {
				copy(L.Bq[h*dh:(h+1)*dh], qb[3*h*dh:])
				copy(L.Bk[h*dh:(h+1)*dh], qb[(3*h+1)*dh:])
				copy(L.Bv[h*dh:(h+1)*dh], qb[(3*h+2)*dh:])
			}
		}
		L.Wo, L.Bo = ld.weight(b+"attention.dense.weight", D, H*dh), bias(c.OBias, b+"attention.dense.bias", D)
		L.WUp, L.BUp = ld.weight(b+"mlp.dense_h_to_4h.weight", F, D), ld.get(b+"mlp.dense_h_to_4h.bias", F)
		L.WDown, L.BDown = ld.weight(b+"mlp.dense_4h_to_h.weight", D, F), ld.get(b+"mlp.dense_4h_to_h.bias", D)
	}
	m.FinalW, m.FinalB = ld.get(p+"final_layer_norm.weight", D), ld.get(p+"final_layer_norm.bias", D)
	loadHead(m, ld, "embed_out.weight")
}

// gptNeoXHFConfig returns the config.json of a GPT-NeoX model in
// transformers 5's form (rope_parameters with partial_rotary_factor).
func gptNeoXHFConfig(c *Config) map[string]any {
	rope := map[string]any{"rope_type": "default", "rope_theta": c.RoPE.Theta,
		"partial_rotary_factor": partialRotaryFactor(c.RoPE.dims(c.DHead), c.DHead)}
	// a scaled RoPE's fields as the Llama layout writes them
	// (rope_scaling), inside the one object GPTNeoXConfig reads
	if rs, ok := decoderHFConfig(c, "", "")["rope_scaling"].(map[string]any); ok {
		for k, v := range rs {
			rope[k] = v
		}
	}
	return map[string]any{
		"model_type": "gpt_neox", "architectures": []string{"GPTNeoXForCausalLM"},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"intermediate_size": c.DMLP, "vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos,
		"layer_norm_eps": c.NormEps, "hidden_act": c.Act, "tie_word_embeddings": c.TiedHead,
		"use_parallel_residual": c.Residual == ResidualParallel, "attention_bias": c.QKVBias,
		"rope_parameters": rope, "dtype": "float32",
	}
}
