package model

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// TestGPTNeoXResidualLayouts: use_parallel_residual true gives x +
// attn(ln₁(x)) + mlp(ln₂(x)) — ln₂ reads the block's input, and the golden
// parity (TestGoldenParity/gpt_neox) holds; false gives the sequential
// x' = x + attn(ln₁(x)), x' + mlp(ln₂(x')) — ln₂ reads x', checked here on
// the golden weights through the hooks, and its logits differ from the
// parallel ones.
func TestGPTNeoXResidualLayouts(t *testing.T) {
	dir := filepath.Join(goldenDir, "gpt_neox")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	if m.Residual != ResidualParallel || m.RoPE.Dims != 4 || !m.QKVBias || !m.OBias || m.TiedHead {
		t.Fatalf("golden config: residual %q, rotated dims %d, attention bias %v/%v, tied %v; want parallel, 4 of 16, true, untied",
			m.Residual, m.RoPE.Dims, m.QKVBias, m.OBias, m.TiedHead)
	}
	g := openGolden(t, dir)
	ids := g.ids(t)
	D := m.DModel
	for _, layout := range []ResidualLayout{ResidualParallel, ResidualSequential} {
		m.Residual = layout
		hs := &hooks.Set{}
		cap := hs.Capture("blocks.*.hook_resid_pre", "blocks.*.hook_attn_out", "blocks.*.ln2.hook_normalized", "blocks.*.hook_mlp_out", "blocks.*.hook_resid_post")
		out, err := m.Forward(ids, Options{Hooks: hs, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := relErr(out.Logits, g.f32(t, "logits"))
		if (rel <= parityTol) != (layout == ResidualParallel) {
			t.Errorf("layout %q: logits rel. error %.3g against the parallel golden run", layout, rel)
		}
		for l := range m.Layers {
			get := func(p string) []float32 { return cap.Get(hooks.Name(p, l)).Data().([]float32) }
			x, a, ln2, mlp, post := get(hooks.ResidPre), get(hooks.AttnOut), get(hooks.LN2Normalized), get(hooks.MLPOut), get(hooks.ResidPost)
			in := append([]float32(nil), x...) // what ln₂ reads
			if layout == ResidualSequential {
				for i := range in {
					in[i] += a[i]
				}
			}
			want := make([]float32, len(in))
			LayerNorm(want, in, D, m.Layers[l].Norm2W, m.Layers[l].Norm2B, m.NormEps)
			if rel, i := relErr(ln2, want); rel > 1e-6 {
				t.Errorf("layout %q layer %d: ln₂ output off by %.3g at %d: it does not read the right stream", layout, l, rel, i)
			}
			sum := make([]float32, len(x))
			for i := range sum {
				sum[i] = x[i] + a[i] + mlp[i]
			}
			if rel, i := relErr(post, sum); rel > 1e-6 {
				t.Errorf("layout %q layer %d: resid_post ≠ x + attn + mlp (%.3g at %d)", layout, l, rel, i)
			}
		}
	}
}

// TestGPTNeoXConfig: the released Pythia config.json (rotary_pct,
// rotary_emb_base, float16), GPTNeoXConfig's defaults and the refusals
// naming the field.
func TestGPTNeoXConfig(t *testing.T) {
	c, err := goldenConfigWith(t, "gpt_neox", func(m map[string]any) {
		delete(m, "rope_parameters")
		delete(m, "dtype")
		delete(m, "attention_bias")
		m["rotary_pct"], m["rotary_emb_base"], m["torch_dtype"], m["use_parallel_residual"] = 0.5, 5e4, "float16", false
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.RoPE.Dims != 8 || c.RoPE.Theta != 5e4 || c.DType != "float16" || c.Residual != ResidualSequential || !c.QKVBias || c.NormEps != 1e-5 {
		t.Errorf("Pythia form: rotated %d, θ %v, dtype %q, residual %q, attention bias %v, ε %v; want 8, 5e4, float16, sequential, true, 1e-5",
			c.RoPE.Dims, c.RoPE.Theta, c.DType, c.Residual, c.QKVBias, c.NormEps)
	}
	c, err = goldenConfigWith(t, "gpt_neox", func(m map[string]any) {
		for _, k := range []string{"rope_parameters", "hidden_act", "use_parallel_residual", "tie_word_embeddings", "layer_norm_eps"} {
			delete(m, k)
		}
		m["attention_bias"] = false
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.RoPE.Dims != 4 || c.RoPE.Theta != 1e4 || c.Act != "gelu" || c.Residual != ResidualParallel || c.TiedHead || c.QKVBias || c.OBias || !c.MLPBias {
		t.Errorf("defaults: rotated %d, θ %v, act %s, residual %q, tied %v, attention bias %v/%v, MLP bias %v; want 4, 1e4, gelu, parallel, false, false/false, true",
			c.RoPE.Dims, c.RoPE.Theta, c.Act, c.Residual, c.TiedHead, c.QKVBias, c.OBias, c.MLPBias)
	}
	checkRefused(t, "gpt_neox", []refusal{
		{"rotary_pct 0", func(m map[string]any) { delete(m, "rope_parameters"); m["rotary_pct"] = 0 }, "rotary_pct = 0 must be in (0, 1]"},
		{"factor above 1", func(m map[string]any) { m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 1.5 }, "rope_parameters.partial_rotary_factor 1.5: need 0 < factor ≤ 1"},
		{"odd rotated dims", func(m map[string]any) { m["rope_parameters"].(map[string]any)["partial_rotary_factor"] = 0.1875 }, "of head_dim 16 (got 3)"},
		{"rope type", func(m map[string]any) { m["rope_parameters"].(map[string]any)["rope_type"] = "ntk" }, `rope_parameters.rope_type "ntk" is not supported`},
		{"activation", func(m map[string]any) { m["hidden_act"] = "gelu_10" }, `hidden_act "gelu_10" is not supported`},
		{"heads", func(m map[string]any) { m["num_attention_heads"] = 5 }, "hidden_size 64 is not a multiple of num_attention_heads 5"},
		{"parallel not a bool", func(m map[string]any) { m["use_parallel_residual"] = "yes" }, "use_parallel_residual"},
	})
}

// TestGPTNeoXEarlierBuffers: the Pythia checkpoints saved by earlier
// transformers hold each layer's causal mask (attention.bias, bool),
// attention.masked_bias and rotary_emb.inv_freq; they load, ignored, to
// the same logits.
func TestGPTNeoXEarlierBuffers(t *testing.T) {
	src := filepath.Join(goldenDir, "gpt_neox")
	ck, err := checkpoint.OpenFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Skipf("golden data not available: %v", err)
	}
	defer ck.Close()
	var tensors []checkpoint.Tensor
	for _, n := range ck.Names() {
		info, _ := ck.Info(n)
		x, err := ck.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		tensors = append(tensors, checkpoint.Tensor{Name: n, Shape: info.Shape, Data: x})
	}
	const maxPos = 8
	for l := 0; l < 4; l++ {
		p := fmt.Sprintf("gpt_neox.layers.%d.attention.", l)
		mask := make([]bool, maxPos*maxPos)
		for i := 0; i < maxPos; i++ {
			for j := 0; j <= i; j++ {
				mask[i*maxPos+j] = true
			}
		}
		tensors = append(tensors,
			checkpoint.Tensor{Name: p + "bias", Shape: []int{1, 1, maxPos, maxPos}, Data: mask},
			checkpoint.Tensor{Name: p + "masked_bias", Shape: []int{}, Data: []float32{-1e9}},
			checkpoint.Tensor{Name: p + "rotary_emb.inv_freq", Shape: []int{2}, Data: []float32{1, 0.01}})
	}
	dir := variantDir(t, src, "config.json", "config.json") // the config alone
	if err := checkpoint.WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, nil); err != nil {
		t.Fatal(err)
	}
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := openGolden(t, src)
	out, err := m.Forward(g.ids(t), Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	checkClose(t, "logits with the earlier buffers", out.Logits, g.f32(t, "logits"))
}

// TestGPTNeoXWritesItsRoPE: a GPT-NeoX configuration with partial rotary
// and a scaled RoPE is written (one rope_parameters object, as
// GPTNeoXConfig reads it) and read back the same.
func TestGPTNeoXWritesItsRoPE(t *testing.T) {
	for _, rc := range []RoPEConfig{
		{Theta: 10000, Type: "default", Factor: 1, Dims: 4},
		{Theta: 5e4, Type: "linear", Factor: 2, Dims: 6},
		{Theta: 1e4, Type: "yarn", Factor: 4, OrigMax: 512, Dims: 8},
	} {
		c, err := SmallConfig(ArchGPTNeoX, Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 4, Vocab: 50, MaxPos: 2048})
		if err != nil {
			t.Fatal(err)
		}
		c.RoPE = rc
		back, err := roundTrip(c.HFConfig())
		if err != nil {
			t.Fatalf("%+v: %v", rc, err)
		}
		if back.RoPE != c.RoPE || back.Residual != c.Residual || back.NormEps != c.NormEps {
			t.Errorf("wrote RoPE %+v, residual %q, ε %v; read %+v, %q, %v", c.RoPE, c.Residual, c.NormEps, back.RoPE, back.Residual, back.NormEps)
		}
	}
}
