package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// gemma4GoldenConfig returns the golden case's config.json as a map.
func gemma4GoldenConfig(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(goldenDir, "gemma4_text", "config.json"))
	if err != nil {
		t.Skipf("golden data not found: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestGemma4Config reads the golden config.json into the slots' data:
// per-layer head widths, k = v on full layers, the KV-sharing sources
// (the last non-shared layer of the same type, not the one before), the
// proportional RoPE's rotated pairs, the experts and per-layer inputs.
func TestGemma4Config(t *testing.T) {
	data, _ := json.Marshal(gemma4GoldenConfig(t))
	c, err := ParseConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != ArchGemma4 || c.DHead != 16 || c.GlobalDHead != 32 || c.KVHeads != 2 || c.GlobalKVHeads != 1 || !c.KEqV {
		t.Fatalf("heads: %+v", c)
	}
	if c.RoPE.Type != "proportional" || c.RoPE.Pairs != 4 || c.RoPE.Theta != 1e6 || c.LocalRoPE == nil || c.LocalRoPE.Theta != 1e4 {
		t.Fatalf("RoPE %+v, local %+v", c.RoPE, c.LocalRoPE)
	}
	if c.MoE == nil || c.MoE.Experts != 4 || c.MoE.TopK != 2 || c.MoE.DExpert != 32 || !c.MoEBeside || c.PerLayerDim != 16 || c.AttnScale != 1 || c.FinalSoftcap != 10 {
		t.Fatalf("experts, PLE, scale: %+v", c)
	}
	want := []int{-1, -1, -1, -1, 3, 2}
	for l, w := range want {
		if got := gemma4KVSource(c, l); got != w {
			t.Errorf("layer %d takes k, v from %d, want %d", l, got, w)
		}
	}
	// written back and read again: the same configuration
	again, _ := json.Marshal(gemma4HFConfig(c))
	c2, err := ParseConfig(again)
	if err != nil {
		t.Fatal(err)
	}
	c2.ModelType, c2.DType = c.ModelType, c.DType
	if a, b := jsonOf(t, c), jsonOf(t, c2); a != b {
		t.Errorf("round trip changed the configuration:\n%s\n%s", a, b)
	}
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestGemma4ConfigRefused checks that what is not implemented is refused
// naming config.json and the field.
func TestGemma4ConfigRefused(t *testing.T) {
	cases := []struct {
		name   string
		change func(m map[string]any)
		want   string
	}{
		{"bidirectional", func(m map[string]any) { m["use_bidirectional_attention"] = "all" }, `use_bidirectional_attention = "all"`},
		{"bidirectional true", func(m map[string]any) { m["use_bidirectional_attention"] = true }, "use_bidirectional_attention = true"},
		{"attention bias", func(m map[string]any) { m["attention_bias"] = true }, "attention_bias = true"},
		{"attention soft-cap", func(m map[string]any) { m["attn_logit_softcapping"] = 50 }, "attn_logit_softcapping"},
		{"no rope_parameters", func(m map[string]any) { delete(m, "rope_parameters") }, "field rope_parameters is missing"},
		{"yarn on full layers", func(m map[string]any) {
			m["rope_parameters"].(map[string]any)["full_attention"] = map[string]any{"rope_type": "yarn", "rope_theta": 1e6, "factor": 4}
		}, `rope_parameters.full_attention.rope_type "yarn" is not implemented`},
		{"partial rotary on sliding layers", func(m map[string]any) {
			m["rope_parameters"].(map[string]any)["sliding_attention"] = map[string]any{"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}
		}, "rope_parameters.sliding_attention.partial_rotary_factor"},
		{"no layer_types", func(m map[string]any) { delete(m, "layer_types") }, "field layer_types is missing"},
		{"shared layers without a source", func(m map[string]any) { m["num_kv_shared_layers"] = 4 }, "layer 2 has no earlier non-shared layer"},
		{"all layers shared", func(m map[string]any) { m["num_kv_shared_layers"] = 6 }, "num_kv_shared_layers 6"},
		{"experts without a count", func(m map[string]any) { delete(m, "num_experts") }, "field num_experts is missing"},
		{"top-k past the experts", func(m map[string]any) { m["top_k_experts"] = 5 }, "top_k_experts 5 exceeds num_experts 4"},
		{"global KV heads", func(m map[string]any) { m["num_global_key_value_heads"] = 3 }, "num_global_key_value_heads 3"},
		{"window null", func(m map[string]any) { m["sliding_window"] = nil }, "sliding_window is null"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := gemma4GoldenConfig(t)
			tc.change(m)
			data, _ := json.Marshal(m)
			_, err := ParseConfig(data)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "config.json") {
				t.Fatalf("got %v, want an error naming config.json and %q", err, tc.want)
			}
		})
	}
}

// TestGemma4GeneratedRoundTrip writes a generated model and
// reads it back (names as HF saves them, no tensor missing or left over),
// with a window shorter than the sequence and other head counts than the
// golden case's.
func TestGemma4GeneratedRoundTrip(t *testing.T) {
	cfg, err := SmallConfig(ArchGemma4, Size{Layers: 7, DModel: 48, Heads: 6, KVHeads: 3, Vocab: 50, MaxPos: 64})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sliding = 5
	gen, dir := writeGenerated(t, cfg, 11)
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Sliding != 5 || m.KVShared == 0 {
		t.Fatalf("window %d, shared layers %d", m.Sliding, m.KVShared)
	}
	ids := seqs(2, 17, m.Vocab)
	a, err := gen.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Forward(ids, Options{Logits: true, TileRows: 3})
	if err != nil {
		t.Fatal(err)
	}
	if rel, i := relErr(b.Logits, a.Logits); rel > 1e-6 {
		t.Errorf("loaded model's logits differ from the generated one's by %.3g at %d", rel, i)
	}
}

// TestGemma4Multimodal: the text model of a Gemma 4 multimodal checkpoint
// (model_type gemma4, text_config, model.language_model.*) runs as the
// text checkpoint does; the vision and audio towers and their embedders
// are skipped and listed in Model.Skipped.
func TestGemma4Multimodal(t *testing.T) {
	src := filepath.Join(goldenDir, "gemma4_text")
	text, err := Load(src, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available (%v)", err)
	}
	ck, err := checkpoint.OpenFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfgText, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var tensors []checkpoint.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		x, err := ck.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, checkpoint.Tensor{Name: "model.language_model." + strings.TrimPrefix(n, "model."), Shape: info.Shape, Data: x})
	}
	// the towers, and (as the released E2B stores them) k_proj, v_proj and
	// k_norm of KV-shared layer 4 (sliding: 2 KV heads × 16), which
	// transformers does not build
	others := []string{"model.audio_tower.layers.0.weight", "model.embed_audio.embedding_projection.weight",
		"model.embed_vision.embedding_projection.weight", "model.language_model.layers.4.self_attn.k_norm.weight",
		"model.language_model.layers.4.self_attn.k_proj.weight", "model.language_model.layers.4.self_attn.v_proj.weight",
		"model.vision_tower.patch_embedder.weight"}
	for _, n := range others {
		tensors = append(tensors, checkpoint.Tensor{Name: n, Shape: []int{2, 3}, Data: make([]float32, 6)})
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`{"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "dtype": "float32",
		"vision_config": {"model_type": "gemma4_vision"}, "audio_config": {"model_type": "gemma4_audio"}, "text_config": %s}`, cfgText)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Arch != ArchGemma4 || m.ModelType != "gemma4" || !reflect.DeepEqual(m.Skipped, others) || m.Parameters != text.Parameters {
		t.Fatalf("loaded %s (%s), %d parameters, skipped %v; want gemma4_text, %d parameters, skipped %v",
			m.Arch, m.ModelType, m.Parameters, m.Skipped, text.Parameters, others)
	}
	ids := seqs(2, 40, text.Vocab)
	want, err := text.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := m.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Logits, want.Logits) {
		rel, _ := relErr(got.Logits, want.Logits)
		t.Fatalf("logits differ from the text checkpoint's: rel %g", rel)
	}
}

// TestGemma4RealConfigs: the released Gemma 4 E2B and E4B config.json
// (google/gemma-4-E2B, google/gemma-4-E4B: Gemma4ForConditionalGeneration
// with the text model in text_config), written here from their published
// values as the fuzz seeds real_gemma4_e2b and real_gemma4_e4b, parse to
// the shapes the releases describe: a full layer every 5th (E2B) or 6th
// (E4B) layer with head width 512 and 64 of its 256 rotation pairs
// rotated, the last 20 (18) layers taking k and v from the last earlier
// layer of their type, per-layer inputs of 256, double-wide MLPs on the
// shared layers of E2B only.
func TestGemma4RealConfigs(t *testing.T) {
	cases := []struct {
		seed                     string
		layers, d, kv, f, period int
		shared, fromSliding      int
		fromFull                 int
		doubleWide               bool
	}{
		{"real_gemma4_e2b", 35, 1536, 1, 6144, 5, 20, 13, 14, true},
		{"real_gemma4_e4b", 42, 2560, 2, 10240, 6, 18, 22, 23, false},
	}
	for _, tc := range cases {
		t.Run(tc.seed, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzParseConfig", tc.seed))
			if err != nil {
				t.Fatal(err)
			}
			_, body, _ := strings.Cut(strings.TrimSpace(string(raw)), "\n")
			data, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(body, "[]byte("), ")"))
			if err != nil {
				t.Fatalf("%s: %v", tc.seed, err)
			}
			c, err := ParseConfig([]byte(data))
			if err != nil {
				t.Fatal(err)
			}
			if c.Arch != ArchGemma4 || c.ModelType != "gemma4" || c.Layers != tc.layers || c.DModel != tc.d || c.Heads != 8 ||
				c.KVHeads != tc.kv || c.GlobalKVHeads != tc.kv || c.DHead != 256 || c.GlobalDHead != 512 || c.DMLP != tc.f ||
				c.Vocab != 262144 || c.PerLayerDim != 256 || c.PerLayerVocab != 262144 || c.KVShared != tc.shared ||
				c.DoubleWideMLP != tc.doubleWide || c.KEqV || c.MoEBeside || c.Sliding != 512 || c.FinalSoftcap != 30 || !c.TiedHead {
				t.Fatalf("parsed %+v", c)
			}
			// the larger releases' "vision" (image tokens attend to each
			// other) leaves a text pass causal: accepted, the same model
			vision := strings.Replace(data, `"use_bidirectional_attention": null`, `"use_bidirectional_attention": "vision"`, 1)
			if vision == data {
				t.Fatal("the seed has no use_bidirectional_attention null")
			}
			if cv, err := ParseConfig([]byte(vision)); err != nil || jsonOf(t, cv) != jsonOf(t, c) {
				t.Errorf("with use_bidirectional_attention \"vision\": %v, or another configuration", err)
			}
			if c.RoPE.Type != "proportional" || c.RoPE.Pairs != 64 || c.RoPE.Theta != 1e6 || c.LocalRoPE == nil || c.LocalRoPE.Theta != 1e4 {
				t.Fatalf("RoPE %+v, local %+v", c.RoPE, c.LocalRoPE)
			}
			for l := 0; l < c.Layers; l++ {
				full := (l+1)%tc.period == 0
				if (c.layerWindow(l) == 0) != full {
					t.Errorf("layer %d: window %d, want a full layer: %v", l, c.layerWindow(l), full)
				}
				want := -1
				if l >= c.Layers-tc.shared {
					want = tc.fromSliding
					if full {
						want = tc.fromFull
					}
				}
				if got := gemma4KVSource(c, l); got != want {
					t.Errorf("layer %d takes k and v from layer %d, want %d", l, got, want)
				}
			}
		})
	}
}
