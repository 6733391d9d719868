package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// Phi-3 and Phi-4-mini (Hugging Face Phi3ForCausalLM) run the decoder pass
// of forward.go with the Llama block (RMSNorm pre-norms, SwiGLU) and three
// differences of storage and position:
//
//   - q, k and v come from one fused projection qkv_proj [H·dh + 2·KV·dh, D]
//     whose rows are q's, then k's, then v's; the loader splits it into
//     Wq, Wk, Wv as views of the stored rows (Weight.rowRange), so nothing
//     is copied;
//   - the MLP's gate and up projections are one gate_up_proj [2F, D], gate
//     rows first (up·silu(gate)), split the same way into WGate and WUp;
//   - partial rotary (partial_rotary_factor: the first int(f·dh)
//     dimensions of each head rotated, the rest passed through) and
//     LongRoPE (rope type longrope: per-frequency divisors short_factor
//     for a pass of at most original_max_position_embeddings positions,
//     long_factor for a longer one, and the attention factor on cos and
//     sin; rope.go).
//
// A config.json with sliding_window (Phi-3-mini-4k: 2047) masks every
// layer to that window, as Phi3Model does (key j seen by query t iff
// t − j < sliding_window); null is full causal attention.
//
// Names: model.embed_tokens, model.layers.{l}.{input_layernorm,
// self_attn.qkv_proj, self_attn.o_proj, post_attention_layernorm,
// mlp.gate_up_proj, mlp.down_proj}, model.norm, lm_head (when untied).

// ArchPhi3 is Phi-3 / Phi-4-mini.
const ArchPhi3 Arch = "phi3"

// phi3Family is the Phi-3 entry of the registry.
var phi3Family = &family{
	arch: ArchPhi3, modelTypes: "phi3 (Phi-3, Phi-4-mini)",
	detect:   func(cf *configFile) bool { return cf.modelType() == "phi3" },
	parse:    parsePhi3,
	load:     loadPhi3,
	hfConfig: phi3HFConfig,
	small:    smallPhi3,
	prefix:   "model.",
}

// parsePhi3 fills c from a Phi-3 config.json; absent fields take
// Phi3Config's defaults (rms_norm_eps 1e-5, untied embeddings, silu,
// sliding_window null, original_max_position_embeddings 4096 where a
// rope type reads it).
func parsePhi3(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	r := cf.r // a copy, completed with the defaults
	if r.RMSNormEps == nil {
		eps := 1e-5
		r.RMSNormEps = &eps
	}
	if r.TieWordEmbeddings == nil {
		tied := false
		r.TieWordEmbeddings = &tied
	}
	if len(r.OrigMaxPositions) == 0 || string(r.OrigMaxPositions) == "null" {
		r.OrigMaxPositions = []byte("4096")
	}
	r.SlidingWindow = nil // every layer's window, read below
	if err := phi3RoPEAliases(&r); err != nil {
		return err
	}
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	if t := c.RoPE.Type; t != "default" && t != "longrope" {
		return fmt.Errorf("rope type %q is not supported for model_type phi3 (Phi3Config accepts default and longrope, and reads su and yarn as longrope)", t)
	}
	for _, f := range []string{"attention_bias", "mlp_bias"} {
		if b, ok := cf.raw[f]; ok && string(b) == "true" {
			return fmt.Errorf("%s = true is not supported for model_type phi3 (its projections have no bias)", f)
		}
	}
	window, err := optNumber(cf.raw, "sliding_window", 0, true)
	if err != nil {
		return err
	}
	if window != math.Trunc(window) || window > maxConfigElems {
		return fmt.Errorf("sliding_window = %v must be a positive integer", window)
	}
	c.Sliding = int(window)
	return nil
}

// phi3RoPEAliases renames the rope types su and yarn of the RoPE object
// (rope_scaling, else rope_parameters) to longrope, as Phi3Config does for
// the configs written before LongRoPE had its name.
func phi3RoPEAliases(r *rawConfig) error {
	for _, raw := range []*json.RawMessage{&r.RopeScaling, &r.RopeParameters} {
		var m map[string]json.RawMessage
		if len(*raw) == 0 || json.Unmarshal(*raw, &m) != nil || len(m) == 0 {
			continue // absent or malformed (the rope parser says which)
		}
		for _, key := range []string{"rope_type", "type"} {
			var t string
			if json.Unmarshal(m[key], &t) == nil && (t == "su" || t == "yarn") {
				m[key] = json.RawMessage(`"longrope"`)
			}
		}
		data, err := json.Marshal(m)
		if err != nil {
			return err
		}
		*raw = data
		return nil // the first object given is the one read
	}
	return nil
}

// loadPhi3 reads (or, generating, makes up) the tensors of a Phi-3
// checkpoint, splitting the fused projections into views.
func loadPhi3(m *Model, ld *loader) {
	c := &m.Config
	D, H, KV, dh, F, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP, c.Vocab
	q, kv := H*dh, KV*dh
	ld.ignore("rotary_emb.inv_freq")
	m.Embed = ld.weight("model.embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		L.Norm1W = ld.get(p+"input_layernorm.weight", D)
		// qkv_proj rows: [q: H·dh | k: KV·dh | v: KV·dh]
		qkv := ld.weight(p+"self_attn.qkv_proj.weight", q+2*kv, D)
		L.Wq, L.Wk, L.Wv = qkv.rowRange(0, q), qkv.rowRange(q, q+kv), qkv.rowRange(q+kv, q+2*kv)
		L.Wo = ld.weight(p+"self_attn.o_proj.weight", D, q)
		L.Norm2W = ld.get(p+"post_attention_layernorm.weight", D)
		// gate_up_proj rows: [gate: F | up: F]
		gu := ld.weight(p+"mlp.gate_up_proj.weight", 2*F, D)
		L.WGate, L.WUp = gu.rowRange(0, F), gu.rowRange(F, 2*F)
		L.WDown = ld.weight(p+"mlp.down_proj.weight", D, F)
	}
	m.FinalW = ld.get("model.norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// phi3HFConfig returns the config.json fields of a Phi-3 configuration.
func phi3HFConfig(c *Config) map[string]any {
	m := decoderHFConfig(c, "phi3", "Phi3ForCausalLM")
	m["sliding_window"] = nil
	if c.Sliding > 0 {
		m["sliding_window"] = c.Sliding
	}
	return m
}

// smallPhi3 returns the config.json fields of a small Phi-3 model: the
// Llama-layout sizes of smallDecoder, untied, three quarters of each head
// rotated where that is an even number of dimensions (else all), and
// LongRoPE over an original context of a quarter of max positions (short
// factors near 1, long ones growing with the wavelength, as released).
func smallPhi3(s Size) (map[string]any, error) {
	m, err := smallDecoder(s, "phi3", "Phi3ForCausalLM")
	if err != nil {
		return nil, err
	}
	dh := s.DModel / s.Heads
	rd := dh
	if r := dh * 3 / 4; r >= 2 && r%2 == 0 && dh%4 == 0 {
		rd = r
		m["partial_rotary_factor"] = 0.75
	}
	short, long := make([]float64, rd/2), make([]float64, rd/2)
	for i := range short {
		x := float64(i) / float64(max(1, rd/2-1))
		short[i], long[i] = 1+0.25*x, 1+5*x
	}
	orig := max(1, s.MaxPos/4)
	m["tie_word_embeddings"], m["sliding_window"] = false, nil
	m["original_max_position_embeddings"] = orig
	m["rope_scaling"] = map[string]any{"rope_type": "longrope", "short_factor": short, "long_factor": long,
		"original_max_position_embeddings": orig}
	return m, nil
}
