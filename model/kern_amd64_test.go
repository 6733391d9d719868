//go:build amd64

package model

import (
	"github.com/filterlens/probe/model/internal/kern"
	"math"
	"math/rand/v2"
	"testing"
)

func init() {
	if kern.Available() {
		tileImpls = append(tileImpls, tileImpl{"softmaxTileGo on softmaxRowStatsAVX512", softmaxTileGo, softmaxRowStatsAVX512})
	}
}

// TestSoftmaxAVX512: the assembly softmax row equals softmaxRowStatsGo
// within 4 ulp per weight (fused multiply-adds, summation order; below
// e^−87.3 the assembly gives 0, Go a subnormal) for every length of tail
// (1 … 70 weights, with and without a window offset) and scores of small
// and wide range; Σα and Σα² are within 1e-6 of float64 sums of its own weights
// and the entropy is the Go one's within 1e-6·(2 + H), and so is g = Σα·w
// relative to Σα|w|; NaN and +Inf scores
// show as NaN weights, −Inf as a 0 weight; shiftSquareFast equals
// shiftSquareGo bit for bit.
func TestSoftmaxAVX512(t *testing.T) {
	if !kern.Available() {
		t.Skip("this CPU has no AVX-512F+BMI2: the build uses softmaxRowStatsGo")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	worstW, worstS := 0.0, 0.0
	for n := 1; n <= 70; n++ {
		for _, lo := range []int{0, n / 3} {
			for _, sd := range []float64{0.5, 5, 40} {
				x := make([]float32, n)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * sd)
				}
				want, got := append([]float32(nil), x...), append([]float32(nil), x...)
				keys := make([]float32, n)
				for i := range keys {
					keys[i] = float32(rng.NormFloat64())
				}
				w1, w2, we, wg, _ := softmaxRowStatsGo(want, lo, 0, noSink, true, keys)
				g1, g2, ge, gg, _ := softmaxRowStatsAVX512(got, lo, 0, noSink, true, keys)
				for i := range want {
					ulp := float64(math.Nextafter32(want[i], 2) - want[i])
					if want[i] < 1e-30 { // near or below e^−87.3: subnormal in Go, 0 in the assembly
						if math.Abs(float64(got[i]-want[i])) > 1e-36 {
							t.Fatalf("n=%d lo=%d: weight %d = %v, want %v", n, lo, i, got[i], want[i])
						}
						continue
					}
					worstW = max(worstW, math.Abs(float64(got[i]-want[i]))/ulp)
				}
				// Σα and Σα² are (nearly) float64 sums of the assembly's own weights;
				// the entropy is the Go one's up to the weights' rounding
				var s1, s2 float64
				for _, a := range got {
					s1 += float64(a)
					s2 += float64(a) * float64(a)
				}
				for _, p := range [][2]float64{{g1, s1}, {g2, s2}} {
					worstS = max(worstS, math.Abs(p[0]-p[1])/p[1])
				}
				if math.Abs(g1-w1) > 1e-6 || math.Abs(g2-w2) > 1e-6*w2 || math.Abs(ge-we) > 1e-6*(2+we) {
					t.Fatalf("n=%d lo=%d: Σα, Σα², entropy %v %v %v, Go %v %v %v", n, lo, g1, g2, ge, w1, w2, we)
				}
				var mag float64
				for i, a := range want {
					mag += float64(a) * math.Abs(float64(keys[i]))
				}
				if math.Abs(gg-wg) > 1e-6*mag {
					t.Fatalf("n=%d lo=%d: Σα·w = %v, Go %v (Σα|w| = %v)", n, lo, gg, wg, mag)
				}
				// without statistics: the same weights
				plain := append([]float32(nil), x...)
				softmaxRowStatsAVX512(plain, lo, 0, noSink, false, nil)
				for i := range plain {
					if plain[i] != got[i] {
						t.Fatalf("n=%d lo=%d: weight %d is %v without statistics, %v with", n, lo, i, plain[i], got[i])
					}
				}
			}
		}
	}
	t.Logf("worst weight error %.2f ulp, worst statistic rel. error %.2g", worstW, worstS)
	if worstW > 4 || worstS > 1e-6 {
		t.Errorf("assembly softmax outside 4 ulp / 1e-6 of the Go one")
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := []float32{1, 2, bad, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}
		softmaxRowStatsAVX512(x, 0, 0, noSink, true, nil)
		nan := 0
		for _, v := range x {
			if v != v {
				nan++
			}
		}
		if bad != float32(math.Inf(-1)) && nan == 0 {
			t.Errorf("score %v: no NaN weight in %v", bad, x)
		}
		if bad == float32(math.Inf(-1)) && (nan != 0 || x[2] != 0) {
			t.Errorf("score −Inf: weights %v, want finite with a 0 at index 2", x)
		}
	}
	for _, dh := range []int{16, 32, 64, 128, 24} {
		const n, stride = 37, 300
		v := make([]float32, n*stride)
		c := make([]float32, dh)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		for i := range c {
			c[i] = float32(rng.NormFloat64())
		}
		want, got := make([]float32, n*dh), make([]float32, n*dh)
		shiftSquareGo(want, v, stride, c, n)
		shiftSquareFast(got, v, stride, c, n)
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("shiftSquare dh=%d: w[%d] = %v, want %v", dh, i, got[i], want[i])
			}
		}
	}
}
