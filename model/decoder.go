package model

import "fmt"

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
	m.Embed = ld.get(p+"embed_tokens.weight", V, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		a := fmt.Sprintf("%slayers.%d.self_attn.", p, l)
		mlp := fmt.Sprintf("%slayers.%d.mlp.", p, l)
		L.Norm1W = ld.get(fmt.Sprintf("%slayers.%d.input_layernorm.weight", p, l), D)
		L.Norm2W = ld.get(fmt.Sprintf("%slayers.%d.post_attention_layernorm.weight", p, l), D)

		if gp := c.GatePerHead(); gp > 0 {
			rows := H*dh + H*gp
			wq := ld.get(a+"q_proj.weight", rows, D)
			L.Wq, L.Wg = unpackGatedQ(wq, D, H, KV, dh, gp)
			if c.QKVBias {
				L.Bq, L.Bg = unpackGatedQ(ld.get(a+"q_proj.bias", rows), 1, H, KV, dh, gp)
			}
		} else {
			L.Wq = ld.get(a+"q_proj.weight", H*dh, D)
			L.Bq = bias(c.QKVBias, a+"q_proj.bias", H*dh)
		}
		L.Wk = ld.get(a+"k_proj.weight", KV*dh, D)
		L.Bk = bias(c.QKVBias, a+"k_proj.bias", KV*dh)
		L.Wv = ld.get(a+"v_proj.weight", KV*dh, D)
		L.Bv = bias(c.QKVBias, a+"v_proj.bias", KV*dh)
		L.Wo = ld.get(a+"o_proj.weight", D, H*dh)
		L.Bo = bias(c.OBias, a+"o_proj.bias", D)
		if c.QKNorm {
			L.QNorm = ld.get(a+"q_norm.weight", dh)
			L.KNorm = ld.get(a+"k_norm.weight", dh)
		}

		L.WGate = ld.get(mlp+"gate_proj.weight", F, D)
		L.BGate = bias(c.MLPBias, mlp+"gate_proj.bias", F)
		L.WUp = ld.get(mlp+"up_proj.weight", F, D)
		L.BUp = bias(c.MLPBias, mlp+"up_proj.bias", F)
		L.WDown = ld.get(mlp+"down_proj.weight", D, F)
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
	m.Head = ld.get(name, m.Vocab, m.DModel)
}
