package probes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

func TestEffAttnRow(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name string
		w    []float32
		want EffAttnRowStats
	}{
		{"one-hot", []float32{0, 0, 1.5, 0}, EffAttnRowStats{NEff: 1, FirstShare: 0, RowSum: 1.5, NegShare: 0}},
		{"one-hot negative", []float32{-0.25, 0, 0}, EffAttnRowStats{NEff: 1, FirstShare: 1, RowSum: -0.25, NegShare: 1}},
		// Σ|w| = 1, Σw² = 0.375, Σw = 0.5
		{"signed", []float32{0.5, -0.25, 0.25}, EffAttnRowStats{NEff: 1 / 0.375, FirstShare: 0.5, RowSum: 0.5, NegShare: 0.25}},
		{"uniform softmax row", []float32{0.25, 0.25, 0.25, 0.25}, EffAttnRowStats{NEff: 4, FirstShare: 0.25, RowSum: 1, NegShare: 0}},
		{"zero", []float32{0, 0}, EffAttnRowStats{NEff: nan, FirstShare: nan, RowSum: 0, NegShare: nan}},
	} {
		got := EffAttnRow(c.w)
		for _, f := range []struct {
			name      string
			got, want float64
		}{{"NEff", got.NEff, c.want.NEff}, {"FirstShare", got.FirstShare, c.want.FirstShare},
			{"RowSum", got.RowSum, c.want.RowSum}, {"NegShare", got.NegShare, c.want.NegShare}} {
			if !(math.IsNaN(f.got) && math.IsNaN(f.want)) && math.Abs(f.got-f.want) > 1e-12 {
				t.Errorf("%s: %s = %v, want %v", c.name, f.name, f.got, f.want)
			}
		}
	}
}

func TestEffAttnWeightsOf(t *testing.T) {
	for _, c := range []struct {
		name    string
		w       []float32
		mode    EffAttnWeights
		ok      bool
		want    []float32
		s, neff float64 // dispersion of the values 0, 1, 2, … under the weights; 1/Σπ²
	}{
		// π = [0.5, 0.25, 0.25]: mean 0.75, S = 0.5·0.75² + 0.25·0.25² + 0.25·1.25² = 0.6875
		{"abs signed row", []float32{0.5, -0.25, 0.25}, WeightsAbs, true, []float32{0.5, 0.25, 0.25}, 0.6875, 1 / 0.375},
		{"signed: mixed signs undefined", []float32{0.5, -0.25, 0.25}, WeightsSigned, false, nil, 0, 0},
		{"signed: same signs", []float32{-0.2, -0.6, -0.2}, WeightsSigned, true, []float32{0.2, 0.6, 0.2}, 0.4, 1 / 0.44},
		{"signed: zero sum undefined", []float32{0, 0}, WeightsSigned, false, nil, 0, 0},
		{"abs: zero row undefined", []float32{0, 0, 0}, WeightsAbs, false, nil, 0, 0},
	} {
		pi := make([]float32, len(c.w))
		if ok := EffAttnWeightsOf(pi, c.w, c.mode); ok != c.ok {
			t.Errorf("%s: defined = %v, want %v", c.name, ok, c.ok)
			continue
		}
		if !c.ok {
			continue
		}
		V := make([]float32, len(c.w))
		for j := range V {
			V[j] = float32(j)
		}
		e, S := make([]float64, 1), make([]float64, 1)
		MomentsStrided(e, S, nil, pi, V, 1, TwoPass)
		for j := range pi {
			if math.Abs(float64(pi[j]-c.want[j])) > 1e-7 {
				t.Errorf("%s: π = %v, want %v", c.name, pi, c.want)
				break
			}
		}
		if math.Abs(S[0]-c.s) > 1e-7 || math.Abs(NEff(pi)-c.neff) > 1e-5 {
			t.Errorf("%s: S = %v, n_eff = %v; want %v, %v", c.name, S[0], NEff(pi), c.s, c.neff)
		}
	}
}

// TestDeltaRuleFilterLastValue: with g = 0 (no forgetting), β = 1 and a unit
// key, the delta rule overwrites its memory with the last value: S_t = k v_tᵀ,
// so ‖S_t‖_F = ‖v_t‖ and the innovation is ‖v_t − v_{t−1}‖ (both forms,
// since e^g = 1).
func TestDeltaRuleFilterLastValue(t *testing.T) {
	const T, dk, dv = 5, 2, 3
	k := make([]float32, T*dk)
	v := make([]float32, T*dv)
	beta, g := make([]float32, T), make([]float32, T)
	for i := 0; i < T; i++ {
		k[i*dk+1] = 1
		beta[i] = 1
		for j := 0; j < dv; j++ {
			v[i*dv+j] = float32((i+1)*(j+2)%7) - 2
		}
	}
	for _, form := range []InnovationForm{InnovationDecayed, InnovationUndecayed} {
		innov, norm := make([]float64, T), make([]float64, T)
		S, r := make([]float64, dk*dv), make([]float64, 2*dv)
		DeltaRuleFilter(innov, norm, S, r, k, v, beta, g, dk, dv, form)
		for i := 0; i < T; i++ {
			var d2, n2 float64
			for j := 0; j < dv; j++ {
				prev := 0.0
				if i > 0 {
					prev = float64(v[(i-1)*dv+j])
				}
				d := float64(v[i*dv+j]) - prev
				d2 += d * d
				n2 += float64(v[i*dv+j]) * float64(v[i*dv+j])
			}
			if math.Abs(innov[i]-math.Sqrt(d2)) > 1e-12 || math.Abs(norm[i]-math.Sqrt(n2)) > 1e-12 {
				t.Errorf("%v: t=%d innovation %v state norm %v, want ‖v_t − v_{t−1}‖ = %v, ‖v_t‖ = %v", form, i, innov[i], norm[i], math.Sqrt(d2), math.Sqrt(n2))
			}
		}
	}
}

// TestDeltaRuleFilterForms: the two innovation forms differ by the decay
// only: with S_{t−1}ᵀk = p, decayed ‖v − e·p‖ and undecayed ‖v − p‖, checked
// on a scalar memory (dk = dv = 1, k = 1) by hand.
func TestDeltaRuleFilterForms(t *testing.T) {
	// S_1 = β_1 v_1 = 0.5·2 = 1; step 2: e = 0.5, p = 1; decayed |v − e p| = |3 − 0.5| = 2.5,
	// undecayed |3 − 1| = 2; S_2 = 0.5 + 1·0.5·2.5 = 1.75.
	k, v := []float32{1, 1}, []float32{2, 3}
	beta, g := []float32{0.5, 0.5}, []float32{0, float32(math.Log(0.5))}
	for _, c := range []struct {
		form InnovationForm
		want float64
	}{{InnovationDecayed, 2.5}, {InnovationUndecayed, 2}} {
		innov, norm := make([]float64, 2), make([]float64, 2)
		S, r := make([]float64, 1), make([]float64, 2)
		DeltaRuleFilter(innov, norm, S, r, k, v, beta, g, 1, 1, c.form)
		if math.Abs(innov[0]-2) > 1e-12 || math.Abs(innov[1]-c.want) > 1e-6 || math.Abs(norm[1]-1.75) > 1e-6 {
			t.Errorf("%v: innovation %v, state norm %v; want [2 %v], 1.75", c.form, innov, norm, c.want)
		}
	}
}

// gdnCases returns the golden folders whose model has Gated DeltaNet
// layers (qwen35_text and any hidden variant of it), or skips.
func gdnCases(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(goldenDir(), "*", "golden.safetensors"))
	var dirs []string
	for _, f := range files {
		dir := filepath.Dir(f)
		if c, err := model.LoadConfig(dir); err == nil && c.DeltaNet != nil {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		t.Skipf("golden data not available: no case with Gated DeltaNet layers under %s (it comes with ../shared)", goldenDir())
	}
	return dirs
}

// openGDNCase loads a golden case's model, golden tensors and input ids.
func openGDNCase(t *testing.T, dir string) (*model.Model, *checkpoint.Checkpoint, [][]int) {
	t.Helper()
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gold, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gold.Close() })
	raw, err := gold.Int64("input_ids")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := gold.Info("input_ids")
	B, T := info.Shape[0], info.Shape[1]
	ids := make([][]int, B)
	for b := range ids {
		ids[b] = make([]int, T)
		for i := range ids[b] {
			ids[b][i] = int(raw[b*T+i])
		}
	}
	return m, gold, ids
}

func goldF32(t *testing.T, ck *checkpoint.Checkpoint, name string) []float32 {
	t.Helper()
	x, err := ck.Float32(name)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func newQwen35Filter(t *testing.T, m *model.Model, B, T int, opt GDNOptions) *GDNFilter {
	t.Helper()
	dn := m.Config.DeltaNet
	f, err := NewGDNFilter(B, T, m.Config.Layers, dn.LinearLayers(), dn.ValueHeads, dn.KeyDim, dn.ValueDim, opt)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestGDNFilterGolden runs the Qwen3.5 golden case with a GDNFilter and
// checks every quantity against the golden tensors: β and e^g against the
// hooks' own values (exactly) and the golden beta.l, g.l; the W-row
// statistics against those of the golden eff_attn.l (float64 from its
// float32 entries); the innovation and state norm against DeltaRuleFilter
// run on the golden k, v, β, g, whose final state must equal the golden
// final_state.l and whose last innovation must satisfy the update's
// identity v_T − S_Tᵀk_T = (1 − β_T‖k_T‖²)·r_T with the golden S_T.
func TestGDNFilterGolden(t *testing.T) {
	for _, dir := range gdnCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, gold, ids := openGDNCase(t, dir)
			B, T := len(ids), len(ids[0])
			dn := m.Config.DeltaNet
			Hv, dk, dv := dn.ValueHeads, dn.KeyDim, dn.ValueDim
			f := newQwen35Filter(t, m, B, T, GDNOptions{})
			hs := &hooks.Set{}
			f.Register(hs)
			capt := hs.Capture("blocks.*.gdn.hook_beta", "blocks.*.gdn.hook_g")
			if _, err := m.Forward(ids, model.Options{Hooks: hs, TileRows: 7}); err != nil {
				t.Fatal(err)
			}
			var worst struct{ beta, decay, neff, first, sum, neg, disp, innov, norm, state, ident float64 }
			pi, e, Sd := make([]float32, T), make([]float64, dv), make([]float64, dv)
			for s, l := range f.Layers {
				hb := capt.Get(hooks.Name("blocks.{l}.gdn.hook_beta", l)).Data().([]float32)
				hg := capt.Get(hooks.Name("blocks.{l}.gdn.hook_g", l)).Data().([]float32)
				gb, gg := goldF32(t, gold, fmt.Sprintf("beta.%d", l)), goldF32(t, gold, fmt.Sprintf("g.%d", l))
				gk, gv := goldF32(t, gold, fmt.Sprintf("k.%d", l)), goldF32(t, gold, fmt.Sprintf("v.%d", l))
				W, fs := goldF32(t, gold, fmt.Sprintf("eff_attn.%d", l)), goldF32(t, gold, fmt.Sprintf("final_state.%d", l))
				for b := 0; b < B; b++ {
					for h := 0; h < Hv; h++ {
						at := f.Index(b, s, h, 0)
						bg := make([]float32, 2*T)
						for tt := 0; tt < T; tt++ {
							i, j := at+tt, (b*T+tt)*Hv+h
							if f.Beta[i] != float64(hb[j]) || f.Decay[i] != math.Exp(float64(hg[j])) {
								t.Fatalf("layer %d b %d head %d t %d: β %v, e^g %v differ from the hooks' %v, e^%v", l, b, h, tt, f.Beta[i], f.Decay[i], hb[j], hg[j])
							}
							worst.beta = max(worst.beta, math.Abs(f.Beta[i]-float64(gb[j])))
							worst.decay = max(worst.decay, math.Abs(f.Decay[i]-math.Exp(float64(gg[j]))))
							bg[tt], bg[T+tt] = gb[j], gg[j]
							row := W[((b*Hv+h)*T+tt)*T:][:tt+1]
							ref := EffAttnRow(row)
							worst.neff = max(worst.neff, math.Abs(f.NEffW[i]-ref.NEff)/ref.NEff)
							worst.first = max(worst.first, math.Abs(f.FirstShare[i]-ref.FirstShare))
							worst.sum = max(worst.sum, math.Abs(f.RowSum[i]-ref.RowSum))
							worst.neg = max(worst.neg, math.Abs(f.NegShare[i]-ref.NegShare))
							if EffAttnWeightsOf(pi, row, WeightsAbs) {
								MomentsStrided(e, Sd, nil, pi[:tt+1], gv[(b*Hv+h)*T*dv:], dv, TwoPass)
								worst.disp = max(worst.disp, math.Abs(f.SMeanW[i]-Mean(Sd)))
							}
						}
						// the recurrence on the golden inputs
						hd := (b*Hv + h) * T
						innov, norm := make([]float64, T), make([]float64, T)
						S, r := make([]float64, dk*dv), make([]float64, 2*dv)
						DeltaRuleFilter(innov, norm, S, r, gk[hd*dk:(hd+T)*dk], gv[hd*dv:(hd+T)*dv], bg[:T], bg[T:], dk, dv, InnovationDecayed)
						for tt := 0; tt < T; tt++ {
							worst.innov = max(worst.innov, math.Abs(f.Innovation[at+tt]-innov[tt])/innov[tt])
							worst.norm = max(worst.norm, math.Abs(f.StateNorm[at+tt]-norm[tt])/norm[tt])
						}
						gs := fs[(b*Hv+h)*dk*dv:][:dk*dv]
						var fn2 float64
						for i, x := range gs {
							worst.state = max(worst.state, math.Abs(S[i]-float64(x)))
							fn2 += float64(x) * float64(x)
						}
						worst.state = max(worst.state, math.Abs(norm[T-1]-math.Sqrt(fn2)))
						// v_T − S_Tᵀk_T = (1 − β_T‖k_T‖²)·r_T with the golden S_T
						kT, vT := gk[(hd+T-1)*dk:][:dk], gv[(hd+T-1)*dv:][:dv]
						var kk, res2 float64
						for _, x := range kT {
							kk += float64(x) * float64(x)
						}
						for j := 0; j < dv; j++ {
							var p float64
							for i := 0; i < dk; i++ {
								p += float64(gs[i*dv+j]) * float64(kT[i])
							}
							d := float64(vT[j]) - p
							res2 += d * d
						}
						want := math.Sqrt(res2) / (1 - float64(bg[T-1])*kk)
						worst.ident = max(worst.ident, math.Abs(innov[T-1]-want)/want)
					}
				}
			}
			t.Logf("worst: β %.2g, e^g %.2g (abs vs golden); W rows vs golden eff_attn: n_eff^W %.2g rel, first share %.2g, row sum %.2g, negative share %.2g abs, S̄^W %.2g abs; innovation %.2g, state norm %.2g rel vs the recurrence on the golden inputs; S_T %.2g abs vs golden final_state; last-step identity %.2g rel",
				worst.beta, worst.decay, worst.neff, worst.first, worst.sum, worst.neg, worst.disp, worst.innov, worst.norm, worst.state, worst.ident)
			for _, c := range []struct {
				name     string
				got, tol float64
			}{
				{"β vs golden beta", worst.beta, 3e-5}, {"e^g vs exp(golden g)", worst.decay, 3e-5},
				{"n_eff^W rel", worst.neff, 1e-4}, {"first-token share", worst.first, 6e-5}, {"row sum", worst.sum, 3e-5},
				{"negative share", worst.neg, 6e-5}, {"S̄^W (abs weights) vs golden W and v", worst.disp, 5e-5},
				{"innovation rel", worst.innov, 1e-4}, {"state norm rel", worst.norm, 1e-4},
				{"S_T vs golden final_state", worst.state, 3e-5}, {"v_T − S_Tᵀk_T identity rel", worst.ident, 1e-4},
			} {
				if !(c.got <= c.tol) {
					t.Errorf("%s: worst %.3g above %.0g", c.name, c.got, c.tol)
				}
			}
		})
	}
}

// TestGDNFilterNoMemory: with the decay forced to e^g = 0 (g = −∞) and
// β = 1 through the model's own hooks (an intervention), the delta rule
// keeps only the current token: W[t, s] = 0 for s < t and W[t, t] =
// q_t·k_t/√d_k, so n_eff^W = 1, the first-token share is 0 beyond t = 0,
// the innovation is ‖v_t‖ and the state norm ‖k_t‖·‖v_t‖; the weighted
// values have no dispersion, so λobs^W = (1 + ν)/(ν σ0²) = 2·d_v.
func TestGDNFilterNoMemory(t *testing.T) {
	for _, dir := range gdnCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, _, ids := openGDNCase(t, dir)
			B, T := len(ids), len(ids[0])
			dn := m.Config.DeltaNet
			Hv, dk, dv := dn.ValueHeads, dn.KeyDim, dn.ValueDim
			f := newQwen35Filter(t, m, B, T, GDNOptions{})
			hs := &hooks.Set{}
			set := func(c float32) hooks.Func {
				return func(_ string, _ int, x *tensor.Dense) error {
					d := x.Data().([]float32)
					for i := range d {
						d[i] = c
					}
					return nil
				}
			}
			hs.Add("blocks.*.gdn.hook_beta", set(1))
			hs.Add("blocks.*.gdn.hook_g", set(float32(math.Inf(-1))))
			capt := hs.Capture("blocks.*.gdn.hook_q", "blocks.*.gdn.hook_k", "blocks.*.gdn.hook_v")
			f.Register(hs)
			if _, err := m.Forward(ids, model.Options{Hooks: hs}); err != nil {
				t.Fatal(err)
			}
			scale := 1 / math.Sqrt(float64(dk))
			for s, l := range f.Layers {
				q := capt.Get(hooks.Name("blocks.{l}.gdn.hook_q", l)).Data().([]float32)
				k := capt.Get(hooks.Name("blocks.{l}.gdn.hook_k", l)).Data().([]float32)
				v := capt.Get(hooks.Name("blocks.{l}.gdn.hook_v", l)).Data().([]float32)
				for b := 0; b < B; b++ {
					for h := 0; h < Hv; h++ {
						for tt := 0; tt < T; tt++ {
							i, hd := f.Index(b, s, h, tt), (b*Hv+h)*T+tt
							var qk, kk, vv float64
							for r := 0; r < dk; r++ {
								qk += float64(q[hd*dk+r]) * float64(k[hd*dk+r])
								kk += float64(k[hd*dk+r]) * float64(k[hd*dk+r])
							}
							for j := 0; j < dv; j++ {
								vv += float64(v[hd*dv+j]) * float64(v[hd*dv+j])
							}
							wantFirst := 0.0
							if tt == 0 {
								wantFirst = 1
							}
							if f.Decay[i] != 0 || f.Horizon[i] != 1 || f.NEffW[i] != 1 || f.FirstShare[i] != wantFirst ||
								math.Abs(f.RowSum[i]-qk*scale) > 1e-6 ||
								math.Abs(f.Innovation[i]-math.Sqrt(vv)) > 1e-9*math.Sqrt(vv) ||
								math.Abs(f.StateNorm[i]-math.Sqrt(kk*vv)) > 1e-9*math.Sqrt(vv) ||
								f.SMeanW[i] != 0 || math.Abs(f.LambdaObsW[i]-2*float64(dv)) > 1e-9 {
								t.Fatalf("layer %d b %d head %d t %d: e^g %v horizon %v n_eff^W %v first %v sum %v (want %v) innovation %v (want %v) state %v (want %v)",
									l, b, h, tt, f.Decay[i], f.Horizon[i], f.NEffW[i], f.FirstShare[i], f.RowSum[i], qk*scale,
									f.Innovation[i], math.Sqrt(vv), f.StateNorm[i], math.Sqrt(kk*vv))
							}
						}
					}
				}
			}
		})
	}
}

// TestGDNDispersionMatchesTwoPass: the tile form of S̄^W (matrix product
// and shifted squares) equals MomentsStrided's float64 two-pass sums on
// signed random rows, including values with a large common offset (where
// the shifted form would cancel and the guard recomputes), for both
// weightings; rows where the signed weights are undefined stay NaN.
func TestGDNDispersionMatchesTwoPass(t *testing.T) {
	const T, dv, tileRows = 37, 5, 6
	rng := rand.New(rand.NewPCG(3, 4))
	for _, offset := range []float32{0, 300} {
		for _, mode := range []EffAttnWeights{WeightsAbs, WeightsSigned} {
			V := make([]float32, T*dv)
			for i := range V {
				V[i] = offset + float32(rng.NormFloat64())
			}
			W := make([]float32, T*T)
			for q := 0; q < T; q++ {
				for s := 0; s <= q; s++ {
					W[q*T+s] = float32(rng.NormFloat64())
					if q%3 == 0 {
						W[q*T+s] = float32(math.Abs(float64(W[q*T+s]))) // same-sign rows: defined for signed weights
					}
				}
			}
			f, err := NewGDNFilter(1, T, 1, []int{0}, 1, 4, dv, GDNOptions{Weights: mode})
			if err != nil {
				t.Fatal(err)
			}
			for q0 := 0; q0 < T; q0 += tileRows {
				n := min(tileRows, T-q0)
				tile := &hooks.AttnTile{Q0: q0, Rows: n, Stride: T, Alpha: W[q0*T : (q0+n)*T], T: T, DHead: dv, VStride: dv, V: V}
				if err := f.ConsumeDelta(tile); err != nil {
					t.Fatal(err)
				}
			}
			pi := make([]float32, T)
			e, S := make([]float64, dv), make([]float64, dv)
			for q := 0; q < T; q++ {
				got := f.SMeanW[f.Index(0, 0, 0, q)]
				if !EffAttnWeightsOf(pi, W[q*T:q*T+q+1], mode) {
					if !math.IsNaN(got) {
						t.Errorf("offset %v %v row %d: S̄^W = %v where the weights are undefined", offset, mode, q, got)
					}
					continue
				}
				MomentsStrided(e, S, nil, pi[:q+1], V, dv, TwoPass)
				want := Mean(S)
				if math.Abs(got-want) > 1e-5*max(want, 1e-3) {
					t.Errorf("offset %v %v row %d: S̄^W = %v, two-pass %v", offset, mode, q, got, want)
				}
			}
		}
	}
}

// TestGDNFilterNoRows: without the rows the filter registers no consumer
// (so the model forms no W), leaves the W-row columns NaN and gives the
// same β, decay, innovation and state norm as with them.
func TestGDNFilterNoRows(t *testing.T) {
	for _, dir := range gdnCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			m, _, ids := openGDNCase(t, dir)
			B, T := len(ids), len(ids[0])
			full, cheap := newQwen35Filter(t, m, B, T, GDNOptions{}), newQwen35Filter(t, m, B, T, GDNOptions{NoRows: true})
			for _, f := range []*GDNFilter{full, cheap} {
				hs := &hooks.Set{}
				f.Register(hs)
				if f == cheap {
					for _, l := range f.Layers {
						if cs := hs.Consumers(l); len(cs) != 0 {
							t.Fatalf("NoRows registered %d consumers on layer %d", len(cs), l)
						}
					}
				}
				if _, err := m.Forward(ids, model.Options{Hooks: hs}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range full.Beta {
				if cheap.Beta[i] != full.Beta[i] || cheap.Decay[i] != full.Decay[i] || cheap.Innovation[i] != full.Innovation[i] ||
					cheap.StateNorm[i] != full.StateNorm[i] || !math.IsNaN(cheap.NEffW[i]) || !math.IsNaN(cheap.KW[i]) {
					t.Fatalf("index %d: without rows β %v e^g %v innovation %v state %v n_eff^W %v; with rows %v %v %v %v",
						i, cheap.Beta[i], cheap.Decay[i], cheap.Innovation[i], cheap.StateNorm[i], cheap.NEffW[i],
						full.Beta[i], full.Decay[i], full.Innovation[i], full.StateNorm[i])
				}
			}
		})
	}
}

// TestGDNFilterOneLayer: under OneLayer the columns hold one layer (B·Hv·T
// cells), every slot's index is slot 0's, and Clear makes them NaN again.
func TestGDNFilterOneLayer(t *testing.T) {
	f, err := NewGDNFilter(2, 5, 4, []int{1, 3}, 3, 2, 2, GDNOptions{OneLayer: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Beta) != 2*3*5 || len(f.NEffW) != 2*3*5 {
		t.Fatalf("columns of %d and %d cells, want B·Hv·T = 30", len(f.Beta), len(f.NEffW))
	}
	if a, b := f.Index(1, 1, 2, 4), f.Index(1, 0, 2, 4); a != b || a != len(f.Beta)-1 {
		t.Errorf("Index(1, slot 1, 2, 4) = %d, slot 0's %d, want both %d", a, b, len(f.Beta)-1)
	}
	f.Beta[7], f.StateNorm[3] = 1, 2
	f.Clear()
	if !math.IsNaN(f.Beta[7]) || !math.IsNaN(f.StateNorm[3]) {
		t.Errorf("after Clear: beta %v, state norm %v, want NaN", f.Beta[7], f.StateNorm[3])
	}
}
