package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/filterlens/probe/hooks"
)

// linkDir makes a checkpoint folder of links: name in the folder → file of
// the golden case.
func linkDir(t *testing.T, caseDir string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for as, from := range files {
		abs, _ := filepath.Abs(filepath.Join(caseDir, from))
		if _, err := os.Stat(abs); err != nil {
			t.Skipf("golden data not available: %v", err)
		}
		if err := os.Symlink(abs, filepath.Join(dir, as)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestQwen35Wrapper loads the text weights of the released vision-language
// layout (model.language_model.*, a vision tower model.visual.*, config
// with text_config): the tower is skipped and listed, and the logits equal
// the golden ones.
func TestQwen35Wrapper(t *testing.T) {
	caseDir := filepath.Join(goldenDir, "qwen35_text")
	dir := linkDir(t, caseDir, map[string]string{"config.json": "config.vlm.json", "model.safetensors": "model.vlm_names.safetensors"})
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.Arch != ArchQwen35 || m.ModelType != "qwen3_5" {
		t.Errorf("arch %q model_type %q, want %q qwen3_5", m.Arch, m.ModelType, ArchQwen35)
	}
	if len(m.Skipped) != 21 {
		t.Errorf("skipped %d tensors, want the 21 of the vision tower: %v", len(m.Skipped), m.Skipped)
	}
	for _, n := range m.Skipped {
		if !strings.HasPrefix(n, "model.visual.") {
			t.Errorf("skipped %q, which is not part of the vision tower", n)
		}
	}
	g := openGolden(t, caseDir)
	out, _ := runGolden(t, m, g)
	checkClose(t, "logits (wrapper)", out.Logits, g.f32(t, "logits"))
}

// TestQwen35ConfigErrors checks that what the code does not implement is
// refused naming the field.
func TestQwen35ConfigErrors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(goldenDir, "qwen35_text", "config.json"))
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
		want string
	}{
		{"unknown layer type", func(m map[string]any) {
			m["layer_types"] = []string{"linear_attention", "sliding_attention", "linear_attention", "full_attention"}
		},
			`layer_types[1] = "sliding_attention" is not supported`},
		{"layer_types length", func(m map[string]any) { m["layer_types"] = []string{"full_attention"} }, "layer_types has 1 entries"},
		{"GDN heads", func(m map[string]any) { m["linear_num_value_heads"] = 6 }, "linear_num_value_heads 6 is not a multiple of linear_num_key_heads 4"},
		{"missing GDN field", func(m map[string]any) { delete(m, "linear_key_head_dim") }, "field linear_key_head_dim is missing"},
		{"rope type", func(m map[string]any) { m["rope_parameters"].(map[string]any)["rope_type"] = "yarn" }, `rope_parameters.rope_type "yarn" is not supported`},
		{"mrope section", func(m map[string]any) { m["rope_parameters"].(map[string]any)["mrope_section"] = []int{2, 2, 2} }, "mrope_section [2 2 2] sums to 6, want 4"},
		{"partial rotary", func(m map[string]any) { m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 0.01 }, "partial_rotary_factor 0.01"},
		{"wrapper without text", func(m map[string]any) {
			for k := range m {
				delete(m, k)
			}
			m["model_type"] = "qwen3_5"
		}, "text_config: field is missing"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			c.edit(m)
			b, _ := json.Marshal(m)
			_, err := ParseConfig(b)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// deltaRecorder is a DeltaConsumer that assembles the streamed effective
// attention rows [B, Hv, T, T] of one layer, and counts softmax tiles.
type deltaRecorder struct {
	mu       sync.Mutex
	layer    int
	B, H, T  int
	w        []float32
	seen     []int // rows received per (b, h)
	softmax  int
	outOfRow bool
}

func (r *deltaRecorder) ConsumeAttn(*hooks.AttnTile) error {
	r.mu.Lock()
	r.softmax++
	r.mu.Unlock()
	return nil
}

func (r *deltaRecorder) ConsumeDelta(a *hooks.AttnTile) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := a.Batch*r.H + a.Head
	if a.Layer != r.layer || a.Q0 != r.seen[i] {
		r.outOfRow = true
	}
	for q := 0; q < a.Rows; q++ {
		copy(r.w[(i*r.T+a.Q0+q)*r.T:], a.Row(q))
	}
	r.seen[i] += a.Rows
	return nil
}

// TestQwen35DeltaStream: the effective attention rows of a Gated DeltaNet
// layer streamed to a DeltaConsumer, in tiles of 1, 7 and 64 rows, equal
// the golden eff_attn; the layer's softmax consumers get nothing from it.
func TestQwen35DeltaStream(t *testing.T) {
	dir := filepath.Join(goldenDir, "qwen35_text")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	g := openGolden(t, dir)
	Hv := m.DeltaNet.ValueHeads
	for _, tile := range []int{1, 7, 64} {
		for _, l := range m.DeltaNet.LinearLayers() {
			r := &deltaRecorder{layer: l, B: g.B, H: Hv, T: g.T, w: make([]float32, g.B*Hv*g.T*g.T), seen: make([]int, g.B*Hv)}
			hs := &hooks.Set{}
			hs.Stream(l, r)
			if _, err := m.Forward(g.ids(t), Options{Hooks: hs, TileRows: tile}); err != nil {
				t.Fatal(err)
			}
			if r.outOfRow || r.softmax != 0 {
				t.Errorf("tile %d layer %d: rows out of order %v, softmax tiles %d", tile, l, r.outOfRow, r.softmax)
			}
			checkClose(t, fmt.Sprintf("streamed eff_attn.%d (tile %d)", l, tile), r.w, g.f32(t, fmt.Sprintf("eff_attn.%d", l)))
		}
	}
}
