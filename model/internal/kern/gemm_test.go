//go:build amd64

package kern

import (
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

// TestAsmGemm: the AVX-512 assembly Sgemm and Dgemm agree with gonum's for every
// transposition of B, edge sizes of every blocking level, narrow products
// with A read in place (n ≤ gemmDirectN, alpha = 1), strided operands, and alpha/beta ∈ {0, 1, other} (float32 within 1e-5 of the
// largest |C|, float64 within 1e-13).
func TestAsmGemm(t *testing.T) {
	if !Available() {
		t.Skip("this CPU has no AVX-512F+BMI2: package model uses gonum's kernels")
	}
	rng := rand.New(rand.NewPCG(13, 14))
	var ref gonum.Implementation
	for _, sh := range [][3]int{{1, 1, 1}, {6, 32, 7}, {7, 33, 300}, {100, 1100, 64}, {13, 5, 513}, {97, 64, 257}, {200, 128, 600}, {64, 96, 2100}, {64, 70, 2100}} {
		m, n, k := sh[0], sh[1], sh[2]
		for _, tB := range []blas.Transpose{blas.NoTrans, blas.Trans} {
			for _, ab := range [][2]float64{{1, 0}, {0.5, 1}, {-2, 0.25}, {0, 3}} {
				lda, ldb, ldc := k+3, n+1, n+2
				rb := k
				if tB == blas.Trans {
					ldb, rb = k+5, n
				}
				a64, b64 := randSlice(rng, m*lda), randSlice(rng, rb*ldb)
				c64 := randSlice(rng, m*ldc)
				want64 := append([]float64(nil), c64...)
				ref.Dgemm(blas.NoTrans, tB, m, n, k, ab[0], a64, lda, b64, ldb, ab[1], want64, ldc)
				Dgemm(tB == blas.Trans, m, n, k, ab[0], a64, lda, b64, ldb, ab[1], c64, ldc)
				if e := maxRel64(c64, want64); e > 1e-13 {
					t.Errorf("Dgemm m=%d n=%d k=%d tB=%c alpha,beta=%v: rel. error %.3g", m, n, k, tB, ab, e)
				}
				a32, b32, c32 := to32(a64), to32(b64), to32(randSlice(rng, m*ldc))
				want32 := append([]float32(nil), c32...)
				ref.Sgemm(blas.NoTrans, tB, m, n, k, float32(ab[0]), a32, lda, b32, ldb, float32(ab[1]), want32, ldc)
				Sgemm(tB == blas.Trans, m, n, k, float32(ab[0]), a32, lda, b32, ldb, float32(ab[1]), c32, ldc)
				if e := maxRel64(to64(c32), to64(want32)); e > 1e-5 {
					t.Errorf("Sgemm m=%d n=%d k=%d tB=%c alpha,beta=%v: rel. error %.3g", m, n, k, tB, ab, e)
				}
			}
		}
	}
}

func randSlice(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

func to32(x []float64) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = float32(v)
	}
	return y
}

func to64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func maxRel64(got, want []float64) float64 {
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(got[i]-want[i]))
		m = math.Max(m, math.Abs(want[i]))
	}
	return d / m
}

// TestGemmKT: scores from keys packed once (PackKT, GemmKT)
// equal Sgemm(NoTrans, Trans) with the keys themselves, bit for bit, for
// every prefix of the keys (partial panels hold later keys, never read
// into C) and edge row counts; and two panels in one sweep over A
// (Panels) equal two separate narrow products bit for bit.
func TestGemmKT(t *testing.T) {
	if !Available() {
		t.Skip("this CPU has no AVX-512F+BMI2: package model uses gonum's kernels")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	const n, k, ldk = 1100, 32, 70
	K := to32(randSlice(rng, n*ldk))
	kp := PackKT(nil, K, ldk, n, k)
	for _, m := range []int{1, 6, 13, 100} {
		a := to32(randSlice(rng, m*k))
		for _, cols := range []int{1, 31, 33, 64, 700, 1025, n} {
			want, got := make([]float32, m*cols), make([]float32, m*cols)
			for i := range got {
				got[i] = float32(math.NaN()) // GemmKT overwrites C, never reads it
			}
			Sgemm(true, m, cols, k, 0.125, a, k, K, ldk, 0, want, cols)
			GemmKT(m, cols, k, 0.125, a, k, kp, got, cols)
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("m=%d cols=%d: C[%d] = %v, want %v", m, cols, i, got[i], want[i])
				}
			}
		}
	}
	for _, m := range []int{5, 64, 97} {
		const kk = 600
		a := to32(randSlice(rng, m*kk))
		b1, b2 := to32(randSlice(rng, kk*40)), to32(randSlice(rng, kk*64))
		want1, want2 := make([]float32, m*32), make([]float32, m*64)
		Sgemm(false, m, 32, kk, 1, a, kk, b1, 40, 0, want1, 32)
		Sgemm(false, m, 64, kk, 1, a, kk, b2, 64, 0, want2, 64)
		got1, got2 := make([]float32, m*32), make([]float32, m*64)
		Panels(m, kk, a, kk, []Panel{{b1, 40, got1, 32}, {b2, 64, got2, 64}, {b2[32:], 64, got2[32:], 64}})
		for i := range want1 {
			if got1[i] != want1[i] {
				t.Fatalf("panels m=%d: C1[%d] = %v, want %v", m, i, got1[i], want1[i])
			}
		}
		for i := range want2 {
			if got2[i] != want2[i] {
				t.Fatalf("panels m=%d: C2[%d] = %v, want %v", m, i, got2[i], want2[i])
			}
		}
	}
}
