package kern

import (
	"math"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"
	"golang.org/x/sys/unix"
)

// The AMX path of GemmBF16: where the CPU has AMX-TILE and AMX-BF16 and
// Linux grants this process the tile data state, the product runs on
// TDPBF16PS, which multiplies a 16 × 32 bf16 tile of X by a 32 × 16 bf16
// tile of W (as 16 rows of 16 pairs) into a 16 × 16 float32 tile of C.
// Each element is then a float32 sum of the same exact pair products, in
// the tile unit's order rather than VDPBF16PS's one-step-per-element
// order, so AMX and the VDPBF16PS/Go kernels agree within the float32
// summation bound, not bit for bit (TestGemmBF16AMX). The order is fixed
// by k alone (steps of 16 pairs, blocks of bfKP pairs, C reloaded between
// blocks), so an element's bits depend on neither m, n nor its place.
//
// Tile state belongs to the OS thread. One call of amxBlocks loads the
// tile configuration, runs its whole block of the product and releases
// the tiles (TILERELEASE) before it returns, and an assembly function has
// no preemption point, so the goroutine cannot change threads while tiles
// are live; the kernel saves and restores them across signals and
// context switches once the permission below is granted.

// Linux's arch_prctl codes for the dynamically enabled XSAVE features
// (asm/prctl.h) and the XTILEDATA component number.
const (
	archGetXcompPerm  = 0x1022
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

func init() { amxGemm = gemmAMX }

var amx struct {
	once sync.Once
	ok   bool
}

// HasAMX reports whether GemmBF16 runs on AMX: the CPU has AMX-TILE and
// AMX-BF16 and the OS granted this process the tile data state (asked for
// once, at the first call). Where it did not, GemmBF16 falls back to
// VDPBF16PS or the Go micro-kernel.
func HasAMX() bool {
	amx.once.Do(func() {
		amx.ok = cpu.X86.HasAMXTile && cpu.X86.HasAMXBF16 && requestTileData()
	})
	return amx.ok
}

// requestTileData asks Linux to let this process use AMX tile data
// (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA; refused by kernels before 5.16
// and where the hypervisor or a too-small sigaltstack forbids it) and
// confirms it with ARCH_GET_XCOMP_PERM. (A variable so that a test can
// play the refusal.)
var requestTileData = func() bool {
	if _, _, e := unix.RawSyscall(unix.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); e != 0 {
		return false
	}
	var mask uint64
	if _, _, e := unix.RawSyscall(unix.SYS_ARCH_PRCTL, archGetXcompPerm, uintptr(unsafe.Pointer(&mask)), 0); e != 0 {
		return false
	}
	return mask&(1<<xfeatureXtiledata) != 0
}

// amxCfg is the tile configuration of amxBlocks (LDTILECFG's 64 bytes):
// palette 1, tiles 0–7 of 16 rows × 64 bytes (16 float32 or 16 bf16
// pairs), the rest unused.
var amxCfg = func() (c [64]byte) {
	c[0] = 1
	for t := 0; t < 8; t++ {
		c[16+2*t] = 64 // colsb, little-endian uint16
		c[48+t] = 16   // rows
	}
	return c
}()

// Blocking of the AMX product: amxMA rows of X are rounded and packed at
// once (packXAMX: in 1 KiB tiles, each block of bfKP pairs padded to a
// multiple of 16 pairs), so that W, packed bfNC columns × bfKP pairs at a time, is
// packed once per amxMA rows (a 1024-token pass: once).
// Within a block of W, amxBlocks passes amxMB blocks of 32 rows of X
// (128 KiB at bfKP pairs, kept in L2) over each 32-column panel of W
// (16 KiB, kept in L1): with all amxMA rows at once the A tiles came from
// further away and the kernel ran at half the speed.
const (
	amxT  = 32 // C is computed in blocks of 32 × 32: 2 × 2 tiles
	amxMA = 1024
	amxMB = 8
)

type amxBuffers struct {
	ap, bp []uint32
	ct     [amxT * amxT]float32
}

// amxKept are the AMX products' buffers (kept: up to 3 × amxMA rows ×
// k/2 dwords of packed activations, 37.7 MB at k = 6144).
var amxKept = newKept(func() *amxBuffers { return &amxBuffers{bp: make([]uint32, bfNC*bfKP)} })

// gemmAMX is GemmBF16 on AMX (arguments checked, m, n, k > 0).
func gemmAMX(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int) {
	productPairs(m, n, k, x, ldx, w, c, ldc, packXAMX, 1)
}

// GemmF32AMX computes C = X·Wᵀ for a W whose values are bfloat16 (W's
// PairSource panels hold them exactly) and a float32 X, on AMX (HasAMX
// must hold), to float32 accuracy: each x is split into three bfloat16
// parts that sum to it exactly (split3BF16), so every product x·w is the
// exact sum of three exact products, and C sums the 3k of them in float32
// (per step of 16 pairs: the hi, mid and lo parts' products in turn).
// Arguments as GemmBF16. Where float32 differs: an x that is exactly a
// bfloat16 has zero mid and lo parts, so a weight of ±Inf gives NaN (0·Inf)
// where float32 gives ±Inf; an x beyond the largest bfloat16 (|x| ≥
// 2¹²⁸·(1 − 2⁻⁹)) rounds to ±Inf; and parts below 2⁻¹²⁶ (x under about
// 2⁻¹¹⁰) are read as 0.
func GemmF32AMX(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int) {
	if !HasAMX() {
		panic("kern: GemmF32AMX without AMX")
	}
	if checkBF16(m, n, k, x, ldx, c, ldc) {
		productPairs(m, n, k, x, ldx, w, c, ldc, packXAMXSplit3, 3)
	}
}

// productPairs is amxProduct with W packed from w as the product goes,
// X laid out by pack in parts planes.
func productPairs(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int,
	pack func(x []float32, ldx, k, ma int, ap []uint32), parts int) {
	buf := amxKept.get()
	defer amxKept.put(buf)
	amxProduct(m, n, (k+1)/2, x, ldx, k, pack, func(jc, pc, nc, kp, kp16 int) ([]uint32, int) {
		for jr := 0; jr < nc; jr += bfNR {
			pan := buf.bp[jr*kp16 : (jr+bfNR)*kp16]
			w.PackPairs(pan[:kp*bfNR], jc+jr, min(bfNR, nc-jr), pc, kp)
			clear(pan[kp*bfNR:])
		}
		return buf.bp, bfNR * kp16
	}, c, ldc, buf, parts)
}

// packXAMXSplit3 is packXAMX in three planes of len(ap)/3 dwords: the
// pairs of the hi, mid and lo parts of split3BF16.
func packXAMXSplit3(x []float32, ldx, k, ma int, ap []uint32) {
	packXTiles(x, ldx, k, ma, ap, tilesSplit3)
}

// amxProduct is the blocked AMX product C = X·Wᵀ over kpAll pairs of k: pack
// lays out the rows of X (k values each) as packXAMX does, and panels
// returns the block of W for columns jc … jc+nc−1 of C and pairs pc …
// pc+kp−1 (kp16: kp rounded up to 16): its 32-column panels, the one of
// columns jc+jr at jr/32·pstride, each holding steps of 32 dwords of which
// the first kp16 are read, zero (or multiplied by X's zero padding) past
// kp pairs and past n columns.
func amxProduct(m, n, kpAll int, x []float32, ldx, k int, pack func(x []float32, ldx, k, ma int, ap []uint32),
	panels func(jc, pc, nc, kp, kp16 int) ([]uint32, int), c []float32, ldc int, buf *amxBuffers, parts int) {
	kpPad := (kpAll + 15) &^ 15
	maxMA := (min(amxMA, m) + amxT - 1) &^ (amxT - 1)
	plane := maxMA * kpPad
	if need := parts * plane; cap(buf.ap) < need {
		buf.ap = make([]uint32, need)
	}
	planeBytes := 0
	if parts == 3 {
		planeBytes = 4 * plane
	}
	cfg := &amxCfg[0]
	for i0 := 0; i0 < m; i0 += amxMA {
		ma := min(amxMA, m-i0)
		ma32 := (ma + amxT - 1) &^ (amxT - 1)
		pack(x[i0*ldx:], ldx, k, ma, buf.ap[:parts*plane])
		for jc := 0; jc < n; jc += bfNC {
			nc := min(bfNC, n-jc)
			for pc := 0; pc < kpAll; pc += bfKP {
				kp := min(bfKP, kpAll-pc)
				kp16 := (kp + 15) &^ 15
				load := 0
				if pc > 0 {
					load = 1
				}
				bp, ps := panels(jc, pc, nc, kp, kp16)
				ablk := buf.ap[pc*ma32 : pc*ma32+ma32*kp16]
				pstride := 4 * ps
				fullM, fullN := ma/amxT, nc/amxT
				ci := i0*ldc + jc
				if fullM > 0 && fullN > 0 {
					_ = c[ci+(fullM*amxT-1)*ldc+fullN*amxT-1]
					_ = bp[(fullN-1)*ps+bfNR*kp16-1]
					for ib := 0; ib < fullM; ib += amxMB {
						mb := min(amxMB, fullM-ib)
						amxBlocks(kp16/16, &ablk[ib*amxT*kp16], &bp[0], pstride, fullN, mb, &c[ci+ib*amxT*ldc], 4*ldc, load, cfg, planeBytes)
					}
				}
				// The edges: blocks of C with rows past m or columns past n,
				// through the 32 × 32 buffer ct (A and W are zero there).
				for ib := 0; ib < ma32/amxT; ib++ {
					for jb := 0; jb < (nc+amxT-1)/amxT; jb++ {
						if ib < fullM && jb < fullN {
							continue
						}
						rows, cols := min(amxT, ma-ib*amxT), min(amxT, nc-jb*amxT)
						cb := ci + ib*amxT*ldc + jb*amxT
						ct := buf.ct[:]
						if load == 1 {
							for i := 0; i < rows; i++ {
								copy(ct[i*amxT:i*amxT+cols], c[cb+i*ldc:])
							}
						}
						_ = bp[jb*ps+bfNR*kp16-1]
						amxBlocks(kp16/16, &ablk[ib*amxT*kp16], &bp[jb*ps], pstride, 1, 1, &ct[0], 4*amxT, load, cfg, planeBytes)
						for i := 0; i < rows; i++ {
							copy(c[cb+i*ldc:][:cols], ct[i*amxT:])
						}
					}
				}
			}
		}
	}
}

// packXAMX rounds the ma rows of X (row stride ldx, k values) to bfloat16
// pairs for TDPBF16PS's A tiles: block b of bfKP pairs (the last holds kp
// pairs, padded to kp16, a multiple of 16) starts at b·bfKP·ma32 (ma32 =
// ma rounded up to 32) and holds the ma32 rows in groups of 16, each group
// kp16/16 tiles of 16 rows × 16 pairs, 1 KiB each, one after the other:
// the dword of row r, step p at (r/16)·16·kp16 + (p/16)·256 + (r%16)·16 +
// p%16 is (x[r][2p′], x[r][2p′+1]), p′ = b·bfKP + p (zero past ma rows,
// past k and in the padding). A tile is thus read from contiguous memory.
func packXAMX(x []float32, ldx, k, ma int, ap []uint32) { packXTiles(x, ldx, k, ma, ap, tilesRound) }

// The values packXTiles writes for X: rounded pairs (packXAMX), one value
// per pair split in two (packXAMXSplit), or pairs in three planes of
// len(ap)/3 dwords each, hi, mid and lo (packXAMXSplit3).
const (
	tilesRound = iota
	tilesSplit2
	tilesSplit3
)

// packXTiles lays X out as packXAMX does, with the values of mode.
func packXTiles(x []float32, ldx, k, ma int, ap []uint32, mode int) {
	per, planes := 2, 1 // values per pair, planes of ap
	switch mode {
	case tilesSplit2:
		per = 1
	case tilesSplit3:
		planes = 3
	}
	plane := len(ap) / planes
	kpAll := (k + per - 1) / per
	ma32 := (ma + amxT - 1) &^ (amxT - 1)
	for pc := 0; pc < kpAll; pc += bfKP {
		kp := min(bfKP, kpAll-pc)
		kp16 := (kp + 15) &^ 15
		for r := 0; r < ma32; r++ {
			// grp[p]: the 16-row group of r in plane p; row r of its
			// tile t at t·256 + i·16
			var grp [3][]uint32
			base := pc*ma32 + r/16*16*kp16
			for p := range planes {
				grp[p] = ap[p*plane+base : p*plane+base+16*kp16]
			}
			i := r % 16
			if r >= ma {
				for t := 0; t < kp16; t += 16 {
					for p := range planes {
						clear(grp[p][t*16+i*16 : t*16+i*16+16])
					}
				}
				continue
			}
			row := x[r*ldx+per*pc : r*ldx+min(k, per*(pc+kp))]
			full := len(row) / per
			t0 := 0
			if hasAVX512 && full >= 16 {
				t0 = full &^ 15
				switch mode {
				case tilesRound:
					roundPairs16(&grp[0][i*16], &row[0], t0/16, 1024)
				case tilesSplit2:
					splitPairs16(&grp[0][i*16], &row[0], t0/16, 1024)
				case tilesSplit3:
					split3Pairs16(&grp[0][i*16], &row[0], t0/16, 1024, 4*plane)
				}
			}
			for t := t0; t < kp16; t += 16 {
				at := t*16 + i*16
				n := min(16, max(0, full-t))
				for q := 0; q < n; q++ {
					switch mode {
					case tilesRound:
						grp[0][at+q] = uint32(RoundBF16(row[2*(t+q)])) | uint32(RoundBF16(row[2*(t+q)+1]))<<16
					case tilesSplit2:
						grp[0][at+q] = splitBF16(row[t+q])
					case tilesSplit3:
						h0, m0, l0 := split3BF16(row[2*(t+q)])
						h1, m1, l1 := split3BF16(row[2*(t+q)+1])
						grp[0][at+q] = uint32(h0) | uint32(h1)<<16
						grp[1][at+q] = uint32(m0) | uint32(m1)<<16
						grp[2][at+q] = uint32(l0) | uint32(l1)<<16
					}
				}
				for p := range planes {
					clear(grp[p][at+n : at+16])
				}
			}
			if full < kp { // an odd k: the last pair holds one value
				at := full/16*256 + i*16 + full%16
				switch mode {
				case tilesRound:
					grp[0][at] = uint32(RoundBF16(row[2*full]))
				case tilesSplit3:
					h, m, l := split3BF16(row[2*full])
					grp[0][at], grp[1][at], grp[2][at] = uint32(h), uint32(m), uint32(l)
				}
			}
		}
	}
}

// split3BF16 splits x into three bfloat16 values that sum to it exactly
// (x normal and beyond 2⁻¹⁰⁹ in magnitude, where no part is subnormal):
// hi = RoundBF16(x), mid = RoundBF16(x − hi), lo = x − hi − mid (at most
// 8 significant bits are left after two roundings of a 24-bit
// significand, each of which takes 8); mid = lo = 0 where hi is ±Inf or
// NaN.
func split3BF16(x float32) (hi, mid, lo uint16) {
	hi = RoundBF16(x)
	if hi&0x7f80 == 0x7f80 {
		return hi, 0, 0
	}
	r := x - math.Float32frombits(uint32(hi)<<16)
	mid = RoundBF16(r)
	lo = RoundBF16(r - math.Float32frombits(uint32(mid)<<16))
	return hi, mid, lo
}

// hasAVX512: roundPairs16 may run (AVX-512F).
var hasAVX512 = Available()

//go:noescape
func roundPairs16(dst *uint32, src *float32, n, stride int)

// split3Pairs16 writes n groups of 32 float32 at src (consecutive) split
// as split3BF16 splits them, each part's group as roundPairs16 writes the
// rounded values: hi at dst, dst + stride, … bytes, mid plane bytes after
// each, lo 2·plane bytes after (amx_linux_amd64.s).
//
//go:noescape
func split3Pairs16(dst *uint32, src *float32, n, stride, plane int)

// amxBlocks computes nb × mb blocks of 32 × 32 of C (amx_linux_amd64.s):
// block (ib, jb) at c + ib·32·ldc + jb·128 bytes is C0 + A_ib·B_jb over kc
// steps of 16 pairs, with C0 that block of C (load ≠ 0) or 0. A_ib is the
// 32 rows of a from ib·2048·kc bytes on, as packXAMX lays them out (the
// tile of rows 0–15, step s at 1024·s bytes, rows 16–31 at 1024·(kc+s));
// B_jb is the panel at b + jb·pstride bytes, step s its 16 rows of 32
// dwords at 2048·s bytes. cfg is amxCfg.
//
//go:noescape
func amxBlocks(kc int, a *uint32, b *uint32, pstride, nb, mb int, c *float32, ldc, load int, cfg *byte, plane int)
