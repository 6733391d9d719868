package kern

import (
	"fmt"
	"math"
	"runtime"
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
// depend on the blocking, nor on m, nor on the other columns. (PyTorch's
// CPU bf16 matmul, oneDNN, also multiplies bf16 pairs exactly and sums in
// float32, in an order of its own, and rounds C to bf16; here C stays
// float32.) W is packed as the product goes, block by block (PairSource),
// so a weight kept in bfloat16 is read where it is stored, with no
// second copy.

// PairSource is the matrix W (n × k) of GemmBF16 as its owner stores it:
// PackPairs writes rows r0 … r0+rows−1 (rows ≤ 32) of W, pairs p0 …
// p0+kp−1 of their k values, in bfloat16 as one panel of the layout
// VDPBF16PS reads: dst[p·32 + j] = (w[r0+j][2(p0+p)], w[r0+j][2(p0+p)+1])
// (low half the even element), 0 for j ≥ rows and for the element past
// an odd k. PackPairsBF16 and PackPairsF32 write one row.
type PairSource interface {
	PackPairs(dst []uint32, r0, rows, p0, kp int)
}

// PackPairsBF16 writes the first kp pairs of row (bfloat16 bits; an odd
// len(row) < 2kp ends with a zero) into column j of a panel: dst[p·32+j].
func PackPairsBF16(dst []uint32, j int, row []uint16, kp int) {
	full := min(kp, len(row)/2)
	packRowPairs(dst, j, row, full)
	if full < kp {
		dst[full*bfNR+j] = uint32(row[2*full])
	}
}

// PackPanelBF16 writes the first kp pairs of 32 rows of bfloat16 bits, row
// j at bits[j·stride:], as one whole panel: dst[p·32+j] (PackPairsBF16 of
// each row, at once).
func PackPanelBF16(dst []uint32, bits []uint16, stride, kp int) {
	if kp <= 0 {
		return
	}
	_, _ = dst[bfNR*kp-1], bits[(bfNR-1)*stride+2*kp-1]
	if stride < 2*kp {
		panic(fmt.Sprintf("kern: PackPanelBF16 with row stride %d for %d pairs", stride, kp))
	}
	packPanel(dst, bits, stride, kp)
}

// packPanelRows is PackPanelBF16 row by row.
func packPanelRows(dst []uint32, bits []uint16, stride, kp int) {
	for j := 0; j < bfNR; j++ {
		packRowPairs(dst, j, bits[j*stride:j*stride+2*kp], kp)
	}
}

// PackPairsF32 is PackPairsBF16 for a float32 row, rounded (RoundBF16).
func PackPairsF32(dst []uint32, j int, row []float32, kp int) {
	full := min(kp, len(row)/2)
	for p := 0; p < full; p++ {
		dst[p*bfNR+j] = uint32(RoundBF16(row[2*p])) | uint32(RoundBF16(row[2*p+1]))<<16
	}
	if full < kp {
		dst[full*bfNR+j] = uint32(RoundBF16(row[2*full]))
	}
}

// bfNR and bfMR are the micro-tile (32 columns, 6 rows). Blocking: the
// rows of X are rounded and packed a super-block at a time (bfSuperRows),
// in blocks of bfMA rows laid out as panels of bfMR rows per block of
// bfKP pairs of k; W is packed bfNC rows (columns of C) × bfKP pairs at a
// time (512 KiB, in L2) once per super-block, and each 32-column panel of
// that block (16 KiB) stays in L1 while the micro-tiles of one bfMA-row
// block (192 KiB of X's pairs, in L2 beside W's block) pass over it.
const (
	bfNR, bfMR = 32, 6
	bfKP       = 128
	bfNC       = 1024
	bfMA       = 384 // a multiple of bfMR
)

// RoundBF16 returns the bfloat16 bits nearest to x, ties to even; NaN stays
// a (quiet) NaN, finite values beyond the largest bfloat16 round to ±Inf.
func RoundBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// bfBuffers are one call's packed rows of X (a super-block of them), block
// of W and edge tile.
type bfBuffers struct {
	ap, bp []uint32
	ct     [bfMR * bfNR]float32
}

// kept holds the buffers of finished products for the next ones, up to
// one per P of the process (the goroutines a projection is split over).
// Not a sync.Pool: that drops them at every collection, and a pass
// collects between its projections, so that the packed activations (the
// super-block of X, up to bfABytes; AMX's up to 37.7 MB at k = 6144) would
// be made again after each collection and the garbage grow with the
// pass. What stays allocated between passes is at most GOMAXPROCS of
// them, each as large as the largest product it served.
type kept[T any] struct {
	ch    chan *T
	fresh func() *T
}

func newKept[T any](fresh func() *T) kept[T] {
	return kept[T]{make(chan *T, max(2, runtime.GOMAXPROCS(0))), fresh}
}

// get returns kept buffers, or new ones.
func (k kept[T]) get() *T {
	select {
	case b := <-k.ch:
		return b
	default:
		return k.fresh()
	}
}

// put keeps b if there is room.
func (k kept[T]) put(b *T) {
	select {
	case k.ch <- b:
	default:
	}
}

// bfKept are the VDPBF16PS products' buffers.
var bfKept = newKept(func() *bfBuffers { return &bfBuffers{bp: make([]uint32, bfNC*bfKP)} })

// bfABytes bounds the packed rows of X that one product holds at once, its
// row super-block, so that every block of W is packed once per super-block
// rather than once per bfMA rows while a long input (T = 32k rows of
// k = 6144: 384 MiB as packed pairs) is still taken a slice at a time:
// 64 MiB shared by the GOMAXPROCS goroutines a projection is split over
// (32 MiB each on 2 cores; from 32 cores on, 2 MiB or less, which is one
// bfMA block at the widest k: the loop before super-blocks), which also
// bounds what bfKept holds between passes. A variable so that tests can
// make the super-blocks small.
var bfABytes = (64 << 20) / max(1, runtime.GOMAXPROCS(0))

// BF16PackedXBytes is the packed rows of X that GemmBF16 holds, and keeps
// for later products, for a product of m rows and k columns of X off AMX:
// one super-block (bfSuperRows), at most about bfABytes.
func BF16PackedXBytes(m, k int) int {
	kpAll := (k + 1) / 2
	return (bfSuperRows(m, kpAll) + bfMR - 1) / bfMR * bfMR * kpAll * 4
}

// bfSuperRows is the rows of X in one super-block of a product of m rows
// and kpAll pairs of k: the most whole blocks of bfMA rows whose packed
// pairs (4·kpAll bytes a row) fit in bfABytes, at least one block, and no
// more than m.
func bfSuperRows(m, kpAll int) int {
	return min(m, max(bfMA, bfABytes/(4*kpAll)/bfMA*bfMA))
}

// bfKernel is the micro-kernel: C[6×32] = C0 + Ap·Bp over kp ≥ 1 pairs
// (C0 = C when load, else 0). kernelBF6x32Go unless bf16_amd64.go installs
// the VDPBF16PS one.
var bfKernel = kernelBF6x32Go

// HasBF16 reports whether GemmBF16 runs on VDPBF16PS (AVX512_BF16) rather
// than the Go micro-kernel.
func HasBF16() bool { return hasBF16 }

// GemmBF16 computes C = bf16(X)·Wᵀ (X: m × k float32, row stride ldx,
// rounded to bfloat16 as it is packed; W: n × k, packed from w as the
// product goes; C: m × n, row stride ldc, overwritten, never read first)
// in the sums described above, or on AMX (HasAMX) in the tile unit's
// order of the same exact products (amx_linux_amd64.go).
func GemmBF16(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int) {
	if !checkBF16(m, n, k, x, ldx, c, ldc) {
		return
	}
	if amxGemm != nil && HasAMX() {
		amxGemm(m, n, k, x, ldx, w, c, ldc)
		return
	}
	gemmBF16(m, n, k, x, ldx, w, c, ldc, bfKernel)
}

// amxGemm is the AMX product (m, n, k > 0, arguments checked), installed by
// amx_linux_amd64.go; nil elsewhere.
var amxGemm func(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int)

// GemmBF16Go is GemmBF16 on the Go micro-kernel whatever the CPU.
func GemmBF16Go(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int) {
	if checkBF16(m, n, k, x, ldx, c, ldc) {
		gemmBF16(m, n, k, x, ldx, w, c, ldc, kernelBF6x32Go)
	}
}

// checkBF16 panics on arguments GemmBF16 cannot take, clears C where k is
// 0, and reports whether a product remains (m, n, k > 0).
func checkBF16(m, n, k int, x []float32, ldx int, c []float32, ldc int) bool {
	switch {
	case m < 0 || n < 0 || k < 0:
		panic(fmt.Sprintf("kern: GemmBF16 with m=%d n=%d k=%d", m, n, k))
	case ldx < max(1, k) || ldc < max(1, n):
		panic(fmt.Sprintf("kern: GemmBF16 strides ldx=%d ldc=%d for k=%d n=%d", ldx, ldc, k, n))
	case m > 0 && (len(x) < ldx*(m-1)+k || len(c) < ldc*(m-1)+n):
		panic("kern: GemmBF16 x or c too short")
	}
	if m == 0 || n == 0 {
		return false
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return false
	}
	return true
}

// gemmBF16 is the product on kernel, the arguments checked (checkBF16).
// Loop order: super-blocks of ms rows of X (bfSuperRows), each rounded and
// packed whole (packXBF16 per block of bfMA rows, one after the other) →
// bfNC columns of C → bfKP pairs of k → the block of W packed once → each
// bfMA-row block of the super-block → 32-column panels → 6-row tiles. The
// pairs of k reach each element in the same order whatever ms, so that C
// does not depend on it (TestGemmBF16SuperBlocks); a block of W is packed
// ceil(m/ms) times per call (ms = bfMA is the loop before super-blocks).
func gemmBF16(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int,
	kernel func(kp int, ap, bp []uint32, c []float32, ldc int, load bool)) {
	kpAll := (k + 1) / 2
	ms := bfSuperRows(m, kpAll)
	buf := bfKept.get()
	defer bfKept.put(buf)
	if need := (ms + bfMR - 1) / bfMR * bfMR * kpAll; cap(buf.ap) < need {
		buf.ap = make([]uint32, need)
	}
	for s0 := 0; s0 < m; s0 += ms {
		sm := min(ms, m-s0)
		// the super-block's blocks of bfMA rows, block b (rows s0 + b·bfMA …)
		// at b·bfMA·kpAll, each as packXBF16 lays out its ma rows
		for b0 := 0; b0 < sm; b0 += bfMA {
			packXBF16(x[(s0+b0)*ldx:], ldx, k, min(bfMA, sm-b0), buf.ap[b0*kpAll:])
		}
		for jc := 0; jc < n; jc += bfNC {
			nc := min(bfNC, n-jc)
			for pc := 0; pc < kpAll; pc += bfKP {
				kp := min(bfKP, kpAll-pc)
				load := pc > 0
				for jr := 0; jr < nc; jr += bfNR {
					w.PackPairs(buf.bp[jr*kp:(jr+bfNR)*kp], jc+jr, min(bfNR, nc-jr), pc, kp)
				}
				for b0 := 0; b0 < sm; b0 += bfMA {
					ma := min(bfMA, sm-b0)
					ma6 := (ma + bfMR - 1) / bfMR * bfMR
					at := b0*kpAll + pc*ma6
					ablk := buf.ap[at : at+ma6*kp] // rows s0+b0 …, X's pairs pc … pc+kp−1 (packXBF16)
					for jr := 0; jr < nc; jr += bfNR {
						bp := buf.bp[jr*kp : (jr+bfNR)*kp]
						for ir := 0; ir < ma; ir += bfMR {
							ap := ablk[ir*kp : (ir+bfMR)*kp]
							ci := (s0+b0+ir)*ldc + jc + jr
							if ir+bfMR <= ma && jr+bfNR <= nc {
								kernel(kp, ap, bp, c[ci:], ldc, load)
								continue
							}
							rows, cols := min(bfMR, ma-ir), min(bfNR, nc-jr)
							ct := buf.ct[:]
							if load {
								for i := 0; i < rows; i++ {
									copy(ct[i*bfNR:i*bfNR+cols], c[ci+i*ldc:])
								}
							}
							kernel(kp, ap, bp, ct, bfNR, load)
							for i := 0; i < rows; i++ {
								copy(c[ci+i*ldc:][:cols], ct[i*bfNR:])
							}
						}
					}
				}
			}
		}
	}
}

// packXBF16 rounds the ma rows of X (row stride ldx, k values) to bfloat16
// into ap: block b of bfKP pairs (the last may be shorter, kp pairs) starts
// at b·bfKP·ma6 (ma6 = ma rounded up to a multiple of bfMR) and holds
// panels of bfMR rows, kp·bfMR dwords each: panel q's step p is the bfMR
// dwords (x[r][2p′], x[r][2p′+1]), p′ = b·bfKP + p, r = q·bfMR … (zero
// beyond ma rows and past an odd k).
func packXBF16(x []float32, ldx, k, ma int, ap []uint32) {
	kpAll := (k + 1) / 2
	ma6 := (ma + bfMR - 1) / bfMR * bfMR
	for pc := 0; pc < kpAll; pc += bfKP {
		kp := min(bfKP, kpAll-pc)
		blk := ap[pc*ma6 : pc*ma6+ma6*kp]
		for r := 0; r < ma6; r++ {
			pan := blk[r/bfMR*bfMR*kp:]
			i := r % bfMR
			if r >= ma {
				for p := 0; p < kp; p++ {
					pan[p*bfMR+i] = 0
				}
				continue
			}
			row := x[r*ldx+2*pc : r*ldx+min(k, 2*(pc+kp))]
			full := len(row) / 2
			for p := 0; p < full; p++ {
				pan[p*bfMR+i] = uint32(RoundBF16(row[2*p])) | uint32(RoundBF16(row[2*p+1]))<<16
			}
			if full < kp {
				pan[full*bfMR+i] = uint32(RoundBF16(row[2*full]))
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
