package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/filterlens/probe/hooks"
)

// TestSmolLM3NoPE: no_rope_layers[l] = 1 applies RoPE (Hugging Face's
// use_rope), 0 does not — in the golden case layer 3 is NoPE, and its
// rotated q is the projection bit for bit while the other layers' are
// not; giving layer 3 RoPE (or taking it from layer 0) breaks the golden
// attention of that layer.
func TestSmolLM3NoPE(t *testing.T) {
	dir := filepath.Join(goldenDir, "smollm3")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	if want := []bool{false, false, false, true}; !slices.Equal(m.NoRoPE, want) {
		t.Fatalf("NoRoPE = %v, want %v", m.NoRoPE, want)
	}
	if m.RoPE.Theta != 2e6 {
		t.Errorf("RoPE θ = %g, want rope_parameters.rope_theta 2e6", m.RoPE.Theta)
	}
	if got, want := m.Positions(), "rotate-half, theta 2e+06, scaling default; no RoPE (NoPE) in layers 3"; got != want {
		t.Errorf("Positions() = %q, want %q", got, want)
	}
	g := openGolden(t, dir)
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.attn.hook_q", "blocks.*.attn.hook_rot_q", "blocks.*.attn.hook_pattern")
	if _, err := m.Forward(g.ids(t), Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	for l := range m.Layers {
		q := cap.Get(hooks.Name(hooks.AttnQ, l)).Data().([]float32)
		rq := cap.Get(hooks.Name(hooks.AttnRotQ, l)).Data().([]float32)
		if same := slices.Equal(q, rq); same != m.NoRoPE[l] {
			t.Errorf("layer %d: rotated q equal to the projection: %v, want %v", l, same, m.NoRoPE[l])
		}
	}
	for _, flip := range []int{0, 3} {
		m.NoRoPE[flip] = !m.NoRoPE[flip]
		hs := &hooks.Set{}
		cap := hs.Capture(hooks.Name(hooks.AttnPattern, flip))
		if _, err := m.Forward(g.ids(t), Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("attn.%d", flip)
		if rel, _ := relErr(cap.Get(hooks.Name(hooks.AttnPattern, flip)).Data().([]float32), g.f32(t, key)); rel < 1e-2 {
			t.Errorf("layer %d with RoPE flipped still matches %s (rel. error %.2g): the test cannot see NoPE", flip, key, rel)
		}
		m.NoRoPE[flip] = !m.NoRoPE[flip]
	}
}

// TestSmolLM3Config: SmolLM3Config's defaults (NoPE every
// no_rope_layer_interval-th layer, RoPE base 2·10⁶, sliding windows on the
// NoPE layers with use_sliding_window) and the refusals, each naming its
// field.
func TestSmolLM3Config(t *testing.T) {
	c, err := goldenConfigWith(t, "smollm3", func(m map[string]any) {
		delete(m, "no_rope_layers")
		delete(m, "rope_parameters")
		delete(m, "layer_types")
		m["num_hidden_layers"], m["no_rope_layer_interval"] = 6, 3
		m["use_sliding_window"], m["sliding_window"] = true, 8
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{false, false, true, false, false, true}; !slices.Equal(c.NoRoPE, want) {
		t.Errorf("NoRoPE by interval 3 = %v, want %v", c.NoRoPE, want)
	}
	if c.RoPE.Theta != smolLM3Theta || c.RoPE.Type != "default" {
		t.Errorf("RoPE without rope_parameters: %+v, want θ 2e6 default", c.RoPE)
	}
	for l := range c.Layers {
		if w := c.layerWindow(l); (w == 8) != c.NoRoPE[l] || (w != 0 && w != 8) {
			t.Errorf("layer %d: window %d; want 8 on the NoPE layers only", l, w)
		}
	}
	back, err := roundTrip(c.HFConfig())
	if err != nil || !slices.Equal(back.NoRoPE, c.NoRoPE) || !slices.Equal(back.SlidingLayers, c.SlidingLayers) || back.Sliding != c.Sliding || back.RoPE != c.RoPE {
		t.Errorf("written back: %v; NoRoPE %v, sliding %v (%d), RoPE %+v; want %v, %v (%d), %+v",
			err, back.NoRoPE, back.SlidingLayers, back.Sliding, back.RoPE, c.NoRoPE, c.SlidingLayers, c.Sliding, c.RoPE)
	}
	c, err = goldenConfigWith(t, "smollm3", func(m map[string]any) {
		delete(m, "rope_parameters")
		m["rope_theta"] = 5e6
		m["torch_dtype"] = "bfloat16"
		delete(m, "dtype")
	})
	if err != nil || c.RoPE.Theta != 5e6 || c.DType != "bfloat16" {
		t.Errorf("earlier form: %v, θ %v, dtype %q; want 5e6, bfloat16", err, c.RoPE.Theta, c.DType)
	}
	checkRefused(t, "smollm3", []refusal{
		{"no_rope_layers short", func(m map[string]any) { m["no_rope_layers"] = []int{1, 1, 0} }, "no_rope_layers has 3 entries for num_hidden_layers 4"},
		{"no_rope_layers long", func(m map[string]any) { m["no_rope_layers"] = []int{1, 1, 1, 0, 1} }, "no_rope_layers has 5 entries"},
		{"no_rope_layers value", func(m map[string]any) { m["no_rope_layers"] = []int{1, 2, 1, 0} }, "no_rope_layers[1] = 2"},
		{"no_rope_layers strings", func(m map[string]any) { m["no_rope_layers"] = []string{"a"} }, "field no_rope_layers"},
		{"interval 0", func(m map[string]any) { delete(m, "no_rope_layers"); m["no_rope_layer_interval"] = 0 }, "no_rope_layer_interval = 0"},
		{"sliding without window", func(m map[string]any) {
			m["layer_types"] = []string{"full_attention", "full_attention", "full_attention", "sliding_attention"}
		}, "layer_types[3] is sliding_attention but sliding_window"},
		{"layer type", func(m map[string]any) {
			m["layer_types"] = []string{"full_attention", "chunked_attention", "full_attention", "full_attention"}
		}, `layer_types[1] = "chunked_attention" is not supported`},
		{"rope type", func(m map[string]any) { m["rope_parameters"] = map[string]any{"rope_type": "ntk", "rope_theta": 1e4} }, `rope_parameters.rope_type "ntk" is not supported`},
		{"rope per layer type", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"full_attention": map[string]any{"rope_type": "default", "rope_theta": 1e4}}
		}, "field rope_parameters: one RoPE per layer type (full_attention) is not supported"},
		{"rope theta", func(m map[string]any) { m["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 0} }, "rope_parameters.rope_theta = 0 must be positive"},
	})
}

// TestSmolLM3SlidingLayers: a sliding_attention layer of layer_types
// attends within sliding_window (key j seen by query t iff t − j <
// window, Hugging Face's sliding-window mask), here 8 < T = 48 on the
// golden weights: its pattern is the softmax of its own scaled q·k over
// the window (float64 here), and the full layers' rows reach back to 0.
func TestSmolLM3SlidingLayers(t *testing.T) {
	src := filepath.Join(goldenDir, "smollm3")
	data, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	var fields map[string]any
	json.Unmarshal(data, &fields)
	const W = 8
	fields["layer_types"] = []string{"full_attention", "sliding_attention", "full_attention", "sliding_attention"}
	fields["sliding_window"], fields["use_sliding_window"] = W, true
	dir := variantDir(t, src, "model.safetensors", "model.safetensors")
	data, _ = json.Marshal(fields)
	os.Remove(filepath.Join(dir, "config.json"))
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := openGolden(t, src)
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.attn.hook_rot_q", "blocks.*.attn.hook_rot_k", "blocks.*.attn.hook_pattern")
	if _, err := m.Forward(g.ids(t), Options{Hooks: hs, TileRows: 5}); err != nil {
		t.Fatal(err)
	}
	B, T, H, KV, dh := g.B, g.T, m.Heads, m.KVHeads, m.DHead
	for l := range m.Layers {
		q := cap.Get(hooks.Name(hooks.AttnRotQ, l)).Data().([]float32)
		k := cap.Get(hooks.Name(hooks.AttnRotK, l)).Data().([]float32)
		pat := cap.Get(hooks.Name(hooks.AttnPattern, l)).Data().([]float32) // [B, H, T, T]
		win := T
		if l%2 == 1 {
			win = W
		}
		var worst float64
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for i := 0; i < T; i++ {
					s := make([]float64, T)
					var mx, sum float64 = math.Inf(-1), 0
					for j := max(0, i-win+1); j <= i; j++ {
						qi, kj := q[((b*T+i)*H+h)*dh:][:dh], k[((b*T+j)*KV+h/(H/KV))*dh:][:dh]
						for d := range qi {
							s[j] += float64(qi[d]) * float64(kj[d])
						}
						s[j] /= math.Sqrt(float64(dh))
						mx = math.Max(mx, s[j])
					}
					for j := max(0, i-win+1); j <= i; j++ {
						s[j] = math.Exp(s[j] - mx)
						sum += s[j]
					}
					for j := 0; j < T; j++ {
						want := 0.0
						if j <= i && i-j < win {
							want = s[j] / sum
						}
						worst = math.Max(worst, math.Abs(float64(pat[((b*H+h)*T+i)*T+j])-want))
					}
				}
			}
		}
		if worst > 3e-5 {
			t.Errorf("layer %d (window %d): pattern off by %.3g from the float64 windowed softmax", l, win, worst)
		}
	}
}
