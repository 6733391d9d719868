//go:build amd64 && linux

package kern

import (
	"fmt"
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

// BenchmarkGemmBF16SuperBlocks: gemmBF16 on bfKernel at the 1.7B-shaped
// projections' sizes (m rows: 1024 and 4096 tokens; n × k: q/o 2048 ×
// 2048, gate/up 6144 × 2048, down 2048 × 6144) with W packed once per
// bfMA rows ("per384", the loop before super-blocks: bfABytes = 1) and
// once per super-block ("super", the default bfABytes), one after the
// other in each round of -count.
func BenchmarkGemmBF16SuperBlocks(b *testing.B) {
	for _, sh := range [][3]int{{1024, 2048, 2048}, {1024, 6144, 2048}, {1024, 2048, 6144},
		{4096, 2048, 2048}, {4096, 6144, 2048}, {4096, 2048, 6144}} {
		m, n, k := sh[0], sh[1], sh[2]
		rng := rand.New(rand.NewPCG(13, 14))
		x, bits := normal32(rng, m*k, 1), make([]uint16, n*k)
		for i := range bits {
			bits[i] = RoundBF16(float32(rng.NormFloat64() * 0.05))
		}
		c := make([]float32, m*n)
		for _, v := range []struct {
			name   string
			aBytes int
		}{{"per384", 1}, {"super", bfABytes}} {
			b.Run(fmt.Sprintf("m=%d/n=%d/k=%d/%s", m, n, k, v.name), func(b *testing.B) {
				defer func(a int) { bfABytes = a }(bfABytes)
				bfABytes = v.aBytes
				benchGFLOPS(b, 2*float64(m)*float64(n)*float64(k), func() {
					gemmBF16(m, n, k, x, k, panelsBF16{bits, k}, c, n, bfKernel)
				})
			})
		}
	}
}

// panelsBF16 is a row-major n × k matrix of bfloat16 bits (n a multiple of
// 32, k even) packed a whole panel at a time, as the model's BF16 weights
// are (PackPanelBF16).
type panelsBF16 struct {
	bits []uint16
	k    int
}

func (d panelsBF16) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	PackPanelBF16(dst, d.bits[r0*d.k+2*p0:], d.k, kp)
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
