package analytic

import (
	"math"
	"testing"

	"gonum.org/v1/gonum/mat"
)

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.IsNaN(got) || math.Abs(got-want) > tol {
		t.Errorf("%s = %.12g, want %.12g (±%g)", what, got, want, tol)
	}
}

func TestKernelLimitsAndRegimes(t *testing.T) {
	k := Kernel{Mu: 0.5, Sigma: 0.3, Eta: 0.2, Gamma: 0.1}
	// V(0) = η² + γ², V(∞) = β = γ² + σ²/(2μ).
	near(t, "V(0)", k.V(0), 0.04+0.01, 1e-15)
	near(t, "V(∞)", k.V(1e6), 0.01+0.09, 1e-15)
	near(t, "β", k.Beta(), 0.1, 1e-15)
	// α/β of the Fig. 3 legends (notes 000 §C): σ=0.3, η=0.2 → (0.04−0.09)/0.1 = −0.5.
	near(t, "α/β σ=0.3", k.Alpha()/k.Beta(), -0.5, 1e-12)
	near(t, "α/β σ=0.2", Kernel{0.5, 0.2, 0.2, 0.1}.Alpha(), 0, 1e-15)
	near(t, "α/β η=0.5", Kernel{0.5, 0.2, 0.5, 0.1}.Alpha()/Kernel{0.5, 0.2, 0.5, 0.1}.Beta(), 4.2, 1e-12)
	near(t, "α/β η=4", Kernel{0.5, 0.2, 4, 0.1}.Alpha()/Kernel{0.5, 0.2, 4, 0.1}.Beta(), 319.2, 1e-9)
	near(t, "α/β σ=2", Kernel{0.5, 2, 0.2, 0.1}.Alpha()/Kernel{0.5, 2, 0.2, 0.1}.Beta(), -3.96/4.01, 1e-12)

	// Closed forms of App. B.4.1 (notes 000 §B items 7–8).
	integ := Kernel{Mu: 0.5, Sigma: 0.2, Eta: 1.0, Gamma: 0.1}
	a, b := integ.Alpha(), integ.Beta()
	for _, tau := range []float64{0, 0.3, 1, 4, 9} {
		sig := 1 / (1 + math.Exp(-(2*integ.Mu*tau - math.Log(a/b))))
		near(t, "integrative P", integ.P(tau), sig/b, 1e-12)
		sp := math.Log1p(math.Exp(math.Log(a/b) - 2*integ.Mu*tau))
		near(t, "integrative B", integ.B(tau), -math.Log(b)-sp, 1e-12)
	}
	diff := Kernel{Mu: 0.5, Sigma: 2, Eta: 0.2, Gamma: 0.1}
	ap, bd := -diff.Alpha(), diff.Beta()
	for _, tau := range []float64{0, 0.5, 2, 7} {
		near(t, "diffusive P", diff.P(tau), 1/(bd-ap*math.Exp(-2*diff.Mu*tau)), 1e-12)
	}
	// Integrative gates open (P rises), diffusive gates close (P falls).
	if !(integ.P(5) > integ.P(0)) || !(diff.P(5) < diff.P(0)) {
		t.Errorf("regimes: integrative P %g→%g, diffusive P %g→%g", integ.P(0), integ.P(5), diff.P(0), diff.P(5))
	}
}

func TestKernelBrownianLimit(t *testing.T) {
	br := Kernel{Mu: 0, Sigma: 1.2, Eta: 0.2, Gamma: 0.1}
	if !br.Brownian() {
		t.Fatal("μ = 0 should use the Brownian branch")
	}
	near(t, "Brownian V(3)", br.V(3), 1.44*3+0.04+0.01, 1e-14)
	// Just above the cutoff, the OU kernel agrees with the Brownian one to O(μΔt).
	ou := Kernel{Mu: 2e-5, Sigma: 1.2, Eta: 0.2, Gamma: 0.1}
	// First order in μΔt: V_OU − V_Br ≈ −σ²μΔt² − 2μΔt·η².
	near(t, "OU(μ→0) V(3)", ou.V(3), br.V(3)-1.44*2e-5*9-2*2e-5*3*0.04, 5e-8) // second order ≈ 1.1e-8
	near(t, "B = −log V", br.B(2), -math.Log(br.V(2)), 0)
}

func TestBanks(t *testing.T) {
	w := RoPEBank(16, 10000)
	near(t, "ω_0", w[0], 1, 0)
	near(t, "ω_15", w[15], math.Pow(10000, -15.0/16), 1e-15)
	sc := SpectralBank(8, 16, 10000)
	// Notes 000 §A.5 table: head 0 band [1.075e-4, 3.162e-4], head 7 max 1.
	near(t, "head0 min", sc[0][0], math.Pow(10000, -127.0/128), 1e-18)
	near(t, "head0 max", sc[0][15], math.Pow(10, -3.5), 1e-15)
	near(t, "head7 max", sc[7][15], 1, 0)
	mu := CoupledDecays(sc, 0.05, 0.25)
	want := []float64{0, 0, 0.05 * math.Pow(10, -2.5), 0.05 * 1e-2, 0.05 * math.Pow(10, -1.5), 0.05 * 0.1, 0.05 * math.Pow(10, -0.5), 0.05}
	for h := range want {
		near(t, "μ_h", mu[h], want[h], 1e-15)
	}
	re, im := Eigenvalues(0.3, []float64{1, 0.5})
	if len(re) != 4 || re[1] != -0.3 || im[0] != 1 || im[1] != -1 || im[3] != -0.5 {
		t.Errorf("eigenvalues = %v %v", re, im)
	}
}

func TestLTIClosedForms(t *testing.T) {
	s := RFAFig1System()
	// A = −μI + ωJ with μ = 0.1, ω = 1: e^{AΔt} = e^{−μΔt} R(ωΔt).
	phi := s.Transition(2)
	e := math.Exp(-0.2)
	near(t, "Φ11", phi.At(0, 0), e*math.Cos(2), 1e-12)
	near(t, "Φ12", phi.At(0, 1), -e*math.Sin(2), 1e-12)
	near(t, "Φ21", phi.At(1, 0), e*math.Sin(2), 1e-12)
	// With isotropic Q = qI the rotation commutes: V(Δt) = q(1 − e^{−2μΔt})/(2μ)·I
	// (RFA Eq. 5, φ of §A.0 step 10), and V_B(−τ) = q(e^{2μτ} − 1)/(2μ)·I.
	q := 0.02
	iso := LTI2{A: s.A, Q: mat.NewDense(2, 2, []float64{q, 0, 0, q}), R: s.R}
	for _, tau := range []float64{0.5, 3, 10} {
		v := iso.ProcessCov(tau)
		want := q * (1 - math.Exp(-2*0.1*tau)) / (2 * 0.1)
		near(t, "V11", v.At(0, 0), want, 1e-12)
		near(t, "V22", v.At(1, 1), want, 1e-12)
		near(t, "V12", v.At(0, 1), 0, 1e-12)
		vb := iso.ProcessCov(-tau)
		near(t, "V_B11", vb.At(0, 0), q*(math.Exp(2*0.1*tau)-1)/(2*0.1), 1e-12)
	}
	// V^C(0) = R: a measurement transported by zero lag keeps its own noise.
	vc := s.MeasurementCov(0)
	near(t, "V^C(0)", vc.At(0, 1), 0.075, 1e-15)
	// Forward transport attenuates R, backward transport amplifies it (Fig. 1's message):
	// tr(Φ R Φᵀ) = e^{−2μΔt} tr R for a rotation-times-decay Φ.
	zeroQ := LTI2{A: s.A, Q: mat.NewDense(2, 2, nil), R: s.R}
	near(t, "tr V^C(+5)", zeroQ.MeasurementCov(5).Trace(), math.Exp(-1)*0.5, 1e-12)
	near(t, "tr V^C(−5)", zeroQ.MeasurementCov(-5).Trace(), math.Exp(1)*0.5, 1e-12)
}

func TestAggregateStaticState(t *testing.T) {
	// A = 0, Q = 0 (a constant state), R = rI: transported estimates are the
	// raw measurements, all with precision 1/r, so the aggregate at i is the
	// plain mean of the others with covariance r/(n−1)·I.
	r := 0.3
	s := LTI2{A: mat.NewDense(2, 2, nil), Q: mat.NewDense(2, 2, []float64{1e-30, 0, 0, 1e-30}), R: mat.NewDense(2, 2, []float64{r, 0, 0, r})}
	smp, err := s.Simulate([2]float64{1, -2}, 1, 0.01, 11, 7)
	if err != nil {
		t.Fatal(err)
	}
	ag, err := s.AggregateAt(smp, 4)
	if err != nil {
		t.Fatal(err)
	}
	var m1, m2 float64
	for j := range smp.Z1 {
		if j != 4 {
			m1 += smp.Z1[j] / 10
			m2 += smp.Z2[j] / 10
		}
	}
	near(t, "mean1", ag.Mean[0], m1, 1e-9)
	near(t, "mean2", ag.Mean[1], m2, 1e-9)
	near(t, "cov11", ag.Cov[0][0], r/10, 1e-9)
	near(t, "cov12", ag.Cov[0][1], 0, 1e-9)
	if len(ag.Hat1) != 10 || !ag.Forward[3] || ag.Forward[4] {
		t.Errorf("estimates: %d, forward flags %v", len(ag.Hat1), ag.Forward)
	}
	xs, ys, err := Ellipse([2]float64{1, 2}, [2][2]float64{{4, 0}, {0, 1}}, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	// 2σ ellipse of diag(4, 1): semi-axes 4 and 2.
	near(t, "ellipse x0", xs[0], 1+4, 1e-12)
	near(t, "ellipse y1", ys[1], 2+2, 1e-12)
}
