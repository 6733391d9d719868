package model

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model/internal/kern"
)

// TestClampedSwiGLU: gpt-oss's expert activation, value by value, equals
// the float64 formula (clamp(u, ±ℓ) + 1)·g·σ(α·g), g = min(gate, ℓ), on
// the float32 product α·g as PyTorch rounds it — within 3 float32 ulps
// (σ, g·σ, u + 1 and the product are each rounded);
// at and beyond the clamps (gate above ℓ, up outside ±ℓ) the clamped
// values are used; a NaN stays NaN.
func TestClampedSwiGLU(t *testing.T) {
	const limit, alpha = float32(7), float32(1.702)
	gate := []float32{-20, -7.5, -1, -1e-3, 0, 0.3, 1, 6.999, 7, 7.001, 30, 2, -3, float32(math.NaN()), 1}
	up := []float32{0.5, -2, 3, 1, 4, -0.9, -7, 7, 8, -8, 100, -100, 6.5, 1, float32(math.NaN())}
	n := 9000 // beyond one chunk of the parallel loop
	for len(gate) < n {
		i := len(gate)
		gate = append(gate, float32(math.Sin(float64(i)))*9)
		up = append(up, float32(math.Cos(float64(i)*1.3))*9)
	}
	got := append([]float32(nil), gate...)
	clampedSwiGLU(got, up, limit, alpha)
	for i := range gate {
		g := math.Min(float64(gate[i]), float64(limit))
		u := math.Max(math.Min(float64(up[i]), float64(limit)), -float64(limit))
		ag := float64(float32(g) * alpha)
		want := (u + 1) * g / (1 + math.Exp(-ag))
		if math.IsNaN(float64(gate[i])) || math.IsNaN(float64(up[i])) {
			if !math.IsNaN(float64(got[i])) {
				t.Fatalf("gate %v, up %v: %v, want NaN", gate[i], up[i], got[i])
			}
			continue
		}
		if d := math.Abs(float64(got[i]) - want); d > 3*ulp32(want) {
			t.Fatalf("gate %v, up %v: %v, want %v (%.3g ulp)", gate[i], up[i], got[i], want, d/ulp32(want))
		}
	}
	// the clamps: gate 30 and up 100 give (7 + 1)·7·σ(11.914)
	if want := float32(8 * 7 / (1 + math.Exp(-float64(float32(7)*alpha)))); math.Abs(float64(got[10]-want)) > float64(2*ulp32(float64(want))) {
		t.Errorf("gate 30, up 100: %v, want the clamped %v", got[10], want)
	}
}

// TestGptOssConfig: the golden config.json parses to gpt-oss's block
// (window 16 on the even layers, YaRN factor 32 over 4096 positions with
// truncate false, θ 150000, biases, untied head, the top-k-first router
// with a bias and the clamped SwiGLU); GptOssConfig's defaults fill a
// config.json that leaves them out; what is not implemented or does not
// fit is refused by field name.
func TestGptOssConfig(t *testing.T) {
	dir := filepath.Join(goldenDir, "gpt_oss")
	base, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Skipf("golden case gpt_oss not present: %v", err)
	}
	c, err := ParseConfig(base)
	if err != nil {
		t.Fatal(err)
	}
	mc := c.MoE
	if c.Arch != ArchGptOss || c.Sliding != 16 || fmt.Sprint(c.SlidingLayers) != "[true false true false]" ||
		c.RoPE.Type != "yarn" || c.RoPE.Factor != 32 || c.RoPE.OrigMax != 4096 || !c.RoPE.NoTruncate || c.RoPE.Theta != 150000 ||
		!c.QKVBias || !c.OBias || c.TiedHead || c.NormEps != 1e-5 || c.DHead != 16 || c.KVHeads != 2 ||
		mc == nil || mc.Experts != 4 || mc.TopK != 2 || mc.DExpert != 64 || mc.Order != RouteTopKSoftmax || mc.Normalize ||
		!mc.RouterBias || mc.SwiGLULimit != 7 || mc.SwiGLUAlpha != 1.702 {
		t.Errorf("golden config parsed to %+v, MoE %+v", *c, mc)
	}

	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(base, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		data, _ := json.Marshal(m)
		return data
	}
	// the defaults: release RoPE, window 128 on the even layers, biases,
	// untied, ε 1e-5, head_dim 64 (not hidden_size/heads), k 4, ℓ 7
	d, err := ParseConfig(edit(func(m map[string]any) {
		for _, k := range []string{"rope_parameters", "sliding_window", "layer_types", "attention_bias", "tie_word_embeddings", "rms_norm_eps",
			"head_dim", "swiglu_limit", "num_experts_per_tok"} {
			delete(m, k)
		}
		m["max_position_embeddings"] = 4096
	}))
	if err != nil {
		t.Fatal(err)
	}
	if d.Sliding != 128 || fmt.Sprint(d.SlidingLayers) != "[true false true false]" || d.RoPE.Type != "yarn" || d.RoPE.Theta != 150000 ||
		!d.RoPE.NoTruncate || d.RoPE.BetaFast != 32 || !d.QKVBias || d.TiedHead || d.NormEps != 1e-5 || d.DHead != 64 ||
		d.MoE.TopK != 4 || d.MoE.SwiGLULimit != 7 {
		t.Errorf("defaults: %+v", *d)
	}
	// transformers 4's form: rope_scaling beside a top-level rope_theta;
	// swiglu_limit given
	o, err := ParseConfig(edit(func(m map[string]any) {
		rp := m["rope_parameters"].(map[string]any)
		delete(rp, "rope_theta")
		delete(m, "rope_parameters")
		m["rope_scaling"], m["rope_theta"], m["swiglu_limit"] = rp, 50000, 5
	}))
	if err != nil {
		t.Fatal(err)
	}
	if o.RoPE.Type != "yarn" || o.RoPE.Theta != 50000 || o.MoE.SwiGLULimit != 5 {
		t.Errorf("rope_scaling and rope_theta: %+v, limit %v", o.RoPE, o.MoE.SwiGLULimit)
	}

	for _, c := range []struct {
		edit func(m map[string]any)
		want string
	}{
		{func(m map[string]any) { m["quantization_config"] = map[string]any{"quant_method": "gptq"} }, `quantization_config.quant_method "gptq"`},
		{func(m map[string]any) { m["layer_types"] = []string{"sliding_attention"} }, "layer_types has 1 entries for num_hidden_layers 4"},
		{func(m map[string]any) {
			m["layer_types"] = []string{"full_attention", "chunked_attention", "full_attention", "full_attention"}
		}, `layer 1 is "chunked_attention"`},
		{func(m map[string]any) { m["sliding_window"] = nil }, "sliding_window is null but layer 0 is a sliding_attention layer"},
		{func(m map[string]any) { m["sliding_window"] = -3 }, "field sliding_window"},
		{func(m map[string]any) { m["swiglu_limit"] = 0 }, "swiglu_limit = 0"},
		{func(m map[string]any) { m["swiglu_alpha"] = -1 }, "swiglu_alpha = -1"},
		{func(m map[string]any) { m["num_experts_per_tok"] = 5 }, "num_experts_per_tok 5 exceeds the 4 experts"},
		{func(m map[string]any) { m["num_local_experts"] = 0 }, "num_local_experts = 0"},
		{func(m map[string]any) { delete(m, "num_key_value_heads") }, "num_attention_heads 4 is not a multiple of num_key_value_heads 8"},
		{func(m map[string]any) { m["rope_parameters"].(map[string]any)["rope_type"] = "ntk" }, `rope_type "ntk"`},
	} {
		_, err := ParseConfig(edit(c.edit))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %q, got %v", c.want, err)
		}
	}
}

// gptOssRef is an independent float64 forward pass of gpt-oss, read from
// a checkpoint's tensors under their Hugging Face names (Hugging Face's
// GptOssForCausalLM, eager): it returns the logits [B·T·V], the attention
// rows [L][B, H, T, T] without the sink column, the sink masses [L][B, H,
// T] and the selected experts [L][B·T·k].
func gptOssRef(c *Config, w map[string][]float64, ids [][]int) (logits []float64, attn, sink [][]float64, experts [][]int) {
	B, T := len(ids), len(ids[0])
	D, H, KV, dh, V := c.DModel, c.Heads, c.KVHeads, c.DHead, c.Vocab
	E, K, F := c.MoE.Experts, c.MoE.TopK, c.MoE.DExpert
	limit, alpha := float64(c.MoE.SwiGLULimit), float64(float32(c.MoE.SwiGLUAlpha))
	rms := func(x, g []float64) []float64 {
		var s float64
		for _, v := range x {
			s += v * v
		}
		r := 1 / math.Sqrt(s/float64(len(x))+c.NormEps)
		out := make([]float64, len(x))
		for i, v := range x {
			out[i] = v * r * g[i]
		}
		return out
	}
	// y = W·x + b for W [out, in] (nn.Linear)
	lin := func(name string, x []float64, out int, bias bool) []float64 {
		W, in := w[name+".weight"], len(x)
		y := make([]float64, out)
		for o := range y {
			for i, v := range x {
				y[o] += W[o*in+i] * v
			}
			if bias {
				y[o] += w[name+".bias"][o]
			}
		}
		return y
	}
	// YaRN (transformers' _compute_yarn_parameters, truncate false): the
	// inverse frequencies blend interpolation and extrapolation over a
	// linear ramp between the correction dimensions of beta_fast and
	// beta_slow; cos and sin are scaled by 0.1·ln(factor) + 1
	rc := c.RoPE
	half := dh / 2
	corr := func(rot float64) float64 {
		return float64(dh) * math.Log(float64(rc.OrigMax)/(rot*2*math.Pi)) / (2 * math.Log(rc.Theta))
	}
	lo, hi := math.Max(corr(rc.BetaFast), 0), math.Min(corr(rc.BetaSlow), float64(dh-1))
	if lo == hi {
		hi += 0.001
	}
	invFreq := make([]float64, half)
	for i := range invFreq {
		extra := 1 / math.Pow(rc.Theta, float64(2*i)/float64(dh))
		ramp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1)
		keep := 1 - ramp // the extrapolated share
		invFreq[i] = extra/rc.Factor*(1-keep) + extra*keep
	}
	af := 0.1*math.Log(rc.Factor) + 1
	rope := func(x []float64, t int) {
		for i := 0; i < half; i++ {
			a := float64(t) * invFreq[i]
			cs, sn := math.Cos(a)*af, math.Sin(a)*af
			x1, x2 := x[i], x[i+half]
			x[i], x[i+half] = x1*cs-x2*sn, x2*cs+x1*sn
		}
	}

	attn, sink, experts = make([][]float64, c.Layers), make([][]float64, c.Layers), make([][]int, c.Layers)
	for l := range attn {
		attn[l], sink[l] = make([]float64, B*H*T*T), make([]float64, B*H*T)
	}
	logits = make([]float64, B*T*V)
	for b, seq := range ids {
		x := make([][]float64, T)
		for t, id := range seq {
			x[t] = append([]float64(nil), w["model.embed_tokens.weight"][id*D:(id+1)*D]...)
		}
		for l := 0; l < c.Layers; l++ {
			p := fmt.Sprintf("model.layers.%d.", l)
			q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
			for t := range x {
				h := rms(x[t], w[p+"input_layernorm.weight"])
				q[t], k[t], v[t] = lin(p+"self_attn.q_proj", h, H*dh, true), lin(p+"self_attn.k_proj", h, KV*dh, true), lin(p+"self_attn.v_proj", h, KV*dh, true)
				for i := 0; i < H; i++ {
					rope(q[t][i*dh:(i+1)*dh], t)
				}
				for i := 0; i < KV; i++ {
					rope(k[t][i*dh:(i+1)*dh], t)
				}
			}
			window := 0
			if c.SlidingLayers[l] {
				window = c.Sliding
			}
			// each head's row: softmax over the visible keys and the sink
			// logit, the sink column dropped
			for t := range x {
				for i := 0; i < H; i++ {
					g := i / (H / KV)
					s := w[p+"self_attn.sinks"][i]
					m := s
					sc := make([]float64, t+1)
					for j := range sc {
						sc[j] = math.Inf(-1)
						if window == 0 || t-j < window {
							var dot float64
							for d := 0; d < dh; d++ {
								dot += q[t][i*dh+d] * k[j][g*dh+d]
							}
							sc[j] = dot / math.Sqrt(float64(dh))
							m = math.Max(m, sc[j])
						}
					}
					sum := math.Exp(s - m)
					for _, v := range sc {
						sum += math.Exp(v - m)
					}
					row := attn[l][((b*H+i)*T+t)*T:]
					for j, v := range sc {
						row[j] = math.Exp(v-m) / sum
					}
					sink[l][(b*H+i)*T+t] = math.Exp(s-m) / sum
				}
			}
			// z = Σ_j a_j·v_j per head
			zs := make([][]float64, T)
			for t := range x {
				zs[t] = make([]float64, H*dh)
				for i := 0; i < H; i++ {
					g := i / (H / KV)
					row := attn[l][((b*H+i)*T+t)*T:]
					for j := 0; j <= t; j++ {
						for d := 0; d < dh; d++ {
							zs[t][i*dh+d] += row[j] * v[j][g*dh+d]
						}
					}
				}
			}
			for t := range x {
				o := lin(p+"self_attn.o_proj", zs[t], D, true)
				for i := range o {
					x[t][i] += o[i]
				}
			}
			// the experts
			mp := p + "mlp."
			for t := range x {
				h := rms(x[t], w[p+"post_attention_layernorm.weight"])
				zr := lin(mp+"router", h, E, true)
				order := make([]int, E)
				for i := range order {
					order[i] = i
				}
				sort.SliceStable(order, func(a, b int) bool { return zr[order[a]] > zr[order[b]] })
				sel := order[:K]
				var den float64
				mx := zr[sel[0]]
				for _, e := range sel {
					den += math.Exp(zr[e] - mx)
				}
				gu, gub := w[mp+"experts.gate_up_proj"], w[mp+"experts.gate_up_proj_bias"]
				dn, dnb := w[mp+"experts.down_proj"], w[mp+"experts.down_proj_bias"]
				y := make([]float64, D)
				for _, e := range sel {
					experts[l] = append(experts[l], e)
					wt := math.Exp(zr[e]-mx) / den
					act := make([]float64, F)
					for f := 0; f < F; f++ {
						// gate_up [E, D, 2F] (in, out): gate column 2f, up 2f+1
						g, u := gub[e*2*F+2*f], gub[e*2*F+2*f+1]
						for i, hv := range h {
							g += hv * gu[(e*D+i)*2*F+2*f]
							u += hv * gu[(e*D+i)*2*F+2*f+1]
						}
						g = math.Min(g, limit)
						u = math.Max(math.Min(u, limit), -limit)
						act[f] = (u + 1) * g / (1 + math.Exp(-alpha*g))
					}
					for o := 0; o < D; o++ {
						s := dnb[e*D+o]
						for f, a := range act {
							s += a * dn[(e*F+f)*D+o] // down [E, F, D] (in, out)
						}
						y[o] += wt * s
					}
				}
				for i := range y {
					x[t][i] += y[i]
				}
			}
		}
		for t := range x {
			h := rms(x[t], w["model.norm.weight"])
			copy(logits[(b*T+t)*V:], lin("lm_head", h, V, false))
		}
	}
	return logits, attn, sink, experts
}

// mxfp4Quantize returns the MXFP4 blocks and scales of x, rows of cols
// (a multiple of 32) values: each block of 32 under the scale 2^e, e =
// ⌊log₂ max|x|⌋ − 2, each value the nearest E2M1 code (any rounding would
// do: the model's weights are the dequantized values).
func mxfp4Quantize(x []float32, cols int) (blocks, scales []uint8) {
	vals := []float64{0, 0.5, 1, 1.5, 2, 3, 4, 6}
	blocks, scales = make([]uint8, len(x)/2), make([]uint8, len(x)/32)
	for b := range scales {
		blk := x[b*32 : (b+1)*32]
		var mx float64
		for _, v := range blk {
			mx = math.Max(mx, math.Abs(float64(v)))
		}
		e := -127
		if mx > 0 {
			e = int(math.Floor(math.Log2(mx))) - 2
		}
		scales[b] = uint8(e + 127)
		for i, v := range blk {
			a, code := math.Abs(float64(v))/math.Ldexp(1, e), 0
			for c, q := range vals {
				if math.Abs(a-q) < math.Abs(a-vals[code]) {
					code = c
				}
			}
			if v < 0 && code != 0 {
				code |= 8
			}
			blocks[(b*32+i)/2] |= uint8(code) << (4 * (i % 2))
		}
	}
	return blocks, scales
}

// TestGptOssReference: generated gpt-oss models — windows smaller than T,
// several GQA ratios, experts and k, plain (in, out) expert tensors and
// the same experts as MXFP4 blocks, and the released layout (MXFP4
// experts, every other tensor bfloat16, sharded, quantization_config) —
// written as Hugging Face checkpoints,
// loaded, and run, equal an independent float64 forward pass over the
// written tensors (gptOssRef): logits, every layer's pattern and sink
// mass within 1e-4 of each tensor's max, the same experts for every
// token, in both builds.
func TestGptOssReference(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		size                    Size
		window, E, k            int
		T                       int
		mxfp4, slide0, released bool
	}{
		{"gqa4 window 5", Size{Layers: 3, DModel: 64, Heads: 8, KVHeads: 2, Vocab: 97, MaxPos: 256}, 5, 5, 3, 23, false, true, false},
		{"mha window 7 mxfp4", Size{Layers: 2, DModel: 96, Heads: 4, KVHeads: 4, Vocab: 61, MaxPos: 128}, 7, 4, 2, 30, true, true, false},
		{"mqa window 3 odd layers mxfp4", Size{Layers: 3, DModel: 64, Heads: 4, KVHeads: 1, Vocab: 50, MaxPos: 64}, 3, 6, 1, 17, true, false, false},
		{"released layout", Size{Layers: 2, DModel: 64, Heads: 8, KVHeads: 1, Vocab: 70, MaxPos: 128}, 4, 4, 2, 19, true, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := SmallConfig(ArchGptOss, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Sliding, cfg.MoE.Experts, cfg.MoE.TopK = tc.window, tc.E, tc.k
			for l := range cfg.SlidingLayers {
				cfg.SlidingLayers[l] = (l%2 == 0) == tc.slide0
			}
			_, tensors, err := Generate(cfg, 7+uint64(tc.T))
			if err != nil {
				t.Fatal(err)
			}
			w := map[string][]float64{}
			var out []checkpoint.Tensor
			for _, ts := range tensors {
				x := ts.Data.([]float32)
				// larger sinks and router biases than the generator's, so
				// that both matter
				if strings.HasSuffix(ts.Name, "sinks") || strings.HasSuffix(ts.Name, "router.bias") {
					for i := range x {
						x[i] = 2 * float32(math.Sin(float64(3*i+len(ts.Name))))
					}
				}
				if tc.mxfp4 && strings.Contains(ts.Name, "experts.") && !strings.HasSuffix(ts.Name, "_bias") {
					// stored [E, in, out]: the MXFP4 blocks are [E, out, in]
					E, in, outN := ts.Shape[0], ts.Shape[1], ts.Shape[2]
					tr := make([]float32, len(x))
					for e := 0; e < E; e++ {
						for i := 0; i < in; i++ {
							for o := 0; o < outN; o++ {
								tr[(e*outN+o)*in+i] = x[(e*in+i)*outN+o]
							}
						}
					}
					blocks, scales := mxfp4Quantize(tr, in)
					kern.DequantMXFP4(tr, blocks, scales, 0)
					for e := 0; e < E; e++ { // the model's weights: the dequantized values, (in, out)
						for i := 0; i < in; i++ {
							for o := 0; o < outN; o++ {
								x[(e*in+i)*outN+o] = tr[(e*outN+o)*in+i]
							}
						}
					}
					out = append(out,
						checkpoint.Tensor{Name: ts.Name + "_blocks", Shape: []int{E, outN, in / 32, 16}, Data: blocks},
						checkpoint.Tensor{Name: ts.Name + "_scales", Shape: []int{E, outN, in / 32}, Data: scales})
				} else {
					if tc.released { // bfloat16, as released
						bits, _ := checkpoint.Convert(x, "BF16")
						for i, b := range bits.(checkpoint.BFloat16) {
							x[i] = checkpoint.BF16ToFloat32(b)
						}
						ts.Data = bits
					}
					out = append(out, ts)
				}
				w[ts.Name] = make([]float64, len(x))
				for i, v := range x {
					w[ts.Name][i] = float64(v)
				}
			}
			dir := t.TempDir()
			if err := WriteHF(dir, cfg, out); err != nil {
				t.Fatal(err)
			}
			if tc.released {
				os.Remove(filepath.Join(dir, "model.safetensors"))
				if _, err := checkpoint.WriteSharded(dir, out, 40000, map[string]string{"format": "pt"}); err != nil {
					t.Fatal(err)
				}
				data, _ := os.ReadFile(filepath.Join(dir, "config.json"))
				var m map[string]any
				json.Unmarshal(data, &m)
				m["quantization_config"] = map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}}
				data, _ = json.Marshal(m)
				os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
			}
			m, err := Load(dir, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want := "[F32]"
			if tc.mxfp4 {
				want = "[F32 MXFP4]"
			}
			if tc.released {
				want = "[BF16 MXFP4]"
				if len(m.Files) < 3 {
					t.Errorf("read %d files, want the shards", len(m.Files))
				}
			}
			if got := fmt.Sprint(m.DTypes); got != want {
				t.Errorf("stored dtypes %s, want %s", got, want)
			}
			ids := make([][]int, 2)
			for b := range ids {
				ids[b] = make([]int, tc.T)
				for i := range ids[b] {
					ids[b][i] = (i*i*7 + b*13 + 3*i) % cfg.Vocab
				}
			}
			hs := &hooks.Set{}
			capt := hs.Capture("blocks.*.attn.hook_pattern", "blocks.*.attn.hook_sink_mass", "blocks.*.mlp.hook_expert_indices")
			res, err := m.Forward(ids, Options{Hooks: hs, Logits: true, TileRows: 4})
			if err != nil {
				t.Fatal(err)
			}
			logits, attn, sink, experts := gptOssRef(&m.Config, w, ids)
			check := func(what string, got []float32, want []float64) {
				t.Helper()
				var maxRef, maxDiff float64
				for i, v := range want {
					maxRef = math.Max(maxRef, math.Abs(v))
					maxDiff = math.Max(maxDiff, math.Abs(float64(got[i])-v))
				}
				if len(got) != len(want) || !(maxDiff <= 1e-4*maxRef) {
					t.Errorf("%s: max |Δ| %.3g of max %.3g (%d values, reference %d)", what, maxDiff, maxRef, len(got), len(want))
				}
			}
			check("logits", res.Logits, logits)
			for l := range attn {
				check(fmt.Sprintf("pattern %d", l), capt.Get(hooks.Name(hooks.AttnPattern, l)).Data().([]float32), attn[l])
				check(fmt.Sprintf("sink mass %d", l), capt.Get(hooks.Name(hooks.AttnSinkMass, l)).Data().([]float32), sink[l])
				got := capt.Get(hooks.Name(hooks.MLPExpertIndices, l)).Data().([]float32)
				for i, e := range experts[l] {
					if got[i] != float32(e) {
						t.Fatalf("layer %d token %d slot %d: expert %v, reference %d", l, i/tc.k, i%tc.k, got[i], e)
					}
				}
			}
		})
	}
}

// TestGptOssMXFP4SameBits: the gpt_oss and gpt_oss_mxfp4 golden
// checkpoints hold the same expert values, as float32 (in, out) tensors
// and as MXFP4 blocks; loaded, the two give the same logits bit for bit
// in the float32 arithmetic and in bf16 (MXFP4 values are bfloat16
// values), the MXFP4 one holding its experts in 17/32 bytes a weight.
func TestGptOssMXFP4SameBits(t *testing.T) {
	plainDir, fp4Dir := filepath.Join(goldenDir, "gpt_oss"), filepath.Join(goldenDir, "gpt_oss_mxfp4")
	if _, err := os.Stat(fp4Dir); err != nil {
		t.Skipf("golden case gpt_oss_mxfp4 not present: %v", err)
	}
	for _, cmp := range []Compute{ComputeF32, ComputeBF16} {
		plain, err := Load(plainDir, LoadOptions{Compute: cmp})
		if err != nil {
			t.Fatal(err)
		}
		fp4, err := Load(fp4Dir, LoadOptions{Compute: cmp})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(fp4.DTypes) != "[F32 MXFP4]" {
			t.Errorf("%s: stored dtypes %v, want [F32 MXFP4]", cmp, fp4.DTypes)
		}
		c := fp4.Config
		experts := int64(c.Layers) * int64(c.MoE.Experts) * int64(3*c.DModel*c.MoE.DExpert)
		if cmp == ComputeF32 {
			if d := plain.WeightBytes - fp4.WeightBytes; d != 4*experts-experts*17/32 {
				t.Errorf("WeightBytes %d (plain) and %d (MXFP4): %d apart, want the experts' 4 − 17/32 bytes a weight, %d", plain.WeightBytes, fp4.WeightBytes, d, 4*experts-experts*17/32)
			}
		}
		g := openGolden(t, plainDir)
		a, err := plain.Forward(g.ids(t), Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := fp4.Forward(g.ids(t), Options{Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := range a.Logits {
			if math.Float32bits(a.Logits[i]) != math.Float32bits(b.Logits[i]) {
				if BLAS() == "gonum+avx512" || cmp == ComputeBF16 {
					t.Fatalf("%s: logit %d is %v from MXFP4 experts, %v from the same values in float32", cmp, i, b.Logits[i], a.Logits[i])
				}
				checkClose(t, string(cmp)+" logits (MXFP4 vs float32 experts)", b.Logits, a.Logits)
				break
			}
		}
	}
}
