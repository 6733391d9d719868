package kern

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestPackXAMXSplit: packXAMXSplit (its AVX-512 split included) lays X out
// as packXAMX does with one value per pair, each the dword splitBF16
// gives — on random bit patterns, ties, infinities, NaNs, values that
// round to infinity and denormals — and splitBF16's parts are those of
// its definition: hi the nearest bfloat16, lo the nearest to x − hi (0
// where hi is not finite), hi + lo within 2⁻¹⁶·|x| of a normal x.
func TestPackXAMXSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, sh := range [][3]int{{1, 1, 0}, {5, 17, 0}, {40, 300, 3}, {33, 257, 1}, {64, 128, 0}} {
		ma, k, pad := sh[0], sh[1], sh[2]
		ldx := k + pad
		x := roundingCases(rng, ma*ldx)
		ma32 := (ma + amxT - 1) &^ (amxT - 1)
		ap := make([]uint32, ma32*((k+15)&^15))
		for i := range ap {
			ap[i] = 0xdeadbeef
		}
		packXAMXSplit(x, ldx, k, ma, ap)
		for pc := 0; pc < k; pc += bfKP {
			kp := min(bfKP, k-pc)
			kp16 := (kp + 15) &^ 15
			for r := 0; r < ma32; r++ {
				for p := 0; p < kp16; p++ {
					var want uint32
					if r < ma && pc+p < k {
						want = splitBF16(x[r*ldx+pc+p])
					}
					at := pc*ma32 + r/16*16*kp16 + p/16*256 + r%16*16 + p%16
					if ap[at] != want {
						t.Fatalf("ma=%d k=%d: row %d value %d (%#08x): %#08x, want %#08x", ma, k, r, pc+p,
							math.Float32bits(x[r*ldx+pc+p]), ap[at], want)
					}
				}
			}
		}
		for _, v := range x {
			d := splitBF16(v)
			hi, lo := uint16(d), uint16(d>>16)
			if hi != RoundBF16(v) {
				t.Fatalf("split(%#08x): hi %#04x, want %#04x", math.Float32bits(v), hi, RoundBF16(v))
			}
			if hi&0x7f80 == 0x7f80 {
				if lo != 0 {
					t.Fatalf("split(%#08x): lo %#04x beside a non-finite hi", math.Float32bits(v), lo)
				}
				continue
			}
			if a := math.Abs(float64(v)); a >= 0x1p-100 && a < 0x1p100 {
				if e := math.Abs(widenBF16(hi) + widenBF16(lo) - float64(v)); e > 0x1p-16*a {
					t.Fatalf("split(%v): hi + lo = %v, error %.3g beyond 2⁻¹⁶·|x|", v, widenBF16(hi)+widenBF16(lo), e)
				}
			}
		}
	}
}

// TestGemmPacked: with W packed by rows, GemmPacked gives GemmBF16's bits
// (the same blocking and order), also from the first n rows and k columns
// of a larger packed W; with W packed by columns for the split product,
// each element is within (2⁻¹⁶ + k·2⁻²⁴)·Σ|x·w| of the float64 sum of x
// times the rounded w — over the AMX blocking's edges.
func TestGemmPacked(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(43, 44))
	var w PackedBF16
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		ldx, ldw := k+3, k+5
		x := normal32(rng, m*ldx, 1)
		// W with 7 more rows and 4 more columns than the product uses
		wf := normal32(rng, (n+7)*ldw, 0.05)
		PackRowsBF16(&w, wf, ldw, n+7, k+4)
		got, want := make([]float32, m*n), make([]float32, m*n)
		GemmPacked(m, n, k, x, ldx, &w, got, n)
		GemmBF16(m, n, k, x, ldx, denseF32{wf, k, ldw}, want, n)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("rows m=%d n=%d k=%d: C[%d,%d] = %v, GemmBF16 %v", m, n, k, i/n, i%n, got[i], want[i])
			}
		}

		// split: C = X·V with V (k × n, row stride ldv) packed as Vᵀ
		ldv := n + 2
		v := normal32(rng, (k+9)*ldv, 1)
		PackColsSplit(&w, v, ldv, k+9, n)
		GemmPacked(m, n, k, x, ldx, &w, got, n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var ref, abs float64
				for p := range k {
					e := float64(x[i*ldx+p]) * widenBF16(RoundBF16(v[p*ldv+j]))
					ref += e
					abs += math.Abs(e)
				}
				if d := math.Abs(float64(got[i*n+j]) - ref); d > (0x1p-16+float64(k)*0x1p-24)*abs {
					t.Fatalf("split m=%d n=%d k=%d: C[%d,%d] = %v, float64 %v: error %.3g", m, n, k, i, j, got[i*n+j], ref, d)
				}
			}
		}
	}
}

// TestGemmPackedGrowing: the attention's α·v product, whose k grows by a
// tile of keys from one call to the next on the same packed values,
// allocates only in its first call (GemmPacked packs X in w's scratch,
// sized for all of w's pairs).
func TestGemmPackedGrowing(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(45, 46))
	const rows, T, dh, tile = 128, 1024, 64, 64
	v := normal32(rng, T*dh, 1)
	x := normal32(rng, rows*T, 1)
	c := make([]float32, rows*dh)
	var w PackedBF16
	PackColsSplit(&w, v, dh, T, dh)
	GemmPacked(rows, dh, tile, x, T, &w, c, dh)
	// one pass of growing k, counted by hand: testing.AllocsPerRun's
	// warm-up run would size the scratch for the last k first
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for k := 2 * tile; k <= T; k += tile {
		GemmPacked(rows, dh, k, x, T, &w, c, dh)
	}
	runtime.ReadMemStats(&after)
	// (in bytes, below one packing of the first k: the process may make
	// a small object of its own meanwhile)
	if b := after.TotalAlloc - before.TotalAlloc; b >= 4*rows*tile {
		t.Errorf("%d bytes in %d allocations over %d products of growing k (k = %d … %d): want none",
			b, after.Mallocs-before.Mallocs, T/tile-1, 2*tile, T)
	}
}
