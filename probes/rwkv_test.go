package probes

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestRWKVRuleFilterHand: two steps of the generalised delta rule with
// N = 2, computed by hand. Step 0 writes v_0 k_0ᵀ = [[3, 6], [4, 8]] into
// the empty state (innovation ‖v_0‖ = 5 in either form). Step 1 reads
// S_0κ̂_1 = (6.6, 8.8) and S_0 diag(w_1) κ̂_1 = (3.3, 4.4), so the
// innovation is ‖(1, 0) − (3.3, 4.4)‖ = √24.65 (decayed) or
// ‖(1, 0) − (6.6, 8.8)‖ = √108.8 (undecayed), and with a_1 ⊙ κ̂_1 =
// (0.6, 0.4) the state becomes [[−2.46, 1.36], [−3.28, 0.48]], norm
// √18.89. The summaries: gain Σ κ̂² a = 0.5, 0.68 (mean 0.5, 0.75);
// decay √(0.5·0.8), 0.5 (mean 0.65, 0.5; min 0.5; max 0.8, 0.5).
func TestRWKVRuleFilterHand(t *testing.T) {
	const T, N = 2, 2
	w := []float32{0.5, 0.8, 0.5, 0.5}
	kk := []float32{1, 0, 0.6, 0.8}
	a := []float32{0.5, 0.5, 1, 0.5}
	k := []float32{1, 2, 0, 1}
	v := []float32{3, 4, 1, 0}
	for _, c := range []struct {
		form      InnovationForm
		innov     [T]float64
		stateNorm [T]float64
	}{
		{InnovationDecayed, [T]float64{5, math.Sqrt(24.65)}, [T]float64{math.Sqrt(125), math.Sqrt(18.89)}},
		{InnovationUndecayed, [T]float64{5, math.Sqrt(108.8)}, [T]float64{math.Sqrt(125), math.Sqrt(18.89)}},
	} {
		innov, sn, S := make([]float64, T), make([]float64, T), make([]float64, N*N)
		RWKVRuleFilter(innov, sn, S, w, k, v, kk, a, 0, T, N, N, c.form)
		for tt := 0; tt < T; tt++ {
			if math.Abs(innov[tt]-c.innov[tt]) > 1e-6 || math.Abs(sn[tt]-c.stateNorm[tt]) > 1e-6 {
				t.Errorf("%v step %d: innovation %v, state norm %v; want %v, %v", c.form, tt, innov[tt], sn[tt], c.innov[tt], c.stateNorm[tt])
			}
		}
		for i, want := range []float64{-2.46, 1.36, -3.28, 0.48} {
			if math.Abs(S[i]-want) > 1e-6 { // 0.6, 0.8 are not exact in float32
				t.Errorf("%v: S_T[%d] = %v, want %v", c.form, i, S[i], want)
			}
		}
	}
	for _, c := range []struct {
		name string
		of   func(t int) float64
		want [T]float64
	}{
		{"gain removal", func(t int) float64 { return GainRemoval.Of(a[t*N:(t+1)*N], kk[t*N:(t+1)*N]) }, [T]float64{0.5, 0.68}},
		{"gain mean", func(t int) float64 { return GainMean.Of(a[t*N:(t+1)*N], kk[t*N:(t+1)*N]) }, [T]float64{0.5, 0.75}},
		{"decay geomean", func(t int) float64 { return DecayGeoMean.Of(w[t*N : (t+1)*N]) }, [T]float64{math.Sqrt(0.4), 0.5}},
		{"decay mean", func(t int) float64 { return DecayMean.Of(w[t*N : (t+1)*N]) }, [T]float64{0.65, 0.5}},
		{"decay min", func(t int) float64 { return DecayMin.Of(w[t*N : (t+1)*N]) }, [T]float64{0.5, 0.5}},
		{"decay max", func(t int) float64 { return DecayMax.Of(w[t*N : (t+1)*N]) }, [T]float64{0.8, 0.5}},
	} {
		for tt := 0; tt < T; tt++ {
			if got := c.of(tt); math.Abs(got-c.want[tt]) > 1e-7 { // float32 inputs
				t.Errorf("%s step %d: %v, want %v", c.name, tt, got, c.want[tt])
			}
		}
	}
}

// TestRWKVSummaryNames: every summary's name parses back to it, and
// unknown names are refused naming the choices.
func TestRWKVSummaryNames(t *testing.T) {
	for _, d := range []DecaySummary{DecayGeoMean, DecayMean, DecayMin, DecayMax} {
		if got, err := ParseDecaySummary(d.String()); err != nil || got != d {
			t.Errorf("decay %v: parsed %v, %v", d, got, err)
		}
	}
	for _, g := range []GainSummary{GainRemoval, GainMean} {
		if got, err := ParseGainSummary(g.String()); err != nil || got != g {
			t.Errorf("gain %v: parsed %v, %v", g, got, err)
		}
	}
	if _, err := ParseDecaySummary("median"); err == nil {
		t.Error("decay summary median accepted")
	}
	if _, err := ParseGainSummary("max"); err == nil {
		t.Error("gain summary max accepted")
	}
}

// rwkvCases returns the golden folders whose model is RWKV-7 (rwkv7 and
// hidden variants of it), or skips.
func rwkvCases(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(goldenDir(), "*", "golden.safetensors"))
	var dirs []string
	for _, f := range files {
		dir := filepath.Dir(f)
		if c, err := model.LoadConfig(dir); err == nil && c.RWKV7 != nil {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		t.Skipf("golden data not available: no RWKV-7 case under %s (it comes with ../shared)", goldenDir())
	}
	return dirs
}

// rowStats64 are the W-row statistics of a float64 row w with values v
// (row s at v[s·stride:][:n]) under |W| weights, computed directly in
// float64 two-pass sums: the independent reference of ConsumeDelta's.
func rowStats64(w []float64, v []float32, stride, n int) (neff, first, sum, neg, smean float64) {
	var abs, sq float64
	for _, x := range w {
		abs += math.Abs(x)
		sq += x * x
		sum += x
		if x < 0 {
			neg -= x
		}
	}
	m := make([]float64, n)
	for s, x := range w {
		for i := range m {
			m[i] += math.Abs(x) / abs * float64(v[s*stride+i])
		}
	}
	for s, x := range w {
		for i := range m {
			d := float64(v[s*stride+i]) - m[i]
			smean += math.Abs(x) / abs * d * d
		}
	}
	return abs * abs / sq, math.Abs(w[0]) / abs, sum, neg / abs, smean / float64(n)
}

// TestRWKVFilterGolden runs each RWKV-7 golden case (both sequences,
// tiles of 7 rows) with a GDNFilter on every layer and checks it against
// the golden tensors: the gain and decay against the summaries of the
// golden a, κ̂ and w; the W-row statistics (n_eff^W, first-token share,
// row sum, negative share, S̄^W, λobs^W, K^W) against the same quantities
// computed directly from the golden float64 eff_attn.l and v.l; the
// innovation and state norm against RWKVRuleFilter run on the golden w, k,
// v, κ̂, a, whose final state must equal the golden state.l; and the state
// norm at the last token against ‖state.l‖_F per head.
func TestRWKVFilterGolden(t *testing.T) {
	for _, dir := range rwkvCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, gold, ids := openGDNCase(t, dir)
			B, T, H, N := len(ids), len(ids[0]), m.Heads, m.DHead
			layers := make([]int, m.Config.Layers)
			for l := range layers {
				layers[l] = l
			}
			f, err := NewGDNFilter(B, T, len(layers), layers, H, N, N, GDNOptions{})
			if err != nil {
				t.Fatal(err)
			}
			hs := &hooks.Set{}
			f.RegisterRWKV(hs)
			if _, err := m.Forward(ids, model.Options{Hooks: hs, TileRows: 7}); err != nil {
				t.Fatal(err)
			}
			var worst struct{ gain, decay, neff, share, sum, disp, lam, innov, norm, last, state float64 }
			innov, sn, S := make([]float64, T), make([]float64, T), make([]float64, N*N)
			for s, l := range f.Layers {
				get := func(k string) []float32 { return goldF32(t, gold, fmt.Sprintf("%s.%d", k, l)) }
				w, k, v, kk, a, st := get("w"), get("k"), get("v"), get("kk"), get("a"), get("state")
				M, err := gold.Float64(fmt.Sprintf("eff_attn.%d", l))
				if err != nil {
					t.Fatal(err)
				}
				for b := 0; b < B; b++ {
					for h := 0; h < H; h++ {
						off := b*T*H*N + h*N
						clear(S)
						RWKVRuleFilter(innov, sn, S, w, k, v, kk, a, off, T, H*N, N, InnovationDecayed)
						gs := st[(b*H+h)*N*N : (b*H+h+1)*N*N]
						var top, n2 float64
						for _, x := range gs {
							top = max(top, math.Abs(float64(x)))
							n2 += float64(x) * float64(x)
						}
						for i, x := range gs {
							worst.state = max(worst.state, math.Abs(S[i]-float64(x))/top)
						}
						at := f.Index(b, s, h, 0)
						worst.last = max(worst.last, math.Abs(f.StateNorm[at+T-1]-math.Sqrt(n2))/math.Sqrt(n2))
						for tt := 0; tt < T; tt++ {
							i, o := at+tt, off+tt*H*N
							worst.gain = max(worst.gain, math.Abs(f.Beta[i]-GainRemoval.Of(a[o:o+N], kk[o:o+N])))
							worst.decay = max(worst.decay, math.Abs(f.Decay[i]-DecayGeoMean.Of(w[o:o+N])))
							worst.innov = max(worst.innov, math.Abs(f.Innovation[i]-innov[tt])/innov[tt])
							worst.norm = max(worst.norm, math.Abs(f.StateNorm[i]-sn[tt])/sn[tt])
							row := M[((b*H+h)*T+tt)*T:][:tt+1]
							neff, first, sum, neg, sm := rowStats64(row, v[off:], H*N, N)
							var abs float64
							for _, x := range row {
								abs += math.Abs(x)
							}
							lam := LambdaREML(neff, sm, 1, 1/float64(N))
							worst.neff = max(worst.neff, math.Abs(f.NEffW[i]-neff)/neff)
							worst.share = max(worst.share, math.Abs(f.FirstShare[i]-first), math.Abs(f.NegShare[i]-neg))
							worst.sum = max(worst.sum, math.Abs(f.RowSum[i]-sum)/max(1, abs))
							worst.disp = max(worst.disp, math.Abs(f.SMeanW[i]-sm)/max(sm, 1e-6)) // 0 at t = 0
							worst.lam = max(worst.lam, math.Abs(f.LambdaObsW[i]-lam)/lam, math.Abs(f.KW[i]-KalmanGain(lam, 1)))
						}
					}
				}
			}
			t.Logf("worst: %+v", worst)
			for _, c := range []struct {
				what     string
				got, tol float64
			}{
				{"gain Σκ̂²a vs golden a, kk (abs)", worst.gain, 1e-5}, {"decay geomean vs golden w (abs)", worst.decay, 1e-5},
				{"n_eff^W vs golden eff_attn (rel)", worst.neff, 1e-4}, {"first and negative share (abs)", worst.share, 1e-4},
				{"row sum (rel. to max(1, Σ|M|))", worst.sum, 1e-4}, {"S̄^W vs golden eff_attn, v (rel)", worst.disp, 1e-4},
				{"λobs^W (rel), K^W (abs)", worst.lam, 1e-4}, {"innovation vs the golden tensors' (rel)", worst.innov, 1e-4},
				{"state norm vs the golden tensors' (rel)", worst.norm, 1e-4}, {"state norm at T vs ‖golden state‖ (rel)", worst.last, 1e-4},
				{"RWKVRuleFilter's S_T vs golden state (rel. to max)", worst.state, 1e-4},
			} {
				if !(c.got <= c.tol) {
					t.Errorf("%s: %.3g, tolerance %.0e", c.what, c.got, c.tol)
				}
			}
		})
	}
}
