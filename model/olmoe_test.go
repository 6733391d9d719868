package model

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// TestOLMoEClipQKV: with clip_qkv c the golden OLMoE checkpoint's first
// layer attends as OlmoeAttention does — q = clamp(q_norm(h W_qᵀ)), k =
// clamp(k_norm(h W_kᵀ)), v = clamp(h W_vᵀ) with clamp to [−c, c], then
// RoPE, softmax(q·k/√d_h) and z = Σ α v — recomputed here in float64 from
// the safetensors weights and the layer's normalized input: hook_pattern
// and hook_z agree within 1e-5, and differ from the unclipped model's.
func TestOLMoEClipQKV(t *testing.T) {
	const clip = 0.9
	dir := brokenDir(t, "olmoe", func(cfg map[string]any) { cfg["clip_qkv"] = clip })
	src := filepath.Join(goldenDir, "olmoe")
	m, err := Load(dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m.ClipQKV != clip {
		t.Fatalf("ClipQKV %v, want %v", m.ClipQKV, clip)
	}
	plain, err := Load(src, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const T = 20
	ids := make([]int, T)
	for i := range ids {
		ids[i] = (13*i + 5) % m.Vocab
	}
	run := func(m *Model) *hooks.Capture {
		hs := &hooks.Set{}
		cp := hs.Capture(hooks.Name(hooks.LN1Normalized, 0), hooks.Name(hooks.AttnPattern, 0), hooks.Name(hooks.AttnZ, 0))
		if _, err := m.Forward([][]int{ids}, Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
		return cp
	}
	cp, cp0 := run(m), run(plain)
	ck, err := checkpoint.OpenFile(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	w := func(name string) []float32 {
		x, err := ck.Float32("model.layers.0.self_attn." + name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	D, H, KV, dh := m.DModel, m.Heads, m.KVHeads, m.DHead
	h := cp.Get(hooks.Name(hooks.LN1Normalized, 0)).Data().([]float32)
	proj := func(W []float32, rows int, norm []float32) [][]float64 {
		out := make([][]float64, T)
		for t := range out {
			y := make([]float64, rows)
			for r := range y {
				for i := 0; i < D; i++ {
					y[r] += float64(h[t*D+i]) * float64(W[r*D+i])
				}
			}
			if norm != nil { // RMSNorm over the whole projection
				var ss float64
				for _, v := range y {
					ss += v * v
				}
				s := 1 / math.Sqrt(ss/float64(rows)+1e-5)
				for r := range y {
					y[r] *= s * float64(norm[r])
				}
			}
			for r := range y {
				y[r] = math.Min(math.Max(y[r], -clip), clip)
			}
			out[t] = y
		}
		return out
	}
	q, k, v := proj(w("q_proj.weight"), H*dh, w("q_norm.weight")), proj(w("k_proj.weight"), KV*dh, w("k_norm.weight")), proj(w("v_proj.weight"), KV*dh, nil)
	rope := func(x []float64, t int) {
		half := dh / 2
		for i := 0; i < half; i++ {
			ang := float64(t) * math.Pow(1e4, -2*float64(i)/float64(dh))
			c, s := math.Cos(ang), math.Sin(ang)
			a, b := x[i], x[i+half]
			x[i], x[i+half] = a*c-b*s, b*c+a*s
		}
	}
	for t := 0; t < T; t++ {
		for i := 0; i < H; i++ {
			rope(q[t][i*dh:(i+1)*dh], t)
		}
		for i := 0; i < KV; i++ {
			rope(k[t][i*dh:(i+1)*dh], t)
		}
	}
	pat := cp.Get(hooks.Name(hooks.AttnPattern, 0)).Data().([]float32)
	pat0 := cp0.Get(hooks.Name(hooks.AttnPattern, 0)).Data().([]float32)
	z := cp.Get(hooks.Name(hooks.AttnZ, 0)).Data().([]float32)
	worst, moved := 0.0, 0.0
	for i := 0; i < H; i++ {
		kv := i / (H / KV)
		for t := 0; t < T; t++ {
			s := make([]float64, t+1)
			mx := math.Inf(-1)
			for j := range s {
				for d := 0; d < dh; d++ {
					s[j] += q[t][i*dh+d] * k[j][kv*dh+d]
				}
				s[j] /= math.Sqrt(float64(dh))
				mx = math.Max(mx, s[j])
			}
			var sum float64
			for j := range s {
				s[j] = math.Exp(s[j] - mx)
				sum += s[j]
			}
			for j := range s {
				a := s[j] / sum
				got := float64(pat[(i*T+t)*T+j])
				worst = math.Max(worst, math.Abs(got-a))
				moved = math.Max(moved, math.Abs(float64(pat0[(i*T+t)*T+j])-a))
			}
			for d := 0; d < dh; d++ {
				var want float64
				for j := range s {
					want += s[j] / sum * v[j][kv*dh+d]
				}
				worst = math.Max(worst, math.Abs(float64(z[(t*H+i)*dh+d])-want))
			}
		}
	}
	t.Logf("clip_qkv %v: worst |Δ| to the float64 recomputation %.1e; the unclipped pattern lies %.2f away", clip, worst, moved)
	if worst > 1e-5 {
		t.Fatalf("clipped attention differs from OlmoeAttention's recomputation by %.3g", worst)
	}
	if moved < 1e-3 {
		t.Fatalf("clip_qkv %v changed no weight (the unclipped pattern is within %.3g): the test clips nothing", clip, moved)
	}
}
