package model

import (
	"path/filepath"
	"testing"
)

// TestGraniteMultipliers: each of Granite's four multipliers is read into
// its slot, and each one changes the logits — the golden parity fails
// without any one of them (so TestGoldenParity's granite case sees each).
func TestGraniteMultipliers(t *testing.T) {
	dir := filepath.Join(goldenDir, "granite")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	c := m.Config
	if c.EmbedScale != 12 || c.AttnScale != 0.15 || c.ResidScale != 0.22 || c.LogitDivisor != 4 || !c.TiedHead {
		t.Fatalf("embedding ×%v, score scale %v, residual ×%v, logits ÷%v, tied %v; want 12, 0.15, 0.22, 4, true",
			c.EmbedScale, c.AttnScale, c.ResidScale, c.LogitDivisor, c.TiedHead)
	}
	g := openGolden(t, dir)
	want := g.f32(t, "logits")
	for _, drop := range []struct {
		name string
		set  func(c *Config)
	}{
		{"embedding_multiplier", func(c *Config) { c.EmbedScale = 0 }},
		{"attention_multiplier", func(c *Config) { c.AttnScale = 0 }},
		{"residual_multiplier", func(c *Config) { c.ResidScale = 0 }},
		{"logits_scaling", func(c *Config) { c.LogitDivisor = 0 }},
	} {
		m.Config = c
		drop.set(&m.Config)
		out, err := m.Forward(g.ids(t), Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		if rel, _ := relErr(out.Logits, want); rel < 10*parityTol {
			t.Errorf("without %s the logits still match (rel. error %.2g)", drop.name, rel)
		}
	}
	m.Config = c
}

// TestGraniteConfig: GraniteConfig's defaults (every multiplier 1, so
// scores unscaled; an untied head) and the refusals naming the field.
func TestGraniteConfig(t *testing.T) {
	c, err := goldenConfigWith(t, "granite", func(m map[string]any) {
		for _, k := range []string{"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling", "tie_word_embeddings"} {
			delete(m, k)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.EmbedScale != 1 || c.AttnScale != 1 || c.ResidScale != 1 || c.LogitDivisor != 1 || c.TiedHead {
		t.Errorf("defaults: embedding ×%v, score scale %v, residual ×%v, logits ÷%v, tied %v; want 1, 1, 1, 1, false",
			c.EmbedScale, c.AttnScale, c.ResidScale, c.LogitDivisor, c.TiedHead)
	}
	checkRefused(t, "granite", []refusal{
		{"embedding 0", func(m map[string]any) { m["embedding_multiplier"] = 0 }, "embedding_multiplier = 0 must be positive"},
		{"attention negative", func(m map[string]any) { m["attention_multiplier"] = -0.1 }, "attention_multiplier = -0.1 must be positive"},
		{"residual null", func(m map[string]any) { m["residual_multiplier"] = nil }, "field residual_multiplier is null"},
		{"logits string", func(m map[string]any) { m["logits_scaling"] = "4" }, "field logits_scaling: want a number"},
		{"logits huge", func(m map[string]any) { m["logits_scaling"] = 1e300 }, "logits_scaling = 1e+300 exceeds the float32 range"},
		{"rope type", func(m map[string]any) {
			m["rope_parameters"] = map[string]any{"rope_type": "ntk", "factor": 4.0, "rope_theta": 1e4}
		}, `rope_parameters.rope_type "ntk" is not supported`},
	})
}
