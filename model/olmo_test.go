package model

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/hooks"
)

// refDecoder is an independent float64 statement of the decoder block of
// the OLMo and Phi-3 families, written from the Hugging Face modeling
// files' algorithm (not from forward.go): per layer
//
//	a = pre₁ ? rms(x) : x;  q, k, v = a·Wqᵀ, a·Wkᵀ, a·Wvᵀ (+ biases)
//	q, k = rms over each QNorm-wide chunk (a head, or the whole projection)
//	RoPE (rotate-half) on the first d dimensions of each head, cos and sin
//	  times the attention factor (refInvFreq64); the sliding layers' own
//	  RoPE where LocalRoPE is set
//	p = softmax(q·kᵀ/√dh, causal, key j seen iff t − j < window)
//	o = (p·v)·Woᵀ;  o = post₁ ? rms(o) : o;  x += o
//	f = down(silu(gate(b)) ⊙ up(b)), b = pre₂ ? rms(x) : x;  post₂;  x += f
//
// then logits = rms(x)·Headᵀ. It returns the logits [B·T·V] and each
// layer's attention probabilities [B, H, T, T].
func refDecoder(m *Model, ids [][]int) ([]float64, [][]float64) {
	c := &m.Config
	B, T, D, H, KV, dh, V := len(ids), len(ids[0]), c.DModel, c.Heads, c.KVHeads, c.DHead, c.Vocab
	eps := c.NormEps
	rms := func(x []float64, w []float32) []float64 {
		out := make([]float64, len(x))
		n := len(w)
		for s := 0; s < len(x); s += n {
			var ss float64
			for _, v := range x[s : s+n] {
				ss += v * v
			}
			r := 1 / math.Sqrt(ss/float64(n)+eps)
			for i := range w {
				out[s+i] = x[s+i] * r * float64(w[i])
			}
		}
		return out
	}
	lin := func(x []float64, w Weight, b []float32) []float64 {
		vals := w.widened()
		n := len(x) / w.Cols
		out := make([]float64, n*w.Rows)
		for r := 0; r < n; r++ {
			for o := 0; o < w.Rows; o++ {
				var s float64
				for i, v := range x[r*w.Cols : (r+1)*w.Cols] {
					s += v * float64(vals[o*w.Cols+i])
				}
				if b != nil {
					s += float64(b[o])
				}
				out[r*w.Rows+o] = s
			}
		}
		return out
	}
	rope := func(rc RoPEConfig, x []float64, t int) { // x: one head
		d := rc.dims(dh)
		inv, att := refInvFreq64(rc, d, T)
		if rc.AttnFactor != 0 {
			att = rc.AttnFactor
		}
		for i, f := range inv {
			a, b := x[i], x[i+d/2]
			cs, sn := math.Cos(float64(t)*f), math.Sin(float64(t)*f)
			x[i], x[i+d/2] = att*(a*cs-b*sn), att*(b*cs+a*sn)
		}
	}
	logits := make([]float64, B*T*V)
	attn := make([][]float64, c.Layers)
	for l := range attn {
		attn[l] = make([]float64, B*H*T*T)
	}
	for b, seq := range ids {
		x := make([]float64, T*D)
		emb := m.Embed.widened()
		for t, id := range seq {
			for i := 0; i < D; i++ {
				x[t*D+i] = float64(emb[id*D+i])
			}
		}
		for l := range m.Layers {
			L := &m.Layers[l]
			a := x
			if L.Norm1W != nil {
				a = rms(x, L.Norm1W)
			}
			q, k, v := lin(a, L.Wq, L.Bq), lin(a, L.Wk, L.Bk), lin(a, L.Wv, L.Bv)
			if L.QNorm != nil {
				q, k = rms(q, L.QNorm), rms(k, L.KNorm)
			}
			rc := c.RoPE
			if c.LocalRoPE != nil && c.layerWindow(l) > 0 {
				rc = *c.LocalRoPE
			}
			for t := 0; t < T; t++ {
				for h := 0; h < H; h++ {
					rope(rc, q[(t*H+h)*dh:(t*H+h+1)*dh], t)
				}
				for h := 0; h < KV; h++ {
					rope(rc, k[(t*KV+h)*dh:(t*KV+h+1)*dh], t)
				}
			}
			z := make([]float64, T*H*dh)
			w := c.layerWindow(l)
			for h := 0; h < H; h++ {
				g := h / (H / KV)
				for t := 0; t < T; t++ {
					p := attn[l][((b*H+h)*T+t)*T:][:T]
					mx := math.Inf(-1)
					for j := 0; j <= t; j++ {
						if w > 0 && t-j >= w {
							continue
						}
						var s float64
						for i := 0; i < dh; i++ {
							s += q[(t*H+h)*dh+i] * k[(j*KV+g)*dh+i]
						}
						p[j] = s / math.Sqrt(float64(dh))
						mx = math.Max(mx, p[j])
					}
					var sum float64
					for j := 0; j <= t; j++ {
						if w > 0 && t-j >= w {
							p[j] = 0
							continue
						}
						p[j] = math.Exp(p[j] - mx)
						sum += p[j]
					}
					for j := 0; j <= t; j++ {
						p[j] /= sum
						for i := 0; i < dh; i++ {
							z[(t*H+h)*dh+i] += p[j] * v[(j*KV+g)*dh+i]
						}
					}
				}
			}
			o := lin(z, L.Wo, L.Bo)
			if L.PostNorm1W != nil {
				o = rms(o, L.PostNorm1W)
			}
			for i := range x {
				x[i] += o[i]
			}
			a = x
			if L.Norm2W != nil {
				a = rms(x, L.Norm2W)
			}
			gate, up := lin(a, L.WGate, nil), lin(a, L.WUp, nil)
			for i, g := range gate {
				gate[i] = g / (1 + math.Exp(-g)) * up[i]
			}
			f := lin(gate, L.WDown, nil)
			if L.PostNorm2W != nil {
				f = rms(f, L.PostNorm2W)
			}
			for i := range x {
				x[i] += f[i]
			}
		}
		copy(logits[b*T*V:], lin(rms(x, m.FinalW), m.Head, nil))
	}
	return logits, attn
}

// checkAgainstRef runs m on B sequences of T tokens and compares its
// logits and every layer's hook_pattern with refDecoder's, max|Δ|/max|ref|
// ≤ 1e-4 per tensor.
func checkAgainstRef(t *testing.T, m *Model, B, T int) {
	t.Helper()
	ids := make([][]int, B)
	for b := range ids {
		ids[b] = make([]int, T)
		for i := range ids[b] {
			ids[b][i] = (7*i*i + 13*b + 3*i) % m.Vocab
		}
	}
	hs := &hooks.Set{}
	cap := hs.Capture("blocks.*.attn.hook_pattern")
	out, err := m.Forward(ids, Options{Hooks: hs, Logits: true, TileRows: 5})
	if err != nil {
		t.Fatal(err)
	}
	logits, attn := refDecoder(m, ids)
	f32 := func(x []float64) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = float32(v)
		}
		return y
	}
	checkClose(t, "logits", out.Logits, f32(logits))
	for l := range attn {
		checkClose(t, fmt.Sprintf("attn.%d", l), cap.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32), f32(attn[l]))
	}
}

// TestOLMoAgainstReference checks the pass on shapes and settings the
// golden cases do not hold (their hidden variants' kinds): other head
// ratios, windows smaller than T, YaRN over and under its original
// length, a RoPE per layer type, attention biases, bf16 weights.
func TestOLMoAgainstReference(t *testing.T) {
	for _, tc := range []struct {
		name  string
		arch  Arch
		size  Size
		T     int
		edit  func(c *Config)
		dtype string
	}{
		{"olmo2 8/2 heads", ArchOLMo2, Size{Layers: 2, DModel: 64, Heads: 8, KVHeads: 2, Vocab: 97, MaxPos: 128}, 37, nil, ""},
		{"olmo2 MHA bias", ArchOLMo2, Size{Layers: 2, DModel: 48, Heads: 3, KVHeads: 3, Vocab: 61, MaxPos: 64}, 20,
			func(c *Config) { c.QKVBias, c.OBias = true, true }, ""},
		{"olmo3 window 5 of T 50, yarn beyond orig", ArchOLMo3, Size{Layers: 4, DModel: 64, Heads: 4, KVHeads: 1, Vocab: 89, MaxPos: 64}, 50,
			func(c *Config) { c.Sliding = 5 }, ""},
		{"olmo3 T within orig", ArchOLMo3, Size{Layers: 4, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 50, MaxPos: 256}, 9, nil, ""},
		{"olmo3 RoPE per layer type, partial on the sliding layers", ArchOLMo3, Size{Layers: 4, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 70, MaxPos: 64}, 40,
			func(c *Config) {
				c.Sliding = 7
				c.LocalRoPE = &RoPEConfig{Theta: 10000, Type: "default", Factor: 1, Dims: 8}
			}, ""},
		{"olmo3 bf16", ArchOLMo3, Size{Layers: 4, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 70, MaxPos: 64}, 30, nil, "bfloat16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := SmallConfig(tc.arch, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			cfg.DType = tc.dtype
			m, _, err := Generate(cfg, 11)
			if err != nil {
				t.Fatal(err)
			}
			checkAgainstRef(t, m, 2, tc.T)
		})
	}
}

// TestOLMoConfigs reads the golden configs field by field and the config
// classes' defaults for the fields a config.json leaves out.
func TestOLMoConfigs(t *testing.T) {
	for _, name := range []string{"olmo2", "olmo3"} {
		c, err := LoadConfig(filepath.Join(goldenDir, name))
		if err != nil {
			t.Skipf("golden %s: %v", name, err)
		}
		if c.Layers != 4 || c.DModel != 64 || c.Heads != 4 || c.KVHeads != 2 || c.DHead != 16 || c.DMLP != 128 || c.Vocab != 512 ||
			c.NormEps != 1e-6 || c.TiedHead || c.QKVBias || !c.QKNorm || c.RoPE.Theta != 500000 || c.Act != "silu" {
			t.Errorf("%s: %+v", name, *c)
		}
		if name == "olmo2" && (c.Sliding != 0 || c.SlidingLayers != nil || c.RoPE.Type != "default") {
			t.Errorf("olmo2: window %d, layers %v, rope %+v", c.Sliding, c.SlidingLayers, c.RoPE)
		}
		if name == "olmo3" {
			if c.Sliding != 16 || fmt.Sprint(c.SlidingLayers) != "[true true true false]" || c.LocalRoPE != nil {
				t.Errorf("olmo3: window %d, sliding %v, local RoPE %v", c.Sliding, c.SlidingLayers, c.LocalRoPE)
			}
			if r := c.RoPE; r.Type != "yarn" || r.Factor != 8 || r.OrigMax != 32 || r.AttnFactor != 1.2079441541679836 || r.BetaFast != 32 || r.BetaSlow != 1 {
				t.Errorf("olmo3 RoPE %+v", r)
			}
		}
	}

	base := `"hidden_size":32,"num_hidden_layers":%d,"num_attention_heads":4,"intermediate_size":64,"vocab_size":50,"max_position_embeddings":128`
	c, err := ParseConfig([]byte(fmt.Sprintf(`{"model_type":"olmo3",`+base+`}`, 8)))
	if err != nil {
		t.Fatal(err)
	}
	if c.NormEps != 1e-5 || c.TiedHead || c.Sliding != 4096 || c.RoPE.Theta != 500000 ||
		fmt.Sprint(c.SlidingLayers) != "[true true true false true true true false]" {
		t.Errorf("olmo3 defaults: eps %g tied %v window %d theta %g layers %v", c.NormEps, c.TiedHead, c.Sliding, c.RoPE.Theta, c.SlidingLayers)
	}
	c, err = ParseConfig([]byte(fmt.Sprintf(`{"model_type":"olmo2",`+base+`}`, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if c.NormEps != 1e-5 || c.TiedHead || c.Sliding != 0 || c.RoPE.Theta != 10000 {
		t.Errorf("olmo2 defaults: eps %g tied %v window %d theta %g", c.NormEps, c.TiedHead, c.Sliding, c.RoPE.Theta)
	}

	// rope_parameters per layer type: the sliding layers get theirs
	perType := fmt.Sprintf(`{"model_type":"olmo3",`+base+`,"sliding_window":8,"rope_parameters":{"full_attention":{"rope_type":"yarn","factor":4,"original_max_position_embeddings":32,"rope_theta":500000},"sliding_attention":{"rope_type":"default","rope_theta":10000}}}`, 4)
	c, err = ParseConfig([]byte(perType))
	if err != nil {
		t.Fatal(err)
	}
	if c.RoPE.Type != "yarn" || c.RoPE.Theta != 500000 || c.LocalRoPE == nil || c.LocalRoPE.Type != "default" || c.LocalRoPE.Theta != 10000 {
		t.Errorf("per layer type: global %+v, local %+v", c.RoPE, c.LocalRoPE)
	}
	// and written back, read the same
	back, err := roundTrip(c.HFConfig())
	if err != nil {
		t.Fatal(err)
	}
	if back.RoPE.Type != c.RoPE.Type || back.RoPE.Factor != c.RoPE.Factor || back.LocalRoPE == nil || *back.LocalRoPE != *c.LocalRoPE ||
		back.Sliding != 8 || fmt.Sprint(back.SlidingLayers) != fmt.Sprint(c.SlidingLayers) {
		t.Errorf("written back: %+v local %+v, want %+v local %+v", back.RoPE, back.LocalRoPE, c.RoPE, c.LocalRoPE)
	}
}

// TestOLMoConfigErrors: what is not implemented or inconsistent is refused
// naming the field.
func TestOLMoConfigErrors(t *testing.T) {
	base := `"hidden_size":32,"num_hidden_layers":4,"num_attention_heads":4,"intermediate_size":64,"vocab_size":50,"max_position_embeddings":128`
	for _, tc := range []struct{ cfg, want string }{
		{`{"model_type":"olmo3",` + base + `,"layer_types":["sliding_attention","chunked_attention","full_attention","full_attention"]}`, `layer_types[1] = "chunked_attention" is not supported`},
		{`{"model_type":"olmo3",` + base + `,"layer_types":["full_attention"]}`, "layer_types has 1 entries for num_hidden_layers 4"},
		{`{"model_type":"olmo3",` + base + `,"sliding_window":null}`, "sliding_window is null but layer_types[0] is sliding_attention"},
		{`{"model_type":"olmo3",` + base + `,"sliding_window":2.5}`, "sliding_window"},
		{`{"model_type":"olmo3",` + base + `,"rope_parameters":{"full_attention":{"rope_type":"default"}}}`, "rope_parameters: per layer type it needs exactly full_attention and sliding_attention"},
		{`{"model_type":"olmo3",` + base + `,"rope_parameters":{"full_attention":{"rope_type":"default"},"sliding_attention":{"rope_type":"mrope"}}}`, "rope_parameters.sliding_attention"},
		{`{"model_type":"olmo3",` + base + `,"rope_parameters":{"rope_type":"ntk","rope_theta":1e4}}`, `"ntk" is not supported`},
		{`{"model_type":"olmo2",` + base + `,"layer_types":["full_attention","full_attention","full_attention","full_attention"]}`, "field layer_types is not read by model_type olmo2"},
		{`{"model_type":"olmo2",` + base + `,"rope_parameters":{"full_attention":{},"sliding_attention":{}}}`, "rope_parameters"},
		{`{"model_type":"olmo2",` + base + `,"mlp_bias":true}`, "mlp_bias = true is not supported"},
	} {
		_, err := ParseConfig([]byte(tc.cfg))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant an error containing %q", tc.cfg, err, tc.want)
		}
	}
}
