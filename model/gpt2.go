package model

import "fmt"

// loadGPT2 reads a GPT-2 checkpoint: learned positions (wpe), LayerNorm
// pre-norm blocks, fused c_attn, and Conv1D weights stored [in, out], which
// are transposed here to the [out, in] layout every projection uses (a copy
// on the heap, in the stored dtype).
//
// Names: [transformer.]wte, wpe, h.{l}.{ln_1, attn.c_attn, attn.c_proj, ln_2,
// mlp.c_fc, mlp.c_proj}, ln_f, lm_head (when untied). The causal-mask
// buffers attn.bias / attn.masked_bias of older checkpoints are ignored.
func loadGPT2(m *Model, ld *loader) {
	c := &m.Config
	D, F, V := c.DModel, c.DMLP, c.Vocab
	p := "transformer."
	if !ld.has(p+"wte.weight") && ld.has("wte.weight") {
		p = ""
	}
	ld.ignore(".attn.bias", ".attn.masked_bias")
	m.Embed = ld.weight(p+"wte.weight", V, D)
	m.PosEmbed = ld.get(p+"wpe.weight", c.MaxPos, D)
	m.Layers = make([]Layer, c.Layers)
	for l := range m.Layers {
		L := &m.Layers[l]
		b := fmt.Sprintf("%sh.%d.", p, l)
		L.Norm1W, L.Norm1B = ld.get(b+"ln_1.weight", D), ld.get(b+"ln_1.bias", D)
		qkv := ld.weight(b+"attn.c_attn.weight", D, 3*D).transposed() // [3D, D]
		qkvB := ld.get(b+"attn.c_attn.bias", 3*D)
		L.Wq, L.Wk, L.Wv = qkv.rowRange(0, D), qkv.rowRange(D, 2*D), qkv.rowRange(2*D, 3*D)
		L.Bq, L.Bk, L.Bv = qkvB[:D], qkvB[D:2*D], qkvB[2*D:]
		L.Wo = ld.weight(b+"attn.c_proj.weight", D, D).transposed()
		L.Bo = ld.get(b+"attn.c_proj.bias", D)
		L.Norm2W, L.Norm2B = ld.get(b+"ln_2.weight", D), ld.get(b+"ln_2.bias", D)
		L.WUp = ld.weight(b+"mlp.c_fc.weight", D, F).transposed()
		L.BUp = ld.get(b+"mlp.c_fc.bias", F)
		L.WDown = ld.weight(b+"mlp.c_proj.weight", F, D).transposed()
		L.BDown = ld.get(b+"mlp.c_proj.bias", D)
	}
	m.FinalW, m.FinalB = ld.get(p+"ln_f.weight", D), ld.get(p+"ln_f.bias", D)
	loadHead(m, ld, "lm_head.weight")
}

// transpose returns the [cols, rows] transpose of a [rows, cols] matrix.
func transpose(a []float32, rows, cols int) []float32 {
	t := make([]float32, len(a))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			t[c*rows+r] = a[r*cols+c]
		}
	}
	return t
}

// ArchGPT2 is GPT-2: LayerNorm, learned positions, Conv1D weights.
const ArchGPT2 Arch = "gpt2"

// gpt2Family is GPT-2 (learned positions, LayerNorm, Conv1D weights).
var gpt2Family = &family{
	arch: ArchGPT2, modelTypes: "gpt2",
	detect: func(cf *configFile) bool { return cf.modelType() == "gpt2" },
	parse: func(c *Config, cf *configFile) error {
		c.ModelType, c.DType = cf.r.ModelType, cf.r.TorchDType
		return c.fromGPT2(&cf.r)
	},
	load:             loadGPT2,
	positions:        "learned positions",
	learnedPositions: true,
	hfConfig: func(c *Config) map[string]any {
		return map[string]any{
			"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
			"n_embd": c.DModel, "n_layer": c.Layers, "n_head": c.Heads, "n_inner": c.DMLP,
			"n_positions": c.MaxPos, "vocab_size": c.Vocab, "layer_norm_epsilon": c.NormEps,
			"activation_function": c.Act, "tie_word_embeddings": c.TiedHead,
			"scale_attn_weights": true, "torch_dtype": "float32",
		}
	},
	// GPT-2 has no grouped-query attention: KVHeads is not used.
	small: func(s Size) (map[string]any, error) {
		if s.DModel%s.Heads != 0 || (s.DModel/s.Heads)%2 != 0 {
			return nil, fmt.Errorf("d_model %d, heads %d: need d_model divisible by heads and an even head dim", s.DModel, s.Heads)
		}
		return map[string]any{
			"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
			"n_embd": s.DModel, "n_layer": s.Layers, "n_head": s.Heads, "n_inner": 4 * s.DModel,
			"n_positions": s.MaxPos, "vocab_size": s.Vocab, "layer_norm_epsilon": 1e-5,
			"activation_function": "gelu_new", "tie_word_embeddings": true,
			"scale_attn_weights": true, "torch_dtype": "float32",
		}, nil
	},
	prefix: "transformer.",
}
