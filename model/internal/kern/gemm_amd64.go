//go:build amd64

package kern

// kernelS6x32 computes C[6×32] += Ap·Bp over kc (Ap: kc × 6 and Bp: kc × 32,
// packed by packA/packB; C row-major with row stride ldc), in twelve zmm
// accumulators (gemm_amd64.s).
func kernelS6x32(kc int, ap, bp, c []float32, ldc int) {
	if kc <= 0 {
		return
	}
	_, _ = ap[6*kc-1], bp[32*kc-1]
	_ = c[5*ldc+31]
	kernelS6x32AVX512(kc, &ap[0], &bp[0], &c[0], ldc, 0)
}

// kernelS6x32Store is kernelS6x32 overwriting C: C[6×32] = Ap·Bp (kc ≥ 1).
func kernelS6x32Store(kc int, ap, bp, c []float32, ldc int) {
	_, _ = ap[6*kc-1], bp[32*kc-1]
	_ = c[5*ldc+31]
	kernelS6x32AVX512(kc, &ap[0], &bp[0], &c[0], ldc, 1)
}

// kernelD6x16 is kernelS6x32 in float64: C[6×16] += Ap·Bp.
func kernelD6x16(kc int, ap, bp, c []float64, ldc int) {
	if kc <= 0 {
		return
	}
	_, _ = ap[6*kc-1], bp[16*kc-1]
	_ = c[5*ldc+15]
	kernelD6x16AVX512(kc, &ap[0], &bp[0], &c[0], ldc)
}

// kernelS6x32Direct is kernelS6x32 reading A and B in place: row r of the
// six is a[r·lda : r·lda+kc], step p of B is b[p·ldb : p·ldb+32].
func kernelS6x32Direct(kc int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if kc <= 0 {
		return
	}
	_, _ = a[5*lda+kc-1], b[(kc-1)*ldb+31]
	_ = c[5*ldc+31]
	kernelS6x32DirectAVX512(kc, &a[0], lda, &b[0], ldb, &c[0], ldc)
}

// kernelS6x64Direct is two kernelS6x32Direct panels in one sweep over A:
// C1[6×32] += A·B1 and C2[6×32] += A·B2.
func kernelS6x64Direct(kc int, a []float32, lda int, b1 []float32, ldb1 int, b2 []float32, ldb2 int, c1 []float32, ldc1 int, c2 []float32, ldc2 int) {
	if kc <= 0 {
		return
	}
	_, _, _ = a[5*lda+kc-1], b1[(kc-1)*ldb1+31], b2[(kc-1)*ldb2+31]
	_, _ = c1[5*ldc1+31], c2[5*ldc2+31]
	kernelS6x64DirectAVX512(kc, &a[0], lda, &b1[0], ldb1, &b2[0], ldb2, &c1[0], ldc1, &c2[0], ldc2)
}

//go:noescape
func kernelS6x64DirectAVX512(kc int, a *float32, lda int, b1 *float32, ldb1 int, b2 *float32, ldb2 int, c1 *float32, ldc1 int, c2 *float32, ldc2 int)

//go:noescape
func kernelS6x32DirectAVX512(kc int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int)

//go:noescape
func kernelS6x32AVX512(kc int, ap, bp, c *float32, ldc, store int)

//go:noescape
func kernelD6x16AVX512(kc int, ap, bp, c *float64, ldc int)
