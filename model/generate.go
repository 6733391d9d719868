package model

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"github.com/filterlens/probe/checkpoint"
)

// generator makes up the tensors a loader asks for: norms near 1 with zero
// bias, embeddings N(0, 0.5²), projections N(0, 1/fan_in), so activations
// stay O(1) and attention is varied. It records every tensor under its
// Hugging Face name so that the checkpoint can be written.
type generator struct {
	rng     *rand.Rand
	tensors []checkpoint.Tensor
	prefix  string
}

func (g *generator) has(name string) bool {
	return strings.HasPrefix(name, g.prefix) && !strings.HasPrefix(name, "lm_head")
}

func (g *generator) make(name string, shape []int) []float32 {
	x := make([]float32, prod(shape))
	base := name[strings.LastIndex(name[:strings.LastIndex(name, ".")], ".")+1:]
	switch {
	case strings.Contains(base, "norm") || strings.HasPrefix(base, "ln_"):
		if strings.HasSuffix(name, ".weight") {
			for i := range x {
				x[i] = float32(1 + 0.1*g.rng.NormFloat64())
			}
		}
	case strings.HasSuffix(name, ".bias"):
		for i := range x {
			x[i] = float32(0.02 * g.rng.NormFloat64())
		}
	case strings.Contains(name, "embed") || strings.Contains(name, "wte") || strings.Contains(name, "wpe"):
		for i := range x {
			x[i] = float32(0.5 * g.rng.NormFloat64())
		}
	default:
		fanIn := shape[len(shape)-1]
		if strings.Contains(name, ".c_") { // GPT-2 Conv1D is [in, out]
			fanIn = shape[0]
		}
		s := 1 / math.Sqrt(float64(fanIn))
		for i := range x {
			x[i] = float32(s * g.rng.NormFloat64())
		}
	}
	g.tensors = append(g.tensors, checkpoint.Tensor{Name: name, Shape: append([]int(nil), shape...), Data: x})
	return x
}

// Generate builds a randomly initialized model of the given configuration
// (seeded, deterministic) and returns it with its tensors under their Hugging
// Face names, ready for WriteHF. Used for demos, tests and benchmarks.
func Generate(cfg Config, seed uint64) (*Model, []checkpoint.Tensor) {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x6b616c6d616e)), prefix: "model."}
	if cfg.Arch == ArchGPT2 {
		g.prefix = "transformer."
	}
	m := &Model{Config: cfg, Format: "generated"}
	ld := &loader{gen: g}
	if cfg.Arch == ArchGPT2 {
		loadGPT2(m, ld)
	} else if cfg.Arch == ArchSelRoPE {
		loadSelRoPE(m, ld)
	} else {
		loadDecoder(m, ld)
	}
	for _, t := range g.tensors {
		m.Parameters += int64(len(t.Data.([]float32)))
	}
	m.DTypes = []string{"F32"}
	return m, g.tensors
}

// WriteHF writes a Hugging Face checkpoint directory: config.json and
// model.safetensors.
func WriteHF(dir string, cfg Config, tensors []checkpoint.Tensor) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(cfg.HFConfig(), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	return checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"})
}

// HFConfig returns the config.json fields that describe c to Hugging Face
// transformers (and to ParseConfig).
func (c *Config) HFConfig() map[string]any {
	if c.SelRoPE != nil {
		return c.selropeHFConfig()
	}
	if c.Arch == ArchGPT2 {
		return map[string]any{
			"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
			"n_embd": c.DModel, "n_layer": c.Layers, "n_head": c.Heads, "n_inner": c.DMLP,
			"n_positions": c.MaxPos, "vocab_size": c.Vocab, "layer_norm_epsilon": c.NormEps,
			"activation_function": c.Act, "tie_word_embeddings": c.TiedHead,
			"scale_attn_weights": true, "torch_dtype": "float32",
		}
	}
	m := map[string]any{
		"hidden_size": c.DModel, "num_hidden_layers": c.Layers, "num_attention_heads": c.Heads,
		"num_key_value_heads": c.KVHeads, "head_dim": c.DHead, "intermediate_size": c.DMLP,
		"vocab_size": c.Vocab, "max_position_embeddings": c.MaxPos, "rms_norm_eps": c.NormEps,
		"hidden_act": c.Act, "rope_theta": c.RoPE.Theta, "tie_word_embeddings": c.TiedHead,
		"torch_dtype": "float32", "rope_scaling": nil,
	}
	if c.RoPE.Type != "" && c.RoPE.Type != "default" {
		rs := map[string]any{"rope_type": c.RoPE.Type, "factor": c.RoPE.Factor}
		if c.RoPE.Type == "llama3" {
			rs["low_freq_factor"], rs["high_freq_factor"] = c.RoPE.LowFreq, c.RoPE.HighFreq
			rs["original_max_position_embeddings"] = c.RoPE.OrigMax
		}
		m["rope_scaling"] = rs
	}
	switch c.Arch {
	case ArchLlama:
		m["model_type"], m["architectures"] = "llama", []string{"LlamaForCausalLM"}
		m["attention_bias"], m["mlp_bias"] = c.QKVBias, c.MLPBias
	case ArchQwen2:
		m["model_type"], m["architectures"] = "qwen2", []string{"Qwen2ForCausalLM"}
	case ArchQwen3:
		m["model_type"], m["architectures"] = "qwen3", []string{"Qwen3ForCausalLM"}
		m["attention_bias"] = c.QKVBias
	case ArchGated:
		m["model_type"], m["architectures"] = "qwen3", []string{"Qwen3ForCausalLM"}
		m["headwise_attn_output_gate"] = c.Gate == GateHeadwise
		m["elementwise_attn_output_gate"] = c.Gate == GateElementwise
		m["use_qk_norm"], m["qkv_bias"] = c.QKNorm, c.QKVBias
	}
	return m
}

// SmallConfig returns a small configuration of arch for demos and tests:
// the given layers, d_model, heads and kv heads, head_dim d_model/heads,
// MLP 3·d_model (GPT-2: 4·d_model), vocabulary vocab.
func SmallConfig(arch Arch, layers, dModel, heads, kvHeads, vocab, maxPos int) (Config, error) {
	if arch == ArchSelRoPE {
		return smallSelRoPEDefault(layers, dModel, heads, kvHeads, vocab, maxPos) // selrope_model.go
	}
	c := Config{Arch: arch, Layers: layers, DModel: dModel, Heads: heads, KVHeads: kvHeads,
		DHead: dModel / heads, DMLP: 3 * dModel, Vocab: vocab, MaxPos: maxPos, NormEps: 1e-6,
		Act: "silu", TiedHead: true, Gate: GateNone, RoPE: RoPEConfig{Theta: 10000, Type: "default", Factor: 1}}
	switch arch {
	case ArchQwen3:
		c.QKNorm = true
	case ArchGated:
		c.QKNorm, c.Gate = true, GateHeadwise
	case ArchQwen2:
		c.QKVBias = true
	case ArchLlama:
	case ArchGPT2:
		c.KVHeads, c.DMLP, c.NormEps, c.Act = heads, 4*dModel, 1e-5, "gelu_new"
		c.QKVBias, c.OBias, c.MLPBias = true, true, true
		c.GPT2Scale.Weights = true
	default:
		return c, fmt.Errorf("unknown architecture %q", arch)
	}
	if dModel%heads != 0 || heads%kvHeads != 0 || c.DHead%2 != 0 {
		return c, fmt.Errorf("d_model %d, heads %d, kv heads %d: need d_model divisible by heads, heads by kv heads, and an even head dim", dModel, heads, kvHeads)
	}
	// Round-trip through config.json so the result is exactly what a
	// reader of the written checkpoint gets.
	data, _ := json.Marshal(c.HFConfig())
	p, err := ParseConfig(data)
	if err != nil {
		return c, err
	}
	return *p, nil
}
