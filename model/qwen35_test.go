package model

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		}, "field text_config is missing"},
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
