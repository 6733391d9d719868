package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// gemmaTolerances are the absolute tolerances of the golden READMEs of the
// Gemma cases (gemma2, gemma3_text), per architecture and key family (the
// f64.* keys take those of their float32 counterparts).
var gemmaTolerances = map[Arch]map[string]float64{
	ArchGemma2: {"attn": 2e-5, "scores": 1.2e-4, "hidden": 1.2e-4, "v": 1e-4, "final_norm": 1e-4,
		"logits": 1.5e-4, "logits_precap": 1.5e-4},
	ArchGemma3: {"attn": 3e-5, "hidden": 1.5e-4, "v": 1e-4, "final_norm": 1e-4, "logits": 2e-4},
}

// TestGemmaGolden: Gemma 2 and Gemma 3 text equal Hugging Face's float32
// run (and the independent float64 numpy run, f64.*) on every key of
// golden.safetensors within the README's absolute tolerances: logits (Gemma
// 2: also before the final soft-cap), final norm, residual stream,
// attention (sliding and global layers), values per query head, and Gemma
// 2's soft-capped scores, recomputed from the rotated q and k as
// cap·tanh(q·k·query_pre_attn_scalar^−½/cap) on the visible keys, 0
// elsewhere. Every golden case of a Gemma architecture is run (the public
// gemma2 and gemma3_text must be there); a key of a family without a
// tolerance here fails the public cases and is logged for the others.
func TestGemmaGolden(t *testing.T) {
	var cases []string
	for _, name := range goldenCases(t) {
		if cfg, err := LoadConfig(filepath.Join(goldenDir, name)); err == nil && gemmaTolerances[cfg.Arch] != nil {
			cases = append(cases, name)
		}
	}
	if !slices.Contains(cases, "gemma2") || !slices.Contains(cases, "gemma3_text") {
		t.Fatalf("golden Gemma cases %v: gemma2 or gemma3_text is missing", cases)
	}
	for _, name := range cases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(goldenDir, name)
			public := name == "gemma2" || name == "gemma3_text"
			m, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			g := openGolden(t, dir)
			c := m.Config
			B, T, H, KV, dh, D := g.B, g.T, c.Heads, c.KVHeads, c.DHead, c.DModel
			for _, tile := range []int{7, 0} {
				hs := &hooks.Set{}
				cp := hs.Capture("blocks.0.hook_resid_pre", "blocks.*.hook_resid_post", "ln_final.hook_normalized",
					"blocks.*.attn.hook_pattern", "blocks.*.attn.hook_v", "blocks.*.attn.hook_rot_q", "blocks.*.attn.hook_rot_k")
				bos := make([]float32, B*c.Layers*H*T) // streamed α_t0, [B, L, H, T] as diagnostics.safetensors
				hs.Stream(-1, consumerFunc(func(a *hooks.AttnTile) error {
					for r := 0; r < a.Rows; r++ {
						bos[((a.Batch*c.Layers+a.Layer)*H+a.Head)*T+a.Q0+r] = a.Alpha[r*a.Stride]
					}
					return nil
				}))
				out, err := m.Forward(g.ids(t), Options{Hooks: hs, Logits: true, TileRows: tile})
				if err != nil {
					t.Fatal(err)
				}
				windowed := false // some layer's window passes position 0 within T
				for l := 0; l < c.Layers; l++ {
					windowed = windowed || (c.layerWindow(l) > 0 && c.layerWindow(l) < T)
				}
				checkBOSZeros(t, dir, bos, windowed)
				get := func(n string, l int) []float32 { return cp.Get(hooks.Name(n, l)).Data().([]float32) }
				finalNorm := get("ln_final.hook_normalized", 0)
				precap := make([]float32, B*T*c.Vocab)
				linear(precap, finalNorm, B*T, D, m.Head, c.Vocab, nil)
				got := map[string][]float32{"logits": out.Logits, "logits_precap": precap, "final_norm": finalNorm,
					"hidden.0": get("blocks.0.hook_resid_pre", 0)}
				for l := 0; l < c.Layers; l++ {
					got[fmt.Sprintf("hidden.%d", l+1)] = get("blocks.{l}.hook_resid_post", l)
					got[fmt.Sprintf("attn.%d", l)] = get("blocks.{l}.attn.hook_pattern", l)
					got[fmt.Sprintf("v.%d", l)] = perQueryHead(get("blocks.{l}.attn.hook_v", l), B, T, H, KV, dh)
					got[fmt.Sprintf("scores.%d", l)] = cappedScores(get("blocks.{l}.attn.hook_rot_q", l), get("blocks.{l}.attn.hook_rot_k", l),
						B, T, H, KV, dh, m.attnScale(l), float32(c.AttnSoftcap), c.layerWindow(l))
				}
				for _, key := range g.ck.Names() {
					if key == "input_ids" {
						continue
					}
					base := strings.TrimPrefix(key, "f64.")
					family, _, _ := strings.Cut(base, ".")
					tol, ok := gemmaTolerances[c.Arch][family]
					x, ok2 := got[base]
					if !ok || !ok2 {
						if public {
							t.Errorf("golden key %s is not compared", key)
						} else if tile == 7 {
							t.Logf("golden key %s is not compared", key)
						}
						continue
					}
					ref, err := g.ck.Float64(key)
					if err != nil {
						t.Fatal(err)
					}
					worst, at := 0.0, 0
					for i, r := range ref {
						if d := math.Abs(float64(x[i]) - r); d > worst || math.IsNaN(d) {
							worst, at = d, i
						}
					}
					if tile == 7 {
						t.Logf("%-16s max abs error %.2e (tolerance %.1e)", key, worst, tol)
					}
					if !(worst <= tol) {
						t.Errorf("tiles of %d rows: %s: max abs error %.3g > %.1e at flat index %d (got %v, want %v)", tile, key, worst, tol, at, x[at], ref[at])
					}
				}
			}
		})
	}
}

// checkBOSZeros checks that the streamed weights on position 0, bos [B, L,
// H, T], are exactly 0 where the golden diagnostics' bos_mass is (rows of
// sliding layers whose window has passed position 0) and only there; some
// are when windowed.
func checkBOSZeros(t *testing.T, dir string, bos []float32, windowed bool) {
	t.Helper()
	d, err := checkpoint.OpenFile(filepath.Join(dir, "diagnostics.safetensors"))
	if err != nil {
		t.Logf("bos_mass zeros not checked: %v", err)
		return
	}
	defer d.Close()
	want, err := d.Float64("bos_mass")
	if err != nil || len(want) != len(bos) {
		t.Fatalf("bos_mass: %d values (%v), streamed %d", len(want), err, len(bos))
	}
	zeros := 0
	for i, w := range want {
		if (w == 0) != (bos[i] == 0) {
			t.Fatalf("bos_mass at flat index %d: streamed %v, golden %v (exact zeros must coincide)", i, bos[i], w)
		}
		if w == 0 {
			zeros++
		}
	}
	if windowed && zeros == 0 {
		t.Fatal("no row has position 0 outside its window")
	}
}

// cappedScores returns the [B, H, T, T] soft-capped attention scores of the
// rotated queries q [B·T, H·dh] and keys k [B·T, KV·dh]: c·tanh(s/c) (s
// itself when c = 0) with s = scale·q·k on the keys a query sees (causal,
// within the window when window > 0), 0 elsewhere.
func cappedScores(q, k []float32, B, T, H, KV, dh int, scale, c float32, window int) []float32 {
	s := make([]float32, B*H*T*T)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			kh := h / (H / KV)
			for t := 0; t < T; t++ {
				qt := q[((b*T+t)*H+h)*dh:][:dh]
				for j := 0; j <= t; j++ {
					if window > 0 && t-j >= window {
						continue
					}
					kj := k[((b*T+j)*KV+kh)*dh:][:dh]
					var dot float64
					for i := range qt {
						dot += float64(qt[i]) * float64(kj[i])
					}
					x := float32(dot) * scale
					if c > 0 {
						x = float32(math.Tanh(float64(x/c))) * c
					}
					s[((b*H+h)*T+t)*T+j] = x
				}
			}
		}
	}
	return s
}

// checkGemmaConfig checks the invariants of an accepted Gemma
// configuration (FuzzParseConfig).
func checkGemmaConfig(t *testing.T, c *Config) {
	t.Helper()
	if len(c.SlidingLayers) != c.Layers {
		t.Fatalf("%d layer types for %d layers", len(c.SlidingLayers), c.Layers)
	}
	for l := range c.SlidingLayers {
		if c.SlidingLayers[l] && c.Sliding <= 0 {
			t.Fatalf("layer %d is sliding with window %d", l, c.Sliding)
		}
	}
	if !(c.AttnScalar > 0) || c.AttnSoftcap < 0 || c.FinalSoftcap < 0 || !(c.EmbedScale > 0) {
		t.Fatalf("scalar %v, soft-caps %v/%v, embedding scale %v accepted", c.AttnScalar, c.AttnSoftcap, c.FinalSoftcap, c.EmbedScale)
	}
	for _, rc := range []*RoPEConfig{&c.RoPE, c.LocalRoPE} {
		if rc != nil && (!(rc.Theta > 0) || (rc.Type != "default" && rc.Type != "linear") || !(rc.Factor > 0)) {
			t.Fatalf("RoPE %+v accepted", *rc)
		}
	}
}

// gemmaConfigJSON returns the config.json fields of a small Gemma model of
// arch, to be changed by a test.
func gemmaConfigJSON(t *testing.T, arch Arch) map[string]any {
	t.Helper()
	fields, err := smallGemma(Size{Layers: 4, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 50, MaxPos: 128}, arch)
	if err != nil {
		t.Fatal(err)
	}
	// through JSON, so that nested objects are maps a test can change
	data, _ := json.Marshal(fields)
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func parseFields(t *testing.T, fields map[string]any) (*Config, error) {
	t.Helper()
	data, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return ParseConfig(data)
}

// TestGemmaConfigRefused: each bad Gemma field is refused by name.
func TestGemmaConfigRefused(t *testing.T) {
	cases := []struct {
		name   string
		arch   Arch
		change func(m map[string]any)
		want   string
	}{
		{"attention soft-cap 0", ArchGemma2, func(m map[string]any) { m["attn_logit_softcapping"] = 0 }, "attn_logit_softcapping = 0 must be positive"},
		{"attention soft-cap negative", ArchGemma2, func(m map[string]any) { m["attn_logit_softcapping"] = -50 }, "attn_logit_softcapping = -50"},
		{"final soft-cap 0", ArchGemma2, func(m map[string]any) { m["final_logit_softcapping"] = 0 }, "final_logit_softcapping = 0"},
		{"final soft-cap negative", ArchGemma3, func(m map[string]any) { m["final_logit_softcapping"] = -1 }, "final_logit_softcapping = -1"},
		{"soft-cap not a number", ArchGemma2, func(m map[string]any) { m["attn_logit_softcapping"] = "50" }, "field attn_logit_softcapping: want a number"},
		{"window 0", ArchGemma2, func(m map[string]any) { m["sliding_window"] = 0 }, "sliding_window = 0 must be positive"},
		{"window negative", ArchGemma3, func(m map[string]any) { m["sliding_window"] = -16 }, "sliding_window = -16"},
		{"window fractional", ArchGemma3, func(m map[string]any) { m["sliding_window"] = 16.5 }, "sliding_window"},
		{"window larger than the context", ArchGemma2, func(m map[string]any) { m["sliding_window"] = 1 << 20 }, "sliding_window 1048576 exceeds max_position_embeddings"},
		{"window null with sliding layers", ArchGemma2, func(m map[string]any) { m["sliding_window"] = nil }, "sliding_window is null but layer 0"},
		{"unknown layer type", ArchGemma3, func(m map[string]any) {
			m["layer_types"] = []string{"sliding_attention", "chunked_attention", "sliding_attention", "full_attention"}
		}, `layer_types[1] = "chunked_attention" is not supported`},
		{"layer types too short", ArchGemma2, func(m map[string]any) { m["layer_types"] = []string{"full_attention"} }, "layer_types has 1 entries for num_hidden_layers 4"},
		{"layer types not strings", ArchGemma2, func(m map[string]any) { m["layer_types"] = []int{1, 2, 3, 4} }, "field layer_types: want a list of strings"},
		{"pattern 0", ArchGemma3, func(m map[string]any) { delete(m, "layer_types"); m["sliding_window_pattern"] = 0 }, "sliding_window_pattern = 0 must be positive"},
		{"rope type yarn", ArchGemma3, func(m map[string]any) {
			m["rope_parameters"].(map[string]any)["full_attention"] = map[string]any{"rope_type": "yarn", "factor": 8, "rope_theta": 1e6}
		}, `rope_parameters.full_attention.rope_type "yarn" is not supported`},
		{"rope type dynamic, earlier form", ArchGemma3, func(m map[string]any) {
			delete(m, "rope_parameters")
			m["rope_scaling"] = map[string]any{"rope_type": "dynamic", "factor": 2}
		}, `rope_scaling.rope_type "dynamic" is not supported`},
		{"linear without factor", ArchGemma2, func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "linear", "rope_theta": 1e4}
		}, "rope_parameters.factor must be given"},
		{"rope theta 0", ArchGemma2, func(m map[string]any) { m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 0} }, "rope_parameters.rope_theta = 0 must be positive"},
		{"sliding rope missing", ArchGemma3, func(m map[string]any) {
			delete(m["rope_parameters"].(map[string]any), "sliding_attention")
		}, "field rope_parameters.sliding_attention is missing"},
		{"one rope for Gemma 3", ArchGemma3, func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1e4}
		}, "Gemma 3 needs one entry per layer type"},
		{"local base 0", ArchGemma3, func(m map[string]any) { delete(m, "rope_parameters"); m["rope_local_base_freq"] = 0 }, "rope_local_base_freq = 0 must be positive"},
		{"query scalar 0", ArchGemma2, func(m map[string]any) { m["query_pre_attn_scalar"] = 0 }, "query_pre_attn_scalar = 0 must be positive"},
		{"query scalar null", ArchGemma2, func(m map[string]any) { m["query_pre_attn_scalar"] = nil }, "field query_pre_attn_scalar is null"},
		{"bidirectional", ArchGemma3, func(m map[string]any) { m["use_bidirectional_attention"] = true }, "use_bidirectional_attention = true"},
		{"activation", ArchGemma2, func(m map[string]any) { m["hidden_activation"] = "gelu_quick" }, `hidden_activation "gelu_quick" is not supported`},
		{"wrapper without text_config", ArchGemma3, func(m map[string]any) {
			for k := range m {
				delete(m, k)
			}
			m["model_type"] = "gemma3"
		}, "text_config: field is missing"},
		{"wrapper with a bad text model", ArchGemma3, func(m map[string]any) {
			text := map[string]any{}
			for k, v := range m {
				text[k] = v
				delete(m, k)
			}
			text["sliding_window"] = 0
			m["model_type"], m["text_config"] = "gemma3", text
		}, "text_config: sliding_window = 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := gemmaConfigJSON(t, tc.arch)
			tc.change(m)
			c, err := parseFields(t, m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got config %v, error %v; want an error containing %q", c != nil, err, tc.want)
			}
		})
	}
}

// TestGemmaConfigForms: the released configurations, which leave fields to
// the config classes' defaults and use the fields before transformers 5,
// parse to the same model as transformers 5's form.
func TestGemmaConfigForms(t *testing.T) {
	// google/gemma-3-4b-it's config.json (vision_config shortened): the
	// text model is mostly Gemma3TextConfig's defaults.
	vlm := `{"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
		"eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
		"model_type": "gemma3",
		"text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
			"rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
		"torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
		"vision_config": {"hidden_size": 1152, "image_size": 896, "model_type": "siglip_vision_model", "patch_size": 14}}`
	c, err := ParseConfig([]byte(vlm))
	if err != nil {
		t.Fatal(err)
	}
	sliding := make([]bool, 34)
	for l := range sliding {
		sliding[l] = (l+1)%6 != 0
	}
	want := Config{Arch: ArchGemma3, ModelType: "gemma3", Layers: 34, DModel: 2560, Heads: 8, KVHeads: 4, DHead: 256, DMLP: 10240,
		Vocab: 262208, MaxPos: 131072, NormEps: 1e-6, Act: "gelu_pytorch_tanh", TiedHead: true, QKNorm: true, Gate: GateNone,
		RoPE: RoPEConfig{Theta: 1e6, Type: "linear", Factor: 8}, LocalRoPE: &RoPEConfig{Theta: 1e4, Type: "default", Factor: 1},
		Sliding: 1024, SlidingLayers: sliding, AttnScalar: 256, AttnScale: 1.0 / 16, DType: "bfloat16",
		EmbedScale: 50.5} // √2560 = 50.596 rounded to bfloat16
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("gemma-3-4b-it config:\n got %+v\nwant %+v", *c, want)
	}

	// the same text model in transformers 5's form
	v5 := map[string]any{"model_type": "gemma3_text", "hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
		"sliding_window": 1024, "dtype": "bfloat16", "layer_types": func() []string {
			s := make([]string, 34)
			for l := range s {
				s[l] = map[bool]string{true: "sliding_attention", false: "full_attention"}[sliding[l]]
			}
			return s
		}(),
		"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "linear", "factor": 8, "rope_theta": 1e6},
			"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 1e4}}}
	c5, err := parseFields(t, v5)
	if err != nil {
		t.Fatal(err)
	}
	want.ModelType = "gemma3_text"
	if !reflect.DeepEqual(*c5, want) {
		t.Errorf("transformers 5 form:\n got %+v\nwant %+v", *c5, want)
	}

	// google/gemma-2-2b's config.json: alternating layers from a sliding
	// layer 0, one RoPE, soft-caps 50 and 30
	g2 := `{"architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
		"attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
		"final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
		"hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02,
		"intermediate_size": 9216, "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
		"num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256,
		"rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "final_logit_softcapping": 30.0,
		"torch_dtype": "float32", "use_cache": true, "vocab_size": 256000}`
	c2, err := ParseConfig([]byte(g2))
	if err != nil {
		t.Fatal(err)
	}
	for l, s := range c2.SlidingLayers {
		if s != (l%2 == 0) || c2.layerWindow(l) != map[bool]int{true: 4096, false: 0}[s] {
			t.Errorf("gemma-2-2b layer %d: sliding %v, window %d; want layer 0, 2, … sliding with window 4096", l, s, c2.layerWindow(l))
		}
	}
	if c2.AttnSoftcap != 50 || c2.FinalSoftcap != 30 || c2.AttnScalar != 256 || c2.LocalRoPE != nil || c2.RoPE.Theta != 1e4 || c2.EmbedScale != 48 || c2.QKNorm {
		t.Errorf("gemma-2-2b: %+v", *c2)
	}

	// √D rounded to the checkpoint's dtype (D = 640, Gemma 3 270M)
	for dtype, want := range map[string]float32{"float32": float32(math.Sqrt(640)), "bfloat16": 25.25, "float16": 25.296875} {
		if got := gemmaEmbedScale(640, dtype); got != want {
			t.Errorf("embedding scale of D = 640 in %s = %v, want %v", dtype, got, want)
		}
	}
}

// TestGemmaVisionLanguage: the text model of a Gemma 3 vision-language
// checkpoint, in either naming (language_model.model.* before transformers
// 4.52, model.language_model.* after), runs as the text checkpoint does;
// the vision tower and projector are skipped and listed in Model.Skipped.
func TestGemmaVisionLanguage(t *testing.T) {
	src := filepath.Join(goldenDir, "gemma3_text")
	if _, err := os.Stat(filepath.Join(src, "model.safetensors")); err != nil {
		t.Skipf("golden data not available (%v)", err)
	}
	text, err := Load(src, LoadOptions{})
	if err != nil {
		t.Fatal(err)
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
	ids := seqs(2, 40, text.Vocab)
	want, err := text.Forward(ids, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, layout := range []struct{ text, vision string }{
		{"language_model.model.", ""},
		{"model.language_model.", "model."},
	} {
		t.Run(strings.TrimSuffix(layout.text, "."), func(t *testing.T) {
			var tensors []checkpoint.Tensor
			for _, n := range ck.Names() {
				info, _ := ck.Info(n)
				x, err := ck.Float32(n)
				if err != nil {
					t.Fatal(err)
				}
				tensors = append(tensors, checkpoint.Tensor{Name: layout.text + strings.TrimPrefix(n, "model."), Shape: info.Shape, Data: x})
			}
			vision := []string{layout.vision + "multi_modal_projector.mm_input_projection_weight",
				layout.vision + "vision_tower.vision_model.embeddings.patch_embedding.weight"}
			for _, n := range vision {
				tensors = append(tensors, checkpoint.Tensor{Name: n, Shape: []int{2, 3}, Data: make([]float32, 6)})
			}
			dir := t.TempDir()
			cfg := fmt.Sprintf(`{"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "torch_dtype": "float32",
				"vision_config": {"model_type": "siglip_vision_model"}, "text_config": %s}`, cfgText)
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
			if m.Arch != ArchGemma3 || m.ModelType != "gemma3" || !reflect.DeepEqual(m.Skipped, vision) || m.Parameters != text.Parameters {
				t.Fatalf("loaded %s (%s), %d parameters, skipped %v; want gemma3, %d parameters, skipped %v",
					m.Arch, m.ModelType, m.Parameters, m.Skipped, text.Parameters, vision)
			}
			got, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Logits, want.Logits) {
				rel, _ := relErr(got.Logits, want.Logits)
				t.Fatalf("logits differ from the text checkpoint's: rel %g", rel)
			}
		})
	}
}

// TestGemmaGenerated: `probe generate --arch gemma2|gemma3` models (norm
// weights near 0, the neutral value of 1 + w) survive WriteHF and Load bit
// for bit at a length past their sliding window; the sliding layers see
// exactly the last window positions, the global ones every earlier one, and
// Gemma 2's logits stay within its final soft-cap.
func TestGemmaGenerated(t *testing.T) {
	for _, arch := range []Arch{ArchGemma2, ArchGemma3} {
		t.Run(string(arch), func(t *testing.T) {
			cfg, err := SmallConfig(arch, Size{Layers: 3, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 61, MaxPos: 128})
			if err != nil {
				t.Fatal(err)
			}
			m, tensors, err := Generate(cfg, 11)
			if err != nil {
				t.Fatal(err)
			}
			for _, tn := range tensors {
				if strings.HasSuffix(tn.Name, "norm.weight") {
					var mean float64
					for _, x := range tn.Data.([]float32) {
						mean += float64(x)
					}
					if mean /= float64(len(tn.Data.([]float32))); math.Abs(mean) > 0.2 {
						t.Errorf("%s: mean %.3f, want near 0 (the factor is 1 + w)", tn.Name, mean)
					}
				}
			}
			dir := filepath.Join(t.TempDir(), "ck")
			if err := WriteHF(dir, cfg, tensors); err != nil {
				t.Fatal(err)
			}
			back, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Config, m.Config) || back.Parameters != m.Parameters {
				t.Fatalf("loaded config %+v (%d parameters), generated %+v (%d)", back.Config, back.Parameters, m.Config, m.Parameters)
			}
			const T = 100
			ids := seqs(2, T, m.Vocab)
			a, err := m.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := back.Forward(ids, Options{Logits: true})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a.Logits, b.Logits) {
				rel, _ := relErr(b.Logits, a.Logits)
				t.Fatalf("logits differ after a save/load round trip: rel %g", rel)
			}
			if arch == ArchGemma2 {
				for i, x := range a.Logits {
					if !(math.Abs(float64(x)) <= 30) {
						t.Fatalf("logit %d = %v beyond the final soft-cap 30", i, x)
					}
				}
			}
			W := cfg.Sliding
			if W >= T {
				t.Fatalf("window %d does not act within %d positions", W, T)
			}
			hs := &hooks.Set{}
			cp := hs.Capture("blocks.*.attn.hook_pattern")
			if _, err := back.Forward(ids, Options{Hooks: hs}); err != nil {
				t.Fatal(err)
			}
			for l := 0; l < cfg.Layers; l++ {
				p := cp.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
				window := cfg.layerWindow(l)
				for r := 0; r < 2*cfg.Heads*T; r++ {
					t0 := r % T
					row := p[r*T : (r+1)*T]
					for j, x := range row {
						seen := j <= t0 && (window == 0 || t0-j < window)
						if seen != (x > 0) {
							t.Fatalf("layer %d (window %d) row %d query %d key %d: weight %v", l, window, r, t0, j, x)
						}
					}
				}
			}
		})
	}
}

// TestGemma1Config: Gemma 1's config.json — the activation is hidden_act
// (transformers 5's GemmaMLP; hidden_activation, which 4.39–4.47 read, is
// ignored), √D in the checkpoint's dtype, multi-query attention, scores
// by head_dim^−½ — and its refusals.
func TestGemma1Config(t *testing.T) {
	c, err := goldenConfigWith(t, "gemma", func(m map[string]any) {})
	if err != nil {
		t.Fatal(err)
	}
	if c.Arch != ArchGemma || c.KVHeads != 1 || c.EmbedScale != 8 || c.Act != "gelu_pytorch_tanh" || c.AttnScale != 0 || !c.TiedHead {
		t.Errorf("golden config: arch %s, kv heads %d, embedding ×%v, act %s, score scale %v, tied %v; want gemma, 1, 8, gelu_pytorch_tanh, 0 (dh^−½), true",
			c.Arch, c.KVHeads, c.EmbedScale, c.Act, c.AttnScale, c.TiedHead)
	}
	// hidden_act decides; bf16 rounds √2048; the earlier rope_theta
	c, err = goldenConfigWith(t, "gemma", func(m map[string]any) {
		delete(m, "rope_parameters")
		delete(m, "dtype")
		m["hidden_act"], m["hidden_activation"], m["hidden_size"], m["torch_dtype"], m["rope_theta"] = "gelu", "gelu_pytorch_tanh", 2048, "bfloat16", 10000.0
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.Act != "gelu" || c.EmbedScale != 45.25 || c.RoPE.Theta != 1e4 {
		t.Errorf("act %s, embedding ×%v, θ %v; want gelu (hidden_act), 45.25 (√2048 in bfloat16), 1e4", c.Act, c.EmbedScale, c.RoPE.Theta)
	}
	c, err = goldenConfigWith(t, "gemma", func(m map[string]any) {
		delete(m, "hidden_act")
		m["hidden_activation"] = "gelu"
	})
	if err != nil || c.Act != "gelu_pytorch_tanh" {
		t.Errorf("without hidden_act: %v, act %s; want GemmaConfig's default gelu_pytorch_tanh", err, c.Act)
	}
	checkRefused(t, "gemma", []refusal{
		{"activation", func(m map[string]any) { m["hidden_act"] = "gelu_quick" }, `hidden_act "gelu_quick" is not supported`},
		{"bidirectional", func(m map[string]any) { m["use_bidirectional_attention"] = true }, "use_bidirectional_attention = true"},
		{"rope type", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "ntk", "rope_theta": 1e4}
		}, `rope_parameters.rope_type "ntk" is not supported`},
		{"kv heads", func(m map[string]any) { m["num_key_value_heads"] = 3 }, "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
	})
}
