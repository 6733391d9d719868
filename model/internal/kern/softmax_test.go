//go:build amd64

package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScaleDotShiftNorm compares ScaleDot and ShiftNorm with float64 sums
// over lengths with and without a tail of n mod 16 elements.
func TestScaleDotShiftNorm(t *testing.T) {
	if !Available() {
		t.Skip("kern: the CPU lacks AVX-512F or BMI2")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 15, 16, 17, 127, 128, 129, 1000, 4099} {
		x, w := to32(randSlice(rng, n)), make([]float32, n)
		for i := range w {
			w[i] = float32(rng.Float64() * 3)
		}
		const s = float32(0.37)
		var want, mag float64
		for i := range x {
			xi := float64(x[i] * s)
			want += xi * float64(w[i])
			mag += math.Abs(xi * float64(w[i]))
		}
		y := append([]float32(nil), x...)
		got := ScaleDot(y, s, w)
		for i := range y {
			if y[i] != x[i]*s {
				t.Fatalf("n=%d: ScaleDot scaled x[%d] to %g, want %g", n, i, y[i], x[i]*s)
			}
		}
		if err := math.Abs(got-want) / mag; err > 1e-6 {
			t.Errorf("n=%d: ScaleDot = %g, want %g (error %.2g of Σ|x·w|)", n, got, want, err)
		}
	}
	for _, dh := range []int{16, 32, 64} {
		const n, stride = 37, 100
		v := to32(randSlice(rng, n*stride))
		c := to32(randSlice(rng, dh))
		w := make([]float32, n+1)
		w[n] = -1
		ShiftNorm(w, v, stride, c, n)
		for j := 0; j < n; j++ {
			var want float64
			for i := 0; i < dh; i++ {
				d := float64(v[j*stride+i]) - float64(c[i])
				want += d * d
			}
			if err := math.Abs(float64(w[j])-want) / want; err > 1e-6 {
				t.Errorf("dh=%d: ShiftNorm row %d = %g, want %g", dh, j, w[j], want)
			}
		}
		if w[n] != -1 {
			t.Errorf("dh=%d: ShiftNorm wrote past row n−1", dh)
		}
	}
}
