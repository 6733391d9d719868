package probes

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func oneHot(n, k int) []float32 {
	row := make([]float32, n)
	row[k] = 1
	return row
}

func uniform(n int) []float32 {
	row := make([]float32, n)
	for j := range row {
		row[j] = float32(1 / float64(n))
	}
	return row
}

func TestNEffIdentities(t *testing.T) {
	cases := []struct {
		name  string
		alpha []float32
		want  float64 // both NEff and NEffEntropy
		tol   float64 // relative
	}{
		{"one-hot t=0", oneHot(1, 0), 1, 0},
		{"one-hot first of 48", oneHot(48, 0), 1, 0},
		{"one-hot last of 4096", oneHot(4096, 4095), 1, 0},
		{"two equal", []float32{0.5, 0.5}, 2, 0},
		{"uniform t+1=3", uniform(3), 3, 1e-6},
		{"uniform t+1=48", uniform(48), 48, 1e-6},
		{"uniform t+1=1000", uniform(1000), 1000, 1e-6},
		{"uniform t+1=10000", uniform(10000), 10000, 1e-6},
		{"uniform with exact zeros elsewhere", []float32{0, 0.25, 0, 0.25, 0.25, 0.25, 0}, 4, 0},
	}
	for _, c := range cases {
		if got := NEff(c.alpha); relErr(got, c.want) > c.tol {
			t.Errorf("%s: NEff = %.10g, want %g (rel tol %g)", c.name, got, c.want, c.tol)
		}
		if got := NEffEntropy(c.alpha); relErr(got, c.want) > c.tol+1e-12 {
			t.Errorf("%s: NEffEntropy = %.10g, want %g (rel tol %g)", c.name, got, c.want, c.tol)
		}
	}
}

func TestNEffBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, temp := range []float64{0.1, 1, 3, 10} {
		for _, n := range []int{1, 2, 17, 500} {
			a := softmaxRow(rng, n, temp)
			ne, nh := NEff(a), NEffEntropy(a)
			if ne < 1-1e-6 || ne > float64(n)*(1+1e-6) {
				t.Errorf("temp %g n %d: NEff = %g outside [1, %d]", temp, n, ne, n)
			}
			if ne > nh*(1+1e-9) {
				t.Errorf("temp %g n %d: NEff %g > NEffEntropy %g (Rényi-2 ≤ Shannon)", temp, n, ne, nh)
			}
		}
	}
}

func TestBOSAndColumnMass(t *testing.T) {
	a := []float32{0.5, 0.25, 0.125, 0.125}
	cases := []struct {
		name string
		keys []int
		want float64
	}{
		{"bos", []int{0}, 0.5},
		{"two keys", []int{0, 2}, 0.625},
		{"all", []int{0, 1, 2, 3}, 1},
		{"beyond the causal row ignored", []int{1, 4, 100}, 0.25},
		{"negative ignored", []int{-1, 3}, 0.125},
		{"none", nil, 0},
	}
	for _, c := range cases {
		if got := ColumnMass(a, c.keys); got != c.want {
			t.Errorf("%s: ColumnMass(%v) = %g, want %g", c.name, c.keys, got, c.want)
		}
	}
	if got := BOSMass(a); got != 0.5 {
		t.Errorf("BOSMass = %g, want 0.5", got)
	}
	if got := BOSMass(nil); got != 0 {
		t.Errorf("BOSMass(empty) = %g, want 0", got)
	}
}

func TestGateReductions(t *testing.T) {
	if got := GateMean([]float32{0.25, 0.75, 0.5, 0.5}); got != 0.5 {
		t.Errorf("GateMean = %g, want 0.5", got)
	}
	if got := GateMean(nil); !math.IsNaN(got) {
		t.Errorf("GateMean(empty) = %g, want NaN", got)
	}
	if got := GateHeadwise(0.25); got != 0.25 {
		t.Errorf("GateHeadwise = %g, want 0.25", got)
	}
}

// TestMomentsOneHot: at n_eff = 1 the estimate is the attended value and
// S = 0 exactly (paper Sec. 3.1 pathology; notes §F.2.15).
func TestMomentsOneHot(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const d = 16
	for _, n := range []int{1, 5, 64} {
		for _, k := range []int{0, n / 2, n - 1} {
			V := randValues(rng, n, d, d+3, 0.3, 2)
			e, S := make([]float64, d), make([]float64, d)
			for _, m := range []MomentsMethod{TwoPass, Expanded} {
				Moments(e, S, oneHot(n, k), rowsOf(V, d+3, d), m)
				for i := range e {
					if e[i] != float64(V[k*(d+3)+i]) || S[i] != 0 {
						t.Fatalf("%v n=%d k=%d dim %d: e=%g (want %g), S=%g (want 0)",
							m, n, k, i, e[i], V[k*(d+3)+i], S[i])
					}
				}
			}
		}
	}
}

// TestMomentsKernelsAgree: the func-based and strided kernels, and the
// expanded form on well-conditioned O(1) data, agree.
func TestMomentsKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		n, d, vStride int
	}{{1, 4, 4}, {3, 5, 7}, {4, 16, 16}, {9, 16, 19}, {130, 128, 128}} {
		alpha := softmaxRow(rng, c.n, 2)
		V := randValues(rng, c.n, c.d, c.vStride, 0.1, 1)
		e1, S1, B1 := make([]float64, c.d), make([]float64, c.d), make([]float64, c.d)
		e2, S2, B2 := make([]float64, c.d), make([]float64, c.d), make([]float64, c.d)
		e3, S3, B3 := make([]float64, c.d), make([]float64, c.d), make([]float64, c.d)
		Moments(e1, S1, alpha, rowsOf(V, c.vStride, c.d), TwoPass)
		SandwichMeat(B1, e1, alpha, rowsOf(V, c.vStride, c.d))
		MomentsStrided(e2, S2, B2, alpha, V, c.vStride, TwoPass)
		MomentsStrided(e3, S3, B3, alpha, V, c.vStride, Expanded)
		// The expanded form equals the centred one plus e²(1 − Σα): float32
		// softmax rows sum to 1 only within ~1e-7.
		short := 1 - SumAlpha(alpha)
		for i := 0; i < c.d; i++ {
			for _, x := range []struct {
				what      string
				got, want float64
				tol       float64
			}{
				{"strided e", e2[i], e1[i], 1e-13},
				{"strided S", S2[i], S1[i], 1e-13},
				{"strided B", B2[i], B1[i], 1e-13},
				{"expanded e", e3[i], e1[i], 1e-13},
				{"expanded S", S3[i], S1[i] + e1[i]*e1[i]*short, 1e-12},
				{"expanded B", B3[i], B1[i], 1e-12},
			} {
				if math.Abs(x.got-x.want) > x.tol*math.Max(1, math.Abs(x.want)) {
					t.Errorf("n=%d d=%d stride=%d dim %d: %s = %.17g, want %.17g", c.n, c.d, c.vStride, i,
						x.what, x.got, x.want)
				}
			}
		}
	}
}

// exactS returns Σα(v−e)² with e = Σαv for dimension 0, in 256-bit
// floating point (exact enough to be the reference).
func exactS(alpha []float32, v func(j int) []float32) float64 {
	const prec = 256
	e := new(big.Float).SetPrec(prec)
	for j, a := range alpha {
		x := new(big.Float).SetPrec(prec).SetFloat64(float64(a))
		x.Mul(x, new(big.Float).SetPrec(prec).SetFloat64(float64(v(j)[0])))
		e.Add(e, x)
	}
	S := new(big.Float).SetPrec(prec)
	for j, a := range alpha {
		r := new(big.Float).SetPrec(prec).SetFloat64(float64(v(j)[0]))
		r.Sub(r, e)
		r.Mul(r, r)
		r.Mul(r, new(big.Float).SetPrec(prec).SetFloat64(float64(a)))
		S.Add(S, r)
	}
	f, _ := S.Float64()
	return f
}

// TestStableVsExpandedLargeOffset shows why TwoPass is the default: with a
// large common offset (values 1e4 + a few float32 ulps, S/e² ≈ 1e-14) the
// expanded form Σαv² − e² loses most digits (or clamps to 0), while the
// two-pass form stays accurate to ~1e-9 or better. Softmax rows add a second
// error to the expanded form, e²(1 − Σα) with 1 − Σα ~ 1e-8 from float32
// rounding; the dyadic uniform rows sum to 1 exactly and show the
// cancellation alone.
func TestStableVsExpandedLargeOffset(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const ulp = 1.0 / 1024 // float32 spacing at 1e4
	cases := []struct {
		name    string
		n       int
		softmax bool // else uniform 1/n (n a power of 2: Σα = 1 exactly)
		steps   int  // noise = k·ulp, |k| ≤ steps
	}{
		{"softmax row n=64, noise ±3 ulp", 64, true, 3},
		{"softmax row n=1000, noise ±1 ulp", 1000, true, 1},
		{"softmax row n=4096, noise ±30 ulp", 4096, true, 30},
		{"exact-sum row n=1024, noise ±3 ulp", 1024, false, 3},
		{"exact-sum row n=4096, noise ±30 ulp", 4096, false, 30},
	}
	for _, c := range cases {
		alpha := uniform(c.n)
		if c.softmax {
			alpha = softmaxRow(rng, c.n, 1)
		}
		V := make([]float32, c.n)
		for j := range V {
			V[j] = float32(1e4 + float64(rng.IntN(2*c.steps+1)-c.steps)*ulp)
		}
		v := rowsOf(V, 1, 1)
		want := exactS(alpha, v)
		e, S := make([]float64, 1), make([]float64, 1)
		Moments(e, S, alpha, v, TwoPass)
		stable := S[0]
		Moments(e, S, alpha, v, Expanded)
		expanded := S[0]
		rs, rx := relErr(stable, want), relErr(expanded, want)
		t.Logf("%s: exact S = %.6g (S/e² = %.1e, 1−Σα = %.1e); two-pass rel err %.1e; expanded rel err %.1e (S = %.6g)",
			c.name, want, want/1e8, 1-SumAlpha(alpha), rs, rx, expanded)
		if rs > 1e-9 {
			t.Errorf("%s: two-pass S = %.17g, exact %.17g: rel err %.2g > 1e-9", c.name, stable, want, rs)
		}
		if rx < 1e-4 {
			t.Errorf("%s: expanded S = %.17g, exact %.17g: rel err %.2g; expected ≥ 1e-4 (cancellation)",
				c.name, expanded, want, rx)
		}
	}
}

func TestMomentsPanicsOnShapeMismatch(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Errorf("Moments with len(e)=2, len(S)=3 did not panic")
		}
	}()
	Moments(make([]float64, 2), make([]float64, 3), []float32{1}, func(int) []float32 { return []float32{1, 2} }, TwoPass)
}
