//go:build goexperiment.simd && amd64 && !openblas

package model

import (
	"fmt"
	"math"
	"simd/archsimd"
	"sync"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
)

// Built with GOEXPERIMENT=simd (Go 1.26's experimental simd/archsimd
// package) on an AVX-512 CPU, the pure-Go build runs its matrix products on
// the blocked kernels below instead of gonum's: still no cgo, about four
// times gonum's rate. Everything else (other BLAS routines, transposed A)
// stays gonum's.
//
//	GOEXPERIMENT=simd go build ./cmd/probe
func init() {
	if !archsimd.X86.AVX512() {
		return
	}
	blas32.Use(simdBLAS{})
	blas64.Use(simdBLAS{})
	blasName = "gonum+simd"
}

// simdBLAS is gonum's BLAS with Sgemm and Dgemm on AVX-512 kernels.
type simdBLAS struct{ gonum.Implementation }

// Blocking of the products (Goto's scheme): C is updated in micro-tiles of
// mr × nr from packed panels of A (mr rows × kc) and B (kc × nr columns);
// A is packed gemmMC rows at a time, B gemmNC columns, both gemmKC deep.
const (
	sMR, sNR = 6, 32 // float32 micro-tile: 12 zmm accumulators
	dMR, dNR = 6, 16 // float64 micro-tile
	gemmKC   = 256
	gemmMC   = 96 // a multiple of 6
	gemmNC   = 1024
)

// Sgemm computes C = alpha·A·op(B) + beta·C (row-major), on the AVX-512
// kernel for A not transposed and on gonum's otherwise.
func (s simdBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if tA != blas.NoTrans || (tB != blas.NoTrans && tB != blas.Trans) {
		s.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkGemm(tB == blas.Trans, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemmBlocked(tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, sMR, sNR, kernelS6x32, &sPool)
}

// Dgemm is Sgemm in float64.
func (s simdBLAS) Dgemm(tA, tB blas.Transpose, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	if tA != blas.NoTrans || (tB != blas.NoTrans && tB != blas.Trans) {
		s.Implementation.Dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkGemm(tB == blas.Trans, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemmBlocked(tB == blas.Trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, dMR, dNR, kernelD6x16, &dPool)
}

// checkGemm panics, as gonum does, on dimensions the slices cannot hold.
func checkGemm(transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	rb, cb := k, n
	if transB {
		rb, cb = n, k
	}
	switch {
	case m < 0 || n < 0 || k < 0:
		panic(fmt.Sprintf("blas: negative dimension m=%d n=%d k=%d", m, n, k))
	case lda < max(1, k) || ldb < max(1, cb) || ldc < max(1, n):
		panic(fmt.Sprintf("blas: bad leading dimension lda=%d ldb=%d ldc=%d for m=%d n=%d k=%d", lda, ldb, ldc, m, n, k))
	case m > 0 && k > 0 && la < lda*(m-1)+k,
		rb > 0 && cb > 0 && lb < ldb*(rb-1)+cb,
		m > 0 && n > 0 && lc < ldc*(m-1)+n:
		panic("blas: insufficient length of a, b or c")
	}
}

type gemmFloat interface{ float32 | float64 }

// gemmBuffers are one call's packing buffers.
type gemmBuffers[E gemmFloat] struct{ ap, bp, ct []E }

var (
	sPool = sync.Pool{New: func() any { return newGemmBuffers[float32](sMR, sNR) }}
	dPool = sync.Pool{New: func() any { return newGemmBuffers[float64](dMR, dNR) }}
)

func newGemmBuffers[E gemmFloat](mr, nr int) *gemmBuffers[E] {
	return &gemmBuffers[E]{ap: make([]E, gemmMC*gemmKC), bp: make([]E, (gemmNC+nr)*gemmKC), ct: make([]E, mr*nr)}
}

// gemmBlocked computes C = alpha·A·op(B) + beta·C with the micro-kernel
// kernel (C[mr×nr] += Ap·Bp over kc), packing alpha·A and B into zero-padded
// panels so that edge tiles use the same kernel on a scratch tile.
func gemmBlocked[E gemmFloat](transB bool, m, n, k int, alpha E, a []E, lda int, b []E, ldb int, beta E, c []E, ldc int,
	mr, nr int, kernel func(kc int, ap, bp, c []E, ldc int), pool *sync.Pool) {
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		switch beta {
		case 0:
			clear(row)
		case 1:
		default:
			for j := range row {
				row[j] *= beta
			}
		}
	}
	if k == 0 || alpha == 0 || m == 0 || n == 0 {
		return
	}
	buf := pool.Get().(*gemmBuffers[E])
	defer pool.Put(buf)
	for jc := 0; jc < n; jc += gemmNC {
		nc := min(gemmNC, n-jc)
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			packB(transB, b, ldb, pc, kc, jc, nc, nr, buf.bp)
			for ic := 0; ic < m; ic += gemmMC {
				mc := min(gemmMC, m-ic)
				packA(a, lda, ic, mc, pc, kc, mr, alpha, buf.ap)
				for jr := 0; jr < nc; jr += nr {
					bpan := buf.bp[(jr/nr)*nr*kc : (jr/nr+1)*nr*kc]
					for ir := 0; ir < mc; ir += mr {
						apan := buf.ap[(ir/mr)*mr*kc : (ir/mr+1)*mr*kc]
						if ir+mr <= mc && jr+nr <= nc {
							kernel(kc, apan, bpan, c[(ic+ir)*ldc+jc+jr:], ldc)
							continue
						}
						clear(buf.ct)
						kernel(kc, apan, bpan, buf.ct, nr)
						for i := 0; i < min(mr, mc-ir); i++ {
							row := c[(ic+ir+i)*ldc+jc+jr:]
							for j, v := range buf.ct[i*nr : i*nr+min(nr, nc-jr)] {
								row[j] += v
							}
						}
					}
				}
			}
		}
	}
}

// packA writes alpha·A[ic:ic+mc, pc:pc+kc] as panels of mr rows: panel q
// holds, for each p < kc, the mr values of column pc+p (zero beyond mc).
func packA[E gemmFloat](a []E, lda, ic, mc, pc, kc, mr int, alpha E, ap []E) {
	for q := 0; q*mr < mc; q++ {
		pan := ap[q*mr*kc : (q+1)*mr*kc]
		for i := 0; i < mr; i++ {
			r := q*mr + i
			if r >= mc {
				for p := 0; p < kc; p++ {
					pan[p*mr+i] = 0
				}
				continue
			}
			src := a[(ic+r)*lda+pc : (ic+r)*lda+pc+kc]
			for p, v := range src {
				pan[p*mr+i] = alpha * v
			}
		}
	}
}

// packB writes op(B)[pc:pc+kc, jc:jc+nc] as panels of nr columns: panel q
// holds, for each p < kc, the nr values of row pc+p (zero beyond nc).
func packB[E gemmFloat](transB bool, b []E, ldb, pc, kc, jc, nc, nr int, bp []E) {
	for q := 0; q*nr < nc; q++ {
		pan := bp[q*nr*kc : (q+1)*nr*kc]
		w := min(nr, nc-q*nr)
		if !transB {
			for p := 0; p < kc; p++ {
				dst := pan[p*nr : (p+1)*nr]
				copy(dst, b[(pc+p)*ldb+jc+q*nr:][:w])
				clear(dst[w:])
			}
			continue
		}
		for j := 0; j < nr; j++ {
			if j >= w {
				for p := 0; p < kc; p++ {
					pan[p*nr+j] = 0
				}
				continue
			}
			src := b[(jc+q*nr+j)*ldb+pc : (jc+q*nr+j)*ldb+pc+kc]
			for p, v := range src {
				pan[p*nr+j] = v
			}
		}
	}
}

// kernelS6x32 computes C[6×32] += Ap·Bp over kc (Ap: kc × 6, Bp: kc × 32,
// packed), twelve 16-lane accumulators.
func kernelS6x32(kc int, ap, bp, c []float32, ldc int) {
	_, _ = ap[6*kc-1], bp[32*kc-1]
	_ = c[5*ldc+31]
	var c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51 archsimd.Float32x16
	pa, pb := unsafe.Pointer(&ap[0]), unsafe.Pointer(&bp[0])
	for p := 0; p < kc; p++ {
		b0 := archsimd.LoadFloat32x16((*[16]float32)(pb))
		b1 := archsimd.LoadFloat32x16((*[16]float32)(unsafe.Add(pb, 64)))
		av := (*[6]float32)(pa)
		x := archsimd.BroadcastFloat32x16(av[0])
		c00, c01 = x.MulAdd(b0, c00), x.MulAdd(b1, c01)
		x = archsimd.BroadcastFloat32x16(av[1])
		c10, c11 = x.MulAdd(b0, c10), x.MulAdd(b1, c11)
		x = archsimd.BroadcastFloat32x16(av[2])
		c20, c21 = x.MulAdd(b0, c20), x.MulAdd(b1, c21)
		x = archsimd.BroadcastFloat32x16(av[3])
		c30, c31 = x.MulAdd(b0, c30), x.MulAdd(b1, c31)
		x = archsimd.BroadcastFloat32x16(av[4])
		c40, c41 = x.MulAdd(b0, c40), x.MulAdd(b1, c41)
		x = archsimd.BroadcastFloat32x16(av[5])
		c50, c51 = x.MulAdd(b0, c50), x.MulAdd(b1, c51)
		pa, pb = unsafe.Add(pa, 6*4), unsafe.Add(pb, 32*4)
	}
	addRowS(c[0:32], c00, c01)
	addRowS(c[ldc:ldc+32], c10, c11)
	addRowS(c[2*ldc:2*ldc+32], c20, c21)
	addRowS(c[3*ldc:3*ldc+32], c30, c31)
	addRowS(c[4*ldc:4*ldc+32], c40, c41)
	addRowS(c[5*ldc:5*ldc+32], c50, c51)
}

func addRowS(row []float32, v0, v1 archsimd.Float32x16) {
	v0.Add(archsimd.LoadFloat32x16Slice(row)).StoreSlice(row)
	v1.Add(archsimd.LoadFloat32x16Slice(row[16:])).StoreSlice(row[16:])
}

// kernelD6x16 is kernelS6x32 in float64: C[6×16] += Ap·Bp.
func kernelD6x16(kc int, ap, bp, c []float64, ldc int) {
	_, _ = ap[6*kc-1], bp[16*kc-1]
	_ = c[5*ldc+15]
	var c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51 archsimd.Float64x8
	pa, pb := unsafe.Pointer(&ap[0]), unsafe.Pointer(&bp[0])
	for p := 0; p < kc; p++ {
		b0 := archsimd.LoadFloat64x8((*[8]float64)(pb))
		b1 := archsimd.LoadFloat64x8((*[8]float64)(unsafe.Add(pb, 64)))
		av := (*[6]float64)(pa)
		x := archsimd.BroadcastFloat64x8(av[0])
		c00, c01 = x.MulAdd(b0, c00), x.MulAdd(b1, c01)
		x = archsimd.BroadcastFloat64x8(av[1])
		c10, c11 = x.MulAdd(b0, c10), x.MulAdd(b1, c11)
		x = archsimd.BroadcastFloat64x8(av[2])
		c20, c21 = x.MulAdd(b0, c20), x.MulAdd(b1, c21)
		x = archsimd.BroadcastFloat64x8(av[3])
		c30, c31 = x.MulAdd(b0, c30), x.MulAdd(b1, c31)
		x = archsimd.BroadcastFloat64x8(av[4])
		c40, c41 = x.MulAdd(b0, c40), x.MulAdd(b1, c41)
		x = archsimd.BroadcastFloat64x8(av[5])
		c50, c51 = x.MulAdd(b0, c50), x.MulAdd(b1, c51)
		pa, pb = unsafe.Add(pa, 6*8), unsafe.Add(pb, 16*8)
	}
	addRowD(c[0:16], c00, c01)
	addRowD(c[ldc:ldc+16], c10, c11)
	addRowD(c[2*ldc:2*ldc+16], c20, c21)
	addRowD(c[3*ldc:3*ldc+16], c30, c31)
	addRowD(c[4*ldc:4*ldc+16], c40, c41)
	addRowD(c[5*ldc:5*ldc+16], c50, c51)
}

func addRowD(row []float64, v0, v1 archsimd.Float64x8) {
	v0.Add(archsimd.LoadFloat64x8Slice(row)).StoreSlice(row)
	v1.Add(archsimd.LoadFloat64x8Slice(row[8:])).StoreSlice(row[8:])
}

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
