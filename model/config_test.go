package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name string
		json string
		arch Arch
		gate GateKind
		want string // error substring; empty: no error
	}{
		{"qwen3", `{"model_type":"qwen3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, ArchQwen3, GateNone, ""},
		{"qiu says qwen2", `{"model_type":"qwen2","headwise_attn_output_gate":true,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, ArchGated, GateHeadwise, ""},
		{"qiu elementwise", `{"model_type":"qwen3","elementwise_attn_output_gate":true,"headwise_attn_output_gate":false,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, ArchGated, GateElementwise, ""},
		{"mistral", `{"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64,"sliding_window":null}`, ArchLlama, GateNone, ""},
		{"mistral window past the context", `{"model_type":"mistral","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64,"sliding_window":128}`, "", "", "sliding_window 128 exceeds max_position_embeddings 64"},
		{"gpt2", `{"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":4,"vocab_size":10,"n_positions":64}`, ArchGPT2, GateNone, ""},
		{"no model_type", `{"hidden_size":64}`, "", "", "model_type is missing"},
		{"unknown model_type", `{"model_type":"bert"}`, "", "", `model_type "bert" is not supported`},
		{"missing field", `{"model_type":"llama","hidden_size":64,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, "", "", "num_hidden_layers is missing"},
		{"zero field", `{"model_type":"llama","hidden_size":0,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, "", "", "hidden_size = 0 must be positive"},
		{"heads not multiple of kv", `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":3,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, "", "", "not a multiple of num_key_value_heads 3"},
		{"unknown rope", `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64,"rope_scaling":{"rope_type":"su","factor":2}}`, "", "", `rope_scaling.rope_type "su" is not supported`},
		{"rope without factor", `{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64,"rope_scaling":{"type":"linear"}}`, "", "", "rope_scaling.factor"},
		{"both gates", `{"model_type":"qwen3","headwise_attn_output_gate":true,"elementwise_attn_output_gate":true,"hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, "", "", "both true"},
		{"not json", `{"model_type":`, "", "", "not valid JSON"},
		{"unknown act", `{"model_type":"llama","hidden_act":"swoosh","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":128,"vocab_size":10,"max_position_embeddings":64}`, "", "", `hidden_act "swoosh"`},
	}
	for _, c := range cases {
		cfg, err := ParseConfig([]byte(c.json))
		if c.want != "" {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if cfg.Arch != c.arch || cfg.Gate != c.gate {
			t.Errorf("%s: arch %s gate %s, want %s %s", c.name, cfg.Arch, cfg.Gate, c.arch, c.gate)
		}
	}
}

// TestRoPEScaling checks the scaled inverse frequencies against their
// definitions.
func TestRoPEScaling(t *testing.T) {
	base := RoPEConfig{Theta: 10000, Type: "default", Factor: 1}
	d := 16
	ref := base.invFreq(d, 100)
	lin := RoPEConfig{Theta: 10000, Type: "linear", Factor: 4}.invFreq(d, 100)
	for i := range ref {
		if rel := (lin[i]*4 - ref[i]) / ref[i]; rel > 1e-6 || rel < -1e-6 {
			t.Errorf("linear: inv_freq[%d] = %v, want %v/4", i, lin[i], ref[i])
		}
	}
	dyn := RoPEConfig{Theta: 10000, Type: "dynamic", Factor: 2, OrigMax: 64}
	short, long := dyn.invFreq(d, 64), dyn.invFreq(d, 256)
	if short[1] != ref[1] {
		t.Errorf("dynamic within the trained length changed inv_freq: %v vs %v", short[1], ref[1])
	}
	if !(long[1] < ref[1]) || long[0] != ref[0] {
		t.Errorf("dynamic beyond the trained length: inv_freq[0,1] = %v,%v; want [0] unchanged and [1] smaller than %v", long[0], long[1], ref[1])
	}
	l3 := RoPEConfig{Theta: 500000, Type: "llama3", Factor: 8, LowFreq: 1, HighFreq: 4, OrigMax: 8192}.invFreq(128, 10)
	r3 := RoPEConfig{Theta: 500000, Type: "default", Factor: 1}.invFreq(128, 10)
	if l3[0] != r3[0] || l3[63] != float32(float64(r3[63])/8) {
		t.Errorf("llama3: high frequency must be kept (%v vs %v), low frequency divided by 8 (%v vs %v)", l3[0], r3[0], l3[63], r3[63]/8)
	}
}

// brokenDir copies a golden case with a changed config.json.
func brokenDir(t *testing.T, caseName string, edit func(map[string]any)) string {
	t.Helper()
	src := filepath.Join(goldenDir, caseName)
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Skipf("golden case %s not found: %v", caseName, err)
	}
	var cfg map[string]any
	json.Unmarshal(data, &cfg)
	edit(cfg)
	dir := t.TempDir()
	out, _ := json.Marshal(cfg)
	os.WriteFile(filepath.Join(dir, "config.json"), out, 0o644)
	abs, _ := filepath.Abs(filepath.Join(src, "model.safetensors"))
	os.Symlink(abs, filepath.Join(dir, "model.safetensors"))
	return dir
}

// TestLoadReportsInconsistentCheckpoints: config and tensors that disagree
// are reported by tensor name, with expected and found shapes.
func TestLoadReportsInconsistentCheckpoints(t *testing.T) {
	cases := []struct {
		name, caseName string
		edit           func(map[string]any)
		want           []string
	}{
		{"wrong width", "qwen3_gqa", func(c map[string]any) { c["intermediate_size"] = 96 },
			[]string{`tensor "model.layers.0.mlp.gate_proj.weight": expected shape [96 64] from config.json, found [128 64]`}},
		{"too few layers", "qwen3_gqa", func(c map[string]any) { c["num_hidden_layers"] = 2 },
			[]string{"unexpected tensors", "model.layers.2.input_layernorm.weight"}},
		{"too many layers", "llama_gqa", func(c map[string]any) { c["num_hidden_layers"] = 4 },
			[]string{"missing tensors", "model.layers.3.input_layernorm.weight"}},
		{"bias claimed", "llama_gqa", func(c map[string]any) { c["attention_bias"] = true },
			[]string{"missing tensors", "model.layers.0.self_attn.q_proj.bias"}},
		{"untied without head", "qwen3_gqa", func(c map[string]any) { c["tie_word_embeddings"] = false },
			[]string{"missing tensors: lm_head.weight"}},
		{"gate not in q_proj", "qwen3_gqa", func(c map[string]any) { c["headwise_attn_output_gate"] = true },
			[]string{`tensor "model.layers.0.self_attn.q_proj.weight": expected shape [68 64]`}},
		{"kv heads", "qwen2_bias", func(c map[string]any) { c["num_key_value_heads"] = 4 },
			[]string{`"model.layers.0.self_attn.k_proj.weight": expected shape [64 64] from config.json, found [32 64]`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(brokenDir(t, c.caseName, c.edit), LoadOptions{})
			if err == nil {
				t.Fatal("loaded an inconsistent checkpoint")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// --allow-unexpected accepts extra tensors.
	dir := brokenDir(t, "qwen3_gqa", func(c map[string]any) { c["num_hidden_layers"] = 2 })
	if _, err := Load(dir, LoadOptions{AllowUnexpected: true}); err != nil {
		t.Errorf("AllowUnexpected: %v", err)
	}
}

// TestShardedCheckpoint: the same weights split over shards with an index
// give the same logits.
func TestShardedCheckpoint(t *testing.T) {
	m := smallModel(t, ArchQwen3)
	_, tensors, err := Generate(m.Config, 7)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := WriteHF(dir, m.Config, nil); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "model.safetensors"))
	weightMap := map[string]string{}
	half := len(tensors) / 2
	for i, part := range [][]checkpoint.Tensor{tensors[:half], tensors[half:]} {
		name := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}[i]
		if err := checkpoint.WriteSafetensors(filepath.Join(dir, name), part, nil); err != nil {
			t.Fatal(err)
		}
		for _, x := range part {
			weightMap[x.Name] = name
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), idx, 0o644)
	back, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if back.Format != "safetensors-sharded" || len(back.Files) != 3 { // index + 2 shards
		t.Errorf("format %s with files %v", back.Format, back.Files)
	}
	ids := seqs(1, 12, m.Vocab)
	a, _ := m.Forward(ids, Options{Logits: true})
	b, err := back.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if rel, _ := relErr(b.Logits, a.Logits); rel != 0 {
		t.Errorf("sharded logits differ: %g", rel)
	}
}
