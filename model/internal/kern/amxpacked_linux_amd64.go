package kern

import (
	"fmt"
	"math"
)

// PackedBF16 is the matrix W (n rows × kp pairs) of GemmPacked, rounded to
// bfloat16 and laid out once in the panels amxProduct multiplies, for many
// products that use its first rows and pairs: an attention head's keys, or
// its values transposed, packed once for every tile of queries. Block b of
// pairs b·bfKP … holds depth(b) = its pairs rounded up to 16 steps of 32
// dwords per panel of 32 rows, panel q at off[b] + q·32·depth(b).
type PackedBF16 struct {
	p     []uint32
	n, kp int
	split bool // pair p holds (w_p, w_p): the product's X is split (GemmPacked)
	off   []int

	// buf is GemmPacked's packed X, kept with W rather than in amxKept:
	// for the split product X is a tile of attention weights, rows × T,
	// and a pool drops it at the collections a long pass makes between
	// its layers, so that it was made again in every layer
	buf *amxBuffers
}

// reset sizes w for n rows of kp pairs, reusing its storage, zeroed.
func (w *PackedBF16) reset(n, kp int, split bool) {
	w.n, w.kp, w.split = n, kp, split
	n32 := (n + bfNR - 1) &^ (bfNR - 1)
	w.off = w.off[:0]
	size := 0
	for pc := 0; pc < kp; pc += bfKP {
		w.off = append(w.off, size)
		size += n32 * ((min(bfKP, kp-pc) + 15) &^ 15)
	}
	if cap(w.p) < size {
		w.p = make([]uint32, size)
	}
	w.p = w.p[:size]
	clear(w.p)
}

// panel returns the steps of the panel of rows j0 … j0+31 in block b of
// pairs (j0 a multiple of 32): step p − b·bfKP at 32·(p − b·bfKP).
func (w *PackedBF16) panel(b, j0 int) []uint32 {
	depth := (min(bfKP, w.kp-b*bfKP) + 15) &^ 15
	return w.p[w.off[b]+j0*depth:][:bfNR*depth]
}

// PackRowsBF16 packs W = the n rows of k values x[j·ldx:][:k] (pairs
// (x_2p, x_2p+1), rounded as RoundBF16 rounds) into w, for GemmPacked with
// an X of k columns.
func PackRowsBF16(w *PackedBF16, x []float32, ldx, n, k int) {
	kp := (k + 1) / 2
	w.reset(n, kp, false)
	for b := 0; b*bfKP < kp; b++ {
		p0 := b * bfKP
		for j0 := 0; j0 < n; j0 += bfNR {
			pan := w.panel(b, j0)
			for j := j0; j < min(n, j0+bfNR); j++ {
				PackPairsF32(pan, j-j0, x[j*ldx+2*p0:j*ldx+min(k, 2*(p0+bfKP))], min(bfKP, kp-p0))
			}
		}
	}
}

// PackColsSplit packs W = xᵀ for the split product: x has rows values of
// cols each (row stride ldx), W row i is column i of x, and its pair p
// holds (bf16(x[p][i]), the same) — one pair per row of x, so that
// GemmPacked multiplies it by X's values split in two bfloat16 parts.
func PackColsSplit(w *PackedBF16, x []float32, ldx, rows, cols int) {
	w.reset(cols, rows, true)
	for b := 0; b*bfKP < rows; b++ {
		p0 := b * bfKP
		for i0 := 0; i0 < cols; i0 += bfNR {
			pan := w.panel(b, i0)
			for p := p0; p < min(rows, p0+bfKP); p++ {
				dst := pan[(p-p0)*bfNR:][:bfNR]
				for i, v := range x[p*ldx+i0 : p*ldx+min(cols, i0+bfNR)] {
					h := uint32(RoundBF16(v))
					dst[i] = h | h<<16
				}
			}
		}
	}
}

// GemmPacked computes C = X·Wᵀ on AMX (HasAMX must hold) from the first n
// rows of W: X is m × k float32 (row stride ldx), C m × n (row stride ldc,
// overwritten). For W from PackRowsBF16, X is rounded to bfloat16 as in
// GemmBF16 and the sums are GemmBF16's. For W from PackColsSplit (k its
// pairs) each x is split into hi = bf16(x) and lo = bf16(x − hi) (0 where
// hi is ±Inf or NaN), so that C sums the exact products (hi + lo)·w, with
// hi + lo within 2⁻¹⁶·|x| of x (the float32 x to 16 significant bits).
// W's values in the rows and pairs packed beyond n and k must be finite:
// the padding of X multiplies them by 0. X is packed into w's own scratch,
// so a PackedBF16 serves one GemmPacked at a time.
func GemmPacked(m, n, k int, x []float32, ldx int, w *PackedBF16, c []float32, ldc int) {
	if !checkBF16(m, n, k, x, ldx, c, ldc) {
		return
	}
	kp, pack := (k+1)/2, packXAMX
	if w.split {
		kp, pack = k, packXAMXSplit
	}
	if n > w.n || kp > w.kp {
		panic(fmt.Sprintf("kern: GemmPacked n=%d k=%d beyond the packed %d rows, %d pairs", n, k, w.n, w.kp))
	}
	if w.buf == nil {
		w.buf = new(amxBuffers) // its bp stays empty: the panels are w's
	}
	// X's packing sized for all of W's pairs, not for this k: the
	// attention's α·v product grows by a tile of keys from one call to the
	// next, and amxProduct, sizing it for k, made it again at every tile
	// (T²/tile of garbage per head)
	if need := ((min(amxMA, m) + amxT - 1) &^ (amxT - 1)) * ((w.kp + 15) &^ 15); cap(w.buf.ap) < need {
		w.buf.ap = make([]uint32, need)
	}
	amxProduct(m, n, kp, x, ldx, k, pack, func(jc, pc, nc, kp, kp16 int) ([]uint32, int) {
		depth := (min(bfKP, w.kp-pc) + 15) &^ 15
		return w.p[w.off[pc/bfKP]+jc*depth:], bfNR * depth
	}, c, ldc, w.buf, 1)
}

// packXAMXSplit is packXAMX with one pair per value: the dword of row r,
// step p is (hi, lo) of x[r][p′] (GemmPacked), k pairs in all.
func packXAMXSplit(x []float32, ldx, k, ma int, ap []uint32) {
	packXTiles(x, ldx, k, ma, ap, tilesSplit2)
}

// splitBF16 is the dword hi | lo<<16 of x split as GemmPacked splits it.
func splitBF16(x float32) uint32 {
	hi := RoundBF16(x)
	if hi&0x7f80 == 0x7f80 { // ±Inf or NaN
		return uint32(hi)
	}
	lo := RoundBF16(x - math.Float32frombits(uint32(hi)<<16))
	return uint32(hi) | uint32(lo)<<16
}

// splitPairs16 writes n groups of 16 float32 at src (consecutive), each
// value as splitBF16's dword, as 16 dwords at dst, dst + stride, … bytes
// (amx_linux_amd64.s).
//
//go:noescape
func splitPairs16(dst *uint32, src *float32, n, stride int)
