package model

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
)

// gpt-oss (OpenAI; Hugging Face GptOssForCausalLM) runs the decoder pass of
// forward.go with learned attention sinks and a mixture of experts:
//
//	x ← x + o(softmax([s·q·kᵀ + mask | s_h])[:, :T]·v) + b_o   (rms₁; sinks s_h per head, Layer.Sinks)
//	x ← x + Σ_{e∈S} w_e·(down_e(act(gu_e(h))) + b_down,e),    h = rms₂(x)
//	S = top-k(z), w = softmax(z_S),  z = h·W_rᵀ + b_r          (top-k of the logits, then the softmax)
//	act: g, u = gu[0::2], gu[1::2] (interleaved columns); (clamp(u, ±ℓ) + 1)·g'·σ(α·g'), g' = min(g, ℓ)
//
// Each head's sink logit s_h is an extra column of its softmax, dropped
// after it, so a row of the pattern sums to 1 − σ (hook_sink_mass). Layers
// alternate by layer_types between sliding_attention (key j seen by query t
// iff t − j < sliding_window) and full_attention; RoPE is YaRN (rope.go:
// factor 32 over 4096 positions in the release, truncate false, cos and sin
// scaled by 0.1·ln(factor) + 1); q, k, v and o have biases; the norms are
// RMSNorm; the head is untied. The experts' activation is MoEConfig's
// clamped SwiGLU (swiglu_limit ℓ = 7, swiglu_alpha α = 1.702).
//
// Names: model.embed_tokens, model.layers.{l}.{input_layernorm,
// self_attn.{q,k,v,o}_proj (weight and bias), self_attn.sinks [H],
// post_attention_layernorm, mlp.router.{weight [E, D], bias [E]},
// mlp.experts.{gate_up_proj [E, D, 2F], gate_up_proj_bias [E, 2F],
// down_proj [E, F, D], down_proj_bias [E, D]}}, model.norm, lm_head. The
// fused expert tensors are stored (in, out): each expert's matrix is
// transposed once on load into nn.Linear's [out, in] (a copy in its stored
// dtype). The released checkpoints store the two expert matrices in MXFP4
// instead, as mlp.experts.{gate_up_proj,down_proj}_{blocks [E, out, in/32,
// 16], scales [E, out, in/32]} — already [out, in]: they are kept as
// mapped and dequantized inside the products (Weight, DType MXFP4).

// ArchGptOss is gpt-oss's architecture.
const ArchGptOss Arch = "gpt_oss"

// gptOssDefaults are Hugging Face's GptOssConfig defaults for the fields a
// config.json may leave out (the class's field defaults and __post_init__:
// layer_types alternate from a sliding layer 0, rope_parameters the
// release's YaRN); parseGptOss completes config.json with them, and
// rope_theta with default_theta where neither rope object names one.
var gptOssDefaults = map[string]string{
	"num_hidden_layers": "36", "num_local_experts": "128", "vocab_size": "201088", "hidden_size": "2880",
	"intermediate_size": "2880", "head_dim": "64", "num_attention_heads": "64", "num_key_value_heads": "8",
	"sliding_window": "128", "tie_word_embeddings": "false", "hidden_act": `"silu"`, "max_position_embeddings": "131072",
	"rms_norm_eps": "1e-5", "num_experts_per_tok": "4", "swiglu_alpha": "1.702", "swiglu_limit": "7.0",
	"attention_bias":  "true",
	"rope_parameters": `{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false, "original_max_position_embeddings": 4096}`,
}

// gptOssTheta is GptOssConfig's default_theta.
const gptOssTheta = 150000

var gptOssFamily = &family{
	arch: ArchGptOss, modelTypes: "gpt_oss",
	detect:   func(cf *configFile) bool { return cf.modelType() == "gpt_oss" },
	parse:    parseGptOss,
	load:     loadGptOss,
	hfConfig: gptOssHFConfig,
	small:    smallGptOss,
	prefix:   "model.",
}

// gptOssRaw holds the config.json fields of gpt-oss beyond the common ones.
type gptOssRaw struct {
	AttentionBias bool            `json:"attention_bias"`
	SlidingWindow json.RawMessage `json:"sliding_window"`
	LayerTypes    []string        `json:"layer_types"`
	SwiGLULimit   float64         `json:"swiglu_limit"`
	SwiGLUAlpha   float64         `json:"swiglu_alpha"`
	Quantization  *struct {
		Method string `json:"quant_method"`
	} `json:"quantization_config"`
}

// parseGptOss fills c from a gpt-oss config.json completed with
// GptOssConfig's defaults (gptOssDefaults), refusing what is not
// implemented by field name.
func parseGptOss(c *Config, cf *configFile) error {
	c.ModelType, c.DType = cf.r.ModelType, cf.dtype()
	// config.json with the defaults where it leaves a field out (a
	// transformers 4 config's rope_scaling stands for rope_parameters)
	full := maps.Clone(cf.raw)
	for k, v := range gptOssDefaults {
		if _, ok := full[k]; !ok && !(k == "rope_parameters" && !emptyJSON(full["rope_scaling"])) {
			full[k] = json.RawMessage(v)
		}
	}
	if _, ok := full["rope_theta"]; !ok && !ropeHasTheta(full["rope_parameters"]) && !ropeHasTheta(full["rope_scaling"]) {
		full["rope_theta"] = json.RawMessage(strconv.Itoa(gptOssTheta))
	}
	data, err := json.Marshal(full)
	if err != nil {
		return err
	}
	cf = &configFile{data: data, raw: full}
	var g gptOssRaw
	if err := json.Unmarshal(data, &cf.r); err != nil {
		return err
	}
	cf.r.RopeScaling = full["rope_scaling"]
	if err := json.Unmarshal(data, &g); err != nil {
		return err
	}
	if q := g.Quantization; q != nil && q.Method != "mxfp4" {
		return fmt.Errorf("quantization_config.quant_method %q is not supported (supported: mxfp4, the released experts' format)", q.Method)
	}
	r := cf.r
	r.SlidingWindow = nil // per layer type: below
	if err := c.fromDecoder(&r, false); err != nil {
		return err
	}
	c.QKVBias, c.OBias = g.AttentionBias, g.AttentionBias

	// sliding_window on the layers layer_types names sliding_attention
	if string(g.SlidingWindow) != "null" {
		if err := json.Unmarshal(g.SlidingWindow, &c.Sliding); err != nil || c.Sliding <= 0 {
			return fmt.Errorf("field sliding_window: want a positive integer or null, got %s", g.SlidingWindow)
		}
	}
	c.SlidingLayers = make([]bool, c.Layers)
	if g.LayerTypes == nil {
		for l := range c.SlidingLayers {
			c.SlidingLayers[l] = l%2 == 0
		}
	} else if len(g.LayerTypes) != c.Layers {
		return fmt.Errorf("field layer_types has %d entries for num_hidden_layers %d", len(g.LayerTypes), c.Layers)
	}
	for l, t := range g.LayerTypes {
		switch t {
		case "sliding_attention":
			c.SlidingLayers[l] = true
		case "full_attention":
		default:
			return fmt.Errorf("field layer_types: layer %d is %q (supported: sliding_attention, full_attention)", l, t)
		}
	}
	for l, s := range c.SlidingLayers {
		if s && c.Sliding == 0 {
			return fmt.Errorf("sliding_window is null but layer %d is a sliding_attention layer (layer_types)", l)
		}
	}
	if c.Sliding > c.MaxPos {
		return fmt.Errorf("sliding_window %d exceeds max_position_embeddings %d", c.Sliding, c.MaxPos)
	}

	// the experts: top-k of the logits then the softmax, a router bias,
	// the clamped SwiGLU
	if err := parseMoE(c, cf, moeSpec{}); err != nil {
		return err
	}
	mc := c.MoE
	mc.Order, mc.Normalize, mc.RouterBias, mc.MXFP4 = RouteTopKSoftmax, false, true, g.Quantization != nil
	for _, f := range []struct {
		name string
		v    float64
		dst  *float32
	}{{"swiglu_limit", g.SwiGLULimit, &mc.SwiGLULimit}, {"swiglu_alpha", g.SwiGLUAlpha, &mc.SwiGLUAlpha}} {
		if !(f.v > 0) || f.v > math.MaxFloat32 {
			return fmt.Errorf("field %s = %v must be a positive number", f.name, f.v)
		}
		*f.dst = float32(f.v)
	}
	return nil
}

// emptyJSON reports whether a config.json value is absent, null or {}.
func emptyJSON(v json.RawMessage) bool {
	s := strings.TrimSpace(string(v))
	return s == "" || s == "null" || strings.ReplaceAll(s, " ", "") == "{}"
}

// ropeHasTheta reports whether a RoPE object of config.json names
// rope_theta.
func ropeHasTheta(v json.RawMessage) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(v, &m) != nil {
		return false
	}
	t, ok := m["rope_theta"]
	return ok && string(t) != "null"
}

// loadGptOss reads (or makes up) a gpt-oss checkpoint's tensors.
func loadGptOss(m *Model, ld *loader) {
	c := &m.Config
	D, H, KV, dh, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.Vocab
	bias := func(on bool, name string, n int) []float32 {
		if !on {
			return nil
		}
		return ld.get(name, n)
	}
	ld.ignore("rotary_emb.inv_freq")
	m.Embed = ld.weight("model.embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		lp := fmt.Sprintf("model.layers.%d.", l)
		a := lp + "self_attn."
		L.Norm1W = ld.get(lp+"input_layernorm.weight", D)
		L.Norm2W = ld.get(lp+"post_attention_layernorm.weight", D)
		L.Wq, L.Bq = ld.weight(a+"q_proj.weight", H*dh, D), bias(c.QKVBias, a+"q_proj.bias", H*dh)
		L.Wk, L.Bk = ld.weight(a+"k_proj.weight", KV*dh, D), bias(c.QKVBias, a+"k_proj.bias", KV*dh)
		L.Wv, L.Bv = ld.weight(a+"v_proj.weight", KV*dh, D), bias(c.QKVBias, a+"v_proj.bias", KV*dh)
		L.Wo, L.Bo = ld.weight(a+"o_proj.weight", D, H*dh), bias(c.OBias, a+"o_proj.bias", D)
		L.Sinks = ld.get(a+"sinks", H)
		L.ffn = loadGptOssExperts(ld, c, lp+"mlp.")
	}
	m.FinalW = ld.get("model.norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// loadGptOssExperts reads a layer's router and experts under p
// (model.layers.{l}.mlp.): the fused matrices in MXFP4 where the
// checkpoint stores *_blocks (the release), else as [E, in, out] tensors,
// each expert's transposed once; the gate rows are the even rows of
// gate_up (its even output columns), the up rows the odd ones, read in
// place (Weight.runsOf), their biases split the same way.
func loadGptOssExperts(ld *loader, c *Config, p string) *moeLayer {
	D, E, F := c.DModel, c.MoE.Experts, c.MoE.DExpert
	e := &moeLayer{cfg: c.MoE, act: c.Act, experts: make([]moeExpert, E)}
	e.router, e.routerB = ld.weight(p+"router.weight", E, D), ld.get(p+"router.bias", E)
	x := p + "experts."
	var gu, down []Weight // each expert's [2F, D] and [D, F]
	if ld.gen == nil && ld.has(x+"gate_up_proj_blocks") || ld.gen != nil && c.MoE.MXFP4 {
		gu, down = ld.mxfp4(x+"gate_up_proj", E, 2*F, D), ld.mxfp4(x+"down_proj", E, D, F)
	} else {
		gus, downs := ld.stacked(x+"gate_up_proj", E, D, 2*F), ld.stacked(x+"down_proj", E, F, D)
		for i := range E {
			gu = append(gu, gus.rowRange(i*D, (i+1)*D).transposed())
			down = append(down, downs.rowRange(i*F, (i+1)*F).transposed())
		}
	}
	gub, db := ld.get(x+"gate_up_proj_bias", E, 2*F), ld.get(x+"down_proj_bias", E, D)
	for i := range e.experts {
		ex := &e.experts[i]
		ex.gate, ex.up, ex.down = gu[i].runsOf(0, 1, 2), gu[i].runsOf(1, 1, 2), down[i]
		ex.bGate, ex.bUp = make([]float32, F), make([]float32, F)
		for j := range F {
			ex.bGate[j], ex.bUp[j] = gub[i*2*F+2*j], gub[i*2*F+2*j+1]
		}
		ex.bDown = db[i*D : (i+1)*D]
	}
	return e
}

// gptOssHFConfig is the config.json of c as transformers 5 writes it
// (rope_scaling in the form it reads too).
func gptOssHFConfig(c *Config) map[string]any {
	m := decoderHFConfig(c, "gpt_oss", "GptOssForCausalLM")
	m["attention_bias"] = c.QKVBias
	m["sliding_window"] = nil
	if c.Sliding > 0 {
		m["sliding_window"] = c.Sliding
	}
	types := make([]string, c.Layers)
	for l := range types {
		types[l] = "full_attention"
		if l < len(c.SlidingLayers) && c.SlidingLayers[l] {
			types[l] = "sliding_attention"
		}
	}
	m["layer_types"] = types
	mc := c.MoE
	m["num_local_experts"], m["num_experts_per_tok"] = mc.Experts, mc.TopK
	m["swiglu_limit"], m["swiglu_alpha"] = float64(mc.SwiGLULimit), float64(mc.SwiGLUAlpha)
	if mc.MXFP4 { // as the release declares it
		m["quantization_config"] = map[string]any{"quant_method": "mxfp4",
			"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
	}
	return m
}

// smallGptOss is a small gpt-oss: the release's block (YaRN as released,
// window min(128, max positions) on the even layers, untied head) with
// head_dim d_model/heads, 4 experts of width d_model, 2 per token.
func smallGptOss(s Size) (map[string]any, error) {
	if s.DModel%s.Heads != 0 || s.Heads%s.KVHeads != 0 || (s.DModel/s.Heads)%2 != 0 {
		return nil, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", s.DModel, s.Heads, s.KVHeads)
	}
	c := &Config{Layers: s.Layers, DModel: s.DModel, Heads: s.Heads, KVHeads: s.KVHeads, DHead: s.DModel / s.Heads,
		DMLP: s.DModel, Vocab: s.Vocab, MaxPos: s.MaxPos, NormEps: 1e-5, Act: "silu", QKVBias: true, OBias: true,
		Sliding: min(128, s.MaxPos), SlidingLayers: make([]bool, s.Layers),
		RoPE: RoPEConfig{Theta: gptOssTheta, Type: "yarn", Factor: 32, OrigMax: 4096, BetaFast: 32, BetaSlow: 1, NoTruncate: true},
		MoE:  &MoEConfig{Experts: 4, TopK: 2, DExpert: s.DModel, SwiGLULimit: 7, SwiGLUAlpha: 1.702}}
	for l := range c.SlidingLayers {
		c.SlidingLayers[l] = l%2 == 0
	}
	return gptOssHFConfig(c), nil
}
