package kern

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestSplit3BF16: split3BF16's parts are those of its definition — hi the
// nearest bfloat16, mid and lo 0 where hi is not finite, and hi + mid + lo
// = x exactly for normal x from 2⁻¹⁰⁰ to 2¹⁰⁰ — on random bit patterns,
// ties and special values (TestPackXAMX checks their layout).
func TestSplit3BF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	for _, v := range roundingCases(rng, 100000) {
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

// TestGemmF32AMX: for a W of bfloat16 values, each element of GemmF32AMX's
// C is within the float32 summation bound of the float64 product of the
// float32 X (not rounded) and W: 3k exact products, each x·w the exact sum
// of three, summed in float32 (γ(3k) ≤ 3k·2⁻²⁴ of Σ|xw|), with strided
// operands over the AMX blocking's edges (checkAMXProduct).
func TestGemmF32AMX(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(45, 46))
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		x, w := normal32(rng, m*(k+3), 1), normal32(rng, n*(k+1), 0.05)
		for i, v := range w {
			w[i] = float32(widenBF16(RoundBF16(v)))
		}
		checkAMXProduct(t, GemmF32AMX, m, n, k, x, w, 3, func(x, w float32) float64 { return float64(x) * float64(w) })
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

// TestAMXBuffersKept: the AMX products keep their buffers across
// collections (amxKept, not a sync.Pool, which drops them at each): after
// a first product, products of the same shape with collections between
// them allocate nothing.
func TestAMXBuffersKept(t *testing.T) {
	skipNoAMX(t)
	const m, n, k = 300, 64, 700
	rng := rand.New(rand.NewPCG(51, 52))
	x, w, c := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05), make([]float32, m*n)
	var src PairSource = denseF32{w, k, k}
	GemmF32AMX(m, n, k, x, k, src, c, n)
	if a := testing.AllocsPerRun(5, func() {
		runtime.GC()
		GemmF32AMX(m, n, k, x, k, src, c, n)
	}); a != 0 {
		t.Errorf("%v allocations per product after collections, want 0", a)
	}
}
