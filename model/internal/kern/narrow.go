//go:build amd64

package kern

import (
	"math"
	"runtime"
	"sync"
)

// NarrowM is the most rows of A for which SgemmRows multiplies without
// packing B (sgemmRowsNarrow), on goroutines of its own: up to it, packing
// a weight matrix costs more than the product saves (BenchmarkSgemmRows;
// docs/performance.md, "Loading"). It bounds the transposed copy of A
// (NarrowM·k float32) too.
const NarrowM = 256

// narrowJ is the number of rows of B (columns of C) that the narrow
// micro-kernel multiplies at once, one zmm accumulator each, and narrowMR
// the rows of A it takes, one per lane.
const (
	narrowJ  = 16
	narrowMR = 16
)

// narrowBuffers are one goroutine's scratch: narrowJ rows of B widened, a
// pitch of gemmKC apart, and the transposed tile of C.
type narrowBuffers struct {
	w  [narrowJ * gemmKC]float32
	ct []float32
}

var (
	narrowPool = sync.Pool{New: func() any { return new(narrowBuffers) }}
	xtPool     = sync.Pool{New: func() any { return new([]float32) }}
)

// sgemmRowsNarrow is SgemmRows for m ≤ NarrowM, reading each row of B once
// from its storage, without packing it: A is transposed once into groups of
// narrowMR rows (xt: for each step p, the 16 values of column p, zero
// beyond m); B is widened narrowJ rows by gemmKC columns at a time into a
// buffer that stays in L1; the micro-kernel keeps one accumulator per row
// of B, a lane per row of A. The sums are those of the blocked product:
// for every element of C, a chain of fused multiply-adds in k order from
// +0 over each block of gemmKC steps, added in block order into C, which
// starts at +0 — bit for bit the packed micro-kernel's (kernelS6x32), NaN
// and infinities alike, whatever m and the split. The rows of B are split
// between goroutines (one per CPU, in blocks of narrowJ rows).
func sgemmRowsNarrow(m, n, k int, a []float32, lda int, b *Rows, c []float32, ldc int) {
	groups := (m + narrowMR - 1) / narrowMR
	xp := xtPool.Get().(*[]float32)
	defer xtPool.Put(xp)
	need := groups * k * narrowMR
	if cap(*xp) < need {
		*xp = make([]float32, need)
	}
	xt := (*xp)[:need]
	for g := range groups {
		dst := xt[g*k*narrowMR : (g+1)*k*narrowMR]
		for i := range narrowMR {
			r := g*narrowMR + i
			if r >= m {
				for p := range k {
					dst[p*narrowMR+i] = 0
				}
				continue
			}
			for p, v := range a[r*lda : r*lda+k] {
				dst[p*narrowMR+i] = v
			}
		}
	}
	blocks := (n + narrowJ - 1) / narrowJ
	parts := min(runtime.GOMAXPROCS(0), blocks, max(1, m*n*k>>22))
	if parts <= 1 {
		narrowBlocks(0, blocks, m, n, k, xt, b, c, ldc)
		return
	}
	var wg sync.WaitGroup
	for q := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			narrowBlocks(q*blocks/parts, (q+1)*blocks/parts, m, n, k, xt, b, c, ldc)
		}()
	}
	wg.Wait()
}

// narrowBlocks computes the columns of C of the blocks lo … hi−1 of
// narrowJ rows of B (sgemmRowsNarrow).
func narrowBlocks(lo, hi, m, n, k int, xt []float32, b *Rows, c []float32, ldc int) {
	buf := narrowPool.Get().(*narrowBuffers)
	defer narrowPool.Put(buf)
	groups := (m + narrowMR - 1) / narrowMR
	if len(buf.ct) < groups*narrowJ*narrowMR {
		buf.ct = make([]float32, groups*narrowJ*narrowMR)
	}
	ct := buf.ct[:groups*narrowJ*narrowMR]
	for blk := lo; blk < hi; blk++ {
		j0 := blk * narrowJ
		rows := min(narrowJ, n-j0)
		clear(ct)
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			for r := range narrowJ {
				dst := buf.w[r*gemmKC : r*gemmKC+kc]
				if r >= rows {
					clear(dst)
					continue
				}
				widenRow(dst, b, b.offset(j0+r)+pc)
			}
			for g := range groups {
				kernelNarrow16(kc, xt[(g*k+pc)*narrowMR:], buf.w[:], ct[g*narrowJ*narrowMR:])
			}
		}
		for g := range groups {
			t := ct[g*narrowJ*narrowMR:]
			for i := range min(narrowMR, m-g*narrowMR) {
				row := c[(g*narrowMR+i)*ldc+j0:][:rows]
				for r := range row {
					row[r] = t[r*narrowMR+i]
				}
			}
		}
	}
}

// widenRow writes len(dst) values of b's storage from element at into dst
// as float32 (MXFP4 and ggml-quantized rows dequantized): exactly (VCVTPH2PS widens half precision exactly, quieting a
// signalling NaN as the first fused multiply-add on it would).
func widenRow(dst []float32, b *Rows, at int) {
	kc := len(dst)
	if b.FP4 != nil {
		DequantMXFP4(dst, b.FP4, b.Scales, at)
		return
	}
	if b.Q != nil {
		b.Q.Dequant(dst, at)
		return
	}
	if b.Bits == nil {
		copy(dst, b.F32[at:at+kc])
		return
	}
	src := b.Bits[at : at+kc]
	v := kc &^ 15
	if v > 0 {
		if b.Half {
			widenF16AVX512(&dst[0], &src[0], v)
		} else {
			widenBF16AVX512(&dst[0], &src[0], v)
		}
	}
	for p := v; p < kc; p++ {
		if b.Half {
			dst[p] = HalfToFloat32(src[p])
		} else {
			dst[p] = math.Float32frombits(uint32(src[p]) << 16)
		}
	}
}

// kernelNarrow16 adds, for r < 16 and lanes i < 16, Σ_p xt[16p+i]·w[256r+p]
// over kc steps (a chain of fused multiply-adds from +0 in p order) to
// ct[16r+i].
func kernelNarrow16(kc int, xt, w, ct []float32) {
	if kc <= 0 {
		return
	}
	_, _ = xt[16*kc-1], w[15*gemmKC+kc-1]
	_ = ct[16*16-1]
	kernelNarrow16AVX512(kc, &xt[0], &w[0], &ct[0])
}

//go:noescape
func kernelNarrow16AVX512(kc int, xt, w, ct *float32)

//go:noescape
func widenBF16AVX512(dst *float32, src *uint16, n int)

//go:noescape
func widenF16AVX512(dst *float32, src *uint16, n int)
