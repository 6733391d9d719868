package model

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// TestPhi3AgainstReference checks the pass against refDecoder (olmo_test.go)
// where the golden case does not reach: LongRoPE's short factors (T at or
// below original_max_position_embeddings) and long ones, whole-head and
// partial rotary, other head ratios, a sliding window, bf16 weights split
// into views.
func TestPhi3AgainstReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		size  Size
		T     int
		edit  func(c *Config)
		dtype string
	}{
		{"short factors, T = orig", Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 80, MaxPos: 64}, 16, nil, ""},
		{"long factors, T > orig", Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 80, MaxPos: 64}, 17, nil, ""},
		{"8/1 heads, whole-head rotary", Size{Layers: 2, DModel: 48, Heads: 8, KVHeads: 1, Vocab: 40, MaxPos: 32}, 30, nil, ""},
		{"window 6", Size{Layers: 3, DModel: 64, Heads: 4, KVHeads: 4, Vocab: 80, MaxPos: 128}, 45,
			func(c *Config) { c.Sliding = 6 }, ""},
		{"window past T (Phi-4-mini's)", Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 80, MaxPos: 64}, 33,
			func(c *Config) { c.Sliding = 1 << 18 }, ""},
		{"bf16", Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 80, MaxPos: 64}, 24, nil, "bfloat16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := SmallConfig(ArchPhi3, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			cfg.DType = tc.dtype
			m, _, err := Generate(cfg, 5)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.RoPE.Type != "longrope" {
				t.Fatalf("small phi3 RoPE %+v, want longrope", cfg.RoPE)
			}
			checkAgainstRef(t, m, 2, tc.T)
		})
	}
}

// TestPhi3FusedViews checks that the split projections are views of the
// stored fused rows (nothing copied): q, k, v follow each other in
// qkv_proj's storage, gate then up in gate_up_proj's.
func TestPhi3FusedViews(t *testing.T) {
	for _, dtype := range []string{"", "bfloat16"} {
		cfg, err := SmallConfig(ArchPhi3, Size{Layers: 1, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 20, MaxPos: 32})
		if err != nil {
			t.Fatal(err)
		}
		cfg.DType = dtype
		m, tensors, err := Generate(cfg, 1)
		if err != nil {
			t.Fatal(err)
		}
		L, D, F := &m.Layers[0], cfg.DModel, cfg.DMLP
		q, kv := cfg.Heads*cfg.DHead, cfg.KVHeads*cfg.DHead
		// base returns the address of element i of a weight's storage
		base := func(w Weight, i int) any {
			if w.F32 != nil {
				return &w.F32[:cap(w.F32)][i]
			}
			return &w.Bits[:cap(w.Bits)][i]
		}
		for _, c := range []struct {
			what string
			a    Weight
			at   int
			b    Weight
		}{
			{"k after q", L.Wq, q * D, L.Wk}, {"v after k", L.Wk, kv * D, L.Wv}, {"up after gate", L.WGate, F * D, L.WUp},
		} {
			if base(c.a, c.at) != base(c.b, 0) {
				t.Errorf("%s %s: not a view of the fused weight", dtype, c.what)
			}
		}
		if L.Wq.Rows != q || L.Wk.Rows != kv || L.Wv.Rows != kv || L.WGate.Rows != F || L.WUp.Rows != F {
			t.Errorf("rows q %d k %d v %d gate %d up %d", L.Wq.Rows, L.Wk.Rows, L.Wv.Rows, L.WGate.Rows, L.WUp.Rows)
		}
		var names []string
		for _, x := range tensors {
			names = append(names, x.Name)
		}
		got := strings.Join(names, " ")
		for _, want := range []string{"model.layers.0.self_attn.qkv_proj.weight", "model.layers.0.mlp.gate_up_proj.weight"} {
			if !strings.Contains(got, want) {
				t.Errorf("generated tensors %s lack %s", got, want)
			}
		}
	}
}

// TestPhi3Configs reads the golden config field by field, the released
// forms (rope_scaling with type su; Phi-4-mini's top-level
// partial_rotary_factor and a window wider than the context) and the
// config class's defaults.
func TestPhi3Configs(t *testing.T) {
	c, err := LoadConfig(filepath.Join(goldenDir, "phi3"))
	if err != nil {
		t.Skipf("golden phi3: %v", err)
	}
	r := c.RoPE
	if c.Layers != 4 || c.DModel != 64 || c.Heads != 4 || c.KVHeads != 2 || c.DHead != 16 || c.DMLP != 128 || c.Vocab != 512 ||
		c.NormEps != 1e-5 || !c.TiedHead || c.Sliding != 0 || c.MaxPos != 128 {
		t.Errorf("phi3: %+v", *c)
	}
	if r.Type != "longrope" || r.Dims != 12 || r.OrigMax != 32 || r.Factor != 4 || r.Theta != 10000 || r.Factors == nil ||
		len(r.Factors.Short) != 6 || r.Factors.Long[5] != 6.6996 || r.Factors.Short[0] != 1.0432 {
		t.Errorf("phi3 RoPE %+v %+v", r, r.Factors)
	}
	if a := r.attentionScale(); math.Abs(a-1.1832159566) > 1e-9 {
		t.Errorf("attention factor %v, want 1.1832159566 (README)", a)
	}

	base := `"model_type":"phi3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":64,"vocab_size":50`
	factors := func(n int, v float64) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprint(v + float64(i))
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	// Phi-3-mini-128k as first released: rope_scaling type su
	su := `{` + base + `,"max_position_embeddings":1024,"original_max_position_embeddings":64,"rope_theta":10000,"sliding_window":262,` +
		`"rope_scaling":{"type":"su","short_factor":` + factors(8, 1) + `,"long_factor":` + factors(8, 2) + `}}`
	c, err = ParseConfig([]byte(su))
	if err != nil {
		t.Fatal(err)
	}
	if c.RoPE.Type != "longrope" || c.RoPE.OrigMax != 64 || c.RoPE.Factor != 16 || c.RoPE.Dims != 0 || c.Sliding != 262 || c.TiedHead || c.NormEps != 1e-5 {
		t.Errorf("su config: %+v, window %d, tied %v, eps %g", c.RoPE, c.Sliding, c.TiedHead, c.NormEps)
	}
	// Phi-4-mini's form: partial_rotary_factor at the top, a window past the context
	phi4 := `{` + base + `,"max_position_embeddings":1024,"original_max_position_embeddings":64,"partial_rotary_factor":0.75,"sliding_window":2048,"tie_word_embeddings":true,` +
		`"rope_scaling":{"type":"longrope","short_factor":` + factors(6, 1) + `,"long_factor":` + factors(6, 2) + `}}`
	c, err = ParseConfig([]byte(phi4))
	if err != nil {
		t.Fatal(err)
	}
	if c.RoPE.Dims != 12 || c.Sliding != 2048 || !c.TiedHead {
		t.Errorf("phi4-mini form: dims %d window %d tied %v", c.RoPE.Dims, c.Sliding, c.TiedHead)
	}
	back, err := roundTrip(c.HFConfig())
	if err != nil {
		t.Fatal(err)
	}
	if back.RoPE.Dims != 12 || back.RoPE.Type != "longrope" || back.RoPE.OrigMax != 64 || back.Sliding != 2048 ||
		fmt.Sprint(back.RoPE.Factors) != fmt.Sprint(c.RoPE.Factors) {
		t.Errorf("written back: %+v window %d", back.RoPE, back.Sliding)
	}
	// without original_max_position_embeddings: Phi3Config's 4096
	c, err = ParseConfig([]byte(`{` + base + `,"max_position_embeddings":8192,"rope_parameters":{"rope_type":"longrope","rope_theta":10000,"short_factor":` + factors(8, 1) + `,"long_factor":` + factors(8, 2) + `}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.RoPE.OrigMax != 4096 || c.RoPE.Factor != 2 {
		t.Errorf("default original length: %+v", c.RoPE)
	}
}

// TestPhi3ConfigErrors: what Phi3Config or this package does not implement
// is refused naming the field.
func TestPhi3ConfigErrors(t *testing.T) {
	base := `"model_type":"phi3","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,"intermediate_size":64,"vocab_size":50,"max_position_embeddings":128`
	for _, tc := range []struct{ cfg, want string }{
		{`{` + base + `,"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":32}}`, `rope type "llama3" is not supported for model_type phi3`},
		{`{` + base + `,"rope_scaling":{"rope_type":"longrope","short_factor":[1,1],"long_factor":[1,1]}}`, "short_factor"},
		{`{` + base + `,"attention_bias":true}`, "attention_bias = true is not supported"},
		{`{` + base + `,"sliding_window":0}`, "sliding_window"},
		{`{` + base + `,"partial_rotary_factor":0.1}`, "partial_rotary_factor"},
	} {
		_, err := ParseConfig([]byte(tc.cfg))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", tc.cfg, err, tc.want)
		}
	}
}
