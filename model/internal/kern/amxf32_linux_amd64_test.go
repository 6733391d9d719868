package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackXAMXSplit3: packXAMXSplit3 (its AVX-512 split included) lays out
// the hi, mid and lo parts of split3BF16 in three planes, each as packXAMX
// lays out rounded pairs — on random bit patterns, ties, infinities, NaNs,
// values that round to infinity and denormals, over odd k, rows past ma
// and padded blocks — and the parts are those of split3BF16's definition:
// hi the nearest bfloat16, 0 for mid and lo where hi is not finite, and
// hi + mid + lo = x exactly for normal x from 2⁻¹⁰⁰ to 2¹⁰⁰.
func TestPackXAMXSplit3(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, sh := range [][3]int{{1, 1, 0}, {5, 33, 0}, {40, 300, 3}, {33, 257, 1}, {64, 64, 0}} {
		ma, k, pad := sh[0], sh[1], sh[2]
		ldx := k + pad
		x := roundingCases(rng, ma*ldx)
		kpAll := (k + 1) / 2
		ma32 := (ma + amxT - 1) &^ (amxT - 1)
		plane := ma32 * ((kpAll + 15) &^ 15)
		ap := make([]uint32, 3*plane)
		for i := range ap {
			ap[i] = 0xdeadbeef
		}
		packXAMXSplit3(x, ldx, k, ma, ap)
		for pc := 0; pc < kpAll; pc += bfKP {
			kp := min(bfKP, kpAll-pc)
			kp16 := (kp + 15) &^ 15
			for r := 0; r < ma32; r++ {
				for p := 0; p < kp16; p++ {
					var want [3]uint32
					for e := 0; e < 2; e++ {
						if q := 2*(pc+p) + e; r < ma && q < k {
							h, m, l := split3BF16(x[r*ldx+q])
							for i, part := range []uint16{h, m, l} {
								want[i] |= uint32(part) << (16 * e)
							}
						}
					}
					at := pc*ma32 + r/16*16*kp16 + p/16*256 + r%16*16 + p%16
					for i := range want {
						if got := ap[i*plane+at]; got != want[i] {
							t.Fatalf("ma=%d k=%d: row %d pair %d, part %d: %#08x, want %#08x", ma, k, r, pc+p, i, got, want[i])
						}
					}
				}
			}
		}
		for _, v := range x {
			hi, mid, lo := split3BF16(v)
			if hi != RoundBF16(v) {
				t.Fatalf("split3(%#08x): hi %#04x, want %#04x", math.Float32bits(v), hi, RoundBF16(v))
			}
			if hi&0x7f80 == 0x7f80 {
				if mid != 0 || lo != 0 {
					t.Fatalf("split3(%#08x): mid %#04x, lo %#04x beside a non-finite hi", math.Float32bits(v), mid, lo)
				}
				continue
			}
			if a := math.Abs(float64(v)); a >= 0x1p-100 && a < 0x1p100 {
				if s := widenBF16(hi) + widenBF16(mid) + widenBF16(lo); s != float64(v) {
					t.Fatalf("split3(%v): hi + mid + lo = %v", v, s)
				}
			}
		}
	}
}

// rowsFrom is the rows of w from j0 on, as the model hands a column block
// of a product to GemmF32AMX.
type rowsFrom struct {
	w  PairSource
	j0 int
}

func (r rowsFrom) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	r.w.PackPairs(dst, r.j0+r0, rows, p0, kp)
}

// TestGemmF32AMX: for a W of bfloat16 values, each element of GemmF32AMX's
// C is within the float32 summation bound of the float64 product of the
// float32 X (not rounded) and W: 3k exact products, each x·w the exact sum
// of three, summed in float32 (γ(3k) ≤ 3k·2⁻²⁴ of Σ|xw|), with strided
// operands over the AMX blocking's edges; columns past n are not written;
// and the sums depend on k alone: rows from m/3 on alone, and columns from
// n/2 on alone (W's rows from there), give the same bits.
func TestGemmF32AMX(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(45, 46))
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		ldx, ldw, ldc := k+3, k+1, n+2
		x, w := normal32(rng, m*ldx, 1), normal32(rng, n*ldw, 0.05)
		for i, v := range w {
			w[i] = float32(widenBF16(RoundBF16(v)))
		}
		c := normal32(rng, m*ldc, 1)
		keep := append([]float32(nil), c...)
		GemmF32AMX(m, n, k, x, ldx, denseF32{w, k, ldw}, c, ldc)
		for i := 0; i < m; i++ {
			for j := n; j < ldc && i*ldc+j < len(c); j++ {
				if c[i*ldc+j] != keep[i*ldc+j] {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] past n written", m, n, k, i, j)
				}
			}
			for j := 0; j < n; j++ {
				var ref, abs float64
				for p := range k {
					v := float64(x[i*ldx+p]) * float64(w[j*ldw+p])
					ref += v
					abs += math.Abs(v)
				}
				if d := math.Abs(float64(c[i*ldc+j]) - ref); d > 3*float64(k)*0x1p-24*abs {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, float64 %v: error %.3g beyond 3k·2⁻²⁴·Σ|xw| = %.3g",
						m, n, k, i, j, c[i*ldc+j], ref, d, 3*float64(k)*0x1p-24*abs)
				}
			}
		}
		i0, j0 := m/3, n/2
		rows, cols := make([]float32, (m-i0)*n), make([]float32, m*(n-j0))
		GemmF32AMX(m-i0, n, k, x[i0*ldx:], ldx, denseF32{w, k, ldw}, rows, n)
		GemmF32AMX(m, n-j0, k, x, ldx, rowsFrom{denseF32{w, k, ldw}, j0}, cols, n-j0)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				whole := math.Float32bits(c[i*ldc+j])
				if i >= i0 && math.Float32bits(rows[(i-i0)*n+j]) != whole {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v in the whole product, %v from row %d on", m, n, k, i, j, c[i*ldc+j], rows[(i-i0)*n+j], i0)
				}
				if j >= j0 && math.Float32bits(cols[i*(n-j0)+j-j0]) != whole {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v in the whole product, %v from column %d on", m, n, k, i, j, c[i*ldc+j], cols[i*(n-j0)+j-j0], j0)
				}
			}
		}
	}
}

// TestGemmF32AMXExact: on integers of up to 21 significant bits, which no
// fewer than three bfloat16 parts hold, times small integers, every
// partial sum is an integer below 2²⁴ and so exact in float32 whatever the
// order: GemmF32AMX gives the exact product, where rounding X to bfloat16
// (GemmBF16) does not.
func TestGemmF32AMXExact(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(47, 48))
	for _, sh := range append([][3]int{{40, 70, 4}, {33, 40, 3}}, amxShapes...) {
		m, n, k := sh[0], sh[1], sh[2]
		top := min(1<<20, (1<<23)/(2*k)) // Σ|x·w| ≤ 2²³
		x, w := make([]float32, m*k), make([]float32, n*k)
		for i := range x {
			x[i] = float32(rng.IntN(2*top+1) - top)
		}
		for i := range w {
			w[i] = float32(rng.IntN(5) - 2)
		}
		got, bf := make([]float32, m*n), make([]float32, m*n)
		GemmF32AMX(m, n, k, x, k, denseF32{w, k, k}, got, n)
		GemmBF16(m, n, k, x, k, denseF32{w, k, k}, bf, n)
		rounded := false
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := range k {
					s += float64(x[i*k+p]) * float64(w[j*k+p])
				}
				if float64(got[i*n+j]) != s {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, exact %v", m, n, k, i, j, got[i*n+j], s)
				}
				rounded = rounded || float64(bf[i*n+j]) != s
			}
		}
		if top >= 1<<9 && !rounded {
			t.Fatalf("m=%d n=%d k=%d: the bfloat16 product of integers up to %d is exact too: the test does not need the split", m, n, k, top)
		}
	}
}

// TestGemmF32AMXSpecial: with NaN, ±Inf, signed zeros and denormals laced
// into normal activations and NaN into the weights (no finite sums near
// the overflow; GemmF32AMX's W must be finite or NaN), GemmF32AMX gives
// NaN exactly where the float32 product does, the same infinities, and
// finite values within its summation bound (the denormal activations,
// whose parts the tile unit reads as 0, change sums by less than 2⁻¹²⁶).
func TestGemmF32AMXSpecial(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(49, 50))
	sp := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p-130, -0x1p-140,
		0, float32(math.Copysign(0, -1))}
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		x, w := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05)
		for i := range x {
			if rng.IntN(400) == 0 {
				x[i] = sp[rng.IntN(len(sp))]
			}
		}
		for i, v := range w {
			w[i] = float32(widenBF16(RoundBF16(v)))
			if rng.IntN(400) == 0 {
				w[i] = sp[0]
			}
		}
		got := make([]float32, m*n)
		GemmF32AMX(m, n, k, x, k, denseF32{w, k, k}, got, n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var ref, abs float64
				for p := range k {
					v := float64(x[i*k+p]) * float64(w[j*k+p])
					ref += v
					abs += math.Abs(v)
				}
				g := float64(got[i*n+j])
				bad := math.IsNaN(g) != math.IsNaN(ref) || (math.IsInf(ref, 0) && g != ref)
				if !bad && !math.IsNaN(ref) && !math.IsInf(ref, 0) {
					bad = math.Abs(g-ref) > 3*float64(k)*0x1p-24*abs+0x1p-126
				}
				if bad {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, float64 %v", m, n, k, i, j, g, ref)
				}
			}
		}
	}
}
