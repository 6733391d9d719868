//go:build amd64 && linux

package kern

import (
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The benchmarks of C = X·Wᵀ at the shape of a 1024-token projection of a
// d = 2048 model (m 1024, n 2048, k 2048) on one core, in GFLOPS (2mnk
// per product) over wall time and over the thread's CPU time (less
// sensitive to a loaded machine: the product runs on the benchmark's
// thread): BenchmarkGemmBF16 with W in bfloat16, packed in the product as
// the model's weights are (on AMX where HasAMX), BenchmarkGemmBF16VDP the
// same on VDPBF16PS, BenchmarkSgemmNT the float32 product of the default
// projections (ComputeF32Widen's), and BenchmarkGemmF32AMX ComputeF32's
// for bf16 weights on AMX.

func BenchmarkGemmBF16(b *testing.B) {
	benchBF16(b, GemmBF16)
}

// BenchmarkGemmF32AMX: the float32-accurate product of a bfloat16 W on
// AMX (three bfloat16 parts of X), which ComputeF32 uses for bf16 weights;
// GFLOPS count 2mnk as for the others.
func BenchmarkGemmF32AMX(b *testing.B) {
	if !HasAMX() {
		b.Skip("no AMX here")
	}
	benchBF16(b, GemmF32AMX)
}

func BenchmarkGemmBF16VDP(b *testing.B) {
	if !HasBF16() {
		b.Skip("this CPU has no AVX512_BF16")
	}
	benchBF16(b, func(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int) {
		gemmBF16(m, n, k, x, ldx, w, c, ldc, bfKernel)
	})
}

func benchBF16(b *testing.B, gemm func(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int)) {
	const m, n, k = 1024, 2048, 2048
	rng := rand.New(rand.NewPCG(11, 12))
	x, w := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05)
	bits := make([]uint16, len(w))
	for i, v := range w {
		bits[i] = RoundBF16(v)
	}
	c := make([]float32, m*n)
	benchGFLOPS(b, 2*m*n*k, func() { gemm(m, n, k, x, k, denseBF16{bits, k, k}, c, n) })
}

func BenchmarkSgemmNT(b *testing.B) {
	if !Available() {
		b.Skip("this CPU has no AVX-512F+BMI2")
	}
	const m, n, k = 1024, 2048, 2048
	rng := rand.New(rand.NewPCG(11, 12))
	x, w := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05)
	c := make([]float32, m*n)
	benchGFLOPS(b, 2*m*n*k, func() { Sgemm(true, m, n, k, 1, x, k, w, k, 0, c, n) })
}

// benchGFLOPS runs f b.N times on a locked thread and reports GFLOPS over
// wall time and over the thread's CPU time.
func benchGFLOPS(b *testing.B, flops float64, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu := func() time.Duration {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b.ResetTimer()
	c0 := cpu()
	for range b.N {
		f()
	}
	used := cpu() - c0
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOPS")
	b.ReportMetric(flops*float64(b.N)/used.Seconds()/1e9, "GFLOPS-cpu")
}
