//go:build amd64

package kern

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSgemmNT is BenchmarkGemmBF16 in float32 (Sgemm with Wᵀ, the
// default projections), for comparison.
func BenchmarkSgemmNT(b *testing.B) {
	if !Available() {
		b.Skip("this CPU has no AVX-512F+BMI2")
	}
	const m, n, k = 1024, 2048, 2048
	rng := rand.New(rand.NewPCG(11, 12))
	x, w := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05)
	c := make([]float32, m*n)
	b.ResetTimer()
	for range b.N {
		Sgemm(true, m, n, k, 1, x, k, w, k, 0, c, n)
	}
	b.ReportMetric(2*m*n*k*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
}
