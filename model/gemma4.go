package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/filterlens/probe/hooks"
)

// Gemma 4 text (Hugging Face Gemma4ForCausalLM, model_type gemma4_text)
// runs the decoder pass of forward.go with the Gemma block and these
// slots filled as data:
//
//	x ← x·√D                                           (EmbedScale)
//	x ← x + postnorm1(attn(norm1(x)))                  (PostNorm1W)
//	m ← mlp(norm2(x))                                   (double-wide on KV-shared layers)
//	m ← post_1(m) + experts(x)                          (enable_moe_block: PostNormMLPW, Layer.ffnBeside)
//	x ← x + postnorm2(m)                                (PostNorm2W)
//	x ← x + ple_norm(W_up·(gelu_tanh(W_gate·x) ⊙ u_l))  (per-layer input u_l, layerInputs)
//	x ← x·λ_l                                           (layer_scalar, Layer.Scale)
//	logits = c·tanh(head(norm(x))/c)                    (FinalSoftcap)
//
// Every RMSNorm is w·x/√(mean(x²)+ε) (plain w, not Gemma 1–3's 1 + w).
// Attention: q = RoPE(q_norm(W_q·x)), k = RoPE(k_norm(W_k·x)) and
// v = rms(W_v·x) per head (weightless V-norm: VNorm of ones), scores
// scaled by 1 (AttnScale). Sliding layers have head_dim and
// num_key_value_heads, full layers global_head_dim and (with
// attention_k_eq_v) num_global_key_value_heads and no v_proj: v is the raw
// k projection (VFromK). Full layers use proportional RoPE: rotate-half
// over the whole head, the first int(prf·hd/2) pairs at θ^(−2i/hd), the
// rest unrotated. The last num_kv_shared_layers layers reuse the k and v
// of the last earlier layer of their type (KVFrom).
//
// Per-layer inputs: u = (norm_P(W_p·x₀·D^−½) + E_p[id]·√P)·2^−½, [L, P]
// per token, x₀ the embedded stream; layer l reads u[:, l].
//
// Experts (Layer.ffnBeside): router input rms(x)·s·D^−½, probabilities
// softmax(W_r·…), the top k renormalised to sum 1, times
// per_expert_scale; expert e: down_e(gelu_tanh(g) ⊙ u), [g | u] =
// gate_up_e·norm(x); output post_2(Σ w·expert).

// ArchGemma4 is Gemma 4's text model.
const ArchGemma4 Arch = "gemma4_text" // Gemma 4 text: PLE, KV sharing, k = v, experts beside the MLP

var gemma4Family = &family{
	arch: ArchGemma4, modelTypes: "gemma4_text, gemma4 (the text model of the multimodal checkpoints)",
	detect: func(cf *configFile) bool { return cf.modelType() == "gemma4_text" || cf.modelType() == "gemma4" },
	parse: func(c *Config, cf *configFile) error {
		if cf.modelType() != "gemma4" {
			return parseGemma4(c, cf)
		}
		tc, err := cf.textConfig("gemma4_text")
		if err == nil {
			if tc.dtype() == "" {
				tc.r.TorchDType = cf.dtype()
			}
			err = parseGemma4(c, tc)
		}
		c.ModelType = "gemma4"
		if err != nil {
			return fmt.Errorf("text_config: %w", err)
		}
		return nil
	},
	load:     loadGemma4,
	hfConfig: gemma4HFConfig,
	small:    smallGemma4,
	prefix:   "model.",
	skips: []string{"model.vision_tower.", "model.audio_tower.", "model.embed_vision.", "model.embed_audio.",
		"vision_tower.", "audio_tower.", "embed_vision.", "embed_audio."},
}

// parseGemma4 fills c from a Gemma 4 text config.json (transformers 5's
// form: rope_parameters per layer type). Every size must be given.
func parseGemma4(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	r := cf.r
	r.HiddenAct = "gelu_pytorch_tanh"
	if raw, ok := cf.raw["hidden_activation"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &r.HiddenAct); err != nil {
			return fmt.Errorf("config.json: field hidden_activation: want a string: %v", err)
		}
		if _, ok := activations[r.HiddenAct]; !ok {
			return fmt.Errorf("config.json: hidden_activation %q is not supported", r.HiddenAct)
		}
	}
	// use_bidirectional_attention "vision" (the released 12B, 26B-A4B and
	// 31B configs; E2B and E4B leave it null) lets the tokens of one image
	// attend to each other on the sliding layers of the multimodal model:
	// a text-only pass has no image tokens, so its mask is causal, as here.
	// "all" (or true) makes every layer bidirectional and is refused.
	if b, ok := cf.raw["use_bidirectional_attention"]; ok && string(b) != "null" && string(b) != "false" && string(b) != `"vision"` {
		return fmt.Errorf("config.json: use_bidirectional_attention = %s is not implemented for Gemma 4 (causal attention; \"vision\" is accepted: it concerns image tokens only, which a text pass has none of)", b)
	}
	if b, ok := cf.raw["attn_logit_softcapping"]; ok && string(b) != "null" && string(b) != "false" {
		return fmt.Errorf("config.json: attn_logit_softcapping = %s is not implemented for Gemma 4 (attention without a score cap only)", b)
	}
	if b, ok := cf.raw["attention_bias"]; ok && string(b) == "true" {
		return fmt.Errorf("config.json: attention_bias = true is not implemented for Gemma 4")
	}
	r.RopeTheta, r.RopeScaling, r.RopeParameters, r.SlidingWindow = nil, nil, nil, nil
	if err := c.fromDecoder(&r, false); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	c.QKNorm, c.AttnScale = true, 1
	var err error
	if c.FinalSoftcap, err = optNumber(cf.raw, "final_logit_softcapping", 0, true); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	window, err := optNumber(cf.raw, "sliding_window", 512, true)
	if err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	if window != math.Trunc(window) || window > maxConfigElems {
		return fmt.Errorf("config.json: sliding_window = %v must be a positive integer", window)
	}
	c.Sliding = int(window)
	if c.SlidingLayers, err = gemma4LayerTypes(cf.raw, c.Layers); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	for l, sl := range c.SlidingLayers {
		if sl && c.Sliding == 0 {
			return fmt.Errorf("config.json: sliding_window is null but layer %d is a sliding_attention layer (layer_types)", l)
		}
	}
	ints := []struct {
		dst      *int
		name     string
		def, min int
	}{
		{&c.GlobalDHead, "global_head_dim", c.DHead, 1},
		{&c.GlobalKVHeads, "num_global_key_value_heads", c.KVHeads, 1},
		{&c.KVShared, "num_kv_shared_layers", 0, 0},
		{&c.PerLayerDim, "hidden_size_per_layer_input", 0, 0},
		{&c.PerLayerVocab, "vocab_size_per_layer_input", c.Vocab, 1},
	}
	for _, f := range ints {
		*f.dst = f.def
		if raw, ok := cf.raw[f.name]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, f.dst); err != nil || *f.dst < f.min || *f.dst > maxConfigElems {
				return fmt.Errorf("config.json: field %s = %s: want an integer ≥ %d", f.name, raw, f.min)
			}
		}
	}
	bools := []struct {
		dst  *bool
		name string
	}{{&c.KEqV, "attention_k_eq_v"}, {&c.DoubleWideMLP, "use_double_wide_mlp"}, {&c.MoEBeside, "enable_moe_block"}}
	for _, f := range bools {
		if raw, ok := cf.raw[f.name]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return fmt.Errorf("config.json: field %s: want true or false: %v", f.name, err)
			}
		}
	}
	if c.KEqV && c.GlobalKVHeads != c.KVHeads {
		// full layers: their own KV head count only with k = v
	} else if !c.KEqV {
		c.GlobalKVHeads = c.KVHeads
	}
	if c.GlobalKVHeads <= 0 || c.Heads%c.GlobalKVHeads != 0 {
		return fmt.Errorf("config.json: num_attention_heads %d is not a multiple of num_global_key_value_heads %d", c.Heads, c.GlobalKVHeads)
	}
	if c.KVShared >= c.Layers {
		return fmt.Errorf("config.json: num_kv_shared_layers %d leaves no layer of the %d computing its own k and v", c.KVShared, c.Layers)
	}
	for l := c.Layers - c.KVShared; l < c.Layers; l++ {
		if gemma4KVSource(c, l) < 0 {
			return fmt.Errorf("config.json: num_kv_shared_layers %d: layer %d has no earlier non-shared layer of its type (layer_types) to take k and v from", c.KVShared, l)
		}
	}
	if c.MoEBeside {
		mc := &MoEConfig{Normalize: true}
		for _, f := range []struct {
			dst  *int
			name string
		}{{&mc.Experts, "num_experts"}, {&mc.TopK, "top_k_experts"}, {&mc.DExpert, "moe_intermediate_size"}} {
			raw, ok := cf.raw[f.name]
			if !ok || string(raw) == "null" {
				return fmt.Errorf("config.json: field %s is missing (enable_moe_block is true)", f.name)
			}
			if err := json.Unmarshal(raw, f.dst); err != nil || *f.dst < 1 || *f.dst > maxConfigElems {
				return fmt.Errorf("config.json: field %s = %s: want a positive integer", f.name, raw)
			}
		}
		if mc.TopK > mc.Experts {
			return fmt.Errorf("config.json: top_k_experts %d exceeds num_experts %d", mc.TopK, mc.Experts)
		}
		c.MoE = mc
	}
	if c.RoPE, c.LocalRoPE, err = gemma4RoPE(cf.raw, c.GlobalDHead); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	c.EmbedScale = gemmaEmbedScale(c.DModel, c.DType)
	return nil
}

// gemma4LayerTypes reads layer_types (required: sliding_attention or
// full_attention per layer) as whether each layer is a sliding one.
func gemma4LayerTypes(raw map[string]json.RawMessage, n int) ([]bool, error) {
	data, ok := raw["layer_types"]
	if !ok || string(data) == "null" {
		return nil, fmt.Errorf("field layer_types is missing (Gemma 4 names each layer's type)")
	}
	var types []string
	if err := json.Unmarshal(data, &types); err != nil {
		return nil, fmt.Errorf("field layer_types: want a list of strings: %v", err)
	}
	if len(types) != n {
		return nil, fmt.Errorf("layer_types has %d entries for num_hidden_layers %d", len(types), n)
	}
	sliding := make([]bool, n)
	for l, t := range types {
		switch t {
		case "sliding_attention":
			sliding[l] = true
		case "full_attention":
		default:
			return nil, fmt.Errorf("layer_types[%d] = %q is not supported (Gemma 4: sliding_attention, full_attention)", l, t)
		}
	}
	return sliding, nil
}

// gemma4KVSource returns the layer whose k and v layer l reuses: −1 when l
// computes its own (not among the last KVShared layers), else the last
// layer before the shared ones with l's layer type (−1 when none).
func gemma4KVSource(c *Config, l int) int {
	first := c.Layers - c.KVShared
	if l < first {
		return -1
	}
	for s := first - 1; s >= 0; s-- {
		if c.layerWindow(s) > 0 == (c.layerWindow(l) > 0) {
			return s
		}
	}
	return -1
}

// gemma4RoPE reads rope_parameters' full_attention entry (default or
// proportional with partial_rotary_factor, over heads of width hd) and its
// sliding_attention entry (default or linear).
func gemma4RoPE(raw map[string]json.RawMessage, hd int) (RoPEConfig, *RoPEConfig, error) {
	data, ok := raw["rope_parameters"]
	if !ok || string(data) == "null" {
		return RoPEConfig{}, nil, fmt.Errorf("field rope_parameters is missing (Gemma 4 keeps one entry per layer type, full_attention and sliding_attention)")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return RoPEConfig{}, nil, fmt.Errorf("field rope_parameters: want an object: %v", err)
	}
	entry := func(name string, types ...string) (RoPEConfig, error) {
		field := "rope_parameters." + name
		var e struct {
			Theta    *float64 `json:"rope_theta"`
			RopeType string   `json:"rope_type"`
			Factor   *float64 `json:"factor"`
			PRF      *float64 `json:"partial_rotary_factor"`
		}
		d, ok := m[name]
		if !ok || string(d) == "null" {
			return RoPEConfig{}, fmt.Errorf("field %s is missing", field)
		}
		if err := json.Unmarshal(d, &e); err != nil {
			return RoPEConfig{}, fmt.Errorf("field %s: %v", field, err)
		}
		if e.Theta == nil || !(*e.Theta > 0) {
			return RoPEConfig{}, fmt.Errorf("field %s.rope_theta: want a positive number", field)
		}
		rc := RoPEConfig{Theta: *e.Theta, Type: e.RopeType, Factor: 1}
		if rc.Type == "" {
			rc.Type = "default"
		}
		known := false
		for _, t := range types {
			known = known || t == rc.Type
		}
		if !known {
			return rc, fmt.Errorf("field %s.rope_type %q is not implemented for Gemma 4 (supported: %v)", field, rc.Type, types)
		}
		if e.Factor != nil {
			if !(*e.Factor > 0) {
				return rc, fmt.Errorf("field %s.factor = %v must be positive", field, *e.Factor)
			}
			rc.Factor = *e.Factor
		}
		if e.PRF != nil {
			if rc.Type != "proportional" || !(*e.PRF > 0 && *e.PRF <= 1) {
				return rc, fmt.Errorf("field %s.partial_rotary_factor = %v is not implemented (Gemma 4: proportional RoPE, 0 < factor ≤ 1)", field, *e.PRF)
			}
		}
		if rc.Type == "proportional" {
			prf := 1.0
			if e.PRF != nil {
				prf = *e.PRF
			}
			rc.Pairs = int(math.Floor(prf * float64(hd) / 2))
		}
		return rc, nil
	}
	global, err := entry("full_attention", "default", "proportional")
	if err != nil {
		return global, nil, err
	}
	local, err := entry("sliding_attention", "default", "linear")
	return global, &local, err
}

// loadGemma4 reads a Gemma 4 text model (names as Hugging Face saves
// them: model.layers.{l}.{input_layernorm, self_attn.{q,k,v,o}_proj,
// self_attn.{q,k}_norm, post_attention_layernorm, pre_feedforward_layernorm,
// mlp.{gate,up,down}_proj, post_feedforward_layernorm[_1,_2],
// pre_feedforward_layernorm_2, router.{proj.weight,scale,per_expert_scale},
// experts.{gate_up_proj,down_proj}, per_layer_input_gate,
// per_layer_projection, post_per_layer_input_norm, layer_scalar},
// model.embed_tokens[_per_layer], model.per_layer_model_projection,
// model.per_layer_projection_norm, model.norm; the multimodal checkpoints
// under model.language_model.).
func loadGemma4(m *Model, ld *loader) {
	c := &m.Config
	D, H, V, F := c.DModel, c.Heads, c.Vocab, c.DMLP
	p := "model."
	switch {
	case ld.has(p + "embed_tokens.weight"):
	case ld.has("model.language_model.embed_tokens.weight"):
		p = "model.language_model."
	case ld.has("embed_tokens.weight"):
		p = ""
	}
	ld.ignore("rotary_emb.inv_freq", "rotary_emb_local.inv_freq")
	m.Embed = ld.weight(p+"embed_tokens.weight", V, D)
	// √D in the weights' dtype, as made here (Generate's dtype) or read
	m.EmbedScale = gemmaEmbedScale(D, c.DType)
	var ple *gemma4PLE
	if P, L := c.PerLayerDim, c.Layers; P > 0 {
		ple = &gemma4PLE{
			table:    ld.weight(p+"embed_tokens_per_layer.weight", c.PerLayerVocab, L*P),
			proj:     ld.weight(p+"per_layer_model_projection.weight", L*P, D),
			projNorm: ld.get(p+"per_layer_projection_norm.weight", P),
			gate:     make([]Weight, L), up: make([]Weight, L), post: make([][]float32, L),
			scale: gemmaEmbedScale(P, c.DType),
		}
		m.ext = ple
	}
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("%slayers.%d.", p, l)
		a := b + "self_attn."
		dh, kv := c.DHead, c.KVHeads
		kEqV := false
		if c.layerWindow(l) == 0 {
			dh, kv, kEqV = c.GlobalDHead, c.GlobalKVHeads, c.KEqV
			L.DHead, L.KVHeads = dh, kv
		}
		L.Norm1W = ld.get(b+"input_layernorm.weight", D)
		L.Wq = ld.weight(a+"q_proj.weight", H*dh, D)
		L.QNorm = ld.get(a+"q_norm.weight", dh)
		if s := gemma4KVSource(c, l); s >= 0 {
			L.KVFrom = s + 1
			// a KV-shared layer's own k_proj, v_proj and k_norm, where
			// the checkpoint stores them (the released E2B's does), are
			// not used, as transformers does not build them: skipped
			m.Skipped = append(m.Skipped, ld.skip([]string{a + "k_proj.", a + "v_proj.", a + "k_norm."})...)
		} else {
			L.Wk = ld.weight(a+"k_proj.weight", kv*dh, D)
			L.KNorm = ld.get(a+"k_norm.weight", dh)
			if kEqV {
				L.VFromK = true
			} else {
				L.Wv = ld.weight(a+"v_proj.weight", kv*dh, D)
			}
			L.VNorm = make([]float32, dh)
			for i := range L.VNorm {
				L.VNorm[i] = 1
			}
		}
		L.Wo = ld.weight(a+"o_proj.weight", D, H*dh)
		L.PostNorm1W = ld.get(b+"post_attention_layernorm.weight", D)
		L.Norm2W = ld.get(b+"pre_feedforward_layernorm.weight", D)
		f := F
		if c.DoubleWideMLP && L.KVFrom > 0 {
			f = 2 * F
		}
		L.WGate = ld.weight(b+"mlp.gate_proj.weight", f, D)
		L.WUp = ld.weight(b+"mlp.up_proj.weight", f, D)
		L.WDown = ld.weight(b+"mlp.down_proj.weight", D, f)
		L.PostNorm2W = ld.get(b+"post_feedforward_layernorm.weight", D)
		if c.MoEBeside {
			L.PostNormMLPW = ld.get(b+"post_feedforward_layernorm_1.weight", D)
			L.ffnBeside = loadGemma4Experts(ld, c, b)
		}
		if ple != nil {
			P := c.PerLayerDim
			ple.gate[l] = ld.weight(b+"per_layer_input_gate.weight", P, D)
			ple.up[l] = ld.weight(b+"per_layer_projection.weight", D, P)
			ple.post[l] = ld.get(b+"post_per_layer_input_norm.weight", D)
		}
		L.Scale = ld.get(b+"layer_scalar", 1)[0]
	}
	m.FinalW = ld.get(p+"norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// gemma4PLE holds the per-layer embeddings (Model.ext, a layerInputs).
type gemma4PLE struct {
	table    Weight      // embed_tokens_per_layer [V_p, L·P]
	proj     Weight      // per_layer_model_projection [L·P, D]
	projNorm []float32   // per_layer_projection_norm [P]
	gate, up []Weight    // per layer: per_layer_input_gate [P, D], per_layer_projection [D, P]
	post     [][]float32 // per layer: post_per_layer_input_norm [D]
	scale    float32     // √P in the checkpoint's dtype
}

// layerInputs returns u [B·T, L, P] = (norm_P(W_p·x·D^−½) + E_p[id]·√P)·2^−½.
func (g *gemma4PLE) layerInputs(m *Model, ids [][]int, x []float32, opt Options, run hookRun) ([]float32, error) {
	c := &m.Config
	B, T, D, P := len(ids), len(ids[0]), c.DModel, c.PerLayerDim
	n, LP := B*T, c.Layers*P
	u := make([]float32, n*LP)
	linearAs(opt.Compute, u, x, n, D, g.proj, LP, nil)
	s := float32(math.Pow(float64(D), -0.5))
	for i := range u {
		u[i] *= s
	}
	rmsNorm(u, u, P, g.projNorm, c.NormEps)
	row := make([]float32, LP)
	half := float32(1 / math.Sqrt2)
	for r := 0; r < n; r++ {
		id := ids[r/T][r%T]
		if id < 0 || id >= c.PerLayerVocab {
			return nil, fmt.Errorf("model: token id %d at batch %d position %d is outside vocab_size_per_layer_input %d", id, r/T, r%T, c.PerLayerVocab)
		}
		g.table.widenRow(row, id)
		ur := u[r*LP : (r+1)*LP]
		for i, v := range row {
			ur[i] = (ur[i] + v*g.scale) * half
		}
	}
	run(hooks.PerLayerInput, -1, u, B, T, c.Layers, P)
	return u, nil
}

// addLayerInput adds layer l's branch post_l(W_up·(gelu_tanh(W_gate·x) ⊙
// u[:, l])) to x.
func (g *gemma4PLE) addLayerInput(m *Model, l int, x, u []float32, B, T int, opt Options, run hookRun) error {
	c := &m.Config
	n, D, P, LP := B*T, c.DModel, c.PerLayerDim, c.Layers*c.PerLayerDim
	a := make([]float32, n*P)
	linearAs(opt.Compute, a, x, n, D, g.gate[l], P, nil)
	act := activations[m.Act]
	for r := 0; r < n; r++ {
		ar, ur := a[r*P:(r+1)*P], u[r*LP+l*P:r*LP+(l+1)*P]
		for i, v := range ar {
			ar[i] = act(v) * ur[i]
		}
	}
	y := make([]float32, n*D)
	linearAs(opt.Compute, y, a, n, P, g.up[l], D, nil)
	rmsNorm(y, y, D, g.post[l], c.NormEps)
	run(hooks.PerLayerOut, l, y, B, T, D)
	addTo(x, y)
	return nil
}

// gemma4Experts is the mixture of experts beside Gemma 4's MLP (a
// channelMixer on the residual stream, Layer.ffnBeside).
type gemma4Experts struct {
	cfg           *MoEConfig
	act           string
	preNorm, post []float32 // pre_feedforward_layernorm_2, post_feedforward_layernorm_2 [D]
	router        Weight    // router.proj [E, D]
	rScale        []float32 // router.scale [D]
	perExpert     []float32 // router.per_expert_scale [E]
	gateUp, down  Weight    // experts.gate_up_proj [E·2F, D], experts.down_proj [E·D, F]
	ones          []float32 // [D]: the router's weightless norm
}

// loadGemma4Experts reads layer b's experts, router and their norms.
func loadGemma4Experts(ld *loader, c *Config, b string) *gemma4Experts {
	mc, D := c.MoE, c.DModel
	E, F := mc.Experts, mc.DExpert
	e := &gemma4Experts{cfg: mc, act: c.Act, ones: make([]float32, D)}
	for i := range e.ones {
		e.ones[i] = 1
	}
	e.preNorm = ld.get(b+"pre_feedforward_layernorm_2.weight", D)
	e.post = ld.get(b+"post_feedforward_layernorm_2.weight", D)
	e.router = ld.weight(b+"router.proj.weight", E, D)
	e.rScale = ld.get(b+"router.scale", D)
	e.perExpert = ld.get(b+"router.per_expert_scale", E)
	e.gateUp = ld.stacked(b+"experts.gate_up_proj", E, 2*F, D)
	e.down = ld.stacked(b+"experts.down_proj", E, D, F)
	return e
}

// scratchFloats is what mixChannels allocates for B·T tokens.
func (e *gemma4Experts) scratchFloats(B, T int) int {
	n, c, D := B*T, e.cfg, len(e.ones)
	// the router input (then the experts'), logits, ids and weights, the
	// sum, and the gathered rows with their hidden values and outputs
	return n * (4*D + c.Experts + 2*c.TopK + 2*c.DExpert + 2)
}

// mixChannels computes post_2(Σ_k w_k·expert_k(pre_2(x))) of the residual
// stream x into out, routed on rms(x)·scale·D^−½ (see the file comment).
func (e *gemma4Experts) mixChannels(m *Model, out, x []float32, l, B, T int, opt Options, run hookRun) error {
	c := e.cfg
	n, D, E, K, F := B*T, len(e.ones), c.Experts, c.TopK, c.DExpert
	rn := make([]float32, n*D)
	rmsNorm(rn, x, D, e.ones, m.NormEps)
	s := float32(math.Pow(float64(D), -0.5))
	for r := 0; r < n; r++ {
		row := rn[r*D : (r+1)*D]
		for i := range row {
			row[i] = row[i] * e.rScale[i] * s
		}
	}
	z := make([]float32, n*E)
	linearAs(opt.Compute, z, rn, n, D, e.router, E, nil)
	run(hooks.MLPRouterLogits, l, z, B, T, E)
	if i := firstNonFinite(z); i >= 0 {
		return fmt.Errorf("model: non-finite router logit %v in layer %d at batch %d position %d (expert %d)", z[i], l, i/E/T, (i/E)%T, i%E)
	}
	idx, w := make([]float32, n*K), make([]float32, n*K)
	sel := make([]int, K)
	for r := 0; r < n; r++ {
		pr := z[r*E : (r+1)*E]
		softmaxRow(pr)
		topK(sel, pr)
		var sum float32
		for _, x := range sel {
			sum += pr[x]
		}
		for j, x := range sel {
			idx[r*K+j] = float32(x)
			w[r*K+j] = pr[x] / sum * e.perExpert[x]
		}
	}
	run(hooks.MLPExpertIndices, l, idx, B, T, K)
	run(hooks.MLPExpertWeights, l, w, B, T, K)

	h := rn // the experts' input pre_2(x), in the router input's storage
	rmsNorm(h, x, D, e.preNorm, m.NormEps)
	sum := make([]float32, n*D)
	xs, a1, a2, ys := make([]float32, n*D), make([]float32, n*F), make([]float32, n*F), make([]float32, n*D)
	toks, slot := make([]int, 0, n), make([]int, 0, n)
	for x := 0; x < E; x++ {
		toks, slot = toks[:0], slot[:0]
		for i, v := range idx {
			if int(v) == x {
				toks, slot = append(toks, i/K), append(slot, i)
			}
		}
		k := len(toks)
		if k == 0 {
			continue
		}
		for j, t := range toks {
			copy(xs[j*D:(j+1)*D], h[t*D:(t+1)*D])
		}
		linearAs(opt.Compute, a1[:k*F], xs[:k*D], k, D, e.gateUp.rowRange(2*x*F, (2*x+1)*F), F, nil)
		linearAs(opt.Compute, a2[:k*F], xs[:k*D], k, D, e.gateUp.rowRange((2*x+1)*F, (2*x+2)*F), F, nil)
		swiglu(a1[:k*F], a2[:k*F], e.act)
		linearAs(opt.Compute, ys[:k*D], a1[:k*F], k, F, e.down.rowRange(x*D, (x+1)*D), D, nil)
		for j, t := range toks {
			wt := w[slot[j]]
			dst, src := sum[t*D:(t+1)*D], ys[j*D:(j+1)*D]
			for i, v := range src {
				dst[i] += v * wt
			}
		}
	}
	rmsNorm(out[:n*D], sum, D, e.post, m.NormEps)
	return nil
}

// gemma4HFConfig returns the config.json (transformers 5's form) of a
// Gemma 4 text configuration.
func gemma4HFConfig(c *Config) map[string]any {
	types := make([]string, c.Layers)
	for l := range types {
		types[l] = "full_attention"
		if c.layerWindow(l) > 0 {
			types[l] = "sliding_attention"
		}
	}
	rope := func(rc RoPEConfig, hd int) map[string]any {
		e := map[string]any{"rope_type": rc.Type, "rope_theta": rc.Theta}
		if rc.Type != "default" {
			e["factor"] = rc.Factor
		}
		if rc.Type == "proportional" {
			e["partial_rotary_factor"] = 2 * float64(rc.Pairs) / float64(hd)
		}
		return e
	}
	local := c.RoPE
	if c.LocalRoPE != nil {
		local = *c.LocalRoPE
	}
	orNull := func(v float64) any {
		if v == 0 {
			return nil
		}
		return v
	}
	m := map[string]any{
		"model_type": "gemma4_text", "architectures": []string{"Gemma4ForCausalLM"},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
		"global_head_dim": c.GlobalDHead, "num_global_key_value_heads": c.GlobalKVHeads,
		"attention_k_eq_v": c.KEqV, "num_kv_shared_layers": c.KVShared,
		"hidden_size_per_layer_input": c.PerLayerDim, "vocab_size_per_layer_input": c.PerLayerVocab,
		"use_double_wide_mlp": c.DoubleWideMLP, "enable_moe_block": c.MoEBeside,
		"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
		"hidden_activation": c.Act, "tie_word_embeddings": c.TiedHead, "attention_bias": false,
		"final_logit_softcapping": orNull(c.FinalSoftcap), "sliding_window": orNull(float64(c.Sliding)),
		"layer_types": types, "use_bidirectional_attention": nil, "dtype": "float32",
		"rope_parameters": map[string]any{"full_attention": rope(c.RoPE, c.GlobalDHead), "sliding_attention": rope(local, c.DHead)},
	}
	if c.DType != "" {
		m["dtype"] = c.DType
	}
	if c.MoEBeside && c.MoE != nil {
		m["num_experts"], m["top_k_experts"], m["moe_intermediate_size"] = c.MoE.Experts, c.MoE.TopK, c.MoE.DExpert
	}
	return m
}

// smallGemma4 returns the config.json of a small Gemma 4 text model that
// uses every feature the golden case exercises: head_dim d_model/heads on
// sliding layers, twice that on full layers (every third layer, and the
// last) with k = v and one KV head and proportional RoPE (θ 10⁶, factor
// 0.25), sliding layers θ 10⁴ and a window of min(64, max positions); the
// last third of the layers sharing k and v (where each has an earlier
// layer of its type); per-layer inputs of width max(4, d_model/4); MLP
// 2·d_model, double-wide on shared layers; 4 experts (top 2, width
// d_model/2) beside it; final soft-cap 30.
func smallGemma4(s Size) (map[string]any, error) {
	if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || (s.DModel/s.Heads)%2 != 0 {
		return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", s.DModel, s.Heads, s.KVHeads)
	}
	dh := s.DModel / s.Heads
	c := &Config{Arch: ArchGemma4, Layers: s.Layers, DModel: s.DModel, Heads: s.Heads, KVHeads: s.KVHeads, DHead: dh,
		DMLP: 2 * s.DModel, Vocab: s.Vocab, MaxPos: s.MaxPos, NormEps: 1e-6, Act: "gelu_pytorch_tanh", TiedHead: true,
		Sliding: min(64, s.MaxPos), SlidingLayers: make([]bool, s.Layers), FinalSoftcap: 30,
		GlobalDHead: 2 * dh, GlobalKVHeads: 1, KEqV: true, PerLayerDim: max(4, s.DModel/4), PerLayerVocab: s.Vocab,
		DoubleWideMLP: true, MoEBeside: true, MoE: &MoEConfig{Experts: 4, TopK: 2, DExpert: max(2, s.DModel/2), Normalize: true},
		RoPE:      RoPEConfig{Theta: 1e6, Type: "proportional", Factor: 1, Pairs: int(0.25 * float64(2*dh) / 2)},
		LocalRoPE: &RoPEConfig{Theta: 1e4, Type: "default", Factor: 1}}
	for l := range c.SlidingLayers {
		c.SlidingLayers[l] = (l+1)%3 != 0 && l != s.Layers-1
	}
	for c.KVShared = s.Layers / 3; c.KVShared > 0; c.KVShared-- {
		ok := true
		for l := s.Layers - c.KVShared; l < s.Layers; l++ {
			ok = ok && gemma4KVSource(c, l) >= 0
		}
		if ok {
			break
		}
	}
	return gemma4HFConfig(c), nil
}
