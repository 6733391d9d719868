package probes

import (
	"math"
	"math/rand/v2"
	"testing"
)

// rowStats computes RowStats (with B) for one row of row-major values.
func rowStats(alpha []float32, V []float32, d int) RowStats {
	e, S, B := make([]float64, d), make([]float64, d), make([]float64, d)
	v := rowsOf(V, d, d)
	Moments(e, S, alpha, v, TwoPass)
	SandwichMeat(B, e, alpha, v)
	return RowStats{NEff: NEff(alpha), SumAlpha: SumAlpha(alpha), S: S, B: B}
}

// TestOneHotIdentities: paper Sec. 3.1 / App. F: at n_eff = 1, S = 0 and
// Eq. 6 gives λobs = (1+ν)/(ν σ0²) = 2·d_head with the defaults, so
// K(λ=1) = 2d/(2d+1) (notes §A.2: 256 and 256/257 for d_head = 128).
func TestOneHotIdentities(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, d := range []int{1, 16, 64, 128} {
		for _, n := range []int{1, 7, 300} {
			V := randValues(rng, n, d, d, 0, 1)
			st := rowStats(oneHot(n, n-1), V, d)
			wantL := 2 * float64(d)
			wantK := wantL / (wantL + 1)
			for _, r := range []Reduction{FromMean, PerDimMean, Harmonic} {
				l := LambdaOptions{Reduction: r}.Lambda(st)
				if l != wantL {
					t.Errorf("d=%d n=%d %v: λobs = %.17g, want 2·d = %g", d, n, r, l, wantL)
				}
				if k := KalmanGain(l, 1); k != wantK {
					t.Errorf("d=%d n=%d %v: K(λ=1) = %.17g, want %g", d, n, r, k, wantK)
				}
			}
			dim := make([]float64, d)
			LambdaOptions{}.LambdaDim(dim, st)
			if k := KDimMean(dim, 1); math.Abs(k-wantK) > 1e-13 {
				t.Errorf("d=%d n=%d: KDimMean = %.17g, want %g", d, n, k, wantK)
			}
		}
	}
}

// TestLambdaUpperBound: S ≥ 0 gives λobs ≤ (n_eff + 1)·d_head under Eq. 6
// with the defaults, for every reduction; and λobs > 0.
func TestLambdaUpperBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for trial := 0; trial < 200; trial++ {
		n := 1 + rng.IntN(200)
		d := []int{4, 16, 128}[trial%3]
		temp := []float64{0.01, 0.5, 2, 8}[trial%4]
		scale := []float64{1e-4, 0.1, 1, 10}[(trial/4)%4]
		st := rowStats(softmaxRow(rng, n, temp), randValues(rng, n, d, d, 0, scale), d)
		bound := (st.NEff + 1) * float64(d) * (1 + 1e-12)
		for _, r := range []Reduction{FromMean, PerDimMean, Harmonic} {
			l := LambdaOptions{Reduction: r}.Lambda(st)
			if !(l > 0 && l <= bound) {
				t.Errorf("trial %d (n=%d d=%d temp=%g scale=%g) %v: λobs = %g, want in (0, (n_eff+1)·d = %g]",
					trial, n, d, temp, scale, r, l, bound)
			}
		}
	}
}

// TestHarmonicEqualsFromMean: every form's Var_i is affine in its statistic,
// so 1/mean_i Var_i = λ(S̄) for all three forms (no cap).
func TestHarmonicEqualsFromMean(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for trial := 0; trial < 50; trial++ {
		n := 2 + rng.IntN(100)
		st := rowStats(softmaxRow(rng, n, 1.5), randValues(rng, n, 16, 16, 0.2, 1), 16)
		for _, f := range []LambdaForm{REMLPrior, REMLNaive, Sandwich} {
			m := LambdaOptions{Form: f}.Lambda(st)
			h := LambdaOptions{Form: f, Reduction: Harmonic}.Lambda(st)
			if relErr(h, m) > 1e-12 {
				t.Errorf("trial %d %v: harmonic %.17g ≠ from-mean %.17g", trial, f, h, m)
			}
			p := LambdaOptions{Form: f, Reduction: PerDimMean}.Lambda(st)
			if p < m*(1-1e-12) {
				t.Errorf("trial %d %v: per-dim mean %.17g < harmonic %.17g (AM ≥ HM violated)", trial, f, p, m)
			}
		}
	}
}

// TestLambdaFormsByHand: α = (½, ½), v = (0, 2) in every dimension:
// e = 1, S = 1, n_eff = 2, Σα²(v−e)² = ½.
func TestLambdaFormsByHand(t *testing.T) {
	const d = 4
	V := make([]float32, 2*d)
	for i := 0; i < d; i++ {
		V[d+i] = 2
	}
	st := rowStats([]float32{0.5, 0.5}, V, d)
	cases := []struct {
		name string
		o    LambdaOptions
		want float64
	}{
		{"Eq. 6 defaults: (2+1)/(1+1/4)", LambdaOptions{}, 3 / 1.25},
		{"Eq. 6 ν=2 σ0²=0.5: (2+2)/(1+1)", LambdaOptions{Nu: 2, Sigma02: 0.5}, 2},
		{"Eq. 5: (2−1)/1", LambdaOptions{Form: REMLNaive}, 1},
		{"Eq. 13: 1²/½", LambdaOptions{Form: Sandwich}, 2},
		{"Eq. 6 capped at 2", LambdaOptions{LambdaMax: 2}, 2},
		{"Eq. 6 per-dim mean", LambdaOptions{Reduction: PerDimMean}, 3 / 1.25},
	}
	for _, c := range cases {
		if got := c.o.Lambda(st); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%s: λobs = %.17g, want %g", c.name, got, c.want)
		}
	}
	// The golden files' formula, spelled out.
	if got, want := LambdaREML(2, 1, 1, 1.0/d), (2.0+1)/(1+1.0/d); got != want {
		t.Errorf("LambdaREML(2, 1, 1, 1/4) = %g, want golden (neff+1)/(S+1/dh) = %g", got, want)
	}
}

// TestNaiveSingularity: Eq. 5 is singular at n_eff = 1 and at S = 0; the
// implementation returns +Inf (K = 1), never NaN, and LambdaMax caps it.
func TestNaiveSingularity(t *testing.T) {
	const d = 8
	rng := rand.New(rand.NewPCG(17, 18))
	V := randValues(rng, 5, d, d, 0, 1)
	same := make([]float32, 5*d) // identical values: S = 0 with n_eff = 5
	cases := []struct {
		name string
		st   RowStats
		o    LambdaOptions
		want float64
	}{
		{"one-hot (n_eff=1, S=0)", rowStats(oneHot(5, 2), V, d), LambdaOptions{Form: REMLNaive}, math.Inf(1)},
		{"one-hot, per-dim", rowStats(oneHot(5, 2), V, d), LambdaOptions{Form: REMLNaive, Reduction: PerDimMean}, math.Inf(1)},
		{"one-hot, harmonic", rowStats(oneHot(5, 2), V, d), LambdaOptions{Form: REMLNaive, Reduction: Harmonic}, math.Inf(1)},
		{"identical values (S=0)", rowStats(uniform(5), same, d), LambdaOptions{Form: REMLNaive}, math.Inf(1)},
		{"n_eff rounded below 1", RowStats{NEff: 1 - 1e-7, S: []float64{1e-9}}, LambdaOptions{Form: REMLNaive}, math.Inf(1)},
		{"one-hot capped", rowStats(oneHot(5, 2), V, d), LambdaOptions{Form: REMLNaive, LambdaMax: 100}, 100},
		{"one-hot capped, harmonic", rowStats(oneHot(5, 2), V, d), LambdaOptions{Form: REMLNaive, Reduction: Harmonic, LambdaMax: 100}, 100},
		{"sandwich one-hot (B=0)", rowStats(oneHot(5, 2), V, d), LambdaOptions{Form: Sandwich}, math.Inf(1)},
		{"Eq. 6 one-hot stays finite", rowStats(oneHot(5, 2), V, d), LambdaOptions{}, 2 * d},
	}
	for _, c := range cases {
		got := c.o.Lambda(c.st)
		if got != c.want {
			t.Errorf("%s: λobs = %g, want %g", c.name, got, c.want)
		}
		if k := KalmanGain(got, 1); math.IsNaN(k) || (math.IsInf(c.want, 1) && k != 1) {
			t.Errorf("%s: K = %g, want 1 for λobs = +Inf and never NaN", c.name, k)
		}
	}
	if got := LambdaNaive(1, 0); !math.IsInf(got, 1) {
		t.Errorf("LambdaNaive(1, 0) = %g, want +Inf", got)
	}
}

// TestSandwichScaleInvariance: Eq. 13 is invariant to multiplying every
// weight by a constant (App. D), given the normalised estimate Σαv/Σα.
func TestSandwichScaleInvariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	const n, d = 40, 8
	alpha := softmaxRow(rng, n, 1)
	V := randValues(rng, n, d, d, 0, 1)
	v := rowsOf(V, d, d)
	lambdaFor := func(c float32) float64 {
		a := make([]float32, n)
		for j := range a {
			a[j] = c * alpha[j]
		}
		e, S, B := make([]float64, d), make([]float64, d), make([]float64, d)
		Moments(e, S, a, v, TwoPass)
		sa := SumAlpha(a)
		for i := range e {
			e[i] /= sa
		}
		SandwichMeat(B, e, a, v)
		return LambdaOptions{Form: Sandwich}.Lambda(RowStats{SumAlpha: sa, B: B})
	}
	ref := lambdaFor(1)
	for _, c := range []float32{1.0 / 48, 0.37, 3, 1024} {
		if got := lambdaFor(c); relErr(got, ref) > 1e-6 {
			t.Errorf("weights ×%g: λ_sand = %.10g, want %.10g (scale invariance)", c, got, ref)
		}
	}
}

func TestKalmanGain(t *testing.T) {
	cases := []struct {
		name        string
		obs, prior  float64
		want        float64
		exactlyOnly bool
	}{
		{"one-hot d=128", 256, 1, 256.0 / 257, true},
		{"equal precisions", 3, 3, 0.5, true},
		{"λobs=+Inf", math.Inf(1), 1, 1, true},
		{"λobs=0", 0, 1, 0, true},
		{"prior 0", 5, 0, 1, true},
	}
	for _, c := range cases {
		if got := KalmanGain(c.obs, c.prior); got != c.want {
			t.Errorf("%s: KalmanGain(%g, %g) = %.17g, want %.17g", c.name, c.obs, c.prior, got, c.want)
		}
	}
}

func TestLambdaOptionsValidate(t *testing.T) {
	cases := []struct {
		name string
		o    LambdaOptions
		ok   bool
	}{
		{"zero value", LambdaOptions{}, true},
		{"all set", LambdaOptions{Form: Sandwich, Reduction: Harmonic, Nu: 2, Sigma02: 0.1, LambdaMax: 3}, true},
		{"bad form", LambdaOptions{Form: 7}, false},
		{"bad reduction", LambdaOptions{Reduction: -1}, false},
		{"negative ν", LambdaOptions{Nu: -1}, false},
		{"NaN σ0²", LambdaOptions{Sigma02: math.NaN()}, false},
		{"negative cap", LambdaOptions{LambdaMax: -2}, false},
	}
	for _, c := range cases {
		if err := c.o.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", c.name, err, c.ok)
		}
	}
	if got := (LambdaOptions{}).WithDefaults(128); got.Nu != 1 || got.Sigma02 != 1.0/128 {
		t.Errorf("WithDefaults(128) = %+v, want ν=1 σ0²=1/128", got)
	}
}
