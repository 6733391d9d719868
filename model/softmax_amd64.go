//go:build amd64 && !openblas

package model

import (
	"math"

	"golang.org/x/sys/cpu"
)

// On AVX-512 CPUs the default amd64 build runs the softmax of the attention
// tiles and the squares of the moments on 16-lane assembly kernels
// (softmax_amd64.s). (The OpenBLAS build uses cgo, which excludes Go
// assembly: it has 8-lane C kernels, blas_openblas_kernels.go.)
func init() {
	if haveSoftmaxAVX512() {
		softmaxRowStats = softmaxRowStatsAVX512
		shiftSquare = shiftSquareFast
		siluMulKernel = siluMulFast
	}
}

// haveSoftmaxAVX512 reports whether the CPU runs softmax_amd64.s.
func haveSoftmaxAVX512() bool { return cpu.X86.HasAVX512F && cpu.X86.HasBMI2 }

// softmaxRowStatsAVX512 is softmaxRowStatsGo on 16 lanes: the same method,
// with fused multiply-adds, another summation order, 0 instead of a
// subnormal for e^(x−m) below e^−87.3, and Σα, Σα² formed as Σp·inv and
// Σp²·inv² (inv the float32 normalizer) in the exponential's pass.
func softmaxRowStatsAVX512(row []float32, lo int, stats bool) (s1, s2, ent float64) {
	seg := row[lo:]
	clear(row[:lo])
	n := len(seg)
	if n == 0 {
		return 0, 0, 0
	}
	st := 0
	if stats {
		st = 1
	}
	m := maxAVX512(&seg[0], n)
	z, pd, q := expSumAVX512(&seg[0], n, m, st)
	inv := 1 / z
	invf := float32(inv)
	scaleSumAVX512(&seg[0], n, invf, 0)
	if !stats {
		return 0, 0, 0
	}
	// Σα and Σα² from the unnormalized sums: within ~1e-7 relative of the
	// sums of the rounded weights, without another pass.
	fi := float64(invf)
	s1 = z * fi
	return s1, q * fi * fi, math.Log(z)*s1 - pd*inv
}

//go:noescape
func maxAVX512(x *float32, n int) float32

//go:noescape
func expSumAVX512(x *float32, n int, m float32, stats int) (z, pd, q float64)

//go:noescape
func scaleSumAVX512(x *float32, n int, inv float32, stats int) (s1, s2 float64)

// shiftSquareFast is shiftSquareGo on 16 lanes where dh is a multiple of 16.
func shiftSquareFast(w, v []float32, stride int, c []float32, n int) {
	dh := len(c)
	if dh%16 != 0 || n == 0 {
		shiftSquareGo(w, v, stride, c, n)
		return
	}
	_, _ = w[n*dh-1], v[(n-1)*stride+dh-1]
	shiftSquareAVX512(&w[0], &v[0], stride, &c[0], n, dh)
}

//go:noescape
func shiftSquareAVX512(w, v *float32, stride int, c *float32, n, dh int)

// siluMulFast computes g[i] = silu(g[i])·u[i] on 16 lanes (siluMulKernel).
func siluMulFast(g, u []float32) {
	if len(g) == 0 {
		return
	}
	_ = u[len(g)-1]
	siluMulAVX512(&g[0], &u[0], len(g))
}

//go:noescape
func siluMulAVX512(x, u *float32, n int)
