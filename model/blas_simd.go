//go:build goexperiment.simd && amd64 && !openblas

package model

import (
	"math"
	"simd/archsimd"
)

// Built with GOEXPERIMENT=simd (Go 1.26's experimental simd/archsimd
// package) on an AVX-512 CPU, the SwiGLU product runs on the 16-lane kernel
// below (the matrix products and the softmax run on the assembly kernels of
// blas_gemm_amd64.s and softmax_amd64.s in every amd64 build):
//
//	GOEXPERIMENT=simd go build ./cmd/probe
func init() {
	if archsimd.X86.AVX512() {
		siluMulKernel = siluMulSimd
	}
}

// exp16 is e^x on 16 lanes, the method of expf (nn.go) and of the OpenBLAS
// build's exp8: lanes below −87.3 (and −Inf) give 0, above 88.72 (and +Inf)
// give +Inf, NaN stays NaN.
func exp16(x archsimd.Float32x16) archsimd.Float32x16 {
	bc := archsimd.BroadcastFloat32x16
	lo, hi := bc(-87.3), bc(88.72)
	nan, under, over := x.IsNaN(), x.Less(lo), x.Greater(hi)
	xc := x.Max(lo).Min(hi)
	magic := bc(12582912)
	t := xc.MulAdd(bc(1.4426950408889634), magic)
	k := t.AsInt32x16().Sub(archsimd.BroadcastInt32x16(0x4b400000))
	n := t.Sub(magic)
	r := n.MulAdd(bc(-0.693145751953125), xc)
	r = n.MulAdd(bc(-1.4286068203094173e-06), r)
	p := bc(1.0 / 5040)
	p = p.MulAdd(r, bc(1.0/720))
	p = p.MulAdd(r, bc(1.0/120))
	p = p.MulAdd(r, bc(1.0/24))
	p = p.MulAdd(r, bc(1.0/6))
	p = p.MulAdd(r, bc(0.5))
	p = p.MulAdd(r, bc(1))
	p = p.MulAdd(r, bc(1))
	k1 := k.ShiftAllRight(1)
	k2 := k.Sub(k1)
	bias := archsimd.BroadcastInt32x16(127)
	res := p.Mul(k1.Add(bias).ShiftAllLeft(23).AsFloat32x16()).Mul(k2.Add(bias).ShiftAllLeft(23).AsFloat32x16())
	res = bc(float32(math.Inf(1))).Merge(res, over)
	res = bc(0).Merge(res, under)
	return x.Merge(res, nan)
}

// siluMulSimd computes g[i] = silu(g[i])·u[i] on 16 lanes (siluMulKernel).
func siluMulSimd(g, u []float32) {
	u = u[:len(g)]
	one, zero := archsimd.BroadcastFloat32x16(1), archsimd.BroadcastFloat32x16(0)
	i := 0
	for ; i+16 <= len(g); i += 16 {
		x := archsimd.LoadFloat32x16Slice(g[i:])
		s := x.Div(one.Add(exp16(zero.Sub(x))))
		s.Mul(archsimd.LoadFloat32x16Slice(u[i:])).StoreSlice(g[i:])
	}
	for ; i < len(g); i++ {
		g[i] = silu(g[i]) * u[i]
	}
}
