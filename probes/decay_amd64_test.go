package probes

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestDecayAddAVX512 checks the AVX-512 row update against decayAdd64 on
// every length up to 41 (the tails included): row and next within a few
// ulps (one FMA instead of two roundings), Σ row² within 1e-14 relative,
// and a NaN in u reaching row, next and the sum.
func TestDecayAddAVX512(t *testing.T) {
	if !cpu.X86.HasAVX512F {
		t.Skip("no AVX-512F on this CPU: decayAdd is decayAdd64")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 41; n++ {
		row, u, next := make([]float64, n), make([]float64, n), make([]float64, n)
		for i := range row {
			row[i], u[i], next[i] = rng.NormFloat64(), rng.NormFloat64(), rng.NormFloat64()
		}
		r2, n2 := append([]float64(nil), row...), append([]float64(nil), next...)
		e, k, kn := 0.93, rng.NormFloat64(), rng.NormFloat64()
		want := decayAdd64(row, u, next, e, k, kn)
		got := decayAddAVX512(r2, u, n2, e, k, kn)
		for i := range row {
			if math.Abs(r2[i]-row[i]) > 1e-15*(1+math.Abs(row[i])) || math.Abs(n2[i]-next[i]) > 1e-14*(1+math.Abs(next[i])) {
				t.Fatalf("n=%d element %d: row %v next %v, want %v %v", n, i, r2[i], n2[i], row[i], next[i])
			}
		}
		if math.Abs(got-want) > 1e-14*math.Max(1, want) {
			t.Fatalf("n=%d: Σ row² %v, want %v", n, got, want)
		}
	}
	row, u, next := make([]float64, 19), make([]float64, 19), make([]float64, 19)
	u[11] = math.NaN()
	if s := decayAddAVX512(row, u, next, 1, 1, 1); !math.IsNaN(s) || !math.IsNaN(row[11]) || !math.IsNaN(next[11]) || math.IsNaN(row[10]) {
		t.Errorf("NaN in u[11]: sum %v, row %v, next %v", s, row[10:12], next[10:12])
	}
}
