//go:build amd64 && !openblas

package model

import (
	"os"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/filterlens/probe/model/internal/kern"
)

// On an amd64 CPU with AVX-512 (and an OS that saves its registers), the
// pure-Go build — no cgo — runs its matrix products on blocked kernels
// whose innermost 6×32 (float32) and 6×16 (float64) tiles are Go assembly
// (model/internal/kern): several times gonum's rate. Everything else (other
// BLAS routines, transposed A) stays gonum's. Without AVX-512 the build
// is plain gonum. PROBE_BLAS=gonum in the environment keeps gonum's kernels
// (for comparisons).
func init() {
	if !kern.Available() || os.Getenv("PROBE_BLAS") == "gonum" {
		return
	}
	blas32.Use(gemmBLAS{})
	blas64.Use(gemmBLAS{})
	blasName = "gonum+avx512"
	gemmWeight, gemmWeightRows = gemmWeightAVX512, kern.NarrowM
}

// gemmWeightAVX512 is gemmWeight on kern.SgemmRows: the sums of the
// blocked product Sgemm(NoTrans, Trans, …), whose packing of the weight
// rows widens 16-bit values — or, for at most kern.NarrowM rows of x, which
// reads the rows without packing them.
func gemmWeightAVX512(n int, x []float32, w *Weight, dst []float32) {
	r := kern.Rows{F32: w.F32, Bits: w.Bits, Half: w.DType == "F16", Cols: w.Cols, Run: int(w.run), Pitch: int(w.pitch)}
	if w.MX != nil {
		r.FP4, r.Scales = w.MX.Codes, w.MX.Scales
	}
	r.Q = w.Q
	kern.SgemmRows(n, w.Rows, w.Cols, x, w.Cols, r, dst, w.Rows)
}

// gemmBLAS is gonum's BLAS with Sgemm and Dgemm on the AVX-512 assembly
// micro-kernels of model/internal/kern.
type gemmBLAS struct{ gonum.Implementation }

// Sgemm computes C = alpha·A·op(B) + beta·C (row-major), on the AVX-512
// kernels for A not transposed and on gonum's otherwise.
func (s gemmBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if tA != blas.NoTrans || (tB != blas.NoTrans && tB != blas.Trans) {
		s.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	kern.Sgemm(tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// Dgemm is Sgemm in float64.
func (s gemmBLAS) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if tA != blas.NoTrans || (tB != blas.NoTrans && tB != blas.Trans) {
		s.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	kern.Dgemm(tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}
