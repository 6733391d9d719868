package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
)

// qwen35Dir is the Qwen3.5 golden case (HF transformers, hybrid Gated
// DeltaNet + gated softmax attention; layers 0–2 are DeltaNet).
var qwen35Dir = filepath.Join(goldenDir, "qwen35_text")

// Absolute tolerances recommended by the case's README.
const (
	tolDeltaCore  = 3e-5 // q, k, beta, g, core_out, final_state, eff_attn
	tolDeltaWide  = 2e-4 // v, out
	qwen35GDNLast = 2    // layers 0…2 are linear_attention
)

// openQwen35 opens the case's golden and model files, or skips.
func openQwen35(t *testing.T) (gold, weights *checkpoint.Checkpoint) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(qwen35Dir, "golden.safetensors")); err != nil {
		t.Skipf("golden data not available at %s (it comes with ../shared in CI): %v", qwen35Dir, err)
	}
	var err error
	if gold, err = checkpoint.OpenFile(filepath.Join(qwen35Dir, "golden.safetensors")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gold.Close() })
	if weights, err = checkpoint.OpenFile(filepath.Join(qwen35Dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { weights.Close() })
	return gold, weights
}

func mustF32(t *testing.T, ck *checkpoint.Checkpoint, name string) []float32 {
	t.Helper()
	x, err := ck.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// maxAbsDiff returns max|got − ref| and its flat index (NaN counts as worst).
func maxAbsDiff(got, ref []float32) (float64, int) {
	var worst float64
	at := 0
	for i := range ref {
		d := math.Abs(float64(got[i]) - float64(ref[i]))
		if d > worst || math.IsNaN(d) {
			worst, at = d, i
			if math.IsNaN(d) {
				return math.NaN(), i
			}
		}
	}
	return worst, at
}

// checkAbs fails when got and ref differ by more than tol anywhere; it
// logs the error either way.
func checkAbs(t *testing.T, what string, got, ref []float32, tol float64) {
	t.Helper()
	if len(got) != len(ref) {
		t.Errorf("%s: %d values, reference has %d", what, len(got), len(ref))
		return
	}
	d, i := maxAbsDiff(got, ref)
	t.Logf("%s: max abs error %.2g", what, d)
	if !(d <= tol) {
		t.Errorf("%s: max abs error %.3g > %.0e at flat index %d (got %v, want %v)", what, d, tol, i, got[i], ref[i])
	}
}

// headMajor gathers x [B, T, H] into [B, H, T].
func headMajor(x []float32, B, T, H int) []float32 {
	y := make([]float32, len(x))
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			for h := 0; h < H; h++ {
				y[(b*H+h)*T+t] = x[(b*T+t)*H+h]
			}
		}
	}
	return y
}

// deltaForm is one way to run the delta rule: recurrent (chunk < 0) or
// chunked.
type deltaForm struct {
	name  string
	chunk int
}

var deltaForms = []deltaForm{{"recurrent", -1}, {"chunk8", 8}, {"chunk16", 16}, {"chunk64", 64}}

func (f deltaForm) run(o, S, q, k, v, beta, g []float32, T, dk, dv int, scale float32) {
	if f.chunk < 0 {
		deltaRuleRecurrent(o, S, q, k, v, beta, g, T, dk, dv, scale)
		return
	}
	deltaRuleChunked(o, S, q, k, v, beta, g, T, dk, dv, scale, f.chunk, nil)
}

// streamW collects deltaRuleAttention's tiles into a full [T, T] matrix and
// checks the tile contract: consecutive tiles of tile rows, width ≥ t0+n,
// zeros above the diagonal.
func streamW(t *testing.T, q, k, beta, g []float32, T, dk int, scale float32, tile, chunk int) []float32 {
	t.Helper()
	W := make([]float32, T*T)
	next := 0
	err := deltaRuleAttention(q, k, beta, g, T, dk, scale, tile, chunk, func(t0, n, width int, rows []float32) error {
		if t0 != next || n < 1 || n > tile || (n < tile && t0+n != T) || width < t0+n || width > T || len(rows) != n*width {
			return fmt.Errorf("tile t0=%d n=%d width=%d len=%d after row %d (tile %d, T %d)", t0, n, width, len(rows), next, tile, T)
		}
		for r := 0; r < n; r++ {
			for s := t0 + r + 1; s < width; s++ {
				if rows[r*width+s] != 0 {
					return fmt.Errorf("W[%d,%d] = %v above the diagonal", t0+r, s, rows[r*width+s])
				}
			}
			copy(W[(t0+r)*T:], rows[r*width:(r+1)*width])
		}
		next = t0 + n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != T {
		t.Fatalf("tiles ended at row %d of %d", next, T)
	}
	return W
}

// TestDeltaRuleGolden: from the golden q, k, v, β, g of the three DeltaNet
// layers, the recurrent and chunked forms give HF's core_out and S_T, and
// the streamed W equals the closed-form eff_attn, within 3e-5.
func TestDeltaRuleGolden(t *testing.T) {
	gold, _ := openQwen35(t)
	for l := 0; l <= qwen35GDNLast; l++ {
		info, _ := gold.Info(fmt.Sprintf("q.%d", l))
		B, H, T, dk := info.Shape[0], info.Shape[1], info.Shape[2], info.Shape[3]
		q, k, v := mustF32(t, gold, fmt.Sprintf("q.%d", l)), mustF32(t, gold, fmt.Sprintf("k.%d", l)), mustF32(t, gold, fmt.Sprintf("v.%d", l))
		dv := len(v) / (B * H * T)
		beta := headMajor(mustF32(t, gold, fmt.Sprintf("beta.%d", l)), B, T, H)
		g := headMajor(mustF32(t, gold, fmt.Sprintf("g.%d", l)), B, T, H)
		refO, refS := mustF32(t, gold, fmt.Sprintf("core_out.%d", l)), mustF32(t, gold, fmt.Sprintf("final_state.%d", l))
		refW := mustF32(t, gold, fmt.Sprintf("eff_attn.%d", l))
		scale := float32(1 / math.Sqrt(float64(dk)))
		for _, f := range deltaForms {
			o, S := make([]float32, len(refO)), make([]float32, len(refS))
			for i := 0; i < B*H; i++ {
				f.run(o[i*T*dv:(i+1)*T*dv], S[i*dk*dv:(i+1)*dk*dv], q[i*T*dk:(i+1)*T*dk], k[i*T*dk:(i+1)*T*dk],
					v[i*T*dv:(i+1)*T*dv], beta[i*T:(i+1)*T], g[i*T:(i+1)*T], T, dk, dv, scale)
			}
			checkAbs(t, fmt.Sprintf("layer %d %s core_out", l, f.name), o, refO, tolDeltaCore)
			checkAbs(t, fmt.Sprintf("layer %d %s final_state", l, f.name), S, refS, tolDeltaCore)
		}
		for _, tile := range []int{1, 7, 64} {
			for _, chunk := range []int{8, 16, 0} {
				W := make([]float32, len(refW))
				for i := 0; i < B*H; i++ {
					copy(W[i*T*T:], streamW(t, q[i*T*dk:(i+1)*T*dk], k[i*T*dk:(i+1)*T*dk], beta[i*T:(i+1)*T], g[i*T:(i+1)*T], T, dk, scale, tile, chunk))
				}
				checkAbs(t, fmt.Sprintf("layer %d eff_attn tile %d chunk %d", l, tile, chunk), W, refW, tolDeltaCore)
			}
		}
	}
}

// loadDeltaNet reads layer l's Gated DeltaNet weights of the Qwen3.5 case.
func loadDeltaNet(t *testing.T, ck *checkpoint.Checkpoint, l int) *deltaNet {
	t.Helper()
	p := fmt.Sprintf("model.layers.%d.linear_attn.", l)
	w := &deltaNet{D: 64, Hk: 4, Dk: 16, Hv: 8, Dv: 16, K: 4, Eps: 1e-6,
		QKV: f32Weight(mustF32(t, ck, p+"in_proj_qkv.weight"), 64), Z: f32Weight(mustF32(t, ck, p+"in_proj_z.weight"), 64),
		B: f32Weight(mustF32(t, ck, p+"in_proj_b.weight"), 64), A: f32Weight(mustF32(t, ck, p+"in_proj_a.weight"), 64),
		Conv: mustF32(t, ck, p+"conv1d.weight"), DtBias: mustF32(t, ck, p+"dt_bias"), ALog: mustF32(t, ck, p+"A_log"),
		Norm: mustF32(t, ck, p+"norm.weight"), Out: f32Weight(mustF32(t, ck, p+"out_proj.weight"), 8*16)}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestGatedDeltaNetGolden: the whole token mixer of layers 0–2, from the
// golden residual stream hidden.l through the layer's (1+w) input RMSNorm,
// reproduces HF's q, k, v, β, g, core_out, S_T and out.l, for the recurrent
// and the chunked form.
func TestGatedDeltaNetGolden(t *testing.T) {
	gold, weights := openQwen35(t)
	info, _ := gold.Info("hidden.0")
	B, T, D := info.Shape[0], info.Shape[1], info.Shape[2]
	for l := 0; l <= qwen35GDNLast; l++ {
		hidden := mustF32(t, gold, fmt.Sprintf("hidden.%d", l))
		lnw := mustF32(t, weights, fmt.Sprintf("model.layers.%d.input_layernorm.weight", l))
		w1 := make([]float32, D)
		for i, x := range lnw {
			w1[i] = 1 + x
		}
		x := make([]float32, len(hidden))
		rmsNorm(x, hidden, D, w1, 1e-6)
		w := loadDeltaNet(t, weights, l)
		for _, chunk := range []int{-1, 0, 16} {
			w.Chunk = chunk
			got := map[string][]float32{}
			run := func(point string, l int, x []float32, shape ...int) {
				got[hooks.Name(point, l)] = append([]float32(nil), x...)
			}
			out := make([]float32, B*T*D)
			if err := gatedDeltaNet(out, x, nil, B, T, w, l, run, Options{}); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				hook, key string
				tol       float64
			}{
				{"blocks.%d.gdn.hook_q", "q.%d", tolDeltaCore}, {"blocks.%d.gdn.hook_k", "k.%d", tolDeltaCore},
				{"blocks.%d.gdn.hook_v", "v.%d", tolDeltaWide}, {"blocks.%d.gdn.hook_beta", "beta.%d", tolDeltaCore},
				{"blocks.%d.gdn.hook_g", "g.%d", tolDeltaCore}, {"blocks.%d.gdn.hook_core_out", "core_out.%d", tolDeltaCore},
				{"blocks.%d.gdn.hook_final_state", "final_state.%d", tolDeltaCore},
			} {
				checkAbs(t, fmt.Sprintf(c.hook+" (chunk %d)", l, chunk), got[fmt.Sprintf(c.hook, l)], mustF32(t, gold, fmt.Sprintf(c.key, l)), c.tol)
			}
			checkAbs(t, fmt.Sprintf("layer %d output (chunk %d)", l, chunk), out, mustF32(t, gold, fmt.Sprintf("out.%d", l)), tolDeltaWide)
		}
	}
}

// randomDeltaInputs returns unit q, k [T, dk], v [T, dv], β in (0.05,
// 0.95) and g = log of a decay in (0.5, 1).
func randomDeltaInputs(r *rand.Rand, T, dk, dv int) (q, k, v, beta, g []float32) {
	q, k, v = make([]float32, T*dk), make([]float32, T*dk), make([]float32, T*dv)
	beta, g = make([]float32, T), make([]float32, T)
	for i := range q {
		q[i], k[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
	}
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	for t := 0; t < T; t++ {
		l2NormalizeEps(q[t*dk:(t+1)*dk], q[t*dk:(t+1)*dk])
		l2NormalizeEps(k[t*dk:(t+1)*dk], k[t*dk:(t+1)*dk])
		beta[t] = float32(0.05 + 0.9*r.Float64())
		g[t] = float32(math.Log(0.5 + 0.5*r.Float64()))
	}
	return q, k, v, beta, g
}

// TestDeltaRuleChunkedEqualsRecurrent: the chunked form is the recurrence,
// for T below, at and across chunk boundaries (chunk 16 and 64).
func TestDeltaRuleChunkedEqualsRecurrent(t *testing.T) {
	const dk, dv = 16, 24
	scale := float32(1 / math.Sqrt(dk))
	for _, T := range []int{1, 63, 64, 65, 200} {
		r := rand.New(rand.NewPCG(uint64(T), 7))
		q, k, v, beta, g := randomDeltaInputs(r, T, dk, dv)
		o0, s0 := make([]float32, T*dv), make([]float32, dk*dv)
		deltaRuleRecurrent(o0, s0, q, k, v, beta, g, T, dk, dv, scale)
		for _, chunk := range []int{16, 64} {
			o, s := make([]float32, T*dv), make([]float32, dk*dv)
			deltaRuleChunked(o, s, q, k, v, beta, g, T, dk, dv, scale, chunk, nil)
			checkAbs(t, fmt.Sprintf("T=%d chunk %d output", T, chunk), o, o0, 2e-5)
			checkAbs(t, fmt.Sprintf("T=%d chunk %d state", T, chunk), s, s0, 2e-5)
		}
	}
}

// TestDeltaRuleOutputOverQ: with dk = dv both forms may write their output
// over q (gatedDeltaNet does, to hold one buffer less at long T); the
// result is bit for bit that of a separate output buffer, across chunk
// boundaries.
func TestDeltaRuleOutputOverQ(t *testing.T) {
	const dk = 16
	scale := float32(1 / math.Sqrt(dk))
	for _, T := range []int{1, 63, 65, 200} {
		r := rand.New(rand.NewPCG(uint64(T), 11))
		q, k, v, beta, g := randomDeltaInputs(r, T, dk, dk)
		for _, chunk := range []int{-1, 16, 64} {
			run := func(o, q []float32) []float32 {
				s := make([]float32, dk*dk)
				if chunk < 0 {
					deltaRuleRecurrent(o, s, q, k, v, beta, g, T, dk, dk, scale)
				} else {
					deltaRuleChunked(o, s, q, k, v, beta, g, T, dk, dk, scale, chunk, nil)
				}
				return s
			}
			want := make([]float32, T*dk)
			s0 := run(want, q)
			qo := slices.Clone(q)
			s1 := run(qo, qo)
			if !slices.Equal(qo, want) || !slices.Equal(s1, s0) {
				t.Errorf("T=%d chunk %d: output written over q differs from a separate buffer", T, chunk)
			}
		}
	}
}

// TestDeltaRuleIdentities checks the limits of the delta rule: with β = 1
// and g = −∞ nothing is remembered (o_t = scale·(q_t·k_t)·v_t, W diagonal);
// with β = 0 nothing is written (o = 0, W = 0); and on random inputs the
// streamed W reproduces the output, W·v = o.
func TestDeltaRuleIdentities(t *testing.T) {
	const T, dk, dv = 200, 16, 8
	scale := float32(1 / math.Sqrt(dk))
	r := rand.New(rand.NewPCG(1, 2))
	q, k, v, beta, g := randomDeltaInputs(r, T, dk, dv)
	fill := func(x []float32, c float32) []float32 {
		y := make([]float32, len(x))
		for i := range y {
			y[i] = c
		}
		return y
	}
	for _, c := range []struct {
		name    string
		beta, g []float32
		wantW   func(t, s int) float32 // nil: W·v = o only
	}{
		{"no memory (β=1, g=−∞)", fill(beta, 1), fill(g, float32(math.Inf(-1))), func(t, s int) float32 {
			if s != t {
				return 0
			}
			var qk float32
			for i := 0; i < dk; i++ {
				qk += q[t*dk+i] * k[t*dk+i]
			}
			return scale * qk
		}},
		{"no writes (β=0)", fill(beta, 0), g, func(t, s int) float32 { return 0 }},
		{"random", beta, g, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, f := range []deltaForm{{"recurrent", -1}, {"chunk16", 16}} {
				o, S := make([]float32, T*dv), make([]float32, dk*dv)
				f.run(o, S, q, k, v, c.beta, c.g, T, dk, dv, scale)
				for _, tile := range []int{7, 16} {
					W := streamW(t, q, k, c.beta, c.g, T, dk, scale, tile, 16)
					wv := make([]float32, T*dv) // W·v in float64
					for i := 0; i < T; i++ {
						for j := 0; j < dv; j++ {
							var s float64
							for m := 0; m <= i; m++ {
								s += float64(W[i*T+m]) * float64(v[m*dv+j])
							}
							wv[i*dv+j] = float32(s)
						}
					}
					checkAbs(t, fmt.Sprintf("%s tile %d W·v vs o", f.name, tile), wv, o, 2e-5)
					if c.wantW == nil {
						continue
					}
					want := make([]float32, T*T)
					wantO := make([]float32, T*dv)
					for i := 0; i < T; i++ {
						for s := 0; s < T; s++ {
							want[i*T+s] = c.wantW(i, s)
						}
						for j := 0; j < dv; j++ {
							wantO[i*dv+j] = want[i*T+i] * v[i*dv+j]
						}
					}
					checkAbs(t, f.name+" W", W, want, 1e-6)
					checkAbs(t, f.name+" o", o, wantO, 1e-6)
				}
			}
		})
	}
}

// BenchmarkDeltaRule compares the recurrent and chunked forms for one head
// of Qwen3.5-0.8B's shape (dk = dv = 128) at T = 4096.
func BenchmarkDeltaRule(b *testing.B) {
	const T, dk, dv = 4096, 128, 128
	q, k, v, beta, g := randomDeltaInputs(rand.New(rand.NewPCG(3, 4)), T, dk, dv)
	scale := float32(1 / math.Sqrt(dk))
	o, S := make([]float32, T*dv), make([]float32, dk*dv)
	for _, f := range []deltaForm{{"recurrent", -1}, {"chunk32", 32}, {"chunk64", 64}, {"chunk128", 128}} {
		b.Run(f.name, func(b *testing.B) {
			ws := newDeltaChunk(max(f.chunk, 1), dk, dv)
			for b.Loop() {
				clear(S)
				if f.chunk < 0 {
					deltaRuleRecurrent(o, S, q, k, v, beta, g, T, dk, dv, scale)
				} else {
					deltaRuleChunked(o, S, q, k, v, beta, g, T, dk, dv, scale, f.chunk, ws)
				}
			}
		})
	}
}

// BenchmarkDeltaRuleAttention streams W for one head (dk = 128) at T = 4096.
func BenchmarkDeltaRuleAttention(b *testing.B) {
	const T, dk = 4096, 128
	q, k, _, beta, g := randomDeltaInputs(rand.New(rand.NewPCG(5, 6)), T, dk, 1)
	scale := float32(1 / math.Sqrt(dk))
	for _, chunk := range []int{64, 128} {
		b.Run(fmt.Sprintf("chunk%d", chunk), func(b *testing.B) {
			for b.Loop() {
				if err := deltaRuleAttention(q, k, beta, g, T, dk, scale, 64, chunk, func(t0, n, width int, rows []float32) error { return nil }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestDeltaNetCheck: a weight of the wrong length is reported by its HF
// name, and value heads that are not a multiple of key heads are refused.
func TestDeltaNetCheck(t *testing.T) {
	ok := func() *deltaNet {
		D, Hk, Dk, Hv, Dv, K := 8, 2, 4, 4, 3, 4
		C := 2*Hk*Dk + Hv*Dv
		return &deltaNet{D: D, Hk: Hk, Dk: Dk, Hv: Hv, Dv: Dv, K: K, Eps: 1e-6,
			QKV: f32Weight(make([]float32, C*D), D), Z: f32Weight(make([]float32, Hv*Dv*D), D),
			B: f32Weight(make([]float32, Hv*D), D), A: f32Weight(make([]float32, Hv*D), D),
			Conv: make([]float32, C*K), DtBias: make([]float32, Hv), ALog: make([]float32, Hv), Norm: make([]float32, Dv),
			Out: f32Weight(make([]float32, D*Hv*Dv), Hv*Dv)}
	}
	if err := ok().check(); err != nil {
		t.Fatalf("valid weights: %v", err)
	}
	for _, c := range []struct {
		want  string
		spoil func(w *deltaNet)
	}{
		{"conv1d.weight", func(w *deltaNet) { w.Conv = w.Conv[1:] }},
		{"in_proj_qkv.weight", func(w *deltaNet) { w.QKV.Rows-- }},
		{"out_proj.weight", func(w *deltaNet) { w.Out.Cols++ }},
		{"norm.weight", func(w *deltaNet) { w.Norm = append(w.Norm, 1) }},
		{"linear_num_value_heads", func(w *deltaNet) { w.Hk = 3 }},
	} {
		w := ok()
		c.spoil(w)
		if err := w.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("broken %s: error %v, want one naming %s", c.want, err, c.want)
		}
	}
}
