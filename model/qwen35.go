package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// Qwen3.5 (model_type qwen3_5_text; the released checkpoints are the
// vision-language wrapper qwen3_5, whose text weights sit under
// model.language_model.) is a hybrid decoder: of every full_attention_interval
// layers, the last is softmax attention with Qiu et al.'s element-wise output
// gate and the others are Gated DeltaNet (deltanet.go), a linear-attention
// recurrence that is a filter update (gain β, innovation v − Sᵀk, forgetting
// exp(g)). Every layer is pre-norm with a SwiGLU MLP. The differences from
// Qwen3 in the softmax layers:
//
//   - every RMSNorm (input, post-attention, final, q_norm, k_norm) scales by
//     (1 + w); the weights are stored as w and 1 is added here at load time
//     in float32, which is the reference's own arithmetic;
//   - q_proj is [H·2·dh, D]: per head, dh query rows followed by dh gate
//     rows (the head-wise interleave, unlike Qiu's per-KV-group packing);
//     the gate is always applied (HF's Qwen3_5Attention ignores
//     attn_output_gate);
//   - RoPE turns only the first partial_rotary_factor·dh dimensions of each
//     head. The RoPE is "interleaved mRoPE" with three position streams
//     (time, height, width) whose sections interleave the frequencies; for
//     text the three streams are the same positions, so it is exactly 1-D
//     RoPE over those dimensions, which is what runs here (images are not
//     supported).

// ArchQwen35 is Qwen3.5's text decoder.
const ArchQwen35 Arch = "qwen3_5"

// DeltaNetConfig holds the Gated DeltaNet layers' settings of a hybrid model.
type DeltaNetConfig struct {
	// Linear[l] says that layer l is Gated DeltaNet (linear_attention);
	// the other layers are softmax attention (full_attention).
	Linear []bool
	// KeyHeads, ValueHeads, KeyDim, ValueDim: linear_num_key_heads,
	// linear_num_value_heads, linear_key_head_dim, linear_value_head_dim.
	// Value head j reads key head j / (ValueHeads/KeyHeads).
	KeyHeads, ValueHeads, KeyDim, ValueDim int
	// ConvKernel is linear_conv_kernel_dim, the causal depthwise
	// convolution's width.
	ConvKernel int
}

// LinearLayers returns the indices of the Gated DeltaNet layers.
func (dc *DeltaNetConfig) LinearLayers() []int {
	var ls []int
	for l, lin := range dc.Linear {
		if lin {
			ls = append(ls, l)
		}
	}
	return ls
}

// qwen35Raw holds the Qwen3.5 text config fields beyond rawConfig's.
type qwen35Raw struct {
	LayerTypes    []string         `json:"layer_types"`
	Interval      *int             `json:"full_attention_interval"`
	KeyHeads      *int             `json:"linear_num_key_heads"`
	ValueHeads    *int             `json:"linear_num_value_heads"`
	KeyDim        *int             `json:"linear_key_head_dim"`
	ValueDim      *int             `json:"linear_value_head_dim"`
	ConvKernel    *int             `json:"linear_conv_kernel_dim"`
	PartialRotary *float64         `json:"partial_rotary_factor"`
	RopeParams    *qwen35RopeRaw   `json:"rope_parameters"`
	TextConfig    *json.RawMessage `json:"text_config"`
}

type qwen35RopeRaw struct {
	RopeType      string   `json:"rope_type"`
	Theta         *float64 `json:"rope_theta"`
	PartialRotary *float64 `json:"partial_rotary_factor"`
	Interleaved   *bool    `json:"mrope_interleaved"`
	Section       []int    `json:"mrope_section"`
}

// qwen35Text returns the text config of a Qwen3.5 config.json: the file
// itself for qwen3_5_text, its text_config for the qwen3_5 wrapper (whose
// top-level tie_word_embeddings and dtype apply when text_config has none).
func qwen35Text(cf *configFile) (*configFile, error) {
	if cf.modelType() == "qwen3_5_text" {
		return cf, nil
	}
	t, err := cf.textConfig("qwen3_5_text")
	if err != nil {
		return nil, fmt.Errorf("field text_config: %w", err)
	}
	if t.r.TieWordEmbeddings == nil {
		t.r.TieWordEmbeddings = cf.r.TieWordEmbeddings
	}
	if t.dtype() == "" {
		t.r.TorchDType = cf.dtype()
	}
	return t, nil
}

// parseQwen35 fills c from a Qwen3.5 config.json (text or wrapper); field
// names in errors are those of the text config.
func parseQwen35(c *Config, cf *configFile) error {
	t, err := qwen35Text(cf)
	if err != nil {
		return err
	}
	where := ""
	if t != cf {
		where = "text_config."
	}
	var q qwen35Raw
	if err := json.Unmarshal(t.data, &q); err != nil {
		return fmt.Errorf("%snot valid: %v", where, err)
	}
	c.ModelType, c.DType = cf.r.ModelType, t.dtype()
	if q.RopeParams != nil {
		// rope_parameters (transformers ≥ 5) replaces rope_theta and
		// rope_scaling: only plain (mRoPE over text) RoPE is supported.
		rp := q.RopeParams
		if rp.RopeType != "" && rp.RopeType != "default" {
			return fmt.Errorf("%srope_parameters.rope_type %q is not supported (supported: default)", where, rp.RopeType)
		}
		if rp.Theta != nil {
			t.r.RopeTheta = rp.Theta
		}
		if rp.PartialRotary != nil {
			q.PartialRotary = rp.PartialRotary
		}
	}
	if len(t.r.RopeScaling) > 0 && string(t.r.RopeScaling) != "null" {
		return fmt.Errorf("%srope_scaling is not supported for Qwen3.5 (use rope_parameters with rope_type default)", where)
	}
	if err := c.fromDecoder(&t.r, false); err != nil {
		return fmt.Errorf("%s%w", where, err)
	}
	if t.r.AttentionBias {
		return fmt.Errorf("%sattention_bias true is not supported for Qwen3.5", where)
	}
	c.QKNorm, c.Gate = true, GateElementwise

	// partial rotary: the first ⌊factor·dh⌋ dimensions, an even number
	f := 1.0
	if q.PartialRotary != nil {
		f = *q.PartialRotary
	}
	rd := int(float64(c.DHead) * f)
	if !(f > 0 && f <= 1) || rd < 2 || rd%2 != 0 {
		return fmt.Errorf("%spartial_rotary_factor %v: need 0 < factor ≤ 1 giving an even number ≥ 2 of rotated dimensions of head_dim %d", where, f, c.DHead)
	}
	if rd < c.DHead {
		c.RoPE.Dims = rd
	}
	if rp := q.RopeParams; rp != nil && len(rp.Section) > 0 {
		sum := 0
		for _, s := range rp.Section {
			sum += s
		}
		if sum != rd/2 {
			return fmt.Errorf("%srope_parameters.mrope_section %v sums to %d, want %d (half the %d rotated dimensions)", where, rp.Section, sum, rd/2, rd)
		}
	}

	dc := &DeltaNetConfig{Linear: make([]bool, c.Layers)}
	switch {
	case q.LayerTypes != nil:
		if len(q.LayerTypes) != c.Layers {
			return fmt.Errorf("%slayer_types has %d entries for num_hidden_layers %d", where, len(q.LayerTypes), c.Layers)
		}
		for l, k := range q.LayerTypes {
			switch k {
			case "linear_attention":
				dc.Linear[l] = true
			case "full_attention":
			default:
				return fmt.Errorf("%slayer_types[%d] = %q is not supported (supported: linear_attention, full_attention)", where, l, k)
			}
		}
	default:
		n := 4 // Qwen3_5TextConfig's default full_attention_interval
		if q.Interval != nil {
			n = *q.Interval
		}
		if n <= 0 {
			return fmt.Errorf("%sfull_attention_interval %d must be positive", where, n)
		}
		for l := range dc.Linear {
			dc.Linear[l] = (l+1)%n != 0
		}
	}
	for _, s := range []struct {
		dst  *int
		name string
		p    *int
	}{
		{&dc.KeyHeads, "linear_num_key_heads", q.KeyHeads}, {&dc.ValueHeads, "linear_num_value_heads", q.ValueHeads},
		{&dc.KeyDim, "linear_key_head_dim", q.KeyDim}, {&dc.ValueDim, "linear_value_head_dim", q.ValueDim},
		{&dc.ConvKernel, "linear_conv_kernel_dim", q.ConvKernel},
	} {
		if *s.dst, err = need(where+s.name, s.p); err != nil {
			return err
		}
	}
	if dc.ValueHeads%dc.KeyHeads != 0 {
		return fmt.Errorf("%slinear_num_value_heads %d is not a multiple of linear_num_key_heads %d (each key head serves value heads j/(Hv/Hk))", where, dc.ValueHeads, dc.KeyHeads)
	}
	for _, s := range []struct {
		what string
		a, b int
	}{
		{"Gated DeltaNet in-projection ((2·key heads·key dim + value heads·value dim) × model width)", 2*dc.KeyHeads*dc.KeyDim + dc.ValueHeads*dc.ValueDim, c.DModel},
		{"Gated DeltaNet state (value heads × key dim × value dim)", dc.ValueHeads * dc.KeyDim, dc.ValueDim},
	} {
		if s.a <= 0 || s.b <= 0 || s.a > maxConfigElems/s.b {
			return fmt.Errorf("%s%s = %d × %d elements exceeds %d", where, s.what, s.a, s.b, maxConfigElems)
		}
	}
	c.DeltaNet = dc
	return nil
}

// loadQwen35 reads a Qwen3.5 checkpoint: names model.{embed_tokens, norm,
// layers.{l}.{input_layernorm, post_attention_layernorm, mlp.*,
// self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm, linear_attn.*}}, or
// model.language_model.* in the wrapper, whose vision tower (model.visual.*)
// and multi-token-prediction head (mtp.*) are skipped and listed in
// Model.Skipped.
func loadQwen35(m *Model, ld *loader) {
	c, dc := &m.Config, m.DeltaNet
	D, H, KV, dh, F, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.DMLP, c.Vocab
	p := "model."
	if ld.has("model.language_model.embed_tokens.weight") {
		p = "model.language_model."
	}
	ld.ignore("rotary_emb.inv_freq")
	norm := func(name string, n int) []float32 { return onePlus(ld.get(name, n)) }
	m.Embed = ld.weight(p+"embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("%slayers.%d.", p, l)
		L.Norm1W = norm(b+"input_layernorm.weight", D)
		L.Norm2W = norm(b+"post_attention_layernorm.weight", D)
		if dc.Linear[l] {
			L.mixer = readDeltaNet(ld, b+"linear_attn.", D, dc, c.NormEps)
		} else {
			a := b + "self_attn."
			L.Wq, L.Wg = unpackGatedQ(ld.weight(a+"q_proj.weight", 2*H*dh, D), H, H, dh, dh)
			L.Wk = ld.weight(a+"k_proj.weight", KV*dh, D)
			L.Wv = ld.weight(a+"v_proj.weight", KV*dh, D)
			L.Wo = ld.weight(a+"o_proj.weight", D, H*dh)
			L.QNorm = norm(a+"q_norm.weight", dh)
			L.KNorm = norm(a+"k_norm.weight", dh)
		}
		L.WGate = ld.weight(b+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight(b+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight(b+"mlp.down_proj.weight", D, F)
	}
	m.FinalW = norm(p+"norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// qwen35Family is Qwen3.5's text decoder (Gated DeltaNet + gated softmax
// attention).
var qwen35Family = &family{
	arch: ArchQwen35, modelTypes: "qwen3_5_text, qwen3_5 (vision-language wrapper: text only)",
	detect: func(cf *configFile) bool {
		return cf.modelType() == "qwen3_5_text" || cf.modelType() == "qwen3_5"
	},
	parse: parseQwen35,
	load:  loadQwen35,
	hfConfig: func(c *Config) map[string]any {
		dc := c.DeltaNet
		types := make([]string, c.Layers)
		for l := range types {
			types[l] = "full_attention"
			if dc.Linear[l] {
				types[l] = "linear_attention"
			}
		}
		rd := c.RoPE.dims(c.DHead)
		return map[string]any{
			"model_type": "qwen3_5_text", "architectures": []string{"Qwen3_5ForCausalLM"},
			"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
			"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
			"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
			"hidden_act": c.Act, "tie_word_embeddings": c.TiedHead, "attention_bias": false,
			"attn_output_gate": true, "dtype": "float32", "layer_types": types,
			"linear_num_key_heads": dc.KeyHeads, "linear_num_value_heads": dc.ValueHeads,
			"linear_key_head_dim": dc.KeyDim, "linear_value_head_dim": dc.ValueDim,
			"linear_conv_kernel_dim": dc.ConvKernel,
			"partial_rotary_factor":  float64(rd) / float64(c.DHead),
			"rope_parameters": map[string]any{
				"rope_type": "default", "rope_theta": c.RoPE.Theta, "partial_rotary_factor": float64(rd) / float64(c.DHead),
				"mrope_interleaved": true, "mrope_section": mropeSection(rd / 2),
			},
		}
	},
	// The 0.8B's proportions: three Gated DeltaNet layers to one softmax
	// layer, head_dim d_model/heads with a quarter rotated, DeltaNet key
	// and value heads of the same width as the softmax heads (heads key
	// heads, 2·heads value heads, as in the golden case), conv width 4,
	// MLP 3·d_model, RMSNorm ε 1e-6, tied head, RoPE θ 10⁷.
	small: func(s Size) (map[string]any, error) {
		dh := s.DModel / s.Heads
		if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || dh%8 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and a head dim divisible by 8 (a quarter of it rotated, in pairs)", s.DModel, s.Heads, s.KVHeads)
		}
		types := make([]string, s.Layers)
		for l := range types {
			types[l] = "linear_attention"
			if (l+1)%4 == 0 || l == s.Layers-1 {
				types[l] = "full_attention"
			}
		}
		return map[string]any{
			"model_type": "qwen3_5_text", "hidden_size": s.DModel, "num_hidden_layers": s.Layers,
			"num_attention_heads": s.Heads, "num_key_value_heads": s.KVHeads, "head_dim": dh,
			"intermediate_size": 3 * s.DModel, "vocab_size": s.Vocab, "max_position_embeddings": s.MaxPos,
			"rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": true, "layer_types": types,
			"linear_num_key_heads": s.Heads, "linear_num_value_heads": 2 * s.Heads,
			"linear_key_head_dim": dh, "linear_value_head_dim": dh, "linear_conv_kernel_dim": 4,
			"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.25},
		}, nil
	},
	prefix: "model.",
	skips:  []string{"model.visual.", "mtp."},
	generated: func(rng *rand.Rand, c *Config) func(string, []float32) {
		return qwen35Generated(rng)
	},
}

// mropeSection splits half rotated dimensions over mRoPE's (time, height,
// width) streams the way Qwen3.5's config does ([11, 11, 10] for 32).
func mropeSection(half int) []int {
	s := []int{half / 3, half / 3, half / 3}
	for i := 0; i < half%3; i++ {
		s[i]++
	}
	return s
}

// qwen35Generated moves a generated Qwen3.5 model's parameters into the
// released models' working ranges: the (1 + w) norms' w near 0 (the generic
// initialisation puts norm weights near 1), the Gated DeltaNet's A_log in
// [0, 2.7] (A = exp(A_log) ∈ [1, 16], as its initialisation draws A) and
// dt_bias so that softplus(dt_bias) spans dt ∈ [1e-3, 0.1], and its
// gated-norm weight near 1.
func qwen35Generated(rng *rand.Rand) func(string, []float32) {
	return func(name string, x []float32) {
		switch {
		case strings.HasSuffix(name, "layernorm.weight") || strings.HasSuffix(name, "_norm.weight") || name == "model.norm.weight":
			for i := range x {
				x[i] = float32(0.1 * rng.NormFloat64())
			}
		case strings.HasSuffix(name, ".A_log"):
			for i := range x {
				x[i] = float32(math.Log(1 + 15*rng.Float64()))
			}
		case strings.HasSuffix(name, ".dt_bias"):
			for i := range x {
				dt := math.Exp(math.Log(1e-3) + rng.Float64()*(math.Log(0.1)-math.Log(1e-3)))
				x[i] = float32(invSoftplus(dt))
			}
		}
	}
}

// readDeltaNet reads the Gated DeltaNet tensors of one layer under prefix p
// (…linear_attn.).
func readDeltaNet(ld *loader, p string, D int, dc *DeltaNetConfig, eps float64) *deltaNet {
	C := 2*dc.KeyHeads*dc.KeyDim + dc.ValueHeads*dc.ValueDim
	Hv, dv := dc.ValueHeads, dc.ValueDim
	return &deltaNet{D: D, Hk: dc.KeyHeads, Dk: dc.KeyDim, Hv: Hv, Dv: dv, K: dc.ConvKernel, Eps: eps,
		QKV: ld.weight(p+"in_proj_qkv.weight", C, D), Z: ld.weight(p+"in_proj_z.weight", Hv*dv, D),
		B: ld.weight(p+"in_proj_b.weight", Hv, D), A: ld.weight(p+"in_proj_a.weight", Hv, D),
		Conv:   ld.get(p+"conv1d.weight", C, 1, dc.ConvKernel),
		DtBias: ld.get(p+"dt_bias", Hv), ALog: ld.get(p+"A_log", Hv),
		Norm: ld.get(p+"norm.weight", dv), Out: ld.weight(p+"out_proj.weight", D, Hv*dv)}
}
