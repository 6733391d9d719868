package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/filterlens/probe/checkpoint"
)

// GGUF files (llama.cpp's format, read by checkpoint.OpenGGUF) of the
// families llama.cpp writes that probe runs — llama, qwen2, qwen3, gemma2,
// gemma3 — map to the Hugging Face checkpoint they were converted from:
// the hyper-parameters under "<arch>." become the config.json fields each
// family parses (GGUFConfig), and every tensor gets its Hugging Face name
// and layout back (GGUFTensors), undoing what llama.cpp's converter
// (convert_hf_to_gguf.py) changed, so that hooks mean what they mean for
// the Hugging Face checkpoint:
//
//   - llama: the rows of q_proj and k_proj (and their biases) were permuted
//     per head from rotate-half to interleaved pairs (LlamaModel.permute:
//     row h·d + 2i + s of the GGUF tensor is row h·d + s·d/2 + i of the
//     Hugging Face one, d the head dimension, i < d/2, s ∈ {0, 1}; n_head
//     heads for q, n_head_kv for k); ggufUnpermute inverts it.
//   - llama with Llama 3.1's rope scaling: rope_scaling (llama3) became a
//     tensor rope_freqs.weight of per-frequency factors and no metadata;
//     ggufLlama3Scaling recovers the parameters from it.
//   - gemma2, gemma3: every norm weight (the QK-norms included) was stored
//     as 1 + w, since llama.cpp's RMSNorm multiplies by the weight; the
//     Hugging Face w is the stored value − 1 (exact in float32 whenever
//     w + 1 was; the Gemma loader adds the 1 back).
//
// Load reads a GGUF file directly (gguf_source.go): the tensors one by one
// under these names and layouts, the quantized matrices kept in their
// blocks and dequantized inside the products (Weight.Q), bit for bit as
// ggml's to_float. ConvertGGUF instead writes everything dequantized to
// float32 (checkpoint.DequantizeRow) as a Hugging Face folder.

// ggufFamily describes one general.architecture value.
type ggufFamily struct {
	modelType string
	// names maps a per-layer GGUF tensor name (after "blk.N.") to the
	// Hugging Face one (after "model.layers.N."); the global names are in
	// ggufGlobalNames.
	names map[string]string
	// permuteQK: q/k rows were permuted by the converter (llama).
	permuteQK bool
	// normPlusOne: norm weights were stored as 1 + w (Gemma).
	normPlusOne bool
	// config adds the family's own config.json fields to cfg.
	config func(g *checkpoint.GGUFFile, arch string, cfg map[string]any) error
}

// ggufDecoderNames are the Llama-layout layer tensors (llama, qwen2, qwen3).
var ggufDecoderNames = map[string]string{
	"attn_norm.weight":   "input_layernorm.weight",
	"attn_q.weight":      "self_attn.q_proj.weight",
	"attn_q.bias":        "self_attn.q_proj.bias",
	"attn_k.weight":      "self_attn.k_proj.weight",
	"attn_k.bias":        "self_attn.k_proj.bias",
	"attn_v.weight":      "self_attn.v_proj.weight",
	"attn_v.bias":        "self_attn.v_proj.bias",
	"attn_output.weight": "self_attn.o_proj.weight",
	"attn_output.bias":   "self_attn.o_proj.bias",
	"attn_q_norm.weight": "self_attn.q_norm.weight",
	"attn_k_norm.weight": "self_attn.k_norm.weight",
	"ffn_norm.weight":    "post_attention_layernorm.weight",
	"ffn_gate.weight":    "mlp.gate_proj.weight",
	"ffn_up.weight":      "mlp.up_proj.weight",
	"ffn_down.weight":    "mlp.down_proj.weight",
}

// ggufGemmaNames are Gemma 2/3's layer tensors: four norms per layer.
var ggufGemmaNames = map[string]string{
	"attn_norm.weight":           "input_layernorm.weight",
	"attn_q.weight":              "self_attn.q_proj.weight",
	"attn_k.weight":              "self_attn.k_proj.weight",
	"attn_v.weight":              "self_attn.v_proj.weight",
	"attn_output.weight":         "self_attn.o_proj.weight",
	"attn_q_norm.weight":         "self_attn.q_norm.weight",
	"attn_k_norm.weight":         "self_attn.k_norm.weight",
	"post_attention_norm.weight": "post_attention_layernorm.weight",
	"ffn_norm.weight":            "pre_feedforward_layernorm.weight",
	"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
	"ffn_gate.weight":            "mlp.gate_proj.weight",
	"ffn_up.weight":              "mlp.up_proj.weight",
	"ffn_down.weight":            "mlp.down_proj.weight",
}

// ggufGlobalNames are the tensors outside the layers, common to the
// families here.
var ggufGlobalNames = map[string]string{
	"token_embd.weight":  "model.embed_tokens.weight",
	"output_norm.weight": "model.norm.weight",
	"output.weight":      "lm_head.weight",
}

// ggufFamilies maps general.architecture to its family.
var ggufFamilies = map[string]*ggufFamily{
	"llama": {modelType: "llama", names: ggufDecoderNames, permuteQK: true, config: ggufDecoderConfig},
	"qwen2": {modelType: "qwen2", names: ggufDecoderNames, config: ggufDecoderConfig},
	"qwen3": {modelType: "qwen3", names: ggufDecoderNames, config: ggufDecoderConfig},
	"gemma2": {modelType: "gemma2", names: ggufGemmaNames, normPlusOne: true, config: func(g *checkpoint.GGUFFile, arch string, cfg map[string]any) error {
		return ggufGemmaConfig(g, arch, cfg, 2, 46)
	}},
	"gemma3": {modelType: "gemma3_text", names: ggufGemmaNames, normPlusOne: true, config: func(g *checkpoint.GGUFFile, arch string, cfg map[string]any) error {
		return ggufGemmaConfig(g, arch, cfg, 6, 62)
	}},
}

// ggufArchs lists the general.architecture values read, for errors.
func ggufArchs() string {
	return "llama, qwen2, qwen3, gemma2, gemma3" // ggufFamilies' keys, in the order the docs give them
}

// ggufFamilyOf returns the file's general.architecture and its family.
func ggufFamilyOf(g *checkpoint.GGUFFile) (string, *ggufFamily, error) {
	arch, err := g.MetaString("general.architecture")
	if err != nil {
		return "", nil, err
	}
	f, ok := ggufFamilies[arch]
	if !ok {
		return arch, nil, fmt.Errorf("model: %s: general.architecture %q is not supported from GGUF (supported: %s)", g.Path, arch, ggufArchs())
	}
	return arch, f, nil
}

// ggufInt reads an integer hyper-parameter, def when absent (def < 0:
// required).
func ggufInt(g *checkpoint.GGUFFile, key string, def int64) (int64, error) {
	if _, ok := g.Meta(key); !ok {
		if def < 0 {
			return 0, fmt.Errorf("model: %s: metadata %q is missing", g.Path, key)
		}
		return def, nil
	}
	v, err := g.MetaInt(key)
	if err != nil {
		return 0, fmt.Errorf("model: %w (probe reads one value for all layers)", err)
	}
	return v, nil
}

// ggufFloat reads a float hyper-parameter, def when absent. A float32 value
// is read as the shortest decimal that rounds to it (1e-06, not
// 9.99999997e-07): the config.json value the converter rounded.
func ggufFloat(g *checkpoint.GGUFFile, key string, def float64) (float64, error) {
	raw, ok := g.Meta(key)
	if !ok {
		return def, nil
	}
	if f, ok := raw.(float32); ok {
		return strconv.ParseFloat(strconv.FormatFloat(float64(f), 'g', -1, 32), 64)
	}
	v, err := g.MetaFloat(key)
	if err != nil {
		return 0, fmt.Errorf("model: %w", err)
	}
	return v, nil
}

// GGUFConfig returns the config.json fields of the Hugging Face checkpoint
// a GGUF file was converted from, read from its "<arch>." metadata:
// embedding_length (hidden_size), block_count, feed_forward_length,
// attention.head_count, head_count_kv (default head_count), key_length
// (head_dim, default hidden/heads; value_length must equal it),
// attention.layer_norm_rms_epsilon, context_length
// (max_position_embeddings), rope.freq_base (default 10000, llama.cpp's),
// rope.scaling.type/factor (none or linear; llama3 from the tensor
// rope_freqs.weight, ggufLlama3Scaling), the vocabulary from the
// embedding's rows; tie_word_embeddings when there is no output.weight,
// attention_bias when blk.0.attn_q.bias is present; torch_dtype float32
// (the weights are dequantized to float32; Gemma's √D embedding scale is
// then computed in float32, as llama.cpp does).
func GGUFConfig(g *checkpoint.GGUFFile) (map[string]any, error) {
	arch, f, err := ggufFamilyOf(g)
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{"model_type": f.modelType, "torch_dtype": "float32"}
	ints := []struct {
		key, field string
		def        int64
	}{
		{"embedding_length", "hidden_size", -1},
		{"block_count", "num_hidden_layers", -1},
		{"feed_forward_length", "intermediate_size", -1},
		{"attention.head_count", "num_attention_heads", -1},
		{"context_length", "max_position_embeddings", -1},
	}
	for _, k := range ints {
		v, err := ggufInt(g, arch+"."+k.key, k.def)
		if err != nil {
			return nil, err
		}
		cfg[k.field] = v
	}
	heads, hidden := cfg["num_attention_heads"].(int64), cfg["hidden_size"].(int64)
	if heads <= 0 {
		return nil, fmt.Errorf("model: %s: metadata %q = %d must be positive", g.Path, arch+".attention.head_count", heads)
	}
	if cfg["num_key_value_heads"], err = ggufInt(g, arch+".attention.head_count_kv", heads); err != nil {
		return nil, err
	}
	dh, err := ggufInt(g, arch+".attention.key_length", hidden/heads)
	if err != nil {
		return nil, err
	}
	if dv, err := ggufInt(g, arch+".attention.value_length", dh); err != nil {
		return nil, err
	} else if dv != dh {
		return nil, fmt.Errorf("model: %s: metadata %q = %d differs from key_length %d (probe's families have one head dimension)", g.Path, arch+".attention.value_length", dv, dh)
	}
	cfg["head_dim"] = dh
	if rd, err := ggufInt(g, arch+".rope.dimension_count", dh); err != nil {
		return nil, err
	} else if rd != dh {
		return nil, fmt.Errorf("model: %s: metadata %q = %d: partial rotary embeddings (of %d dimensions per head) are not in the %s family", g.Path, arch+".rope.dimension_count", rd, dh, arch)
	}
	if cfg["rms_norm_eps"], err = ggufFloat(g, arch+".attention.layer_norm_rms_epsilon", 1e-6); err != nil {
		return nil, err
	}
	emb, ok := g.Tensor("token_embd.weight")
	if !ok || len(emb.Dims) != 2 {
		return nil, fmt.Errorf("model: %s: no 2-D tensor token_embd.weight (the embedding)", g.Path)
	}
	cfg["vocab_size"] = emb.Dims[1]
	_, untied := g.Tensor("output.weight")
	cfg["tie_word_embeddings"] = !untied
	_, bias := g.Tensor("blk.0.attn_q.bias")
	cfg["attention_bias"] = bias
	if err := f.config(g, arch, cfg); err != nil {
		return nil, err
	}
	if _, ok := g.Tensor("rope_freqs.weight"); ok {
		if f.normPlusOne || cfg["rope_scaling"] != nil {
			return nil, fmt.Errorf("model: %s: tensor rope_freqs.weight (per-frequency rope factors) in a %s file with rope.scaling.type set: not a form llama.cpp's converter writes", g.Path, arch)
		}
		if cfg["rope_scaling"], err = ggufLlama3Scaling(g, cfg["rope_theta"].(float64), int(dh)); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// ggufLlama3Known are the llama3 rope_scaling parameters (low_freq_factor,
// high_freq_factor, original_max_position_embeddings) of the released
// Llama 3.1, 3.2 and 3.3 models (their factor, 8 or 32, is read from the
// table itself).
var ggufLlama3Known = [][3]float64{{1, 4, 8192}}

// ggufLlama3Scaling recovers the llama3 rope_scaling that llama.cpp's
// converter turned into the tensor rope_freqs.weight (one factor per
// frequency, ggufLlama3Factors): the factor is the table's largest entry,
// and the other three parameters the first set of ggufLlama3Known whose
// table equals the stored one (to 1e-5 relative). A table that no known
// set makes is refused: the parameters are not identifiable from it.
func ggufLlama3Scaling(g *checkpoint.GGUFFile, theta float64, dh int) (map[string]any, error) {
	stored, err := g.Dequantize("rope_freqs.weight")
	if err != nil {
		return nil, err
	}
	if len(stored) != dh/2 {
		return nil, fmt.Errorf("model: %s: tensor rope_freqs.weight has %d values, want one per frequency (%d)", g.Path, len(stored), dh/2)
	}
	factor := float32(0)
	for _, v := range stored {
		factor = max(factor, v)
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(factor), 'g', -1, 32), 64)
	for _, k := range ggufLlama3Known {
		want := ggufLlama3Factors(theta, dh, f, k[0], k[1], k[2])
		same := true
		for i, w := range want {
			same = same && math.Abs(float64(w-stored[i])) <= 1e-5*math.Abs(float64(w))
		}
		if same {
			return map[string]any{"rope_type": "llama3", "factor": f, "low_freq_factor": k[0], "high_freq_factor": k[1],
				"original_max_position_embeddings": k[2]}, nil
		}
	}
	return nil, fmt.Errorf("model: %s: tensor rope_freqs.weight (factor %g) is not the llama3 rope scaling of any known parameters (low_freq_factor, high_freq_factor, original_max_position_embeddings: %v)", g.Path, f, ggufLlama3Known)
}

// ggufLlama3Factors is the table llama.cpp's converter writes for llama3
// rope scaling (LlamaModel.generate_extra_tensors): for each frequency
// f_i = θ^(−2i/d) (float32) with wavelength λ = 2π/f_i, 1 when λ <
// orig/high, factor when λ > orig/low, else 1/((1 − s)/factor + s) with
// s = (orig/λ − low)/(high − low). llama.cpp divides the frequency by it.
func ggufLlama3Factors(theta float64, d int, factor, low, high, orig float64) []float32 {
	out := make([]float32, d/2)
	for i := range out {
		freq := float64(float32(1 / math.Pow(theta, float64(2*i)/float64(d))))
		wave := 2 * math.Pi / freq
		switch {
		case wave < orig/high:
			out[i] = 1
		case wave > orig/low:
			out[i] = float32(factor)
		default:
			s := (orig/wave - low) / (high - low)
			out[i] = float32(1 / ((1-s)/factor + s))
		}
	}
	return out
}

// ggufRoPE returns the base and the rope_scaling of the "<arch>.rope."
// keys: none or linear (factor), anything else refused naming the key.
func ggufRoPE(g *checkpoint.GGUFFile, arch string) (theta float64, scaling map[string]any, err error) {
	if theta, err = ggufFloat(g, arch+".rope.freq_base", 10000); err != nil {
		return 0, nil, err
	}
	typ := "none"
	if _, ok := g.Meta(arch + ".rope.scaling.type"); ok {
		if typ, err = g.MetaString(arch + ".rope.scaling.type"); err != nil {
			return 0, nil, fmt.Errorf("model: %w", err)
		}
	}
	switch typ {
	case "none", "":
		// llama.cpp's freq_scale = 1/factor may also be given alone
		if f, err := ggufFloat(g, arch+".rope.scaling.factor", 0); err != nil || (f != 0 && f != 1) {
			if err != nil {
				return 0, nil, err
			}
			return 0, nil, fmt.Errorf("model: %s: metadata %q = %g with rope.scaling.type none", g.Path, arch+".rope.scaling.factor", f)
		}
		return theta, nil, nil
	case "linear":
		f, err := ggufFloat(g, arch+".rope.scaling.factor", 0)
		if err != nil {
			return 0, nil, err
		}
		if !(f > 0) {
			return 0, nil, fmt.Errorf("model: %s: metadata %q must be positive for linear scaling", g.Path, arch+".rope.scaling.factor")
		}
		return theta, map[string]any{"rope_type": "linear", "factor": f}, nil
	}
	return 0, nil, fmt.Errorf("model: %s: metadata %q = %q is not supported (supported: none, linear)", g.Path, arch+".rope.scaling.type", typ)
}

// ggufDecoderConfig adds llama/qwen2/qwen3's RoPE and activation.
func ggufDecoderConfig(g *checkpoint.GGUFFile, arch string, cfg map[string]any) error {
	theta, scaling, err := ggufRoPE(g, arch)
	if err != nil {
		return err
	}
	cfg["rope_theta"], cfg["hidden_act"] = theta, "silu"
	if scaling != nil {
		cfg["rope_scaling"] = scaling
	}
	if arch == "qwen2" {
		cfg["attention_bias"] = true // Qwen2's q/k/v always carry biases
	}
	return nil
}

// ggufGemmaConfig adds Gemma 2/3's fields: the sliding window
// (attention.sliding_window) and the layers it applies to
// (attention.sliding_window_pattern p, a number — every p-th layer global,
// as llama.cpp's set_swa_pattern — or one bool per layer; default
// defaultPattern, llama.cpp's), the logit soft-caps (Gemma 2), the RoPE of
// the global and (Gemma 3, rope.freq_base_swa, default 10000) sliding
// layers. GGUF does not store query_pre_attn_scalar: llama.cpp scales
// scores by head_dim^−½, but by (hidden/heads)^−½ for the 27B models,
// which it knows by their layer count (bigLayers); so does this.
func ggufGemmaConfig(g *checkpoint.GGUFFile, arch string, cfg map[string]any, defaultPattern int, bigLayers int64) error {
	layers := cfg["num_hidden_layers"].(int64)
	cfg["hidden_activation"] = "gelu_pytorch_tanh"
	cfg["query_pre_attn_scalar"] = cfg["head_dim"]
	if layers == bigLayers {
		cfg["query_pre_attn_scalar"] = cfg["hidden_size"].(int64) / cfg["num_attention_heads"].(int64)
	}
	window, err := ggufInt(g, arch+".attention.sliding_window", -1)
	if err != nil {
		return err
	}
	cfg["sliding_window"] = window
	sliding := make([]bool, layers)
	key := arch + ".attention.sliding_window_pattern"
	v, ok := g.Meta(key)
	switch a, isArray := v.(checkpoint.GGUFArray); {
	case !ok:
		for l := range sliding {
			sliding[l] = (l+1)%defaultPattern != 0
		}
	case isArray:
		b, isBool := a.Values.([]bool)
		if !isBool || int64(len(b)) != layers {
			return fmt.Errorf("model: %s: metadata %q: want a number or %d bools, got an array of %d %v", g.Path, key, layers, a.Len(), a.Elem)
		}
		copy(sliding, b)
	default:
		p, err := ggufInt(g, key, -1)
		if err != nil {
			return err
		}
		if p <= 0 {
			return fmt.Errorf("model: %s: metadata %q = %d must be positive", g.Path, key, p)
		}
		for l := range sliding {
			sliding[l] = int64(l)%p < p-1
		}
	}
	types := make([]string, layers)
	for l, s := range sliding {
		types[l] = "full_attention"
		if s {
			types[l] = "sliding_attention"
		}
	}
	cfg["layer_types"] = types
	theta, scaling, err := ggufRoPE(g, arch)
	if err != nil {
		return err
	}
	if arch == "gemma2" {
		cfg["rope_theta"] = theta
		if scaling != nil {
			return fmt.Errorf("model: %s: metadata %q: Gemma 2 has no rope scaling", g.Path, arch+".rope.scaling.type")
		}
		for _, k := range []string{"attn_logit_softcapping", "final_logit_softcapping"} {
			c, err := ggufFloat(g, arch+"."+k, 0)
			if err != nil {
				return err
			}
			cfg[k] = c
			if c == 0 {
				cfg[k] = nil
			}
		}
		return nil
	}
	full := map[string]any{"rope_type": "default", "rope_theta": theta}
	for k, v := range scaling {
		full[k] = v
	}
	local, err := ggufFloat(g, arch+".rope.freq_base_swa", 10000)
	if err != nil {
		return err
	}
	cfg["rope_parameters"] = map[string]any{"full_attention": full, "sliding_attention": map[string]any{"rope_type": "default", "rope_theta": local}}
	cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"] = nil, nil
	return nil
}

// hfName maps a GGUF tensor name to the Hugging Face one.
func (f *ggufFamily) hfName(name string) (string, bool) {
	if hf, ok := ggufGlobalNames[name]; ok {
		return hf, true
	}
	rest, ok := strings.CutPrefix(name, "blk.")
	if !ok {
		return "", false
	}
	num, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return "", false
	}
	if l, err := strconv.Atoi(num); err != nil || l < 0 || strconv.Itoa(l) != num {
		return "", false
	}
	hf, ok := f.names[suffix]
	if !ok {
		return "", false
	}
	return "model.layers." + num + "." + hf, true
}

// GGUFTensors returns every tensor of g under its Hugging Face name and
// shape, dequantized to float32, with the converter's changes undone (see
// the top of this file). cfg is GGUFConfig's result. A tensor the family
// does not name is an error naming it.
func GGUFTensors(g *checkpoint.GGUFFile, cfg map[string]any) ([]checkpoint.Tensor, error) {
	_, f, err := ggufFamilyOf(g)
	if err != nil {
		return nil, err
	}
	heads, kv, dh := int(cfg["num_attention_heads"].(int64)), int(cfg["num_key_value_heads"].(int64)), int(cfg["head_dim"].(int64))
	var out []checkpoint.Tensor
	for _, ti := range g.Tensors {
		if ti.Name == "rope_freqs.weight" { // llama3 rope scaling, in the config (GGUFConfig)
			continue
		}
		hf, ok := f.hfName(ti.Name)
		if !ok {
			return nil, fmt.Errorf("model: %s: tensor %q has no Hugging Face name in the %s family", g.Path, ti.Name, f.modelType)
		}
		data, err := g.Dequantize(ti.Name)
		if err != nil {
			return nil, err
		}
		shape := ti.Shape()
		switch {
		case f.permuteQK && strings.HasPrefix(hf, "model.layers.") && (strings.HasSuffix(hf, ".q_proj.weight") || strings.HasSuffix(hf, ".q_proj.bias")):
			if data, err = ggufUnpermute(data, shape, heads, dh, ti.Name); err != nil {
				return nil, fmt.Errorf("model: %s: %w", g.Path, err)
			}
		case f.permuteQK && strings.HasPrefix(hf, "model.layers.") && (strings.HasSuffix(hf, ".k_proj.weight") || strings.HasSuffix(hf, ".k_proj.bias")):
			if data, err = ggufUnpermute(data, shape, kv, dh, ti.Name); err != nil {
				return nil, fmt.Errorf("model: %s: %w", g.Path, err)
			}
		case f.normPlusOne && strings.HasSuffix(ti.Name, "norm.weight"):
			for i := range data {
				data[i] -= 1
			}
		}
		out = append(out, checkpoint.Tensor{Name: hf, Shape: shape, Data: data})
	}
	return out, nil
}

// ggufUnpermute inverts LlamaModel.permute on the rows of a q or k weight
// ([n·d, in]) or bias ([n·d]): Hugging Face row h·d + s·d/2 + i is GGUF row
// h·d + 2i + s.
func ggufUnpermute(x []float32, shape []int, n, d int, name string) ([]float32, error) {
	if len(shape) == 0 || shape[0] != n*d || d%2 != 0 {
		return nil, fmt.Errorf("tensor %q: shape %v, want %d heads × %d rows first", name, shape, n, d)
	}
	return ggufUnpermuteRows(x, shape[0], n, d), nil
}

// GGUFOptions are ConvertGGUF's choices.
type GGUFOptions struct {
	// NoTokenizer writes no tokenizer.json. Default (false): the file's
	// tokenizer.ggml.* is written as tokenizer.json (GGUFTokenizerJSON),
	// and a tokenizer that does not convert fails the conversion.
	NoTokenizer bool
}

// ConvertGGUF writes the Hugging Face checkpoint a GGUF file was converted
// from into dir: config.json (GGUFConfig), model.safetensors (float32,
// GGUFTensors) and tokenizer.json (GGUFTokenizerJSON, unless
// opt.NoTokenizer), which Load and the commands read. dir is created if
// needed; files in it are replaced.
func ConvertGGUF(src, dir string, opt GGUFOptions) error {
	g, err := checkpoint.OpenGGUF(src)
	if err != nil {
		return err
	}
	defer g.Close()
	cfg, err := GGUFConfig(g)
	if err != nil {
		return err
	}
	ts, err := GGUFTensors(g, cfg)
	if err != nil {
		return err
	}
	var tok []byte
	if !opt.NoTokenizer {
		if tok, err = GGUFTokenizerJSON(g); err != nil {
			return fmt.Errorf("%w (convert without it: GGUFOptions.NoTokenizer)", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if _, err := ParseConfig(data); err != nil {
		return fmt.Errorf("model: %s: the config.json made from its metadata: %w", src, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("model: %w", err)
	}
	if tok != nil {
		if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
			return fmt.Errorf("model: %w", err)
		}
	}
	return checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), ts, map[string]string{"format": "pt", "source": "gguf " + filepath.Base(src)})
}

// WriteGGUFFromHF writes a Hugging Face checkpoint of a family above (its
// Config and tensors under their Hugging Face names) to a GGUF file as
// llama.cpp's converter lays it out. Each tensor's Data decides its GGUF
// type: []float32 is stored F32; checkpoint.BFloat16 is stored BF16 (the
// bits as given, not rounded again) when it has two or more dimensions and
// widened to F32 when it has one, as the converter keeps norms in F32;
// general.file_type says BF16 (llama_ftype 32) when any tensor is, else
// F32 (0). A BFloat16 tensor that needs no permutation is written from
// its own memory (a view of a mapped checkpoint stays a view), so an 8B
// model is converted without holding its 16 GB on the heap. The "<arch>."
// hyper-parameters GGUFConfig reads, the GGUF tensor names, llama's q/k
// rows permuted (LlamaModel.permute) and Gemma's norms stored as 1 + w,
// and a placeholder byte-level tokenizer of tokens "<tN>" without merges
// (the tokenizer is not carried over). It is the inverse of GGUFConfig and GGUFTensors, for
// making test files that llama.cpp then quantizes (scripts/gguf/hf2gguf).
// What GGUF cannot say is refused: rope scaling other than linear, MLP
// biases, a Gemma query_pre_attn_scalar other than llama.cpp's rule.
func WriteGGUFFromHF(path string, cfg *Config, tensors []checkpoint.Tensor) error {
	arch := string(cfg.Arch)
	f, ok := ggufFamilies[arch]
	if !ok {
		return fmt.Errorf("model: %s: architecture %s cannot be written to GGUF here (supported: %s)", path, arch, ggufArchs())
	}
	fail := func(format string, a ...any) error {
		return fmt.Errorf("model: %s: %s", path, fmt.Sprintf(format, a...))
	}
	if cfg.MLPBias {
		return fail("MLP biases have no GGUF name in the %s family", arch)
	}
	u32 := func(v int) any { return uint32(v) }
	kv := []checkpoint.GGUFKV{
		{Key: "general.architecture", Type: checkpoint.GGUFString, Value: arch},
		{Key: "general.name", Type: checkpoint.GGUFString, Value: "probe " + arch},
		{Key: "general.alignment", Type: checkpoint.GGUFUint32, Value: uint32(32)},
	}
	add := func(key string, t checkpoint.GGUFValueType, v any) {
		kv = append(kv, checkpoint.GGUFKV{Key: arch + "." + key, Type: t, Value: v})
	}
	for _, e := range []struct {
		key string
		v   int
	}{{"context_length", cfg.MaxPos}, {"embedding_length", cfg.DModel}, {"block_count", cfg.Layers},
		{"feed_forward_length", cfg.DMLP}, {"attention.head_count", cfg.Heads}, {"attention.head_count_kv", cfg.KVHeads},
		{"attention.key_length", cfg.DHead}, {"attention.value_length", cfg.DHead}, {"rope.dimension_count", cfg.DHead},
		{"vocab_size", cfg.Vocab}} {
		add(e.key, checkpoint.GGUFUint32, u32(e.v))
	}
	add("attention.layer_norm_rms_epsilon", checkpoint.GGUFFloat32, float32(cfg.NormEps))
	add("rope.freq_base", checkpoint.GGUFFloat32, float32(cfg.RoPE.Theta))
	switch cfg.RoPE.Type {
	case "default", "":
	case "linear":
		add("rope.scaling.type", checkpoint.GGUFString, "linear")
		add("rope.scaling.factor", checkpoint.GGUFFloat32, float32(cfg.RoPE.Factor))
	case "llama3": // as the converter: a table of factors, no metadata
		rc := cfg.RoPE
		table := ggufLlama3Factors(rc.Theta, cfg.DHead, rc.Factor, rc.LowFreq, rc.HighFreq, float64(rc.OrigMax))
		tensors = append(tensors[:len(tensors):len(tensors)], checkpoint.Tensor{Name: "rope_freqs.weight", Shape: []int{len(table)}, Data: table})
	default:
		return fail("rope scaling %q has no GGUF form here (supported: default, linear, llama3)", cfg.RoPE.Type)
	}
	if f.normPlusOne {
		scalar := cfg.DHead
		if (arch == "gemma2" && cfg.Layers == 46) || (arch == "gemma3" && cfg.Layers == 62) {
			scalar = cfg.DModel / cfg.Heads
		}
		if cfg.AttnScalar != float64(scalar) {
			return fail("query_pre_attn_scalar %g: GGUF does not store it and llama.cpp would use %d", cfg.AttnScalar, scalar)
		}
		add("attention.sliding_window", checkpoint.GGUFUint32, u32(cfg.Sliding))
		if arch == "gemma2" {
			for l := 0; l < cfg.Layers; l++ {
				if (cfg.layerWindow(l) > 0) != (l%2 == 0) {
					return fail("layer %d: llama.cpp's Gemma 2 alternates sliding (even) and global (odd) layers; this model does not", l)
				}
			}
			add("attn_logit_softcapping", checkpoint.GGUFFloat32, float32(cfg.AttnSoftcap))
			add("final_logit_softcapping", checkpoint.GGUFFloat32, float32(cfg.FinalSoftcap))
		} else {
			pattern := make([]bool, cfg.Layers)
			for l := range pattern {
				pattern[l] = cfg.layerWindow(l) > 0
			}
			add("attention.sliding_window_pattern", checkpoint.GGUFArrayT, checkpoint.GGUFArray{Elem: checkpoint.GGUFBool, Values: pattern})
			local := cfg.RoPE.Theta
			if cfg.LocalRoPE != nil {
				if cfg.LocalRoPE.Type != "default" {
					return fail("the sliding layers' rope scaling %q has no GGUF form", cfg.LocalRoPE.Type)
				}
				local = cfg.LocalRoPE.Theta
			}
			add("rope.freq_base_swa", checkpoint.GGUFFloat32, float32(local))
		}
	}
	tokens, types := make([]string, cfg.Vocab), make([]int32, cfg.Vocab)
	for i := range tokens {
		tokens[i], types[i] = fmt.Sprintf("<t%d>", i), 1
	}
	kv = append(kv,
		checkpoint.GGUFKV{Key: "tokenizer.ggml.model", Type: checkpoint.GGUFString, Value: "gpt2"},
		checkpoint.GGUFKV{Key: "tokenizer.ggml.pre", Type: checkpoint.GGUFString, Value: "gpt-2"},
		checkpoint.GGUFKV{Key: "tokenizer.ggml.tokens", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFString, Values: tokens}},
		checkpoint.GGUFKV{Key: "tokenizer.ggml.token_type", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFInt32, Values: types}},
		checkpoint.GGUFKV{Key: "tokenizer.ggml.merges", Type: checkpoint.GGUFArrayT, Value: checkpoint.GGUFArray{Elem: checkpoint.GGUFString, Values: []string{}}},
		checkpoint.GGUFKV{Key: "tokenizer.ggml.bos_token_id", Type: checkpoint.GGUFUint32, Value: uint32(cfg.Vocab - 1)},
		checkpoint.GGUFKV{Key: "tokenizer.ggml.eos_token_id", Type: checkpoint.GGUFUint32, Value: uint32(cfg.Vocab - 1)},
	)
	toGGUF := map[string]string{"rope_freqs.weight": "rope_freqs.weight"}
	for g, hf := range ggufGlobalNames {
		toGGUF[hf] = g
	}
	var out []checkpoint.GGUFWriteTensor
	fileType := uint32(0) // LLAMA_FTYPE_ALL_F32
	for _, t := range tensors {
		x, isF32 := t.Data.([]float32)
		xb, isBF16 := t.Data.(checkpoint.BFloat16)
		if !isF32 && !isBF16 {
			return fail("tensor %q holds %T: convert it to float32 or checkpoint.BFloat16 first", t.Name, t.Data)
		}
		if isBF16 && len(t.Shape) < 2 {
			x, isF32, isBF16 = make([]float32, len(xb)), true, false
			for i, b := range xb {
				x[i] = checkpoint.BF16ToFloat32(b)
			}
		}
		name, ok := toGGUF[t.Name]
		if rest, isLayer := strings.CutPrefix(t.Name, "model.layers."); !ok && isLayer {
			num, suffix, _ := strings.Cut(rest, ".")
			for g, hf := range f.names {
				if hf == suffix {
					name, ok = "blk."+num+"."+g, true
				}
			}
		}
		if !ok {
			return fail("tensor %q has no GGUF name in the %s family", t.Name, arch)
		}
		heads := 0 // the heads whose rows LlamaModel.permute reorders
		switch {
		case f.permuteQK && strings.Contains(name, ".attn_q."):
			heads = cfg.Heads
		case f.permuteQK && strings.Contains(name, ".attn_k."):
			heads = cfg.KVHeads
		}
		dims := make([]int64, len(t.Shape))
		for i, d := range t.Shape {
			dims[len(dims)-1-i] = int64(d)
		}
		if isBF16 {
			if heads > 0 {
				xb = ggufPermute(xb, t.Shape, heads, cfg.DHead)
			}
			fileType = 32 // LLAMA_FTYPE_MOSTLY_BF16
			out = append(out, checkpoint.GGUFWriteTensor{Name: name, Type: checkpoint.GGMLBF16, Dims: dims, Data: checkpoint.BF16Bytes(xb)})
			continue
		}
		x = append([]float32(nil), x...)
		if heads > 0 {
			x = ggufPermute(x, t.Shape, heads, cfg.DHead)
		}
		if f.normPlusOne && strings.HasSuffix(name, "norm.weight") {
			for i := range x {
				x[i] += 1
			}
		}
		out = append(out, checkpoint.GGUFWriteTensor{Name: name, Type: checkpoint.GGMLF32, Dims: dims, Data: checkpoint.F32Bytes(x)})
	}
	kv = append(kv, checkpoint.GGUFKV{Key: "general.file_type", Type: checkpoint.GGUFUint32, Value: fileType})
	return checkpoint.WriteGGUF(path, kv, out)
}

// ggufPermute is LlamaModel.permute on the rows of x ([n·d, …]): row
// h·d + s·d/2 + i moves to h·d + 2i + s (ggufUnpermute's inverse).
func ggufPermute[E float32 | uint16, S ~[]E](x S, shape []int, n, d int) S {
	cols := len(x) / shape[0]
	out := make(S, len(x))
	for h := 0; h < n; h++ {
		for s := 0; s < 2; s++ {
			for i := 0; i < d/2; i++ {
				src, dst := h*d+s*d/2+i, h*d+2*i+s
				copy(out[dst*cols:(dst+1)*cols], x[src*cols:(src+1)*cols])
			}
		}
	}
	return out
}
