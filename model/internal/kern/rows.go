//go:build amd64

package kern

import (
	"math"
	"sync"
)

// Rows is the matrix B of a product C = A·Bᵀ given row by row as it is
// stored: float32 values (F32), the 16-bit patterns of bfloat16 or IEEE
// half-precision values (Bits, Half), or MXFP4 codes and scales (FP4,
// Scales: DequantMXFP4, Cols a multiple of MXFP4Block), widened to float32
// while the rows are packed into the panels of the blocked product. Row j (Cols values) starts
// at element ((j/Run)·Pitch + j%Run)·Cols: rows come in runs of Run rows,
// consecutive runs Pitch rows apart (Run 0: all rows contiguous), so that
// a matrix made of every other block of rows of a stored one (the query
// rows of a packed q_proj) is read in place.
type Rows struct {
	F32        []float32
	Bits       []uint16
	Half       bool    // Bits hold IEEE 754 half precision, else bfloat16
	FP4        []uint8 // MXFP4 codes, two a byte (element i in byte i/2)
	Scales     []uint8 // MXFP4 E8M0 scales, one per MXFP4Block elements
	Q          *Blocks // ggml's quantized blocks (GGUF), Cols a multiple of Q.Block
	Cols       int
	Run, Pitch int
}

// offset is the element offset of row j.
func (b *Rows) offset(j int) int {
	if b.Run == 0 {
		return j * b.Cols
	}
	return (j/b.Run*b.Pitch + j%b.Run) * b.Cols
}

// stored is the number of elements b's storage holds.
func (b *Rows) stored() int {
	if b.FP4 != nil {
		return min(2*len(b.FP4), MXFP4Block*len(b.Scales))
	}
	if b.Q != nil {
		return b.Q.Elements()
	}
	return max(len(b.F32), len(b.Bits))
}

// SgemmRows computes C = A·Bᵀ (A: m × k with row stride lda; B: n rows of
// k = b.Cols values; C: m × n with row stride ldc, overwritten) on the
// blocked AVX-512 product, widening 16-bit rows while packing them. The
// sums are those of Sgemm(transB, …, alpha 1, beta 0) on the widened B
// (the same packed panels, the same micro-kernel): bit for bit the
// product of the float32 matrix. For m ≤ NarrowM the same sums come from
// sgemmRowsNarrow, which reads B without packing it, on goroutines.
func SgemmRows(m, n, k int, a []float32, lda int, b Rows, c []float32, ldc int) {
	if k != b.Cols {
		panic("kern: SgemmRows depth differs from the rows' length")
	}
	// A and C as Sgemm checks them (B as a dense k × n stand-in), B's
	// last row against its storage.
	checkGemm(false, m, n, k, len(a), lda, n*k, max(1, n), len(c), ldc)
	if n > 0 && k > 0 && (b.Run < 0 || b.Run > 0 && b.Pitch < b.Run ||
		b.offset(n-1)+k > b.stored()) {
		panic("blas: insufficient length of b")
	}
	if k == 0 || m == 0 || n == 0 {
		scaleRows(m, n, 0, c, ldc)
		return
	}
	if m <= NarrowM {
		scaleRows(m, n, 0, c, ldc)
		sgemmRowsNarrow(m, n, k, a, lda, &b, c, ldc)
		return
	}
	sgemmRowsPacked(m, n, k, a, lda, &b, c, ldc)
}

// sgemmRowsPacked is SgemmRows on packed panels of B. The first block of
// depth overwrites C (kernelS6x32Store) instead of adding to a cleared C:
// the same bits, as the accumulators start at +0 either way, without the
// pass that clears C.
func sgemmRowsPacked(m, n, k int, a []float32, lda int, b *Rows, c []float32, ldc int) {
	buf := sPool.Get().(*gemmBuffers[float32])
	defer sPool.Put(buf)
	for jc := 0; jc < n; jc += gemmNC {
		nc := min(gemmNC, n-jc)
		for pc := 0; pc < k; pc += gemmKC {
			kc := min(gemmKC, k-pc)
			packRows(b, pc, kc, jc, nc, buf.bp)
			kernel := kernelS6x32
			if pc == 0 {
				kernel = kernelS6x32Store
			}
			gemmPanelBlock(m, nc, kc, 1, a, lda, pc, buf.bp, c[jc:], ldc, sMR, sNR, kernel, pc == 0, buf)
		}
	}
}

// packRows is packB of the transposed rows jc … jc+nc−1 of b, columns
// pc … pc+kc−1, widened to float32: panel q holds, for each p < kc, the
// sNR values of column pc+p of rows jc+q·sNR … (zero beyond nc). F32 and
// BF16 rows go 8 at a time (packRows8), MXFP4 and ggml-quantized rows too, dequantized first
// (packRowsFP4); F16 rows, and the rows of a panel's last group of fewer
// than 8, one by one.
func packRows(b *Rows, pc, kc, jc, nc int, bp []float32) {
	const nr = sNR
	var fp4 *[8 * gemmKC]float32
	deq := b.FP4 != nil || b.Q != nil // rows dequantized into fp4 first
	if deq {
		fp4 = fp4Pool.Get().(*[8 * gemmKC]float32)
		defer fp4Pool.Put(fp4)
	}
	for q := 0; q*nr < nc; q++ {
		pan := bp[q*nr*kc : (q+1)*nr*kc]
		w := min(nr, nc-q*nr)
		j := 0
		if deq {
			for ; j+8 <= w; j += 8 {
				packRowsFP4(b, pc, kc, jc+q*nr+j, pan[j:], fp4)
			}
		} else if !b.Half {
			for ; j+8 <= w; j += 8 {
				packRows8(b, pc, kc, jc+q*nr+j, pan[j:])
			}
		}
		for ; j < nr; j++ {
			if j >= w {
				for p := 0; p < kc; p++ {
					pan[p*nr+j] = 0
				}
				continue
			}
			at := b.offset(jc+q*nr+j) + pc
			switch {
			case !deq && b.Bits == nil:
				for p, v := range b.F32[at : at+kc] {
					pan[p*nr+j] = v
				}
			case deq:
				widenRow(fp4[:kc], b, at)
				for p, v := range fp4[:kc] {
					pan[p*nr+j] = v
				}
			case b.Half:
				for p, v := range b.Bits[at : at+kc] {
					pan[p*nr+j] = HalfToFloat32(v)
				}
			default:
				for p, v := range b.Bits[at : at+kc] {
					pan[p*nr+j] = math.Float32frombits(uint32(v) << 16)
				}
			}
		}
	}
}

// packRows8 writes columns pc … pc+kc−1 of the 8 rows j … j+7 of b (F32
// or BF16) into 8 adjacent columns of a panel: dst[p·sNR + i] is row j+i,
// column pc+p: eight values a step, written next to each other, from
// eight sequential reads, where a row at a time writes one value per
// cache line (BenchmarkPackRows).
func packRows8(b *Rows, pc, kc, j int, dst []float32) {
	const nr = sNR
	var o [8]int
	for i := range o {
		o[i] = b.offset(j+i) + pc
	}
	if b.Bits == nil {
		f := b.F32
		r0, r1, r2, r3 := f[o[0]:o[0]+kc], f[o[1]:o[1]+kc], f[o[2]:o[2]+kc], f[o[3]:o[3]+kc]
		r4, r5, r6, r7 := f[o[4]:o[4]+kc], f[o[5]:o[5]+kc], f[o[6]:o[6]+kc], f[o[7]:o[7]+kc]
		for p := range kc {
			d := dst[p*nr : p*nr+8 : p*nr+8]
			d[0], d[1], d[2], d[3] = r0[p], r1[p], r2[p], r3[p]
			d[4], d[5], d[6], d[7] = r4[p], r5[p], r6[p], r7[p]
		}
		return
	}
	h := b.Bits
	r0, r1, r2, r3 := h[o[0]:o[0]+kc], h[o[1]:o[1]+kc], h[o[2]:o[2]+kc], h[o[3]:o[3]+kc]
	r4, r5, r6, r7 := h[o[4]:o[4]+kc], h[o[5]:o[5]+kc], h[o[6]:o[6]+kc], h[o[7]:o[7]+kc]
	for p := range kc {
		d := dst[p*nr : p*nr+8 : p*nr+8]
		d[0], d[1] = math.Float32frombits(uint32(r0[p])<<16), math.Float32frombits(uint32(r1[p])<<16)
		d[2], d[3] = math.Float32frombits(uint32(r2[p])<<16), math.Float32frombits(uint32(r3[p])<<16)
		d[4], d[5] = math.Float32frombits(uint32(r4[p])<<16), math.Float32frombits(uint32(r5[p])<<16)
		d[6], d[7] = math.Float32frombits(uint32(r6[p])<<16), math.Float32frombits(uint32(r7[p])<<16)
	}
}

// fp4Pool holds packRows' scratch for 8 dequantized MXFP4 or ggml-quantized rows.
var fp4Pool = sync.Pool{New: func() any { return new([8 * gemmKC]float32) }}

// packRowsFP4 is packRows8 for MXFP4 and ggml-quantized rows: the kc
// values of each of the 8 rows j … j+7 from column pc are dequantized
// into tmp, which packRows8 then interleaves as float32 rows.
func packRowsFP4(b *Rows, pc, kc, j int, dst []float32, tmp *[8 * gemmKC]float32) {
	for i := range 8 {
		widenRow(tmp[i*kc:(i+1)*kc], b, b.offset(j+i)+pc)
	}
	packRows8(&Rows{F32: tmp[:8*kc], Cols: kc}, 0, kc, 0, dst)
}

// HalfToFloat32 widens IEEE 754 half-precision bits to float32, exactly
// (subnormals, infinities and NaN payloads included): the magnitude bits
// shifted into a float32's place are the value times 2⁻¹¹², which the
// multiplication by 2¹¹² undoes exactly, and the all-ones exponent maps to
// float32's.
func HalfToFloat32(h uint16) float32 {
	bits := uint32(h&0x7fff) << 13
	mag := math.Float32bits(math.Float32frombits(bits) * 0x1p112)
	if bits >= 0x0f800000 { // exponent 31: infinity or NaN
		mag = bits | 0x7f800000
	}
	return math.Float32frombits(uint32(h&0x8000)<<16 | mag)
}
