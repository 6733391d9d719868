package model

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// blasName names the BLAS implementation behind the matrix products:
// "gonum" (pure Go, the default) or "openblas" (build tag openblas).
var blasName = "gonum"

// BLAS reports which BLAS implementation this binary uses.
func BLAS() string { return blasName }

// gemmPanels, where the build has it (the AVX-512 kernels of amd64
// builds, kern_amd64.go), adds A·B_p to C_p for every panel p
// (A: m × k, row stride lda), reading A once for all panels: the attention
// computes α·v and the moments' α·(v − c)² in one sweep over the weights.
// Each element of C is the same sum as the one Sgemm computes alone.
var gemmPanels func(m, k int, a []float32, lda int, ps []panelProduct)

// gemmNarrow computes C = A·B for the attention's α·v (A: m × k, B: k ×
// n): on the AVX-512 kernels (kern_amd64.go) the sums gemmPanels forms for
// products of at most gemmDirectN columns, else blas32.Gemm.
var gemmNarrow = func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	blas32.Gemm(blas.NoTrans, blas.NoTrans, 1,
		blas32.General{Rows: m, Cols: k, Stride: lda, Data: a},
		blas32.General{Rows: k, Cols: n, Stride: ldb, Data: b},
		0, blas32.General{Rows: m, Cols: n, Stride: ldc, Data: c})
}

// packKT and gemmKT, where the build has them (kern_amd64.go), compute the
// attention scores q·Kᵀ of every tile from keys packed once per head:
// kp = packKT(kp, K, ldk, n, k) packs the n × k keys (k ≤ maxKTDepth), then
// gemmKT(m, n′, k, alpha, A, lda, kp, C, ldc) sets C = alpha·A·Kᵀ[:, :n′]
// for any n′ ≤ n, the same sums as blas32.Gemm with K.
var (
	packKT func(dst, K []float32, ldk, n, k int) []float32
	gemmKT func(m, n, k int, alpha float32, a []float32, lda int, kp []float32, c []float32, ldc int)
)
