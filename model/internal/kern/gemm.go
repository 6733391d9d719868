//go:build amd64

// Package kern holds the AVX-512 kernels of package model's forward pass:
// blocked matrix products on 6×32 (float32) and 6×16 (float64) assembly
// micro-tiles (SgemmRows: with weight rows stored as float32, bfloat16 or
// half, widened while packed, or, for few rows of A, read in place on
// 16×16 tiles: narrow.go), narrow products without packing, keys
// packed once for the attention scores, and the softmax, SiLU and
// squared-shift loops on 16 lanes; and the bf16 product of model's
// Compute bf16 (GemmBF16, bf16.go: AMX tiles where the CPU and Linux
// allow them, amx_linux_amd64.go; else VDPBF16PS where the CPU has
// AVX512_BF16, a Go micro-kernel with its sums elsewhere, every
// architecture). It has no cgo, so that both the default and the OpenBLAS
// build (which uses cgo and so cannot hold Go assembly itself) use it.
// Callers of the float32 kernels check Available first.
package kern

import (
	"fmt"
	"sync"

	"golang.org/x/sys/cpu"
)

// Available reports whether this CPU (and OS) runs the kernels: AVX-512F
// and BMI2.
func Available() bool { return cpu.X86.HasAVX512F && cpu.X86.HasBMI2 }

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

// Sgemm computes C = alpha·A·op(B) + beta·C (row-major; op(B) = Bᵀ when
// transB), with blocked products on the AVX-512 micro-kernels, and narrow
// ones (alpha = 1, B not transposed, n a multiple of 32 up to DirectN)
// without packing (gemmDirect). It panics, as gonum does, on dimensions
// the slices cannot hold.
func Sgemm(transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkGemm(transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if alpha == 1 && !transB && n <= DirectN && n%sNR == 0 {
		gemmDirect(m, n, k, a, lda, b, ldb, beta, c, ldc)
		return
	}
	gemmBlocked(transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, sMR, sNR, kernelS6x32, &sPool)
}

// Dgemm is Sgemm in float64 (always blocked).
func Dgemm(transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	checkGemm(transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	gemmBlocked(transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, dMR, dNR, kernelD6x16, &dPool)
}

// DirectN is the widest product (columns) that Sgemm multiplies without
// packing; MaxKTDepth the deepest keys PackKT packs (one block of the
// blocked product).
const (
	DirectN    = 128
	MaxKTDepth = gemmKC
)

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
	scaleRows(m, n, beta, c, ldc)
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
			gemmPanelBlock(m, nc, kc, alpha, a, lda, pc, buf.bp, c[jc:], ldc, mr, nr, kernel, false, buf)
		}
	}
}

// gemmPanelBlock adds alpha·A[:, pc:pc+kc]·Bp to C[:m, :nc], where Bp holds
// the kc × nc block of op(B) in panels of nr columns (packB), packing A
// gemmMC rows at a time. With store it overwrites C instead (kernel must
// then overwrite its micro-tile too).
func gemmPanelBlock[E gemmFloat](m, nc, kc int, alpha E, a []E, lda, pc int, bp, c []E, ldc int,
	mr, nr int, kernel func(kc int, ap, bp, c []E, ldc int), store bool, buf *gemmBuffers[E]) {
	for ic := 0; ic < m; ic += gemmMC {
		mc := min(gemmMC, m-ic)
		packA(a, lda, ic, mc, pc, kc, mr, alpha, buf.ap)
		for jr := 0; jr < nc; jr += nr {
			bpan := bp[(jr/nr)*nr*kc : (jr/nr+1)*nr*kc]
			for ir := 0; ir < mc; ir += mr {
				apan := buf.ap[(ir/mr)*mr*kc : (ir/mr+1)*mr*kc]
				if ir+mr <= mc && jr+nr <= nc {
					kernel(kc, apan, bpan, c[(ic+ir)*ldc+jr:], ldc)
					continue
				}
				clear(buf.ct)
				kernel(kc, apan, bpan, buf.ct, nr)
				for i := 0; i < min(mr, mc-ir); i++ {
					row := c[(ic+ir+i)*ldc+jr:]
					ct := buf.ct[i*nr : i*nr+min(nr, nc-jr)]
					if store {
						copy(row, ct)
						continue
					}
					for j, v := range ct {
						row[j] += v
					}
				}
			}
		}
	}
}

// PackKT packs Kᵀ for GemmKT: K is n × k (row stride ldk,
// k ≤ MaxKTDepth), packed as the panels of sNR columns that gemmBlocked packs
// for op(B) = Kᵀ, once for every product with the rows of K.
func PackKT(dst, K []float32, ldk, n, k int) []float32 {
	if need := (n + sNR - 1) / sNR * sNR * k; cap(dst) >= need {
		dst = dst[:need]
	} else {
		dst = make([]float32, need)
	}
	packB(true, K, ldk, 0, k, 0, n, sNR, dst)
	return dst
}

// GemmKT computes C = alpha·A·Kᵀ[:, :n] (A: m × k) from the panels
// PackKT made of K's rows (n at most the rows packed): the same
// sums as Sgemm(NoTrans, Trans, …) with K itself, without packing K again.
// C is overwritten in one step per micro-tile (k ≤ MaxKTDepth is one
// summation block), never cleared or read first.
func GemmKT(m, n, k int, alpha float32, a []float32, lda int, kp []float32, c []float32, ldc int) {
	if k == 0 {
		scaleRows(m, n, 0, c, ldc)
	}
	if m == 0 || n == 0 || k == 0 {
		return
	}
	if k > gemmKC {
		panic("kern: GemmKT depth beyond MaxKTDepth")
	}
	buf := sPool.Get().(*gemmBuffers[float32])
	defer sPool.Put(buf)
	for jc := 0; jc < n; jc += gemmNC {
		gemmPanelBlock(m, min(gemmNC, n-jc), k, alpha, a, lda, 0, kp[jc*k:], c[jc:], ldc, sMR, sNR, kernelS6x32Store, true, buf)
	}
}

// scaleRows sets C[:m, :n] = beta·C (C row-major with stride ldc), 0 for
// beta = 0 whatever C held (as BLAS does: NaN·0 is not kept).
func scaleRows[E gemmFloat](m, n int, beta E, c []E, ldc int) {
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
}

// gemmDirect computes C = A·B + beta·C (float32, B not transposed, n a
// multiple of sNR and at most DirectN) with Panels, one panel per sNR
// columns.
func gemmDirect(m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	scaleRows(m, n, beta, c, ldc)
	var ps [DirectN / sNR]Panel
	for jr := 0; jr < n; jr += sNR {
		ps[jr/sNR] = Panel{B: b[jr:], LDB: ldb, C: c[jr:], LDC: ldc}
	}
	Panels(m, k, a, lda, ps[:n/sNR])
}

// Panel is one 32-column panel of a narrow product: C[:m, :32] +=
// A·B[:k, :32], with B at B[p·LDB:] and C at C[r·LDC:].
type Panel struct {
	B   []float32
	LDB int
	C   []float32
	LDC int
}

// Panels adds A·B_p to C_p for every panel p (A: m × k, row stride lda)
// without packing: for narrow products — the attention's α·v and the
// moments' products, whose A is a tile of attention weights — packing A
// and B would cost about as much as the product. The micro-kernel reads
// both in place, gemmKC steps at a time (the summation blocks of
// gemmBlocked), all panels of a block of rows in turn, so that A is read
// from memory once; the last rows, if m is not a multiple of sMR, go
// through a zero-padded copy of A. Each element of C is the same sum
// whatever the other panels and m are.
func Panels(m, k int, a []float32, lda int, ps []Panel) {
	if k == 0 || m == 0 || len(ps) == 0 {
		return
	}
	full := m - m%sMR
	for pc := 0; pc < k; pc += gemmKC {
		kc := min(gemmKC, k-pc)
		for ir := 0; ir < full; ir += sMR {
			ai := a[ir*lda+pc:]
			q := 0
			for ; q+1 < len(ps); q += 2 { // two panels per sweep over A
				p1, p2 := ps[q], ps[q+1]
				kernelS6x64Direct(kc, ai, lda, p1.B[pc*p1.LDB:], p1.LDB, p2.B[pc*p2.LDB:], p2.LDB,
					p1.C[ir*p1.LDC:], p1.LDC, p2.C[ir*p2.LDC:], p2.LDC)
			}
			if q < len(ps) {
				p := ps[q]
				kernelS6x32Direct(kc, ai, lda, p.B[pc*p.LDB:], p.LDB, p.C[ir*p.LDC:], p.LDC)
			}
		}
	}
	if full == m {
		return
	}
	buf := sPool.Get().(*gemmBuffers[float32])
	defer sPool.Put(buf)
	rows := m - full
	for pc := 0; pc < k; pc += gemmKC {
		kc := min(gemmKC, k-pc)
		ap := buf.ap[:sMR*kc]
		clear(ap)
		for i := 0; i < rows; i++ {
			copy(ap[i*kc:(i+1)*kc], a[(full+i)*lda+pc:][:kc])
		}
		for _, p := range ps {
			clear(buf.ct)
			kernelS6x32Direct(kc, ap, kc, p.B[pc*p.LDB:], p.LDB, buf.ct, sNR)
			for i := 0; i < rows; i++ {
				row := p.C[(full+i)*p.LDC:][:sNR]
				for j, v := range buf.ct[i*sNR : (i+1)*sNR] {
					row[j] += v
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
		if mr == 6 && (q+1)*mr <= mc { // a full panel: sequential writes
			r := ic + q*mr
			r0, r1, r2 := a[r*lda+pc:][:kc], a[(r+1)*lda+pc:][:kc], a[(r+2)*lda+pc:][:kc]
			r3, r4, r5 := a[(r+3)*lda+pc:][:kc], a[(r+4)*lda+pc:][:kc], a[(r+5)*lda+pc:][:kc]
			for p := range kc {
				d := pan[p*6 : p*6+6 : p*6+6]
				d[0], d[1], d[2] = alpha*r0[p], alpha*r1[p], alpha*r2[p]
				d[3], d[4], d[5] = alpha*r3[p], alpha*r4[p], alpha*r5[p]
			}
			continue
		}
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
