package probes

import (
	"math"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestRTKernelIdentities: notes 004 §A.18. e^L = κ·w(d²) with d² = κ‖R‖²
// and ‖R‖² = 2 − 2c (#2, Eqs. 11, 14); Σ(0) = η² + γ² and φ(μ, Δt) → Δt as
// μ → 0 (#8); the two kernels agree for σ̃² = σ²/(2μ).
func TestRTKernelIdentities(t *testing.T) {
	p := model.RTHeadParams{C: 4, Mu: 0.3, Sigma2: 0.7, Eta2: 0.4, Gamma2: 0.1, TauTheta2: 0.2, Nu: 5, Beta: 1.5,
		RobustD: 4, RobustExp: (5 + 4) / 4.0, Kernel: "alg1", KappaEps: 1e-6, MinExponent: -50}
	for _, kc := range [][2]float64{{0.5, 0.9}, {3, -0.2}, {12, 0.1}} {
		kappa, c := kc[0], kc[1]
		want := math.Log(kappa) + math.Log(RTRobustWeight(&p, RTWhitenedDistance(kappa, c)))
		if got := p.Logit(kappa, 2-2*c); math.Abs(got-want) > 1e-12 {
			t.Fatalf("κ=%v c=%v: L = %v, log κ·w = %v", kappa, c, got, want)
		}
	}
	if v := p.KeyVariance(0); math.Abs(v-(p.Eta2+p.Gamma2)) > 1e-15 {
		t.Fatalf("Σ(0) = %v, want η²+γ²", v)
	}
	q := p
	q.Kernel, q.Sigma2 = "prop1", p.Sigma2*2*p.Mu
	for _, lag := range []float64{0, 1, 7, 40} {
		if a, b := p.KeyVariance(lag), q.KeyVariance(lag); math.Abs(a-b) > 1e-12 {
			t.Fatalf("lag %v: alg1 %v vs prop1 with σ² = 2μσ̃²: %v", lag, a, b)
		}
	}
	q.Mu = 1e-9
	z := q
	z.Mu = 0
	if a, b := q.KeyVariance(5), z.KeyVariance(5); math.Abs(a-b) > 1e-7 {
		t.Fatalf("μ → 0: %v, μ = 0 (σ²Δt): %v", a, b)
	}
	if s := RTALiBiSlope(&p); math.Abs(s-2*0.3*1.5) > 1e-15 {
		t.Fatal(s)
	}
}

// TestRTRecorderAndCollector runs an RT model with the Collector streamed
// and an RTRecorder: the Collector's ‖e‖ = ‖Σ_j A_ij Ṽ_j‖ on the streamed
// rows is the concentration ‖ū_i‖ (rotation keeps norms), ‖ū‖ ≤ 1, and the
// recorded tangent norm is the norm of hook_z (up to the cancellation in
// ‖ū‖² − ρ², checked on squares).
func TestRTRecorderAndCollector(t *testing.T) {
	m := smallModel(t, model.ArchRT, model.Size{Layers: 2, DModel: 24, Heads: 3, KVHeads: 3, Vocab: 41, MaxPos: 64}, 2)
	cfg := m.Config
	B, T := 2, 20
	col, err := NewCollector(B, cfg.Layers, cfg.Heads, T, cfg.DHead, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := NewRTRecorder(B, cfg.Layers, cfg.Heads, T, cfg.DHead)
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, col)
	rec.Register(hs)
	zc := hs.Capture("blocks.*.attn.hook_z")
	if _, err := m.Forward(bftIDs(B, T, cfg.Vocab), model.Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	for b := 0; b < B; b++ {
		for l := 0; l < cfg.Layers; l++ {
			z := zc.Get(hooks.Name("blocks.{l}.attn.hook_z", l)).Data().([]float32)
			for h := 0; h < cfg.Heads; h++ {
				for tq := 0; tq < T; tq++ {
					i := rec.Index(b, l, h, tq)
					if c := rec.Concentration[i]; c > 1+1e-6 || math.Abs(c-float64(col.ENorm[col.Index(b, l, h, tq)])) > 1e-5 {
						t.Fatalf("cell (%d,%d,%d,%d): ‖ū‖ %v, Collector ‖e‖ %v", b, l, h, tq, c, col.ENorm[col.Index(b, l, h, tq)])
					}
					zz := z[((b*T+tq)*cfg.Heads+h)*cfg.DHead:][:cfg.DHead]
					var s float64
					for _, v := range zz {
						s += float64(v) * float64(v)
					}
					// Squares: at t = 0, ū = v̂ and the difference of squares cancels.
					if tn := rec.TangentNorm[i]; math.Abs(s-tn*tn) > 1e-6 {
						t.Fatalf("cell (%d,%d,%d,%d): ‖Πū‖ %v, ‖hook_z‖ %v", b, l, h, tq, rec.TangentNorm[i], math.Sqrt(s))
					}
					if !(rec.Magnitude[i] > 0) || math.IsNaN(rec.LogPrecision[i]) || math.IsNaN(rec.StepSize[i]) {
						t.Fatalf("cell %d: magnitude %v, log precision %v, step %v", i, rec.Magnitude[i], rec.LogPrecision[i], rec.StepSize[i])
					}
				}
			}
		}
	}
	if n := col.NEff[col.Index(0, 1, 2, T-1)]; !(n >= 1 && n <= float32(T)) {
		t.Fatalf("n_eff %v", n)
	}
}
