//go:build goexperiment.simd && amd64 && !openblas

package model

import (
	"math"
	"simd/archsimd"
)

// Built with GOEXPERIMENT=simd (Go 1.26's experimental simd/archsimd
// package) on an AVX-512 CPU, the softmax of the attention tiles and the
// SwiGLU product run on 16-lane kernels below (the matrix products run on
// the assembly kernels of blas_gemm_amd64.s in every amd64 build):
//
//	GOEXPERIMENT=simd go build ./cmd/probe
func init() {
	if archsimd.X86.AVX512() {
		softmaxTile = softmaxTileSimd
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

// sum16 adds the 16 lanes of x into two float64 accumulators.
func sum16(x archsimd.Float32x16, lo, hi archsimd.Float64x8) (archsimd.Float64x8, archsimd.Float64x8) {
	return lo.Add(x.GetLo().ConvertToFloat64()), hi.Add(x.GetHi().ConvertToFloat64())
}

func hsum8(x archsimd.Float64x8) float64 {
	var a [8]float64
	x.Store(&a)
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))
}

// softmaxTileSimd is softmaxTile on 16 lanes (the OpenBLAS build's C kernel
// in Go).
func softmaxTileSimd(s []float32, rows, ncol, q0, window int, a64, s1, s2, ent []float64) {
	for r := 0; r < rows; r++ {
		t := q0 + r
		row := s[r*ncol : (r+1)*ncol]
		lo := 0
		if window > 0 && t-window+1 > 0 {
			lo = t - window + 1
		}
		clear(row[:lo])
		clear(row[t+1:])
		x := row[lo : t+1]
		n := len(x)
		// max
		vm := archsimd.BroadcastFloat32x16(float32(math.Inf(-1)))
		j := 0
		for ; j+16 <= n; j += 16 {
			vm = vm.Max(archsimd.LoadFloat32x16Slice(x[j:]))
		}
		var mv [16]float32
		vm.Store(&mv)
		m := float32(math.Inf(-1))
		for _, v := range mv {
			m = max(m, v)
		}
		for _, v := range x[j:] {
			m = max(m, v)
		}
		// p = e^(x − m); z = Σp, pd = Σ p·(x − m) in float64
		bm := archsimd.BroadcastFloat32x16(m)
		var z0, z1, d0, d1 archsimd.Float64x8
		j = 0
		for ; j+16 <= n; j += 16 {
			d := archsimd.LoadFloat32x16Slice(x[j:]).Sub(bm)
			p := exp16(d)
			p.StoreSlice(x[j:])
			z0, z1 = sum16(p, z0, z1)
			if a64 != nil {
				d0 = d0.Add(p.GetLo().ConvertToFloat64().Mul(d.GetLo().ConvertToFloat64()))
				d1 = d1.Add(p.GetHi().ConvertToFloat64().Mul(d.GetHi().ConvertToFloat64()))
			}
		}
		z, pd := hsum8(z0.Add(z1)), hsum8(d0.Add(d1))
		for ; j < n; j++ {
			d := x[j] - m
			p := expf(d)
			if d < -87.3 {
				p = 0 // as exp16
			}
			x[j] = p
			z += float64(p)
			pd += float64(p) * float64(d)
		}
		inv := 1 / z
		invf := float32(inv)
		binv := archsimd.BroadcastFloat32x16(invf)
		if a64 == nil {
			j = 0
			for ; j+16 <= n; j += 16 {
				archsimd.LoadFloat32x16Slice(x[j:]).Mul(binv).StoreSlice(x[j:])
			}
			for ; j < n; j++ {
				x[j] *= invf
			}
			continue
		}
		ar := a64[r*ncol : (r+1)*ncol]
		clear(ar[:lo])
		clear(ar[t+1:])
		ax := ar[lo : t+1]
		var a0, a1, q0v, q1v archsimd.Float64x8
		j = 0
		for ; j+16 <= n; j += 16 {
			a := archsimd.LoadFloat32x16Slice(x[j:]).Mul(binv)
			a.StoreSlice(x[j:])
			alo, ahi := a.GetLo().ConvertToFloat64(), a.GetHi().ConvertToFloat64()
			alo.StoreSlice(ax[j:])
			ahi.StoreSlice(ax[j+8:])
			a0, a1 = a0.Add(alo), a1.Add(ahi)
			q0v, q1v = alo.MulAdd(alo, q0v), ahi.MulAdd(ahi, q1v)
		}
		sa, sq := hsum8(a0.Add(a1)), hsum8(q0v.Add(q1v))
		for ; j < n; j++ {
			a := x[j] * invf
			x[j] = a
			ax[j] = float64(a)
			sa += float64(a)
			sq += float64(a) * float64(a)
		}
		s1[r], s2[r], ent[r] = sa, sq, math.Log(z)*sa-pd*inv
	}
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
