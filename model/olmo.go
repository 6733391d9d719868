package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// OLMo 2 and OLMo 3 (Hugging Face Olmo2ForCausalLM, Olmo3ForCausalLM) run
// the decoder pass of forward.go with the OLMo 2 block: no norm before a
// sub-block, an RMSNorm after it,
//
//	x ← x + post₁(o(attn(q_norm(Wq·x), k_norm(Wk·x), Wv·x)))   (PostNorm1W)
//	x ← x + post₂(down(silu(gate(x)) ⊙ up(x)))                  (PostNorm2W)
//
// where q_norm and k_norm are RMSNorms over the whole projection (weights
// [H·dh] and [KV·dh], Layer.QNorm/KNorm), applied before the heads are
// split and before RoPE; RMSNorm is w·x/√(mean(x²)+ε) in float32. The
// checkpoint's post_attention_layernorm is thus the norm after attention
// (not Llama's norm before the MLP), post_feedforward_layernorm the norm
// after the MLP.
//
// OLMo 3 adds sliding-window layers: layer_types lists sliding_attention
// (key j seen by query t iff t − j < sliding_window) or full_attention per
// layer (default: every fourth layer full, as Olmo3Config), and its
// released checkpoints use YaRN. One RoPE object (rope_scaling, or
// rope_parameters as transformers 5 writes it) applies to every layer, as
// modeling_olmo3.py at the golden case's commit computes it (one rotary
// embedding); rope_parameters given per layer type (full_attention,
// sliding_attention: the form later Olmo3Config writes) puts each layer's
// own on it (LocalRoPE for the sliding layers).
//
// Names: model.embed_tokens, model.layers.{l}.self_attn.{q,k,v,o}_proj
// (.bias with attention_bias), self_attn.{q,k}_norm,
// post_attention_layernorm, mlp.{gate,up,down}_proj,
// post_feedforward_layernorm, model.norm, lm_head (when untied).

// The OLMo architectures.
const (
	ArchOLMo2 Arch = "olmo2" // OLMo 2: post-norms only, QK-norm over the whole projection
	ArchOLMo3 Arch = "olmo3" // OLMo 3: OLMo 2 with sliding-window layer_types (and YaRN)
)

// The OLMo families of the registry.
var (
	olmo2Family = &family{
		arch: ArchOLMo2, modelTypes: "olmo2",
		detect:   func(cf *configFile) bool { return cf.modelType() == "olmo2" },
		parse:    parseOLMo,
		load:     loadOLMo,
		hfConfig: olmoHFConfig,
		small:    func(s Size) (map[string]any, error) { return smallOLMo(s, false) },
		prefix:   "model.",
	}
	olmo3Family = &family{
		arch: ArchOLMo3, modelTypes: "olmo3",
		detect:   func(cf *configFile) bool { return cf.modelType() == "olmo3" },
		parse:    parseOLMo,
		load:     loadOLMo,
		hfConfig: olmoHFConfig,
		small:    func(s Size) (map[string]any, error) { return smallOLMo(s, true) },
		prefix:   "model.",
	}
)

// olmoModelTypes are the model_type and architecture class config.json
// carries per OLMo architecture.
var olmoModelTypes = map[Arch][2]string{
	ArchOLMo2: {"olmo2", "Olmo2ForCausalLM"},
	ArchOLMo3: {"olmo3", "Olmo3ForCausalLM"},
}

// OLMo 3's config class defaults (Olmo3Config) for fields config.json may
// leave out: sliding_window 4096, rope_theta 500000 (OLMo 2: 10000, the
// shared default), and every fourth layer full attention.
const (
	olmo3Window   = 4096
	olmo3Theta    = 500000
	olmo3FullEach = 4
)

// parseOLMo fills c from an OLMo 2 or OLMo 3 config.json. Absent fields
// take the config classes' defaults: rms_norm_eps 1e-5, untied
// embeddings, silu.
func parseOLMo(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	olmo3 := c.Arch == ArchOLMo3
	r := cf.r // a copy, completed with the defaults
	if r.RMSNormEps == nil {
		eps := 1e-5
		r.RMSNormEps = &eps
	}
	if r.TieWordEmbeddings == nil {
		tied := false
		r.TieWordEmbeddings = &tied
	}
	r.SlidingWindow = nil // OLMo 3's window is per layer type (below); OLMo 2 has none
	var local *RoPEConfig
	if olmo3 {
		if r.RopeTheta == nil {
			theta := float64(olmo3Theta)
			r.RopeTheta = &theta
		}
		// rope_parameters per layer type: the full layers' into fromDecoder,
		// the sliding layers' read here
		var err error
		if local, err = olmoRoPEPerType(&r); err != nil {
			return err
		}
	}
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	if local != nil && *local != c.RoPE {
		c.LocalRoPE = local
	}
	c.QKVBias, c.OBias = r.AttentionBias, r.AttentionBias
	c.QKNorm = true // over the whole projection (loadOLMo)
	if r.MLPBias {
		return fmt.Errorf("mlp_bias = true is not supported for model_type %s (its MLP has no bias)", c.ModelType)
	}
	if !olmo3 {
		if lt, ok := cf.raw["layer_types"]; ok && string(lt) != "null" {
			return fmt.Errorf("field layer_types is not read by model_type olmo2 (every layer is full attention); use model_type olmo3 for sliding-window layers")
		}
		return nil
	}
	window, err := optNumber(cf.raw, "sliding_window", olmo3Window, true)
	if err != nil {
		return err
	}
	if window != math.Trunc(window) || window > maxConfigElems {
		return fmt.Errorf("sliding_window = %v must be a positive integer", window)
	}
	c.Sliding = int(window)
	if c.SlidingLayers, err = olmoLayerTypes(cf.raw, c.Layers); err != nil {
		return err
	}
	if c.Sliding == 0 {
		for l, s := range c.SlidingLayers {
			if s {
				return fmt.Errorf("sliding_window is null but layer_types[%d] is sliding_attention", l)
			}
		}
	}
	return nil
}

// olmoRoPEPerType handles rope_parameters given per layer type
// ({"full_attention": {...}, "sliding_attention": {...}}): r then reads
// the full_attention entry as its RoPE, and the sliding layers' RoPE is
// returned (nil when rope_parameters is one object for all layers).
func olmoRoPEPerType(r *rawConfig) (*RoPEConfig, error) {
	if len(r.RopeScaling) > 0 && string(r.RopeScaling) != "null" && string(r.RopeScaling) != "{}" {
		return nil, nil // rope_scaling, read first, is one object for all layers
	}
	var m map[string]json.RawMessage
	if len(r.RopeParameters) == 0 || json.Unmarshal(r.RopeParameters, &m) != nil {
		return nil, nil // absent or malformed: fromDecoder says which
	}
	full, okF := m["full_attention"]
	sliding, okS := m["sliding_attention"]
	if !okF && !okS {
		return nil, nil
	}
	if !okF || !okS || len(m) != 2 {
		return nil, fmt.Errorf("field rope_parameters: per layer type it needs exactly full_attention and sliding_attention entries")
	}
	maxPos, dh := 0, 0
	if r.MaxPos != nil {
		maxPos = *r.MaxPos
	}
	if r.HeadDim != nil {
		dh = *r.HeadDim
	} else if r.HiddenSize != nil && r.NumHeads != nil && *r.NumHeads > 0 {
		dh = *r.HiddenSize / *r.NumHeads
	}
	s := *r
	s.RopeParameters = sliding
	rc, err := s.rope(maxPos, dh)
	if err != nil {
		return nil, fmt.Errorf("rope_parameters.sliding_attention: %w", err)
	}
	r.RopeParameters = full
	return &rc, nil
}

// olmoLayerTypes returns for each of the n layers whether it is a
// sliding-window layer: from layer_types, else every olmo3FullEach-th
// layer full and the others sliding (Olmo3Config's default).
func olmoLayerTypes(raw map[string]json.RawMessage, n int) ([]bool, error) {
	sliding := make([]bool, n)
	data, ok := raw["layer_types"]
	if !ok || string(data) == "null" {
		for l := range sliding {
			sliding[l] = (l+1)%olmo3FullEach != 0
		}
		return sliding, nil
	}
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
			return nil, fmt.Errorf("layer_types[%d] = %q is not supported (OLMo 3: sliding_attention, full_attention)", l, t)
		}
	}
	return sliding, nil
}

// loadOLMo reads (or, generating, makes up) the tensors of an OLMo 2 or
// OLMo 3 checkpoint.
func loadOLMo(m *Model, ld *loader) {
	c := &m.Config
	D, H, KV, dh, F, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP, c.Vocab
	bias := func(name string, n int) []float32 {
		if !c.QKVBias {
			return nil
		}
		return ld.get(name, n)
	}
	ld.ignore("rotary_emb.inv_freq")
	m.Embed = ld.weight("model.embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		a := p + "self_attn."
		L.Wq, L.Bq = ld.weight(a+"q_proj.weight", H*dh, D), bias(a+"q_proj.bias", H*dh)
		L.Wk, L.Bk = ld.weight(a+"k_proj.weight", KV*dh, D), bias(a+"k_proj.bias", KV*dh)
		L.Wv, L.Bv = ld.weight(a+"v_proj.weight", KV*dh, D), bias(a+"v_proj.bias", KV*dh)
		L.Wo, L.Bo = ld.weight(a+"o_proj.weight", D, H*dh), bias(a+"o_proj.bias", D)
		// QK-norm over the whole projection: the pass reads the width
		L.QNorm = ld.get(a+"q_norm.weight", H*dh)
		L.KNorm = ld.get(a+"k_norm.weight", KV*dh)
		L.PostNorm1W = ld.get(p+"post_attention_layernorm.weight", D)
		L.WGate = ld.weight(p+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight(p+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight(p+"mlp.down_proj.weight", D, F)
		L.PostNorm2W = ld.get(p+"post_feedforward_layernorm.weight", D)
	}
	m.FinalW = ld.get("model.norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// olmoHFConfig returns the config.json fields of an OLMo configuration.
func olmoHFConfig(c *Config) map[string]any {
	mt := olmoModelTypes[c.Arch]
	m := decoderHFConfig(c, mt[0], mt[1])
	m["attention_bias"] = c.QKVBias
	if c.Arch != ArchOLMo3 {
		return m
	}
	types := make([]string, c.Layers)
	for l := range types {
		types[l] = "full_attention"
		if c.layerWindow(l) > 0 {
			types[l] = "sliding_attention"
		}
	}
	m["layer_types"] = types
	m["sliding_window"] = nil
	if c.Sliding > 0 {
		m["sliding_window"] = c.Sliding
	}
	if c.LocalRoPE != nil {
		// one RoPE object per layer type, as rope_parameters
		entry := func(rc RoPEConfig) map[string]any {
			cc := *c
			cc.RoPE = rc
			e := map[string]any{"rope_type": "default"}
			if rs, ok := decoderHFConfig(&cc, mt[0], mt[1])["rope_scaling"].(map[string]any); ok {
				e = rs
			}
			e["rope_theta"] = rc.Theta
			return e
		}
		m["rope_parameters"] = map[string]any{"full_attention": entry(c.RoPE), "sliding_attention": entry(*c.LocalRoPE)}
		delete(m, "rope_scaling")
		delete(m, "rope_theta")
	}
	return m
}

// smallOLMo returns the config.json fields of a small OLMo model: the
// Llama-layout sizes of smallDecoder, untied; OLMo 3 with a window of a
// quarter of max positions on three layers of four and YaRN over an
// original context of an eighth of them.
func smallOLMo(s Size, olmo3 bool) (map[string]any, error) {
	mt := olmoModelTypes[ArchOLMo2]
	if olmo3 {
		mt = olmoModelTypes[ArchOLMo3]
	}
	m, err := smallDecoder(s, mt[0], mt[1])
	if err != nil {
		return nil, err
	}
	m["tie_word_embeddings"], m["attention_bias"] = false, false
	if olmo3 {
		types := make([]string, s.Layers)
		for l := range types {
			types[l] = "sliding_attention"
			if (l+1)%olmo3FullEach == 0 {
				types[l] = "full_attention"
			}
		}
		m["layer_types"], m["sliding_window"] = types, max(1, s.MaxPos/4)
		m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": max(1, s.MaxPos/8)}
	}
	return m, nil
}
