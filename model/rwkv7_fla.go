package model

import (
	"encoding/json"
	"fmt"
	"math"
)

// RWKV-7 in the Hugging Face port of flash-linear-attention (fla-hub
// RWKV7ForCausalLM, model_type rwkv7; rwkv7_fla in some fla versions): the
// same model under other names (model.embeddings, model.layers.{l}.{
// pre_norm (layer 0), attn_norm, ffn_norm, attn.*, ffn.*}, model.norm,
// lm_head), with the LoRAs as nn.Sequential(Linear, act, Linear) —
// w1 = lora.0.weightᵀ, w2 = lora.2.weightᵀ, w0/a0/v0 = lora.2.bias —,
// k_k and k_a as [C], the group norm g_norm with eps head_dim·norm_eps and
// the decay written −e^{−½}·σ(·) (the same w as the authors' w_log).

// rwkv7FlaRaw holds the fla config fields beyond rawConfig's.
type rwkv7FlaRaw struct {
	HeadDim     *int            `json:"head_dim"`
	NumHeads    *int            `json:"num_heads"`
	HiddenRatio *float64        `json:"hidden_ratio"`
	NormFirst   *bool           `json:"norm_first"`
	NormBias    *bool           `json:"norm_bias"`
	NormEps     *float64        `json:"norm_eps"`
	HiddenAct   *string         `json:"hidden_act"`
	Attn        json.RawMessage `json:"attn"`
	ValueDim    json.RawMessage `json:"value_dim"`
}

// isRWKV7FlaConfig reports whether config.json is fla's RWKV-7.
func isRWKV7FlaConfig(cf *configFile) bool {
	return cf.modelType() == "rwkv7" || cf.modelType() == "rwkv7_fla"
}

// parseRWKV7Fla fills c from fla's RWKV7Config.
func parseRWKV7Fla(c *Config, cf *configFile) error {
	var f rwkv7FlaRaw
	if err := json.Unmarshal(cf.data, &f); err != nil {
		return fmt.Errorf("not valid for RWKV-7: %v", err)
	}
	r := &cf.r
	if len(f.Attn) > 0 && string(f.Attn) != "null" {
		return fmt.Errorf("field attn (hybrid softmax-attention layers) is not supported for RWKV-7")
	}
	if f.NormBias != nil && !*f.NormBias {
		return fmt.Errorf("field norm_bias false is not supported (LayerNorms with bias only)")
	}
	if f.HiddenAct != nil && *f.HiddenAct != "sqrelu" {
		return fmt.Errorf("field hidden_act %q is not supported (supported: sqrelu)", *f.HiddenAct)
	}
	var err error
	for _, x := range []struct {
		dst  *int
		name string
		p    *int
	}{{&c.DModel, "hidden_size", r.HiddenSize}, {&c.Layers, "num_hidden_layers", r.NumLayers}, {&c.Vocab, "vocab_size", r.VocabSize}} {
		if *x.dst, err = need(x.name, x.p); err != nil {
			return err
		}
	}
	if len(f.ValueDim) > 0 && string(f.ValueDim) != "null" {
		var one int
		var per []*int
		if json.Unmarshal(f.ValueDim, &one) == nil {
			per = []*int{&one}
		} else if json.Unmarshal(f.ValueDim, &per) != nil {
			return fmt.Errorf("field value_dim: want a number or a list of numbers")
		}
		for _, v := range per {
			if v != nil && *v != c.DModel {
				return fmt.Errorf("field value_dim %d differs from hidden_size %d (not supported)", *v, c.DModel)
			}
		}
	}
	// head_dim (default 64) decides, else num_heads
	switch {
	case f.HeadDim != nil:
		if c.DHead, err = need("head_dim", f.HeadDim); err != nil {
			return err
		}
	case f.NumHeads != nil:
		h, err := need("num_heads", f.NumHeads)
		if err != nil {
			return err
		}
		c.DHead = c.DModel / h
	default:
		if _, null := cf.raw["head_dim"]; null {
			return fmt.Errorf("fields head_dim and num_heads are both null")
		}
		c.DHead = 64
	}
	if c.DHead <= 0 || c.DModel%c.DHead != 0 {
		return fmt.Errorf("field head_dim %d does not divide hidden_size %d", c.DHead, c.DModel)
	}
	c.Heads = c.DModel / c.DHead
	if f.NumHeads != nil && f.HeadDim != nil && *f.NumHeads != c.Heads {
		return fmt.Errorf("field num_heads %d is inconsistent with hidden_size %d / head_dim %d", *f.NumHeads, c.DModel, c.DHead)
	}
	c.KVHeads = c.Heads
	ratio := 4.0
	if f.HiddenRatio != nil {
		ratio = *f.HiddenRatio
	}
	if r.Intermediate != nil {
		if c.DMLP, err = need("intermediate_size", r.Intermediate); err != nil {
			return err
		}
	} else {
		c.DMLP = 32 * ((int(float64(c.DModel)*ratio) + 31) / 32)
	}
	// the LoRA ranks: RWKV7Config's defaults when absent, the layer's
	// own formula when null (RWKV7Attention)
	rc := &RWKV7Config{Layout: "fla"}
	fac := float64(c.DHead) / 64
	sq := math.Sqrt(float64(c.DModel))
	for _, x := range []struct {
		dst    *int
		name   string
		def    int
		null   float64
		scaled bool
	}{
		{&rc.DecayLoRA, "decay_low_rank_dim", 64, 2.5, true}, {&rc.ICLRLoRA, "a_low_rank_dim", 64, 2.5, true},
		{&rc.ValueLoRA, "v_low_rank_dim", 16, 1.7, true}, {&rc.GateLoRA, "gate_low_rank_dim", 128, 5, false},
	} {
		raw, present := cf.raw[x.name]
		switch {
		case !present:
			*x.dst = x.def
		case string(raw) == "null":
			v := x.null * sq
			if x.scaled {
				v *= fac
			}
			*x.dst = max(32, int(math.Round(v/32))*32)
		default:
			var n int
			if err := json.Unmarshal(raw, &n); err != nil || n <= 0 {
				return fmt.Errorf("field %s %s must be a positive integer", x.name, raw)
			}
			*x.dst = n
		}
	}
	c.NormEps = 1e-5
	if f.NormEps != nil {
		c.NormEps = *f.NormEps
	}
	rc.GroupNormEps = float64(c.DHead) * c.NormEps
	rc.NoEmbedNorm = f.NormFirst != nil && !*f.NormFirst
	c.MaxPos = 2048
	if r.MaxPos != nil {
		if c.MaxPos, err = need("max_position_embeddings", r.MaxPos); err != nil {
			return err
		}
	}
	c.TiedHead = r.TieWordEmbeddings != nil && *r.TieWordEmbeddings
	c.Act, c.Gate = "relu2", GateNone
	c.ModelType, c.DType = cf.modelType(), cf.dtype()
	c.RWKV7 = rc
	return nil
}

// transposed returns the [cols, rows] transpose of x [rows, cols].
func transposed(x []float32, rows, cols int) []float32 {
	t := make([]float32, len(x))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			t[j*rows+i] = x[i*cols+j]
		}
	}
	return t
}

// loadRWKV7Fla reads fla's state dict into the same layers as loadRWKV7.
func loadRWKV7Fla(m *Model, ld *loader) {
	c, rc := &m.Config, m.RWKV7
	C, H, N, F, V := c.DModel, c.Heads, c.DHead, c.DMLP, c.Vocab
	m.Embed = ld.weight("model.embeddings.weight", V, C)
	if !rc.NoEmbedNorm {
		m.EmbedNormW, m.EmbedNormB = ld.get("model.layers.0.pre_norm.weight", C), ld.get("model.layers.0.pre_norm.bias", C)
	}
	ranks := [4]int{rc.DecayLoRA, rc.ICLRLoRA, rc.ValueLoRA, rc.GateLoRA}
	// lora returns a LoRA's first and second matrices as x·A·B reads them
	lora := func(p string, rank int) ([]float32, []float32) {
		return transposed(ld.get(p+"lora.0.weight", rank, C), rank, C), transposed(ld.get(p+"lora.2.weight", C, rank), C, rank)
	}
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		p := fmt.Sprintf("model.layers.%d.", l)
		L.Norm1W, L.Norm1B = ld.get(p+"attn_norm.weight", C), ld.get(p+"attn_norm.bias", C)
		L.Norm2W, L.Norm2B = ld.get(p+"ffn_norm.weight", C), ld.get(p+"ffn_norm.bias", C)
		a := p + "attn."
		tm := &rwkvTimeMix{C: C, H: H, N: N, eps: rc.GroupNormEps, first: l == 0, ranks: ranks,
			kK: ld.get(a+"k_k", C), kA: ld.get(a+"k_a", C), rK: ld.get(a+"r_k", H, N),
			lnW: ld.get(a+"g_norm.weight", C), lnB: ld.get(a+"g_norm.bias", C),
			Wr: ld.weight(a+"r_proj.weight", C, C), Wk: ld.weight(a+"k_proj.weight", C, C),
			Wv: ld.weight(a+"v_proj.weight", C, C), Wo: ld.weight(a+"o_proj.weight", C, C)}
		tm.w1, tm.w2 = lora(a+"w_lora.", ranks[0])
		tm.w0 = ld.get(a+"w_lora.lora.2.bias", C)
		tm.a1, tm.a2 = lora(a+"a_lora.", ranks[1])
		tm.a0 = ld.get(a+"a_lora.lora.2.bias", C)
		if l > 0 { // layer 0 has no v_lora: it sets v_first
			tm.v1, tm.v2 = lora(a+"v_lora.", ranks[2])
			tm.v0 = ld.get(a+"v_lora.lora.2.bias", C)
		}
		tm.g1, tm.g2 = lora(a+"g_lora.", ranks[3])
		for i, x := range []string{"x_r", "x_w", "x_k", "x_v", "x_a", "x_g"} {
			tm.mu[i] = ld.get(a+x, 1, 1, C)
		}
		L.mixer = tm
		f := p + "ffn."
		L.ffn = &rwkvChannelMix{C: C, F: F, mu: ld.get(f+"x_k", C),
			Wk: ld.weight(f+"key.weight", F, C), Wv: ld.weight(f+"value.weight", C, F)}
	}
	m.FinalW, m.FinalB = ld.get("model.norm.weight", C), ld.get("model.norm.bias", C)
	loadHead(m, ld, "lm_head.weight")
}

// rwkv7FlaConfig returns fla's config.json fields for c (a model loaded
// from fla's layout).
func rwkv7FlaConfig(c *Config) map[string]any {
	rc := c.RWKV7
	return map[string]any{
		"model_type": "rwkv7", "architectures": []string{"RWKV7ForCausalLM"}, "hidden_size": c.DModel,
		"num_hidden_layers": c.Layers, "head_dim": c.DHead, "intermediate_size": c.DMLP, "vocab_size": c.Vocab,
		"max_position_embeddings": c.MaxPos, "decay_low_rank_dim": rc.DecayLoRA, "a_low_rank_dim": rc.ICLRLoRA,
		"v_low_rank_dim": rc.ValueLoRA, "gate_low_rank_dim": rc.GateLoRA, "norm_first": !rc.NoEmbedNorm,
		"norm_bias": true, "norm_eps": c.NormEps, "hidden_act": "sqrelu", "tie_word_embeddings": c.TiedHead,
		"attn": nil, "dtype": "float32",
	}
}
