package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// Gemma 2 and Gemma 3 (text) run the decoder pass of forward.go with the
// Gemma block (Hugging Face Gemma2DecoderLayer / Gemma3DecoderLayer):
//
//	x ← x·s                                    (s = √D in the weights' dtype, EmbedScale)
//	x ← x + postnorm1(attn(norm1(x)))          (PostNorm1W)
//	x ← x + postnorm2(down(gelu_tanh(gate(h)) ⊙ up(h))),  h = norm2(x)  (PostNorm2W)
//	logits = c_f·tanh(head(norm(x))/c_f)       (Gemma 2's final soft-cap, FinalSoftcap)
//
// Every norm is Gemma's RMSNorm x/√(mean(x²)+ε)·(1 + w), Gemma 3's
// per-head QK-norm included; the loader stores 1 + w, added once in
// float32 exactly as Hugging Face computes (1 + w.float()), so that the
// pass uses the plain rmsNorm. Attention scores are q·k·
// query_pre_attn_scalar^−½ (AttnScalar), capped to c_a·tanh(s/c_a) before
// the mask in Gemma 2 (AttnSoftcap, applied by the attention tile loop);
// layers are sliding-window ("sliding_attention": key j seen by query t iff
// t − j < sliding_window) or global ("full_attention") by layer_types
// (SlidingLayers), and Gemma 3's sliding layers have their own RoPE base
// (LocalRoPE), its global layers the rope_scaling of the config (linear,
// factor 8, in the released 4B/12B/27B).
//
// Names: model.embed_tokens, model.layers.{l}.{input_layernorm,
// self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm (Gemma 3),
// post_attention_layernorm, pre_feedforward_layernorm, mlp.{gate,up,down}_proj,
// post_feedforward_layernorm}, model.norm, lm_head (when untied). The Gemma 3
// vision-language checkpoints (model_type gemma3, Gemma3ForConditionalGeneration)
// hold the same text model under language_model.model.* (lm_head:
// language_model.lm_head) as written before transformers 4.52, or
// model.language_model.* after; their vision tower and projector are
// skipped and listed in Model.Skipped.

// The Gemma architectures.
const (
	ArchGemma2 Arch = "gemma2" // Gemma 2: sliding/global layers, logit soft-caps, pre/post norms
	ArchGemma3 Arch = "gemma3" // Gemma 3 text (also the text model of the vision-language checkpoints): QK-norm, local/global RoPE
)

// gemmaDefaults are the defaults of Hugging Face's config classes
// (Gemma2Config, Gemma3TextConfig) for the fields a config.json may leave
// out; the released Gemma 3 vision-language configs rely on them (their
// text_config names only a few sizes). Common to both: rms_norm_eps 1e-6,
// hidden_activation gelu_pytorch_tanh, query_pre_attn_scalar 256,
// sliding_window 4096, attention_bias false, tied embeddings.
type gemmaDefaults struct {
	vocab, hidden, inter, layers, heads, kvHeads, headDim, maxPos int

	theta      float64 // rope_theta (all layers; Gemma 3: the global ones)
	localTheta float64 // rope_local_base_freq of the sliding layers (Gemma 3; 0: one RoPE)
	attnCap    float64 // attn_logit_softcapping (0: null)
	finalCap   float64 // final_logit_softcapping (0: null)
	// pattern: without layer_types, layer i is global iff (i+1) % pattern
	// = 0 (Gemma 2 alternates from a sliding layer 0; Gemma 3's
	// sliding_window_pattern).
	pattern int
}

var (
	gemma2Defaults = gemmaDefaults{vocab: 256000, hidden: 2304, inter: 9216, layers: 26, heads: 8, kvHeads: 4, headDim: 256,
		maxPos: 8192, theta: 10000, attnCap: 50, finalCap: 30, pattern: 2}
	gemma3Defaults = gemmaDefaults{vocab: 262208, hidden: 2304, inter: 9216, layers: 26, heads: 8, kvHeads: 4, headDim: 256,
		maxPos: 131072, theta: 1e6, localTheta: 1e4, pattern: 6}
)

// The Gemma families of the registry.
var (
	gemma2Family = &family{
		arch: ArchGemma2, modelTypes: "gemma2",
		detect:      func(cf *configFile) bool { return cf.modelType() == "gemma2" },
		parse:       func(c *Config, cf *configFile) error { return parseGemma(c, cf, &gemma2Defaults) },
		load:        loadGemma,
		hfConfig:    gemmaHFConfig,
		small:       func(s Size) (map[string]any, error) { return smallGemma(s, ArchGemma2) },
		prefix:      "model.",
		offsetNorms: true,
	}
	gemma3Family = &family{
		arch: ArchGemma3, modelTypes: "gemma3_text, gemma3 (the text model of the vision-language checkpoints)",
		detect: func(cf *configFile) bool { return cf.modelType() == "gemma3_text" || cf.modelType() == "gemma3" },
		parse: func(c *Config, cf *configFile) error {
			if cf.modelType() != "gemma3" {
				return parseGemma(c, cf, &gemma3Defaults)
			}
			// the vision-language wrapper: the text model's fields are in
			// text_config, the dtype may be only at the top
			tc, err := cf.textConfig("gemma3_text")
			if err == nil {
				if tc.dtype() == "" {
					tc.r.TorchDType = cf.dtype()
				}
				err = parseGemma(c, tc, &gemma3Defaults)
			}
			c.ModelType = "gemma3"
			if err != nil {
				return fmt.Errorf("text_config: %w", err)
			}
			return nil
		},
		load:        loadGemma,
		hfConfig:    gemmaHFConfig,
		small:       func(s Size) (map[string]any, error) { return smallGemma(s, ArchGemma3) },
		prefix:      "model.",
		offsetNorms: true,
		skips:       []string{"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."},
	}
)

// gemmaRaw returns config.json's common fields completed with the config
// class's defaults d, with the activation read from the field actField
// (default gelu_pytorch_tanh), the one the family's transformers 5 code
// reads: Gemma 2 and 3 read hidden_activation (their configs' hidden_act
// is ignored), Gemma 1 hidden_act (transformers 4.39–4.47 read its
// hidden_activation instead; transformers 5, the golden reference, no
// longer does). It sets c's model type and dtype.
func gemmaRaw(c *Config, cf *configFile, d *gemmaDefaults, actField string) (rawConfig, error) {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	r := cf.r // a copy, completed with the defaults
	for _, f := range []struct {
		p **int
		v int
	}{{&r.VocabSize, d.vocab}, {&r.HiddenSize, d.hidden}, {&r.Intermediate, d.inter}, {&r.NumLayers, d.layers},
		{&r.NumHeads, d.heads}, {&r.NumKVHeads, d.kvHeads}, {&r.HeadDim, d.headDim}, {&r.MaxPos, d.maxPos}} {
		if *f.p == nil {
			v := f.v
			*f.p = &v
		}
	}
	r.HiddenAct = "gelu_pytorch_tanh"
	if raw, ok := cf.raw[actField]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &r.HiddenAct); err != nil {
			return r, fmt.Errorf("field %s: want a string: %v", actField, err)
		}
		if _, ok := activations[r.HiddenAct]; !ok {
			return r, fmt.Errorf("%s %q is not supported", actField, r.HiddenAct)
		}
	}
	if b, ok := cf.raw["use_bidirectional_attention"]; ok && string(b) == "true" {
		return r, fmt.Errorf("use_bidirectional_attention = true (EmbeddingGemma's encoder) is not supported: the passes here are causal")
	}
	return r, nil
}

// parseGemma fills c from a Gemma 2 or Gemma 3 text config.json, with the
// config class's defaults d for absent fields.
func parseGemma(c *Config, cf *configFile, d *gemmaDefaults) error {
	r, err := gemmaRaw(c, cf, d, "hidden_activation")
	if err != nil {
		return err
	}
	// RoPE and the window are per layer type: read below.
	r.RopeTheta, r.RopeScaling, r.RopeParameters, r.SlidingWindow = nil, nil, nil, nil
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
	c.QKNorm = c.Arch == ArchGemma3

	if c.AttnScalar, err = optNumber(cf.raw, "query_pre_attn_scalar", 256, false); err != nil {
		return err
	}
	c.AttnScale = math.Pow(c.AttnScalar, -0.5)
	caps := []struct {
		dst  *float64
		name string
		def  float64
	}{{&c.AttnSoftcap, "attn_logit_softcapping", d.attnCap}, {&c.FinalSoftcap, "final_logit_softcapping", d.finalCap}}
	for _, f := range caps {
		if *f.dst, err = optNumber(cf.raw, f.name, f.def, true); err != nil {
			return err
		}
	}
	window, err := optNumber(cf.raw, "sliding_window", 4096, true)
	if err != nil {
		return err
	}
	if window != math.Trunc(window) || window > maxConfigElems {
		return fmt.Errorf("sliding_window = %v must be a positive integer", window)
	}
	c.Sliding = int(window)
	if c.Sliding > c.MaxPos {
		return fmt.Errorf("sliding_window %d exceeds max_position_embeddings %d: a window larger than the context the model was made for cannot be told from full attention (use layer_types full_attention for such layers)", c.Sliding, c.MaxPos)
	}
	if c.SlidingLayers, err = gemmaLayerTypes(cf.raw, c.Layers, d); err != nil {
		return err
	}
	if c.Sliding == 0 {
		for l, s := range c.SlidingLayers {
			if s {
				return fmt.Errorf("sliding_window is null but layer %d is a sliding_attention layer", l)
			}
		}
	}
	if c.RoPE, c.LocalRoPE, err = gemmaRoPE(cf.raw, d); err != nil {
		return err
	}
	c.EmbedScale = gemmaEmbedScale(c.DModel, c.DType)
	return nil
}

// optNumber reads the number field name of raw: def when absent, 0 when
// null where nullable (a feature turned off). A given number must be
// positive.
func optNumber(raw map[string]json.RawMessage, name string, def float64, nullable bool) (float64, error) {
	data, ok := raw[name]
	if !ok {
		return def, nil
	}
	if string(data) == "null" {
		if nullable {
			return 0, nil
		}
		return 0, fmt.Errorf("field %s is null; want a positive number", name)
	}
	var v float64
	if err := json.Unmarshal(data, &v); err != nil {
		return 0, fmt.Errorf("field %s: want a number: %v", name, err)
	}
	if !(v > 0) {
		if nullable {
			return 0, fmt.Errorf("%s = %v must be positive (null turns it off)", name, v)
		}
		return 0, fmt.Errorf("%s = %v must be positive", name, v)
	}
	return v, nil
}

// gemmaLayerTypes returns for each of the n layers whether it is a
// sliding-window layer: from layer_types, else by the family's pattern
// (Gemma 3: sliding_window_pattern, or _sliding_window_pattern as
// transformers 5 writes it).
func gemmaLayerTypes(raw map[string]json.RawMessage, n int, d *gemmaDefaults) ([]bool, error) {
	sliding := make([]bool, n)
	if data, ok := raw["layer_types"]; ok && string(data) != "null" {
		var types []string
		if err := json.Unmarshal(data, &types); err != nil {
			return nil, fmt.Errorf("field layer_types: want a list of strings: %v", err)
		}
		if len(types) != n {
			return nil, fmt.Errorf("layer_types has %d entries for num_hidden_layers %d", len(types), n)
		}
		for l, t := range types {
			switch t {
			case "sliding_attention":
				sliding[l] = true
			case "full_attention":
			default:
				return nil, fmt.Errorf("layer_types[%d] = %q is not supported (Gemma: sliding_attention, full_attention)", l, t)
			}
		}
		return sliding, nil
	}
	pattern := d.pattern
	if d.localTheta > 0 { // Gemma 3
		for _, name := range []string{"sliding_window_pattern", "_sliding_window_pattern"} {
			if _, ok := raw[name]; !ok {
				continue
			}
			p, err := optNumber(raw, name, 0, false)
			if err != nil {
				return nil, err
			}
			if p != math.Trunc(p) || p > float64(maxConfigLayers) {
				return nil, fmt.Errorf("%s = %v must be a positive integer", name, p)
			}
			pattern = int(p)
			break
		}
	}
	for l := range sliding {
		sliding[l] = (l+1)%pattern != 0
	}
	return sliding, nil
}

// gemmaRoPE returns the RoPE of the global layers and, where it differs,
// of the sliding ones. Accepted forms: transformers 5's rope_parameters,
// either one entry for all layers (Gemma 2) or one per layer type
// (full_attention, sliding_attention); else the earlier fields rope_theta,
// rope_scaling (Gemma 3: global layers only) and rope_local_base_freq
// (Gemma 3's sliding layers, default RoPE). Rope types: default and linear.
func gemmaRoPE(raw map[string]json.RawMessage, d *gemmaDefaults) (RoPEConfig, *RoPEConfig, error) {
	var global, local RoPEConfig
	var err error
	if data, ok := raw["rope_parameters"]; ok && string(data) != "null" {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return global, nil, fmt.Errorf("field rope_parameters: want an object: %v", err)
		}
		_, full := m["full_attention"]
		_, sliding := m["sliding_attention"]
		switch {
		case full || sliding:
			if global, err = gemmaRoPEEntry(m["full_attention"], "rope_parameters.full_attention", 0); err != nil {
				return global, nil, err
			}
			if local, err = gemmaRoPEEntry(m["sliding_attention"], "rope_parameters.sliding_attention", 0); err != nil {
				return global, nil, err
			}
		case d.localTheta > 0:
			return global, nil, fmt.Errorf("field rope_parameters: Gemma 3 needs one entry per layer type, full_attention and sliding_attention")
		default:
			if global, err = gemmaRoPEEntry(data, "rope_parameters", 0); err != nil {
				return global, nil, err
			}
			local = global
		}
	} else {
		theta, err := optNumber(raw, "rope_theta", d.theta, false)
		if err != nil {
			return global, nil, err
		}
		global = RoPEConfig{Theta: theta, Type: "default", Factor: 1}
		if s, ok := raw["rope_scaling"]; ok && string(s) != "null" {
			if global, err = gemmaRoPEEntry(s, "rope_scaling", theta); err != nil {
				return global, nil, err
			}
		}
		local = global
		if d.localTheta > 0 {
			lt, err := optNumber(raw, "rope_local_base_freq", d.localTheta, false)
			if err != nil {
				return global, nil, err
			}
			local = RoPEConfig{Theta: lt, Type: "default", Factor: 1}
		}
	}
	if local == global {
		return global, nil, nil
	}
	return global, &local, nil
}

// gemmaRoPEEntry parses one RoPE object named field: rope_type (or type)
// default or linear, factor (linear), and rope_theta, which must be given
// unless theta > 0 supplies it (rope_scaling).
func gemmaRoPEEntry(data json.RawMessage, field string, theta float64) (RoPEConfig, error) {
	if len(data) == 0 || string(data) == "null" {
		return RoPEConfig{}, fmt.Errorf("field %s is missing", field)
	}
	var e struct {
		Theta    *float64 `json:"rope_theta"`
		RopeType string   `json:"rope_type"`
		Type     string   `json:"type"`
		Factor   *float64 `json:"factor"`
	}
	if err := json.Unmarshal(data, &e); err != nil {
		return RoPEConfig{}, fmt.Errorf("field %s: %v", field, err)
	}
	rc := RoPEConfig{Theta: theta, Type: e.RopeType, Factor: 1}
	if e.Theta != nil {
		rc.Theta = *e.Theta
	}
	if !(rc.Theta > 0) {
		if e.Theta == nil {
			return rc, fmt.Errorf("field %s.rope_theta is missing", field)
		}
		return rc, fmt.Errorf("%s.rope_theta = %v must be positive", field, rc.Theta)
	}
	if rc.Type == "" {
		rc.Type = e.Type
	}
	switch rc.Type {
	case "", "default":
		rc.Type = "default"
	case "linear":
		if e.Factor == nil || !(*e.Factor > 0) {
			return rc, fmt.Errorf("%s.factor must be given and positive for rope_type linear", field)
		}
		rc.Factor = *e.Factor
	default:
		return rc, fmt.Errorf("%s.rope_type %q is not supported for Gemma (supported: default, linear)", field, rc.Type)
	}
	return rc, nil
}

// gemmaEmbedScale is the factor √D on Gemma's embedding as Hugging Face
// applies it: a tensor of the weights' dtype, so √D rounded to float32 and
// then, for a checkpoint whose config.json says bfloat16 or float16 (the
// dtype the reference runs it in), to that dtype (e.g. D = 640: 25.298 in
// float32, 25.25 in bfloat16).
func gemmaEmbedScale(d int, dtype string) float32 {
	s := float32(math.Sqrt(float64(d)))
	switch dtype {
	case "bfloat16":
		return roundMantissa(s, 16)
	case "float16":
		return roundMantissa(s, 13)
	}
	return s
}

// loadGemma reads the weights of a Gemma 2 or Gemma 3 text model (names in
// the comment at the top of this file), storing every norm weight w as the
// factor 1 + w.
func loadGemma(m *Model, ld *loader) {
	c := &m.Config
	D, H, KV, dh, F, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP, c.Vocab
	p, head := "model.", "lm_head.weight"
	switch {
	case ld.has(p + "embed_tokens.weight"):
	case ld.has("model.language_model.embed_tokens.weight"):
		p = "model.language_model."
	case ld.has("language_model.model.embed_tokens.weight"):
		p, head = "language_model.model.", "language_model.lm_head.weight"
	case ld.has("embed_tokens.weight"):
		p = ""
	}
	ld.ignore("rotary_emb.inv_freq", "rotary_emb_local.inv_freq")
	norm := func(name string, n int) []float32 { return onePlus(ld.get(name, n)) }
	bias := func(name string, n int) []float32 {
		if !c.QKVBias {
			return nil
		}
		return ld.get(name, n)
	}
	m.Embed = ld.weight(p+"embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("%slayers.%d.", p, l)
		L.Norm1W = norm(b+"input_layernorm.weight", D)
		L.Wq, L.Bq = ld.weight(b+"self_attn.q_proj.weight", H*dh, D), bias(b+"self_attn.q_proj.bias", H*dh)
		L.Wk, L.Bk = ld.weight(b+"self_attn.k_proj.weight", KV*dh, D), bias(b+"self_attn.k_proj.bias", KV*dh)
		L.Wv, L.Bv = ld.weight(b+"self_attn.v_proj.weight", KV*dh, D), bias(b+"self_attn.v_proj.bias", KV*dh)
		L.Wo, L.Bo = ld.weight(b+"self_attn.o_proj.weight", D, H*dh), bias(b+"self_attn.o_proj.bias", D)
		if c.QKNorm {
			L.QNorm = norm(b+"self_attn.q_norm.weight", dh)
			L.KNorm = norm(b+"self_attn.k_norm.weight", dh)
		}
		L.PostNorm1W = norm(b+"post_attention_layernorm.weight", D)
		L.Norm2W = norm(b+"pre_feedforward_layernorm.weight", D)
		L.WGate = ld.weight(b+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight(b+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight(b+"mlp.down_proj.weight", D, F)
		L.PostNorm2W = norm(b+"post_feedforward_layernorm.weight", D)
	}
	m.FinalW = norm(p+"norm.weight", D)
	loadHead(m, ld, head)
}

// gemmaHFConfig returns the config.json of a Gemma 2 or Gemma 3 text model
// in transformers 5's form (layer_types, rope_parameters), with the RoPE
// bases and pattern its defaults also give to earlier versions where the
// configuration is the default one.
func gemmaHFConfig(c *Config) map[string]any {
	types := make([]string, c.Layers)
	for l := range types {
		types[l] = "full_attention"
		if c.layerWindow(l) > 0 {
			types[l] = "sliding_attention"
		}
	}
	orNull := func(v float64) any {
		if v > 0 {
			return v
		}
		return nil
	}
	rope := func(rc RoPEConfig) map[string]any {
		e := map[string]any{"rope_type": rc.Type, "rope_theta": rc.Theta}
		if rc.Type == "linear" {
			e["factor"] = rc.Factor
		}
		return e
	}
	scalar := c.AttnScalar
	if scalar == 0 {
		scalar = float64(c.DHead)
	}
	modelType, class := "gemma2", "Gemma2ForCausalLM"
	if c.Arch == ArchGemma3 {
		modelType, class = "gemma3_text", "Gemma3ForCausalLM"
	}
	m := map[string]any{
		"model_type": modelType, "architectures": []string{class},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
		"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
		"hidden_activation": c.Act, "tie_word_embeddings": c.TiedHead, "attention_bias": c.QKVBias,
		"query_pre_attn_scalar": scalar, "attn_logit_softcapping": orNull(c.AttnSoftcap),
		"final_logit_softcapping": orNull(c.FinalSoftcap), "sliding_window": orNull(float64(c.Sliding)),
		"layer_types": types, "use_bidirectional_attention": false, "torch_dtype": "float32",
		"rope_parameters": rope(c.RoPE),
	}
	if c.LocalRoPE != nil || c.Arch == ArchGemma3 {
		local := c.RoPE
		if c.LocalRoPE != nil {
			local = *c.LocalRoPE
		}
		m["rope_parameters"] = map[string]any{"full_attention": rope(c.RoPE), "sliding_attention": rope(local)}
	}
	return m
}

// smallGemma returns the config.json of a small Gemma model: head_dim
// d_model/heads (even), query_pre_attn_scalar = head_dim, MLP 4·d_model,
// GeGLU, tied head, sliding window min(64, max positions); Gemma 2
// alternates sliding and global layers from a sliding layer 0, with RoPE θ
// 10000 and soft-caps 50 (attention) and 30 (logits); Gemma 3 makes every
// p-th layer global, p = min(6, layers), with RoPE θ 10⁶ on global and 10⁴
// on sliding layers and QK-norm.
func smallGemma(s Size, arch Arch) (map[string]any, error) {
	if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || (s.DModel/s.Heads)%2 != 0 {
		return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", s.DModel, s.Heads, s.KVHeads)
	}
	dh := s.DModel / s.Heads
	c := &Config{Arch: arch, Layers: s.Layers, DModel: s.DModel, Heads: s.Heads, KVHeads: s.KVHeads, DHead: dh,
		DMLP: 4 * s.DModel, Vocab: s.Vocab, MaxPos: s.MaxPos, NormEps: 1e-6, Act: "gelu_pytorch_tanh", TiedHead: true,
		Sliding: min(64, s.MaxPos), AttnScalar: float64(dh), SlidingLayers: make([]bool, s.Layers),
		RoPE: RoPEConfig{Theta: 10000, Type: "default", Factor: 1}}
	pattern := 2
	if arch == ArchGemma3 {
		pattern = min(6, s.Layers)
		c.RoPE.Theta = 1e6
		c.LocalRoPE = &RoPEConfig{Theta: 1e4, Type: "default", Factor: 1}
	} else {
		c.AttnSoftcap, c.FinalSoftcap = 50, 30
	}
	for l := range c.SlidingLayers {
		c.SlidingLayers[l] = (l+1)%pattern != 0
	}
	return gemmaHFConfig(c), nil
}

// roundMantissa rounds the positive normal x to nearest even, keeping all
// but the low drop bits of its float32 mantissa (16: bfloat16; 13: the
// 10-bit mantissa of float16, within its normal range).
func roundMantissa(x float32, drop uint) float32 {
	b := math.Float32bits(x)
	half := uint32(1)<<(drop-1) - 1
	b += half + (b>>drop)&1
	return math.Float32frombits(b &^ (1<<drop - 1))
}

// Gemma 1 (GemmaForCausalLM) is the Llama block with Gemma's RMSNorm
// x/√(mean(x²)+ε)·(1 + w) before attention and before the MLP (no post
// norms, no soft-caps, no windows), GeGLU (act(gate(h)) ⊙ up(h), act
// hidden_act, default gelu_pytorch_tanh, as transformers 5 reads it), the embedding × √D in the checkpoint's dtype (EmbedScale), scores
// scaled by head_dim^−½, multi-query attention in the 2B model, a tied
// head. Names: the Llama layout's (loadDecoder), with
// post_attention_layernorm the norm before the MLP.

// ArchGemma is Gemma 1.
const ArchGemma Arch = "gemma"

// gemma1Defaults are GemmaConfig's defaults (the 7B model's sizes).
var gemma1Defaults = gemmaDefaults{vocab: 256000, hidden: 3072, inter: 24576, layers: 28, heads: 16, kvHeads: 16, headDim: 256,
	maxPos: 8192, theta: 10000}

var gemmaFamily = &family{
	arch: ArchGemma, modelTypes: "gemma",
	detect: func(cf *configFile) bool { return cf.modelType() == "gemma" },
	parse: func(c *Config, cf *configFile) error {
		r, err := gemmaRaw(c, cf, &gemma1Defaults, "hidden_act")
		if err != nil {
			return err
		}
		r.SlidingWindow = nil // Gemma 1 has none
		if err := c.fromDecoder(&r, false); err != nil {
			return err
		}
		c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
		c.EmbedScale = gemmaEmbedScale(c.DModel, c.DType)
		return nil
	},
	// load: the Llama layout's tensors, every norm weight w stored as the
	// factor 1 + w.
	load: func(m *Model, ld *loader) {
		loadDecoder(m, ld)
		for l := range m.Layers {
			L := &m.Layers[l]
			L.Norm1W, L.Norm2W = onePlus(L.Norm1W), onePlus(L.Norm2W)
		}
		m.FinalW = onePlus(m.FinalW)
	},
	hfConfig: func(c *Config) map[string]any {
		m := decoderHFConfig(c, "gemma", "GemmaForCausalLM")
		m["hidden_activation"], m["attention_bias"] = c.Act, c.QKVBias // both names: every transformers version reads c.Act
		return m
	},
	// small: head_dim d_model/heads, MLP 4·d_model, GeGLU, tied head, RoPE
	// θ 10⁴; kv heads as given (1: Gemma 2B's multi-query attention).
	small: func(s Size) (map[string]any, error) {
		m, err := smallDecoder(s, "gemma", "GemmaForCausalLM")
		if err != nil {
			return nil, err
		}
		m["intermediate_size"], m["hidden_act"], m["hidden_activation"] = 4*s.DModel, "gelu_pytorch_tanh", "gelu_pytorch_tanh"
		return m, nil
	},
	prefix:      "model.",
	offsetNorms: true,
}
