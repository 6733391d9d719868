package analytic

import (
	"math"
	"testing"
)

func TestTemperatureSchedules(t *testing.T) {
	eps := 1.0 / 500000
	r := RoPETemperatures(128, eps)
	if len(r) != 64 {
		t.Fatalf("len = %d", len(r))
	}
	near(t, "Θ_0", r[0], 1, 0)
	near(t, "Θ_32", r[32], math.Sqrt(eps), 1e-15)
	tn := TanTemperatures(128, eps)
	near(t, "tan Θ_0", tn[0], 0, 0)
	near(t, "tan Θ_63", tn[63], 1/math.Tan(eps*math.Pi/2), 1e-6*tn[63])
	// Θ = tan(φ/2) at φ = π/2 is 1: with ε = 0 and 3 points, the middle is 1.
	near(t, "tan mid", TanTemperatures(6, 0)[1], 1, 1e-15)
	rel := ReleaseTanTemperatures(128, 0.995, 0.25)
	near(t, "release max", rel[63], 0.25, 1e-15)
	// Both analytic densities integrate to 1 over log10 Θ.
	for _, e := range []float64{1.0 / 500000, 1.0 / 10000} {
		var ir, it float64
		dv := 1e-4
		for v := -12.0; v < 8; v += dv {
			ir += RoPELog10Density(v+dv/2, e) * dv
			it += TanLog10Density(v+dv/2, e) * dv
		}
		near(t, "∫RoPE density", ir, 1, 1e-3)
		near(t, "∫tan density", it, 1, 1e-3)
	}
}

func TestWindowsAndLeakage(t *testing.T) {
	n := 128
	h := Window(WindowHann, n, 0)
	near(t, "hann[0]", h[0], 0, 0)
	near(t, "hann[N−1]", h[n-1], 0, 1e-15)
	near(t, "hann symmetric", h[10], h[n-11], 1e-15)
	e := Window(WindowExp, n, 0.05)
	near(t, "exp[N−1]", e[n-1], 1, 0)
	near(t, "exp[N−11]", e[n-11], math.Exp(-0.5), 1e-15)

	// An on-bin tone under the rectangular window: all energy in bin 10,
	// 0 dB at 10 cycles, no leakage.
	on := Signal(n, Tone{Amp: 1, Freq: 10})
	rect := Window(WindowRect, n, 0)
	sp := WindowedSpectrum(on, rect, n, -200)
	near(t, "on-bin peak", sp.Peak, 10, 0)
	near(t, "on-bin level", sp.LevelAt(10), 0, 1e-9)
	near(t, "on-bin leakage", Leakage(on, rect, 10, 0), 0, 1e-12)
	// Parseval: Σ|V_k|² = N Σ x².
	v := DFT(on, n)
	var ev, ex float64
	for k := range v {
		ev += real(v[k])*real(v[k]) + imag(v[k])*imag(v[k])
	}
	for _, x := range on {
		ex += x * x
	}
	near(t, "Parseval", ev, float64(n)*ex, 1e-8)

	// Off-bin (10.37 cycles): the rectangular window leaks, Hann much less,
	// and the zero-padded Hann spectrum peaks at the true frequency.
	off := Signal(n, Tone{Amp: 1, Freq: 10.37, Phase: 0.3})
	lr, lh := Leakage(off, rect, 10, 2), Leakage(off, h, 10, 2)
	if !(lr > 10*lh) || lh > 1e-3 {
		t.Errorf("leakage rect %g, hann %g", lr, lh)
	}
	sh := WindowedSpectrum(off, h, 1024, -200)
	near(t, "hann peak", sh.Peak, 10.37, 0.07)
}

func TestRotateAndSphereWalk(t *testing.T) {
	x, z := Vec3{1, 0, 0}, Vec3{0, 0, 1}
	y := Rotate(x, z, math.Pi/2)
	near(t, "R(π/2)x·ŷ", y[1], 1, 1e-15)
	near(t, "R(π/2)x·x̂", y[0], 0, 1e-15)
	tg := Tangent(Vec3{0, 0, 1}, Vec3{1, 2, 3})
	near(t, "P_T removes radial", tg[2], 0, 0)

	// σ_t = 0: a pure rotation, on the sphere, back at the start after 2π/ω.
	w := SphereWalk{Omega: 1, Axis: Vec3{0.3, 0.2, 1}, M0: 1, H: 2 * math.Pi / 1000, Steps: 1000, U0: Vec3{1, 0, 0.5}}
	p, err := w.Simulate()
	if err != nil {
		t.Fatal(err)
	}
	end, start := p.U[len(p.U)-1], p.U[0]
	near(t, "closed orbit", GeodesicSq(end, start), 0, 1e-18)
	near(t, "unit norm", p.U[500].Norm(), 1, 1e-14)
	// The angle to the axis is conserved by the rotation.
	ax := w.Axis.Unit()
	near(t, "axis angle", p.U[321].Dot(ax), start.Dot(ax), 1e-12)

	// Pure tangential noise: E θ² ≈ 2σ_t² t/m0² for small t (two tangent
	// dimensions; notes 004 §C.1 check (a)).
	const paths = 2000
	sig, tEnd := 0.3, 0.05
	var msd float64
	for s := 0; s < paths; s++ {
		p, err := SphereWalk{SigmaT: sig, M0: 1, H: 1e-3, Steps: 50, U0: Vec3{0, 1, 0}, Seed: uint64(s + 1)}.Simulate()
		if err != nil {
			t.Fatal(err)
		}
		msd += GeodesicSq(p.U[0], p.U[len(p.U)-1]) / paths
	}
	near(t, "MSD", msd, 2*sig*sig*tEnd, 0.1*2*sig*sig*tEnd)

	o := Ortho{Az: -60 * math.Pi / 180, El: 25 * math.Pi / 180}
	eye := Vec3{math.Cos(o.El) * math.Cos(o.Az), math.Cos(o.El) * math.Sin(o.Az), math.Sin(o.El)}
	px, py, d := o.Project(eye)
	near(t, "eye x", px, 0, 1e-15)
	near(t, "eye y", py, 0, 1e-15)
	near(t, "eye depth", d, 1, 1e-15)
	_, zy, _ := o.Project(Vec3{0, 0, 1})
	near(t, "north pole height", zy, math.Cos(o.El), 1e-15)
}

func TestBFTFormulas(t *testing.T) {
	// A one-hot row (n_eff = 1, S = 0) at σ0² = 1/128: λobs = 256, K = 256/257
	// (notes 003 F.2 #15).
	l := BFTLambdaObs(1, 0, 1.0/128)
	near(t, "λobs", l, 256, 1e-12)
	near(t, "K", BFTGain(l, 1), 256.0/257, 1e-15)
	lam, err := FitPriorPrecision(40, 0.9)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "K_opt at the fit point", BFTGain(40, lam), 0.9, 1e-15)
	if _, err := FitPriorPrecision(40, 1); err == nil {
		t.Error("K = 1 should be refused")
	}
	// Paper Fig. 4: r ≈ 0.246 over 448 cells gives p ≈ 1.3e-7 (notes 003 §B.6).
	p := PearsonP(0.246, 448)
	if p < 1.0e-7 || p > 1.6e-7 {
		t.Errorf("p(0.246, 448) = %g, want ≈ 1.3e-7", p)
	}
	r, p, err := Pearson([]float64{1, 2, 3, 4}, []float64{8, 6, 4, 2})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "r", r, -1, 1e-15)
	near(t, "p", p, 0, 0)
	// r = 0 has p = 1.
	near(t, "p(0)", PearsonP(0, 50), 1, 1e-12)
}
