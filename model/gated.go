package model

// Qiu et al.'s gated attention ("Gated Attention for Large Language Models",
// the checkpoints behind BFT Appendix I) runs the Qwen3 block with a sigmoid
// gate on each head's attention output, before o_proj:
//
//	z_h = sigmoid(x·W_θ[:, h]) ⊙ Σ_j α_hj v_j
//
// The gate logits come from the same normalized input as the queries and are
// packed inside q_proj: its output, viewed as [KV groups, G·dh + G·g] with
// G = H/KV query heads per group, holds for each group the G·dh query rows of
// heads gG..gG+G−1 followed by their G·g gate rows (g = 1 headwise, g = dh
// elementwise). The gate sees neither q_norm nor RoPE. The configuration
// fields are headwise_attn_output_gate, elementwise_attn_output_gate,
// use_qk_norm and qkv_bias (bias on q, k, v and o_proj); model_type may say
// qwen2.

// unpackGatedQ splits a packed q_proj weight [KV·(G·dh + G·g), in] (or bias,
// in = 1) into query rows [H·dh, in] in head order and gate rows [H·g, in].
func unpackGatedQ(w []float32, in, H, KV, dh, g int) (q, gate []float32) {
	G := H / KV
	group := G*dh + G*g
	q = make([]float32, H*dh*in)
	gate = make([]float32, H*g*in)
	for kv := 0; kv < KV; kv++ {
		src := w[kv*group*in : (kv+1)*group*in]
		copy(q[kv*G*dh*in:(kv+1)*G*dh*in], src[:G*dh*in])
		copy(gate[kv*G*g*in:(kv+1)*G*g*in], src[G*dh*in:])
	}
	return q, gate
}
