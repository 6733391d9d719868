package kern

import (
	"fmt"
	"math"
	"sync"
)

// The bf16 compute of package model (its option Compute "bf16"): C =
// bf16(X)·Wᵀ with X in float32 rounded to bfloat16 (round to nearest even,
// as PyTorch's .to(torch.bfloat16)), W in bfloat16, products exact and
// sums in float32. On CPUs with AVX512_BF16 the micro-kernel is
// VDPBF16PS (bf16_amd64.s); elsewhere, and where BF16 is absent, a Go
// micro-kernel (kernelBF6x32Go) forms the same sums in the same order, so
// that both give the same bits (TestGemmBF16MatchesGo) apart from the
// underflow threshold (dpStep).
//
// Each element of C is one float32 accumulator, from 0, over the pairs p
// = 0, 1, … of k in order: acc += x[2p+1]·w[2p+1], then acc += x[2p]·w[2p]
// (the order in which VDPBF16PS adds a lane's pair), each step one fused
// multiply-add rounded to nearest even, with denormal inputs read as 0
// and denormal results flushed to 0. The accumulators stay in registers
// across the blocks of k (a later block starts from C), so the sums do not
// depend on the blocking, nor on m, nor on the other columns.

// PackedBF16 is an N × K matrix W in bfloat16, laid out for GemmBF16 as
// panels of 32 rows of W (the last zero-padded): panel q holds, for each
// pair p < ⌈K/2⌉, the 32 dwords (w[32q+j][2p], w[32q+j][2p+1]) (low half
// the even element; an odd K ends with a zero). A K-block of a panel is
// contiguous, so the kernels read the panels in place.
type PackedBF16 struct {
	N, K  int
	Pairs []uint32
}

// bfNR and bfMR are the micro-tile (32 columns, 6 rows); bfKP the pairs per
// block of k (a panel's block, 128 × 128 bytes, stays in L1 while the
// micro-tiles of bfMC rows pass over it); bfMC the rows packed at once.
const (
	bfNR, bfMR = 32, 6
	bfKP       = 128
	bfMC       = 192 // a multiple of bfMR
)

// PackedBF16Len is the length of the Pairs of an n × k PackedBF16.
func PackedBF16Len(n, k int) int { return (n + bfNR - 1) / bfNR * bfNR * ((k + 1) / 2) }

// RoundBF16 returns the bfloat16 bits nearest to x, ties to even; NaN stays
// a (quiet) NaN, finite values beyond the largest bfloat16 round to ±Inf.
func RoundBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// PackBF16 rounds the n × k matrix w (row-major, row stride ldw) to
// bfloat16 and lays it out as a PackedBF16 (dst reused when long enough).
func PackBF16(dst []uint32, w []float32, ldw, n, k int) PackedBF16 {
	return packBF16(dst, n, k, func(r, p int) (lo, hi uint16) {
		row := w[r*ldw : r*ldw+k]
		lo = RoundBF16(row[2*p])
		if 2*p+1 < k {
			hi = RoundBF16(row[2*p+1])
		}
		return lo, hi
	})
}

// PackBF16Bits is PackBF16 for w already in bfloat16 (raw bits).
func PackBF16Bits(dst []uint32, w []uint16, ldw, n, k int) PackedBF16 {
	return packBF16(dst, n, k, func(r, p int) (lo, hi uint16) {
		row := w[r*ldw : r*ldw+k]
		lo = row[2*p]
		if 2*p+1 < k {
			hi = row[2*p+1]
		}
		return lo, hi
	})
}

func packBF16(dst []uint32, n, k int, pair func(r, p int) (lo, hi uint16)) PackedBF16 {
	if n < 0 || k < 0 {
		panic(fmt.Sprintf("kern: negative bf16 matrix %d × %d", n, k))
	}
	size := PackedBF16Len(n, k)
	if cap(dst) >= size {
		dst = dst[:size]
	} else {
		dst = make([]uint32, size)
	}
	kp := (k + 1) / 2
	for q := 0; q*bfNR < n; q++ {
		pan := dst[q*bfNR*kp : (q+1)*bfNR*kp]
		for j := 0; j < bfNR; j++ {
			r := q*bfNR + j
			if r >= n {
				for p := 0; p < kp; p++ {
					pan[p*bfNR+j] = 0
				}
				continue
			}
			for p := 0; p < kp; p++ {
				lo, hi := pair(r, p)
				pan[p*bfNR+j] = uint32(lo) | uint32(hi)<<16
			}
		}
	}
	return PackedBF16{N: n, K: k, Pairs: dst}
}

// Rows writes rows [r0, r0+len(dst)/K) of W widened to float32 (exact)
// into dst, row-major with stride K.
func (w PackedBF16) Rows(dst []float32, r0 int) {
	rows := len(dst) / max(w.K, 1)
	if r0 < 0 || r0+rows > w.N {
		panic(fmt.Sprintf("kern: rows %d…%d of a %d-row bf16 matrix", r0, r0+rows, w.N))
	}
	kp := (w.K + 1) / 2
	for i := 0; i < rows; i++ {
		r := r0 + i
		pan := w.Pairs[r/bfNR*bfNR*kp:]
		row := dst[i*w.K : (i+1)*w.K]
		for c := range row {
			d := pan[(c/2)*bfNR+r%bfNR]
			row[c] = math.Float32frombits(d >> (16 * uint(c&1)) << 16)
		}
	}
}

// bfBuffers are one call's packed rows of X (bfMC rows × bfKP pairs) and
// edge tile.
type bfBuffers struct {
	ap []uint32
	ct [bfMR * bfNR]float32
}

var bfPool = sync.Pool{New: func() any { return &bfBuffers{ap: make([]uint32, bfMC*bfKP)} }}

// bfKernel is the micro-kernel: C[6×32] = C0 + Ap·Bp over kp ≥ 1 pairs
// (C0 = C when load, else 0). kernelBF6x32Go unless bf16_amd64.go installs
// the VDPBF16PS one.
var bfKernel = kernelBF6x32Go

// HasBF16 reports whether GemmBF16 runs on VDPBF16PS (AVX512_BF16) rather
// than the Go micro-kernel.
func HasBF16() bool { return hasBF16 }

// GemmBF16 computes C = bf16(X)·Wᵀ (X: m × k float32, row stride ldx,
// rounded to bfloat16 as it is packed; W the n × k PackedBF16; C: m × n,
// row stride ldc, overwritten, never read first) in the sums described
// above.
func GemmBF16(m int, x []float32, ldx int, w PackedBF16, c []float32, ldc int) {
	gemmBF16(m, x, ldx, w, c, ldc, bfKernel)
}

// GemmBF16Go is GemmBF16 on the Go micro-kernel whatever the CPU.
func GemmBF16Go(m int, x []float32, ldx int, w PackedBF16, c []float32, ldc int) {
	gemmBF16(m, x, ldx, w, c, ldc, kernelBF6x32Go)
}

func gemmBF16(m int, x []float32, ldx int, w PackedBF16, c []float32, ldc int,
	kernel func(kp int, ap, bp []uint32, c []float32, ldc int, load bool)) {
	n, k := w.N, w.K
	switch {
	case m < 0:
		panic(fmt.Sprintf("kern: GemmBF16 with %d rows", m))
	case len(w.Pairs) != PackedBF16Len(n, k):
		panic(fmt.Sprintf("kern: bf16 matrix %d × %d holds %d pairs, want %d", n, k, len(w.Pairs), PackedBF16Len(n, k)))
	case ldx < max(1, k) || ldc < max(1, n):
		panic(fmt.Sprintf("kern: GemmBF16 strides ldx=%d ldc=%d for k=%d n=%d", ldx, ldc, k, n))
	case m > 0 && (len(x) < ldx*(m-1)+k || len(c) < ldc*(m-1)+n):
		panic("kern: GemmBF16 x or c too short")
	}
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	kpAll := (k + 1) / 2
	buf := bfPool.Get().(*bfBuffers)
	defer bfPool.Put(buf)
	for pc := 0; pc < kpAll; pc += bfKP {
		kp := min(bfKP, kpAll-pc)
		load := pc > 0
		for ic := 0; ic < m; ic += bfMC {
			mc := min(bfMC, m-ic)
			packXBF16(x, ldx, k, ic, mc, pc, kp, buf.ap)
			for jr := 0; jr < n; jr += bfNR {
				bp := w.Pairs[jr*kpAll+pc*bfNR : jr*kpAll+(pc+kp)*bfNR]
				for ir := 0; ir < mc; ir += bfMR {
					ap := buf.ap[ir*kp : (ir+bfMR)*kp]
					if ir+bfMR <= mc && jr+bfNR <= n {
						kernel(kp, ap, bp, c[(ic+ir)*ldc+jr:], ldc, load)
						continue
					}
					rows, cols := min(bfMR, mc-ir), min(bfNR, n-jr)
					ct := buf.ct[:]
					if load {
						for i := 0; i < rows; i++ {
							copy(ct[i*bfNR:i*bfNR+cols], c[(ic+ir+i)*ldc+jr:])
						}
					}
					kernel(kp, ap, bp, ct, bfNR, load)
					for i := 0; i < rows; i++ {
						copy(c[(ic+ir+i)*ldc+jr:][:cols], ct[i*bfNR:])
					}
				}
			}
		}
	}
}

// packXBF16 rounds X[ic:ic+mc, pairs pc:pc+kp] to bfloat16 into panels of
// bfMR rows: panel q holds, for each pair p < kp, the bfMR dwords
// (x[r][2p], x[r][2p+1]) (zero beyond mc rows and beyond k).
func packXBF16(x []float32, ldx, k, ic, mc, pc, kp int, ap []uint32) {
	for q := 0; q*bfMR < mc; q++ {
		pan := ap[q*bfMR*kp : (q+1)*bfMR*kp]
		for i := 0; i < bfMR; i++ {
			r := q*bfMR + i
			if r >= mc {
				for p := 0; p < kp; p++ {
					pan[p*bfMR+i] = 0
				}
				continue
			}
			row := x[(ic+r)*ldx : (ic+r)*ldx+k]
			c0 := 2 * pc
			full := min(kp, (k-c0)/2) // pairs with both elements inside k
			for p := 0; p < full; p++ {
				pan[p*bfMR+i] = uint32(RoundBF16(row[c0+2*p])) | uint32(RoundBF16(row[c0+2*p+1]))<<16
			}
			if full < kp {
				pan[full*bfMR+i] = uint32(RoundBF16(row[c0+2*full]))
			}
		}
	}
}

// kernelBF6x32Go is the Go micro-kernel: the VDPBF16PS sums of
// kernelBF6x32AVX512, element by element.
func kernelBF6x32Go(kp int, ap, bp []uint32, c []float32, ldc int, load bool) {
	_, _ = ap[bfMR*kp-1], bp[bfNR*kp-1]
	_ = c[(bfMR-1)*ldc+bfNR-1]
	for r := 0; r < bfMR; r++ {
		row := c[r*ldc : r*ldc+bfNR]
		for j := range row {
			var acc float32
			if load {
				acc = row[j]
			}
			for p := 0; p < kp; p++ {
				a, b := ap[p*bfMR+r], bp[p*bfNR+j]
				acc = dpStep(acc, uint16(a>>16), uint16(b>>16))
				acc = dpStep(acc, uint16(a), uint16(b))
			}
			row[j] = acc
		}
	}
}

// dpStep returns acc + a·b for bfloat16 a and b as one VDPBF16PS step
// does: a and b denormal read as 0, one rounding to nearest even, a
// denormal result flushed to 0. A product of two bfloat16 (8-bit
// significands) is exact in float32 unless it leaves the normal range, so
// acc + a·b in float32 is the fused step there; otherwise the step is
// fmaF32. Where the exact result lies within half an ulp of 2⁻¹²⁶, the
// flush decision (tininess before or after rounding) may differ from the
// hardware's.
func dpStep(acc float32, a, b uint16) float32 {
	fa, fb := bf16DAZ(a), bf16DAZ(b)
	p := fa * fb
	var s float32
	if ap := math.Abs(float64(p)); (ap >= 0x1p-126 && ap <= math.MaxFloat32) || fa == 0 || fb == 0 {
		s = acc + p
	} else {
		s = fmaF32(fa, fb, acc)
	}
	if math.Abs(float64(s)) < 0x1p-126 {
		return math.Float32frombits(math.Float32bits(s) & 0x80000000)
	}
	return s
}

// bf16DAZ widens a bfloat16 to float32, denormals read as (signed) 0.
func bf16DAZ(h uint16) float32 {
	if h&0x7f80 == 0 {
		h &= 0x8000
	}
	return math.Float32frombits(uint32(h) << 16)
}

// fmaF32 returns a·b + c rounded once to float32 (nearest even): the exact
// product in float64, the sum by TwoSum (s + e exact), and a tie of s
// between two float32 broken by the sign of e (the double rounding of
// float64 then float32 would otherwise break it to even).
func fmaF32(a, b, c float32) float32 {
	x, y := float64(a)*float64(b), float64(c)
	s := x + y
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bv := s - x
	e := (x - (s - bv)) + (y - bv)
	r := float32(s)
	if e == 0 || float64(r) == s || math.IsInf(float64(r), 0) {
		return r
	}
	// The float32 neighbour of r on s's side; s is a tie iff it lies
	// halfway between them, and then e says which side the exact sum is on.
	nb := math.Nextafter32(r, float32(math.Copysign(math.Inf(1), s-float64(r))))
	if s-float64(r) == float64(nb)-s && (e > 0) == (float64(nb) > s) {
		return nb
	}
	return r
}
