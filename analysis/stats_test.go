package analysis

import (
	"math"
	"math/rand/v2"
	"testing"
)

func near(a, b, rel float64) bool {
	if a == b {
		return true
	}
	return math.Abs(a-b) <= rel*math.Max(math.Abs(a), math.Abs(b))
}

func TestMomentsCombineIsExact(t *testing.T) {
	// Values with a large common offset: the naive Σx² − (Σx)²/n loses
	// every digit of the variance here; pooled moments from any split
	// must still match the two-pass moments of all values.
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float64, 1000)
	for i := range x {
		x[i] = 1e8 + rng.NormFloat64()
	}
	want := momentsOf(x)
	for _, cuts := range [][]int{{1}, {7, 500, 501}, {333, 666}, {999}} {
		var got Moments
		prev := 0
		for _, c := range append(cuts, len(x)) {
			got = got.Combine(momentsOf(x[prev:c]))
			prev = c
		}
		if got.N != want.N || !near(got.Mean(), want.Mean(), 1e-14) || !near(got.Std(1), want.Std(1), 1e-8) {
			t.Errorf("cuts %v: got n=%d mean %.17g std %.17g, want n=%d mean %.17g std %.17g",
				cuts, got.N, got.Mean(), got.Std(1), want.N, want.Mean(), want.Std(1))
		}
	}
	if sd := want.Std(1); sd < 0.9 || sd > 1.1 {
		t.Errorf("std of N(1e8, 1) sample = %v", sd)
	}
	// Hand example: {1, 2, 3, 4}: mean 2.5, M2 5, std 1.118 (ddof 0), 1.291 (ddof 1).
	m := momentsOf([]float64{1, 2}).Combine(momentsOf([]float64{3, 4}))
	if m.N != 4 || m.Sum != 10 || m.M2 != 5 || !near(m.Std(0), math.Sqrt(1.25), 1e-15) || !near(m.Std(1), math.Sqrt(5.0/3), 1e-15) {
		t.Errorf("{1,2}+{3,4} = %+v", m)
	}
	if !math.IsNaN((Moments{}).Mean()) || !math.IsNaN((Moments{N: 1, Sum: 3}).Std(1)) {
		t.Error("empty mean or single-value ddof-1 std should be NaN")
	}
}

func TestPearsonSpearmanHand(t *testing.T) {
	// x = 1..5, y = 2,4,5,4,5: Σdxdy = 6, Σdx² = 10, Σdy² = 6, r = 6/√60.
	r, err := pearson([]float64{1, 2, 3, 4, 5}, []float64{2, 4, 5, 4, 5})
	if err != nil || !near(r, 6/math.Sqrt(60), 1e-15) {
		t.Errorf("Pearson = %v, %v; want %v", r, err, 6/math.Sqrt(60))
	}
	// Ties: ranks of x = 1, 2.5, 2.5, 4; y = 1, 3, 2, 4; ρ = 4.5/√22.5.
	rho, err := spearman([]float64{1, 2, 2, 3}, []float64{1, 3, 2, 4})
	if err != nil || !near(rho, 4.5/math.Sqrt(22.5), 1e-15) {
		t.Errorf("Spearman = %v, %v; want %v", rho, err, 4.5/math.Sqrt(22.5))
	}
	if got := ranks([]float64{3, 1, 3, 3, 2}); got[0] != 4 || got[1] != 1 || got[2] != 4 || got[3] != 4 || got[4] != 2 {
		t.Errorf("Ranks = %v, want [4 1 4 4 2]", got)
	}
	if r, _ := pearson([]float64{1, 1, 1}, []float64{1, 2, 3}); !math.IsNaN(r) {
		t.Errorf("constant x: r = %v, want NaN", r)
	}
	if _, err := pearson([]float64{1}, []float64{1}); err == nil {
		t.Error("one pair: want an error")
	}
	if _, err := spearman([]float64{1, 2}, []float64{1}); err == nil {
		t.Error("unequal lengths: want an error")
	}
}

func TestPearsonP(t *testing.T) {
	for _, c := range []struct {
		r    float64
		n    int
		want float64
		why  string
	}{
		// The paper's Fig. 4: r = +0.25 (rounded) over 448 cells, p = 1.3e-7;
		// r = 0.246 reproduces it. Expected values from the regularized
		// incomplete beta I_{df/(df+t²)}(df/2, 1/2), integrated numerically
		// with Python's standard library (Simpson, 2e5 intervals).
		{0.246, 448, 1.3381248445039568e-07, "paper Fig. 4"},
		{0.25, 448, 8.226055429730304e-08, "r = 0.25 exactly"},
		{0.5, 10, 0.14111328124999886, "df 8"},
		{-0.3, 30, 0.1072459480579549, "negative r, df 28"},
		// df = 3 closed form: F(t) = 1/2 + (t/(√3(1 + t²/3)) + atan(t/√3))/π.
		{0.9, 5, 0.03738607346849854, "df 3 closed form"},
		// df = 2: t/√(2 + t²) = |r|, so p = 1 − |r| exactly.
		{0.6, 4, 0.4, "df 2: p = 1 − |r|"},
	} {
		if got := pearsonP(c.r, c.n); !near(got, c.want, 2e-6) {
			t.Errorf("%s: PearsonP(%v, %d) = %.10g, want %.10g", c.why, c.r, c.n, got, c.want)
		}
	}
	if p := pearsonP(1, 10); p != 0 {
		t.Errorf("r = 1: p = %v, want 0", p)
	}
	if p := pearsonP(0, 10); !near(p, 1, 1e-15) {
		t.Errorf("r = 0: p = %v, want 1", p)
	}
	if p := pearsonP(0.5, 2); !math.IsNaN(p) {
		t.Errorf("n = 2: p = %v, want NaN", p)
	}
}

func TestQuantileType7(t *testing.T) {
	s := []float64{1, 2, 3, 4}
	for _, c := range []struct{ q, want float64 }{{0, 1}, {0.25, 1.75}, {0.5, 2.5}, {0.975, 3.925}, {1, 4}} {
		if got := quantile(s, c.q); !near(got, c.want, 1e-15) {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(quantile(nil, 0.5)) {
		t.Error("empty: want NaN")
	}
}

func TestBootstrapPearson(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	n := 200
	x, y := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
		y[i] = 0.5*x[i] + rng.NormFloat64()
	}
	r, _ := pearson(x, y)
	ci, err := bootstrapPearson(x, y, 2000, 0.95, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !(float64(ci.Lo) < r && r < float64(ci.Hi)) || ci.Valid != 2000 || ci.Resamples != 2000 {
		t.Fatalf("CI %+v does not contain r = %v", ci, r)
	}
	// The sampling std of r near ρ = 0.447 with n = 200 is (1 − ρ²)/√n ≈ 0.057,
	// so a 95 % interval is about 4 × 0.057 wide.
	if w := float64(ci.Hi - ci.Lo); w < 0.15 || w > 0.3 {
		t.Errorf("CI width %v, want ≈ 0.22", w)
	}
	again, _ := bootstrapPearson(x, y, 2000, 0.95, 7)
	if again != ci {
		t.Errorf("same seed gave %+v then %+v", ci, again)
	}
	other, _ := bootstrapPearson(x, y, 2000, 0.95, 8)
	if other == ci {
		t.Error("another seed gave the same interval")
	}
	// Perfectly correlated pairs: every defined resample has r = 1.
	lin := []float64{1, 2, 3, 4, 5, 6}
	ci, _ = bootstrapPearson(lin, lin, 500, 0.9, 1)
	if ci.Lo != 1 || ci.Hi != 1 || ci.Valid == 0 || ci.Valid > 500 {
		t.Errorf("y = x: CI %+v, want [1, 1]", ci)
	}
	if _, err := bootstrapPearson(lin, lin, 0, 0.9, 1); err == nil {
		t.Error("0 resamples: want an error")
	}
	if _, err := bootstrapPearson(lin, lin, 10, 1.5, 1); err == nil {
		t.Error("level 1.5: want an error")
	}
}
