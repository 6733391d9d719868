package model

// The Selective-RoPE language model: the authors' Transformer LM
// (src/selective_rope/models/transformer, HF model_type "transformer"), a
// Llama-style pre-norm decoder
//
//	x += Attention(RMSNorm(x));  x += SwiGLU(RMSNorm(x));  logits = lm_head(RMSNorm(x))
//
// whose attention is SelRoPEAttention (selrope.go). Everything except the
// rotation is the standard pass of forward.go; Forward calls
// selropeWeights.rotate in place of RoPE (the model's unexported selrope
// field selects it, as the rfa field selects forwardRFA).
//
// Checkpoint layout (config.json as TransformerConfig.save_pretrained writes
// it, names of TransformerForCausalLM.state_dict()):
//
//	model.embeddings.weight                                   [V, D]
//	model.layers.{l}.attn_norm.weight                         [D]
//	model.layers.{l}.attn.{q,k,v}_proj.weight (+ .bias)       [D, D] (bias with qkv_bias)
//	model.layers.{l}.attn.o_proj.weight                       [D, D]
//	model.layers.{l}.attn.{q,k}_norm.weight                   [d]    (qk_norm)
//	model.layers.{l}.attn.rotary.*                            see SelRoPERotary
//	model.layers.{l}.mlp_norm.weight                          [D]
//	model.layers.{l}.mlp.{gate,up}_proj.weight                [F, D]
//	model.layers.{l}.mlp.down_proj.weight                     [D, F]
//	model.norm.weight                                         [D]
//	lm_head.weight                                            [V, D] (absent when tied)

import (
	"encoding/json"
	"fmt"

	"github.com/filterlens/probe/hooks"
)

// ArchSelRoPE is the Selective-RoPE Transformer LM (config.json model_type
// "transformer" with position_embedding.type "selective_rope").
const ArchSelRoPE Arch = "selrope"

// selropeModelType is the authors' TransformerConfig.model_type.
const selropeModelType = "transformer"

// selropeWeights holds the per-layer rotary modules of a Selective-RoPE LM;
// the rest of each layer lives in Model.Layers.
type selropeWeights struct {
	layers []*SelRoPERotary
}

// isSelRoPEConfig reports whether config.json is the authors'
// TransformerConfig (model_type "transformer").
func isSelRoPEConfig(raw map[string]json.RawMessage) bool {
	var mt string
	if v, ok := raw["model_type"]; ok && json.Unmarshal(v, &mt) == nil {
		return mt == selropeModelType
	}
	return false
}

// selropeRaw holds the TransformerConfig fields beyond the attention
// arguments, with the authors' defaults applied where a field is absent.
type selropeRaw struct {
	attnRaw
	Layers       *int     `json:"num_hidden_layers"`
	Vocab        *int     `json:"vocab_size"`
	MaxPos       *int     `json:"max_position_embeddings"`
	HiddenRatio  *int     `json:"hidden_ratio"`
	Intermediate *int     `json:"intermediate_size"`
	HiddenAct    *string  `json:"hidden_act"`
	NormEps      *float64 `json:"norm_eps"`
	Tied         *bool    `json:"tie_word_embeddings"`
	Affine       *bool    `json:"elementwise_affine"`
	TorchDType   string   `json:"torch_dtype"`
}

// fromSelRoPE fills c from the authors' TransformerConfig. Defaults are
// TransformerConfig's own: max_position_embeddings 2048, hidden_ratio 4,
// hidden_act "swish", norm_eps 1e-6, tie_word_embeddings false,
// elementwise_affine true. The MLP width, when intermediate_size is null,
// is fla GatedMLP's: 256·⌈⌊D·hidden_ratio·2/3⌋/256⌉.
func (c *Config) fromSelRoPE(data []byte) error {
	var r selropeRaw
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	c.Arch, c.ModelType, c.DType = ArchSelRoPE, selropeModelType, r.TorchDType
	D, H, dh, sc, err := r.attnRaw.parse()
	if err != nil {
		return err
	}
	c.DModel, c.Heads, c.KVHeads, c.DHead = D, H, H, dh
	if c.Layers, err = need("num_hidden_layers", r.Layers); err != nil {
		return err
	}
	c.Vocab = 32000
	if r.Vocab != nil {
		if c.Vocab, err = need("vocab_size", r.Vocab); err != nil {
			return err
		}
	}
	c.MaxPos = 2048
	if r.MaxPos != nil {
		if c.MaxPos, err = need("max_position_embeddings", r.MaxPos); err != nil {
			return err
		}
	}
	ratio := 4
	if r.HiddenRatio != nil {
		if ratio, err = need("hidden_ratio", r.HiddenRatio); err != nil {
			return err
		}
	}
	if r.Intermediate != nil {
		if c.DMLP, err = need("intermediate_size", r.Intermediate); err != nil {
			return err
		}
	} else {
		f := int(float64(D*ratio) * 2 / 3)
		c.DMLP = 256 * ((f + 255) / 256)
	}
	c.Act = "swish"
	if r.HiddenAct != nil {
		c.Act = *r.HiddenAct
	}
	if c.Act != "swish" && c.Act != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (fla's GatedMLP accepts only \"swish\")", c.Act)
	}
	c.NormEps = 1e-6
	if r.NormEps != nil {
		if c.NormEps = *r.NormEps; !(c.NormEps >= 0) {
			return fmt.Errorf("norm_eps %v must be ≥ 0", c.NormEps)
		}
	}
	c.TiedHead = r.Tied != nil && *r.Tied
	if r.Affine != nil && !*r.Affine {
		return fmt.Errorf("elementwise_affine = false is not supported (RMSNorm weights are expected)")
	}
	c.QKVBias, c.QKNorm, c.Gate = r.QKVBias, r.QKNorm, GateNone
	if r.Window != nil {
		c.Sliding = *r.Window
	}
	c.SelRoPE = &sc
	return nil
}

// loadSelRoPE reads (or, under Generate, makes up) a Selective-RoPE LM.
func loadSelRoPE(m *Model, ld *loader) {
	c := &m.Config
	D, H, dh, F, V := c.DModel, c.Heads, c.DHead, c.DMLP, c.Vocab
	m.Embed = ld.weight32("model.embeddings.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	m.ext = &selropeWeights{layers: make([]*SelRoPERotary, c.Layers)}
	for l := range m.Layers {
		L, p := &m.Layers[l], fmt.Sprintf("model.layers.%d.", l)
		L.Norm1W = ld.get(p+"attn_norm.weight", D)
		a := loadSelRoPEAttention(ld, p+"attn.", D, H, dh, c.QKVBias, *c.SelRoPE)
		L.Wq, L.Bq, L.Wk, L.Bk, L.Wv, L.Bv, L.Wo = a.Wq, a.Bq, a.Wk, a.Bk, a.Wv, a.Bv, a.Wo
		m.selrope().layers[l] = a.Rotary // its q_norm/k_norm run after the rotation, not in L.QNorm
		L.Norm2W = ld.get(p+"mlp_norm.weight", D)
		L.WGate = ld.weight32(p+"mlp.gate_proj.weight", F, D)
		L.WUp = ld.weight32(p+"mlp.up_proj.weight", F, D)
		L.WDown = ld.weight32(p+"mlp.down_proj.weight", D, F)
	}
	m.FinalW = ld.get("model.norm.weight", D)
	loadHead(m, ld, "lm_head.weight")
}

// rotate is the Selective-RoPE step of Forward for layer l: the angles from
// the attention input h [B·T, D] (hooks hook_phase_gate,
// hook_angular_velocity, hook_angle), then q and k [B·T, H, d] rotated in
// place (and QK-normed after the rotation when qk_norm is set).
func (w *selropeWeights) rotate(l int, h, q, k []float32, B, T int, hs *hooks.Set) error {
	r := w.layers[l]
	tr, err := r.Trace(h, B, T, hs, l)
	if err != nil {
		return err
	}
	r.Rotate(q, tr, r.QNorm)
	r.Rotate(k, tr, r.KNorm)
	return nil
}

// IsSelRoPE reports whether the model is a Selective-RoPE LM.
func (m *Model) IsSelRoPE() bool { return m.selrope() != nil }

// SelRoPELayer returns layer l's rotary module (options, temperatures,
// projection, conv, bias and gate parameters), or an error when the model
// is not a Selective-RoPE LM or l is out of range.
func (m *Model) SelRoPELayer(l int) (*SelRoPERotary, error) {
	if m.selrope() == nil {
		return nil, fmt.Errorf("model: %s is a %s checkpoint, not Selective RoPE (config.json model_type %q with position_embedding.type \"selective_rope\")", m.Dir, m.Arch, selropeModelType)
	}
	if l < 0 || l >= len(m.selrope().layers) {
		return nil, fmt.Errorf("model: layer %d out of range (model has %d layers)", l, len(m.selrope().layers))
	}
	return m.selrope().layers[l], nil
}

// selropeHFConfig returns config.json fields of the authors'
// TransformerConfig for c (what WriteHF writes for ArchSelRoPE). pair_layout
// is written only when it is not the authors' layout, since their
// SelectiveRoPE rejects unknown keywords.
func (c *Config) selropeHFConfig() map[string]any {
	s := c.SelRoPE
	act := any(nil)
	if s.ConvAct != "" {
		act = s.ConvAct
	}
	pe := map[string]any{
		"type": "selective_rope", "skip_conv": s.SkipConv, "d_conv": s.DConv,
		"temp_type": s.TempType, "temp_theta": s.TempTheta, "temp_max": s.TempMax, "temp_grad": false,
		"phi_proj_rank": s.PhiRank, "phi_parametrization": s.PhiParam, "conv_act": act,
		"use_gate": s.UseGate, "gate_parametrization": s.GateParam, "gate_low_rank_dim": s.GateRank,
		"use_bias": s.UseBias, "use_triton": false, "fuse_gate": false,
	}
	if s.Pairing != PairNeoX {
		pe["pair_layout"] = string(s.Pairing)
	}
	window := any(nil)
	if c.Sliding > 0 {
		window = c.Sliding
	}
	return map[string]any{
		"model_type": selropeModelType, "architectures": []string{"TransformerForCausalLM"},
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_heads": c.Heads, "num_kv_heads": nil,
		"qkv_bias": c.QKVBias, "qk_norm": s.QKNorm, "window_size": window,
		"max_position_embeddings": c.MaxPos, "hidden_ratio": 4, "intermediate_size": c.DMLP,
		"hidden_act": "swish", "norm_eps": c.NormEps, "elementwise_affine": true,
		"tie_word_embeddings": c.TiedHead, "vocab_size": c.Vocab, "torch_dtype": "float32",
		"fuse_norm": true, "fuse_swiglu": true, "fuse_cross_entropy": true,
		"position_embedding": pe,
	}
}

// SmallSelRoPEConfig returns a small Selective-RoPE LM configuration for
// demos and tests with the rotary options sc (start from
// DefaultSelRoPEConfig); SmallConfig(ArchSelRoPE, …) gives the options of
// the authors' released LM sweep. d_model/heads head dim, MLP 3·d_model,
// norm ε 1e-6, untied head (the authors' default). The result is what a
// reader of the written config.json gets: L2Eps and QKNormEps are the
// authors' fixed values whatever sc says.
func SmallSelRoPEConfig(layers, dModel, heads, vocab, maxPos int, sc SelRoPEConfig) (Config, error) {
	fields, err := selropeSmall(Size{Layers: layers, DModel: dModel, Heads: heads, KVHeads: heads, Vocab: vocab, MaxPos: maxPos}, sc)
	if err != nil {
		return Config{}, err
	}
	return roundTrip(fields)
}

// selropeSmall returns the config.json fields of a small Selective-RoPE LM
// with rotary options sc. Selective RoPE has no grouped-query attention, so
// s.KVHeads must equal s.Heads.
func selropeSmall(s Size, sc SelRoPEConfig) (map[string]any, error) {
	if s.KVHeads != s.Heads {
		return nil, fmt.Errorf("kv heads %d must equal heads %d (Selective RoPE shares one angle set between the q and k heads, so there is no grouped-query attention)", s.KVHeads, s.Heads)
	}
	if s.Heads <= 0 || s.DModel%s.Heads != 0 || (s.DModel/s.Heads)%2 != 0 {
		return nil, fmt.Errorf("d_model %d, heads %d: need d_model divisible by heads and an even head dim", s.DModel, s.Heads)
	}
	c := Config{Arch: ArchSelRoPE, ModelType: selropeModelType, Layers: s.Layers, DModel: s.DModel, Heads: s.Heads,
		KVHeads: s.Heads, DHead: s.DModel / s.Heads, DMLP: 3 * s.DModel, Vocab: s.Vocab, MaxPos: s.MaxPos, NormEps: 1e-6,
		Act: "swish", Gate: GateNone, QKNorm: sc.QKNorm, SelRoPE: &sc}
	return c.selropeHFConfig(), nil
}

// selropeFamily is a Llama-style LM whose attention is Selective RoPE, in
// the authors' TransformerConfig layout. It runs the decoder pass with its
// rotary modules (selropeWeights.rotate) in place of RoPE.
var selropeFamily = &family{
	arch: ArchSelRoPE, modelTypes: selropeModelType + ` with "position_embedding": {"type": "selective_rope"}`,
	detect:    func(cf *configFile) bool { return isSelRoPEConfig(cf.raw) },
	parse:     func(c *Config, cf *configFile) error { return c.fromSelRoPE(cf.data) },
	load:      loadSelRoPE,
	positions: "Selective RoPE: input-dependent cumulative angles (hook_angle, hook_angular_velocity)",
	hfConfig:  (*Config).selropeHFConfig,
	// The rotary options of the authors' released LM sweep (full-rank
	// weight-normalised φ-projection, SiLU conv, standard phase gate, no
	// bias; as golden case selrope_attn_fullrank_silu_gate).
	small: func(s Size) (map[string]any, error) {
		sc := DefaultSelRoPEConfig()
		sc.PhiParam, sc.ConvAct, sc.UseGate = "full-rank", "silu", true
		return selropeSmall(s, sc)
	},
	prefix: "model.",
}

// selrope returns the model's Selective-RoPE rotary modules, or nil for
// another family.
func (m *Model) selrope() *selropeWeights { w, _ := m.ext.(*selropeWeights); return w }
