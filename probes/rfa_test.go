package probes

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// rfaHead returns head parameters with the authors' constants.
func rfaHead(mu, sigma2, eta2, gamma2, tshift float64) model.RFAHeadParams {
	return model.RFAHeadParams{D: 8, Mu: mu, Sigma2: sigma2, Eta2: eta2, Gamma2: gamma2, TShift: tshift,
		Nu: 8*3.1 + 2, Tau: 1.3, NuGate: 8 * (3.1 + 2), PScaleLog: -0.4, PPriorLog: 0.3, Gate: true,
		Epsilon: 1e-5, CovEps: 0.01, BrownianBelow: 1e-5, MinExponent: -10, MaxExponent: 0}
}

// rfaV is V_Δt(lag) of the pass's kernel (RFAHeadParams.Kernel).
func rfaV(p *model.RFAHeadParams, lag float64) float64 {
	V, _ := p.Kernel(lag)
	return V
}

// TestRFAKernelClosedForms checks the kernel's V, and P and B, against the
// closed forms of App. B.4.1 (notes §B.7–8, §G.4) and the μ → 0 limit.
func TestRFAKernelClosedForms(t *testing.T) {
	integ := rfaHead(0.05, 0.01, 1.3, 0.2, 0.7) // σ̃² = 0.1 < η²
	diff := rfaHead(0.05, 0.5, 0.3, 0.2, 0.7)   // σ̃² = 5 > η²
	for _, p := range []model.RFAHeadParams{integ, diff} {
		r := p.Regime()
		bt := r.Beta + p.CovEps // V(∞)
		for _, lag := range []float64{0, 1, 3, 17, 60} {
			s := lag + p.TShift
			V := rfaV(&p, lag)
			if want := r.Alpha*math.Exp(-2*p.Mu*s) + bt; math.Abs(V-want) > 1e-12*want {
				t.Errorf("%s: V(%g) = %v, want α e^{−2μs} + β + c = %v", r.Regime, lag, V, want)
			}
			P := RFAPrecisionPrior(&p, lag)
			var want float64
			if r.Regime == model.RegimeIntegrative { // opening gate: (1/β)·sigmoid(2μs − ln(α/β))
				want = 1 / bt / (1 + math.Exp(-(2*p.Mu*s - math.Log(r.Alpha/bt))))
			} else { // closing gate: 1/(β − α′e^{−2μs})
				want = 1 / (bt - (-r.Alpha)*math.Exp(-2*p.Mu*s))
			}
			if math.Abs(P-want) > 1e-12*want {
				t.Errorf("%s: P(%g) = %v, closed form %v", r.Regime, lag, P, want)
			}
			if B := RFAAdditiveBias(&p, lag); math.Abs(B+math.Log(V)) > 1e-15 {
				t.Errorf("B(%g) = %v, want −log V = %v", lag, B, -math.Log(V))
			}
		}
	}
	if r := integ.Regime(); r.Regime != model.RegimeIntegrative || math.Abs(r.Alpha-1.2) > 1e-12 || math.Abs(r.Beta-0.3) > 1e-12 {
		t.Errorf("integrative head: %+v", r)
	}
	if r := diff.Regime(); r.Regime != model.RegimeDiffusive {
		t.Errorf("diffusive head: %+v", r)
	}
	// μ → 0: the OU kernel tends to the Brownian σ²s + η² + γ² + c.
	br := rfaHead(0, 0.02, 0.8, 0.3, 0.5)
	small := rfaHead(2e-5, 0.02, 0.8, 0.3, 0.5)
	if r := br.Regime(); r.Regime != model.RegimeBrownian || !math.IsNaN(r.Alpha) {
		t.Errorf("μ = 0 head: %+v", r)
	}
	for _, lag := range []float64{0, 10, 40} {
		vb, vs := rfaV(&br, lag), rfaV(&small, lag)
		if want := 0.02*(lag+0.5) + 0.8 + 0.3 + 0.01; math.Abs(vb-want) > 1e-12 {
			t.Errorf("Brownian V(%g) = %v, want %v", lag, vb, want)
		}
		if rel := math.Abs(vs-vb) / vb; rel > 4*2e-5*(lag+0.5) {
			t.Errorf("μ = 2e-5: V(%g) = %v differs from the μ → 0 limit %v by %g", lag, vs, vb, rel)
		}
	}
	// The −10 clamp of the decay exponent.
	fast := rfaHead(3, 0.1, 0.5, 0.2, 0)
	if _, E := fast.Kernel(20); E != math.Exp(-10) {
		t.Errorf("E(20) at μ = 3: %v, want e^-10", E)
	}
}

// TestRFATotalPrecisionAndGate: both p̂_tot forms against their direct
// definitions, and the gate as a Kalman gain p̂/(p̂ + p_prior) at p_scale = 1.
func TestRFATotalPrecisionAndGate(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	p := rfaHead(0.02, 0.01, 0.9, 0.3, 0.6)
	r2 := make([]float32, 30)
	for j := range r2 {
		r2[j] = float32(5 * rng.Float64())
	}
	var sa, sp float64
	T := len(r2) - 1
	for j, x := range r2 {
		V := rfaV(&p, float64(T-j))
		sa += math.Exp(-math.Log(V) - math.Log(1+float64(x)/(p.Nu*V)))
		sp += math.Exp(-math.Log(V) - float64(x)/V)
	}
	if got := RFALogTotalPrecision(&p, r2, TotalPrecisionAuthors); math.Abs(got-math.Log(sa)) > 1e-13 {
		t.Errorf("authors' log p̂_tot %v, direct %v", got, math.Log(sa))
	}
	if got := RFALogTotalPrecision(&p, r2, TotalPrecisionPaper); math.Abs(got-math.Log(sp)) > 1e-13 {
		t.Errorf("paper log p̂_tot %v, direct %v", got, math.Log(sp))
	}
	p.PScaleLog = 0
	for _, lp := range []float64{-3, 0, 2.5} {
		pt, pp := math.Exp(lp), math.Exp(p.PPriorLog)
		if g := RFAGate(&p, lp, GatePaper); math.Abs(g-pt/(pt+pp)) > 1e-15 {
			t.Errorf("gate at p_scale 1: %v, Kalman gain p̂/(p̂+p_prior) = %v", g, pt/(pt+pp))
		}
		if g, m := RFAGate(&p, lp, GateAuthors), p.GateFrom(lp); math.Abs(g-m) > 1e-15 {
			t.Errorf("authors' gate %v, the model's %v", g, m)
		}
	}
}

// TestRFAGoldenDiagnostics streams every RFA golden case through an
// RFACollector and compares its log p̂_tot and gate with the authors'
// P_tot and gate, its n_eff, BOS mass and decayed row mass with the values
// computed from their attn_mat / decayed_attn_mat, and the kernels with
// A_prior and V_lag (rel. ≤ 1e-4 of each tensor's max).
func TestRFAGoldenDiagnostics(t *testing.T) {
	entries, err := os.ReadDir(goldenDir())
	if err != nil {
		t.Skipf("golden data not found at %s (it comes with ../shared in CI): %v", goldenDir(), err)
	}
	n := 0
	for _, e := range entries {
		dir := filepath.Join(goldenDir(), e.Name())
		if cfg, err := model.LoadConfig(dir); err != nil || cfg.Arch != model.ArchRFA {
			continue
		}
		n++
		t.Run(e.Name(), func(t *testing.T) { rfaGoldenCase(t, dir) })
	}
	if n == 0 {
		t.Skipf("no RFA golden cases (\"architecture\": \"rfa_lm\") in %s", goldenDir())
	}
}

func rfaGoldenCase(t *testing.T, dir string) {
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	f64 := func(name string) []float64 {
		x, err := g.Float64(name)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	info, _ := g.Info("input_ids")
	B, T, L, H := info.Shape[0], info.Shape[1], m.Config.Layers, m.Heads
	raw, _ := g.Int64("input_ids")
	ids := make([][]int, B)
	for b := range ids {
		for _, v := range raw[b*T : (b+1)*T] {
			ids[b] = append(ids[b], int(v))
		}
	}
	rc, err := NewRFACollector(B, L, H, T, m.DHead, RFACollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, rc)
	if _, err := m.Forward(ids, model.Options{Hooks: hs, TileRows: 9}); err != nil {
		t.Fatal(err)
	}
	ps, _ := m.RFAParams()
	check := func(what string, got, want []float64) {
		t.Helper()
		var maxRef, maxDiff float64
		for i := range want {
			maxRef = max(maxRef, math.Abs(want[i]))
			d := math.Abs(got[i] - want[i])
			if d > maxDiff || math.IsNaN(d) {
				maxDiff = d
			}
		}
		rel := maxDiff / maxRef
		t.Logf("%s: rel. error %.2g", what, rel)
		if !(rel <= 1e-4) {
			t.Errorf("%s: rel. error %.3g > 1e-4", what, rel)
		}
	}
	for l := 0; l < L; l++ {
		pre := fmt.Sprintf("l%d.", l)
		attn, dec := f64(pre+"attn_mat"), f64(pre+"decayed_attn_mat") // [B, i, j, H]
		var gate []float64
		if _, ok := g.Info(pre + "gate"); ok {
			gate = f64(pre + "gate")
		}
		ptot := f64(pre + "P_tot") // [B, i, H]
		var gotLP, wantLP, gotNE, wantNE, gotBOS, wantBOS, gotM, wantM, gotG, wantG []float64
		for b := 0; b < B; b++ {
			for h := 0; h < H; h++ {
				for i := 0; i < T; i++ {
					c := rc.Index(b, l, h, i)
					var s2, mass float64
					for j := 0; j <= i; j++ {
						a := attn[((b*T+i)*T+j)*H+h]
						s2 += a * a
						mass += dec[((b*T+i)*T+j)*H+h]
					}
					gotLP, wantLP = append(gotLP, rc.LogPTot[c]), append(wantLP, ptot[(b*T+i)*H+h])
					gotNE, wantNE = append(gotNE, float64(rc.NEff[c])), append(wantNE, 1/s2)
					gotBOS, wantBOS = append(gotBOS, float64(rc.BOSMass[c])), append(wantBOS, attn[((b*T+i)*T)*H+h])
					gotM, wantM = append(gotM, rc.DecayedMass[c]), append(wantM, mass)
					if gate != nil {
						gotG, wantG = append(gotG, float64(rc.Gate[c])), append(wantG, gate[(b*T+i)*H+h])
					} else if !math.IsNaN(float64(rc.Gate[c])) {
						t.Fatalf("layer %d: gate stored for a model without the gate", l)
					}
				}
			}
		}
		check(pre+"P_tot (log p̂_tot)", gotLP, wantLP)
		check(pre+"n_eff on Â", gotNE, wantNE)
		check(pre+"BOS mass on Â", gotBOS, wantBOS)
		check(pre+"decayed row mass", gotM, wantM)
		if gate != nil {
			check(pre+"gate (Kalman gain)", gotG, wantG)
		}
		aprior, vlag := f64(pre+"A_prior"), f64(pre+"x.V_lag") // [i, j, H], [1, k, H]
		var gotP, wantP, gotV, wantV []float64
		for h := 0; h < H; h++ {
			p := &ps[l*H+h]
			for i := 0; i < T; i++ {
				gotV, wantV = append(gotV, rfaV(p, float64(i))), append(wantV, vlag[i*H+h])
				for j := 0; j <= i; j++ {
					gotP, wantP = append(gotP, RFAPrecisionPrior(p, float64(i-j))), append(wantP, aprior[(i*T+j)*H+h])
				}
			}
		}
		check(pre+"A_prior (P_Δt)", gotP, wantP)
		check(pre+"V_lag", gotV, wantV)
	}
}

// textbookKernel is RFA paper Eq. 9 written as the paper and the authors'
// code write it, E = exp(clamp(−μs, min, max)) and V = σ²(1 − E²)/(2μ) +
// η²E² + γ² + c with s = lag + Δt₊ (σ²s + η²E² + γ² + c for |μ| below
// BrownianBelow): the reference of RFAHeadParams.Kernel, which computes
// 1 − E² as −expm1(2e). (It was probes.RFACovariance and RFADecay until
// the kernel was kept in one place.)
func textbookKernel(p *model.RFAHeadParams, lag float64) (V, E float64) {
	s := lag + p.TShift
	E = math.Exp(min(max(-p.Mu*s, p.MinExponent), p.MaxExponent))
	floor := p.Eta2*E*E + p.Gamma2 + p.CovEps
	if math.Abs(p.Mu) < p.BrownianBelow {
		return p.Sigma2*s + floor, E
	}
	return p.Sigma2/(2*p.Mu)*(1-E*E) + floor, E
}

// TestRFAKernelEquivalence: model.RFAHeadParams.Kernel, the kernel the
// forward pass uses, and the textbook form agree on every head of the RFA
// golden cases and the zoo's RFA checkpoints at lags 0 … 4095 and half
// lags (rel. ≤ 1e-12 in V, E equal to the last bit).
func TestRFAKernelEquivalence(t *testing.T) {
	var dirs []string
	entries, _ := os.ReadDir(goldenDir())
	for _, e := range entries {
		dirs = append(dirs, filepath.Join(goldenDir(), e.Name()))
	}
	dirs = append(dirs, filepath.Join("..", "zoo", "checkpoints", "rfa_m1"), filepath.Join("..", "zoo", "checkpoints", "rfa_m2_sc"))
	heads, worst := 0, 0.0
	for _, dir := range dirs {
		if cfg, err := model.LoadConfig(dir); err != nil || cfg.Arch != model.ArchRFA {
			continue
		}
		m, err := model.Load(dir, model.LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ps, _ := m.RFAParams()
		for i := range ps {
			p := &ps[i]
			heads++
			for k := 0; k < 8192; k++ {
				lag := float64(k) / 2
				V, E := p.Kernel(lag)
				v, e := textbookKernel(p, lag)
				if e != E {
					t.Fatalf("%s layer %d head %d lag %g: E %v (Kernel) vs %v (textbook)", dir, p.Layer, p.Head, lag, E, e)
				}
				worst = max(worst, math.Abs(v-V)/V)
				if math.Abs(v-V) > 1e-12*V {
					t.Fatalf("%s layer %d head %d lag %g: V %v (Kernel) vs %v (textbook)", dir, p.Layer, p.Head, lag, V, v)
				}
			}
		}
	}
	if heads == 0 {
		t.Skip("no RFA checkpoint found (golden cases in ../shared/golden, zoo/checkpoints/rfa_m1)")
	}
	t.Logf("%d heads, largest relative difference in V %.2g", heads, worst)
}
