//go:build amd64

package model

import (
	"os"

	"github.com/filterlens/probe/model/internal/kern"
)

// On AVX-512 CPUs every amd64 build — the default one and the OpenBLAS one
// alike — runs the attention on the assembly kernels of model/internal/kern:
// the scores from keys packed once per head, the softmax and SiLU on 16
// lanes, α·v and the moments' products without packing; RMSNorm, RoPE and
// the scans for NaN/Inf run on 16 lanes too. (The OpenBLAS build keeps
// OpenBLAS for the projections and the MLP.) PROBE_BLAS=gonum
// keeps gonum's matrix products (for comparisons).
func init() {
	if !kern.Available() {
		return
	}
	softmaxRowStats = softmaxRowStatsAVX512
	shiftNorm = shiftNormFast
	shiftSquare = shiftSquareFast
	siluMulKernel = kern.SiluMul
	scaleTile = kern.Scale
	sumSquares, scaleMul, firstNonFinite, rotateHalf = kern.SumSquares, kern.ScaleMul, kern.FirstNonFinite, kern.Rotate
	if os.Getenv("PROBE_BLAS") == "gonum" {
		return
	}
	gemmPanels, packKT, gemmKT = kern.Panels, kern.PackKT, kern.GemmKT
	gemmNarrow = func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
		kern.Sgemm(false, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
	}
}

// panelProduct is one 32-column panel of a narrow product (gemmPanels).
type panelProduct = kern.Panel

// gemmDirectN is the widest product (columns) that gemmNarrow multiplies
// without packing, so that its sums are gemmPanels'; maxKTDepth the
// deepest keys packKT packs.
const (
	gemmDirectN = kern.DirectN
	maxKTDepth  = kern.MaxKTDepth
)

// softmaxRowStatsAVX512 is softmaxRowStatsGo on 16 lanes: the soft-cap
// as there (capLogits in Go, so the 16-lane passes need no tanh and the
// capped scores are Go's bit for bit), then kern.SoftmaxRow: the same
// method and the same sink column, with fused multiply-adds, another
// summation order, 0 instead of a subnormal for e^(x−m) below e^−87.3, and
// Σα, Σα² formed as Σp·inv and Σp²·inv² (inv the float32 normalizer) in the
// exponential's pass; g comes from the scaling pass (kern.ScaleDot,
// products summed in float32 over 8 blocks of 16, then in float64).
func softmaxRowStatsAVX512(row []float32, lo int, softcap, sink float32, stats bool, w []float32) (s1, s2, ent, g float64, sm float32) {
	seg := row[lo:]
	clear(row[:lo])
	if len(seg) == 0 {
		if sink > noSink {
			sm = 1 // the sink column alone
		}
		return 0, 0, 0, 0, sm
	}
	if softcap > 0 {
		capLogits(seg, softcap)
	}
	if w != nil {
		w = w[lo:len(row)]
	}
	return kern.SoftmaxRow(seg, sink, stats, w)
}

// shiftNormFast is shiftNormGo on 16 lanes where dh is a multiple of 16.
func shiftNormFast(w, v []float32, stride int, c []float32, n int) {
	if len(c)%16 != 0 || n == 0 {
		shiftNormGo(w, v, stride, c, n)
		return
	}
	kern.ShiftNorm(w, v, stride, c, n)
}

// shiftSquareFast is shiftSquareGo on 16 lanes where dh is a multiple of 16.
func shiftSquareFast(w, v []float32, stride int, c []float32, n int) {
	if len(c)%16 != 0 || n == 0 {
		shiftSquareGo(w, v, stride, c, n)
		return
	}
	kern.ShiftSquare(w, v, stride, c, n)
}
