package kern

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"testing"
)

// bfShapes are m, n, k of the bf16 tests: one tile, edge tiles in rows and
// columns, odd k, k not a multiple of 32, k across several blocks of
// bfKP pairs (with an odd tail), m across blocks of bfMA rows, n across
// blocks of bfNC columns.
var bfShapes = [][3]int{
	{1, 1, 1}, {6, 32, 2}, {7, 33, 3}, {13, 5, 513}, {5, 64, 1000}, {100, 70, 255},
	{193, 97, 257}, {200, 40, 600}, {12, 96, 2049}, {400, 33, 31}, {9, 1060, 270},
}

// normal32 returns n normal variates in float32, scaled by s.
func normal32(rng *rand.Rand, n int, s float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * s)
	}
	return x
}

// widenBF16 is the float32 value of bf16 bits (no flush).
func widenBF16(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }

// denseBF16 and denseF32 are row-major n × k sources (row stride ld) of
// GemmBF16, as bfloat16 bits and as float32 rounded while packed.
type denseBF16 struct {
	bits  []uint16
	k, ld int
}

func (d denseBF16) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	packRowsTest(dst, rows, kp, func(j int) { PackPairsBF16(dst, j, d.bits[(r0+j)*d.ld+2*p0:(r0+j)*d.ld+min(d.k, 2*(p0+kp))], kp) })
}

type denseF32 struct {
	x     []float32
	k, ld int
}

func (d denseF32) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	packRowsTest(dst, rows, kp, func(j int) { PackPairsF32(dst, j, d.x[(r0+j)*d.ld+2*p0:(r0+j)*d.ld+min(d.k, 2*(p0+kp))], kp) })
}

// packRowsTest packs rows with row(j) and zeroes the panel's columns past
// them.
func packRowsTest(dst []uint32, rows, kp int, row func(j int)) {
	for j := 0; j < bfNR; j++ {
		if j < rows {
			row(j)
			continue
		}
		for p := 0; p < kp; p++ {
			dst[p*bfNR+j] = 0
		}
	}
}

// TestRoundBF16: RoundBF16 returns the nearest bfloat16 (ties to the even
// significand, ±Inf past the largest) on random bit patterns and on the
// ties and limits, and keeps NaN a NaN.
func TestRoundBF16(t *testing.T) {
	nearest := func(x float32) uint16 {
		b := math.Float32bits(x)
		lo := uint16(b >> 16)
		hi := lo + 1 // next bf16 away from zero (lo is x truncated)
		dl, dh := math.Abs(float64(x)-widenBF16(lo)), math.Abs(widenBF16(hi)-float64(x))
		if lo&0x7fff == 0x7f7f && dh >= dl && b&0xffff >= 0x8000 {
			return hi // beyond half an ulp past the largest: Inf (IEEE)
		}
		switch {
		case dl < dh:
			return lo
		case dh < dl:
			return hi
		case lo&1 == 0:
			return lo
		}
		return hi
	}
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []uint32{0, 0x80000000, 0x3f800000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f80ffff, 0x00000001,
		0x007fffff, 0x7f7f7fff, 0x7f7f8000, 0x7f7fffff, 0xff7f8000, 0x7f800000, 0xff800000}
	for range 200000 {
		cases = append(cases, rng.Uint32())
	}
	for _, b := range cases {
		x := math.Float32frombits(b)
		got := RoundBF16(x)
		if x != x {
			if g := math.Float32frombits(uint32(got) << 16); g == g {
				t.Fatalf("RoundBF16(NaN %#08x) = %#04x, not a NaN", b, got)
			}
			continue
		}
		if want := nearest(x); got != want {
			t.Fatalf("RoundBF16(%g = %#08x) = %#04x, want %#04x", x, b, got, want)
		}
	}
}

// TestFmaF32: fmaF32 is a·b + c rounded once to float32, against exact
// arithmetic (math/big), on operands whose sums span wide exponent
// ranges, and on constructed ties that double rounding would break wrong.
func TestFmaF32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(a, b, c float32) {
		t.Helper()
		exact := new(big.Float).SetPrec(1000)
		exact.Mul(big.NewFloat(float64(a)).SetPrec(1000), big.NewFloat(float64(b)))
		exact.Add(exact, big.NewFloat(float64(c)))
		want, _ := exact.Float32() // nearest even
		if got := fmaF32(a, b, c); got != want && !(math.Abs(float64(want)) < 0x1p-126) {
			t.Fatalf("fmaF32(%g, %g, %g) = %g, want %g", a, b, c, got, want)
		}
	}
	bf := func() float32 {
		return math.Float32frombits(uint32(RoundBF16(float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(120)-60)))) << 16)
	}
	for range 20000 {
		a, b := bf(), bf()
		c := float32(math.Ldexp(rng.NormFloat64(), rng.IntN(160)-80))
		check(a, b, c)
		check(a, -b, c)
	}
	// c = 1 + 2⁻²³·odd, a·b = ±2⁻²⁴ ± 2⁻⁷⁰: the sum lies just off a float32
	// tie, which the float64 sum rounds onto.
	for _, s := range []float32{1, -1} {
		c := s * (1 + 0x1p-23)
		check(0x1p-24+0x1p-31, 1-0x1p-8, c)
		check(-(0x1p-24 + 0x1p-31), 1-0x1p-8, c)
		check(0x1p-24, 1+0x1p-7, c)
	}
}

// foldBF16 is one element of GemmBF16 written out: the pairs in order, odd
// element first, each a dpStep, from x and w read in place.
func foldBF16(x, w []float32) float32 {
	var acc float32
	for p := 0; 2*p < len(x); p++ {
		var x1, w1 uint16
		if 2*p+1 < len(x) {
			x1, w1 = RoundBF16(x[2*p+1]), RoundBF16(w[2*p+1])
		}
		acc = dpStep(acc, x1, w1)
		acc = dpStep(acc, RoundBF16(x[2*p]), RoundBF16(w[2*p]))
	}
	return acc
}

// TestGemmBF16Go: the Go micro-kernel under the blocked product gives, bit
// for bit, each element as foldBF16 forms it alone (so the packing of X and
// W, the blocking of k and the edge tiles add nothing), with strided
// operands; and each element is within the float32 summation bound of
// the float64 product of the bf16-rounded operands: |c − Σxw| ≤ k·2⁻²⁴·Σ|xw|
// (plus the flush of denormal terms, absent here).
func TestGemmBF16Go(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, sh := range bfShapes {
		m, n, k := sh[0], sh[1], sh[2]
		ldx, ldw, ldc := k+3, k+1, n+2
		x, w := normal32(rng, m*ldx, 1), normal32(rng, n*ldw, 0.05)
		c := normal32(rng, m*ldc, 1) // overwritten
		GemmBF16Go(m, n, k, x, ldx, denseF32{w, k, ldw}, c, ldc)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				xr, wr := x[i*ldx:i*ldx+k], w[j*ldw:j*ldw+k]
				got := c[i*ldc+j]
				if want := foldBF16(xr, wr); got != want {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, the element alone %v", m, n, k, i, j, got, want)
				}
				var ref, abs float64
				for p := range k {
					v := widenBF16(RoundBF16(xr[p])) * widenBF16(RoundBF16(wr[p]))
					ref += v
					abs += math.Abs(v)
				}
				if d := math.Abs(float64(got) - ref); d > float64(k)*0x1p-24*abs {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, float64 %v: error %.3g beyond k·2⁻²⁴·Σ|xw| = %.3g",
						m, n, k, i, j, got, ref, d, float64(k)*0x1p-24*abs)
				}
			}
		}
	}
}

// special32 fills x with normal variates and, at random places, the values
// the kernels must treat as VDPBF16PS does: NaN, ±Inf, denormals, zeros
// of both signs, values near the largest finite, and ones whose products
// underflow or overflow.
func special32(rng *rand.Rand, n int) []float32 {
	x := normal32(rng, n, 1)
	sp := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p-130, -0x1p-140,
		0, float32(math.Copysign(0, -1)), 3e38, -2e38, 0x1p-70, 0x1p70, 0x1p-100, -0x1p-64}
	for i := range x {
		if rng.IntN(40) == 0 {
			x[i] = sp[rng.IntN(len(sp))]
		}
	}
	return x
}

// sameFloat reports whether a and b are the same float32, any NaN equal
// to any NaN.
func sameFloat(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
}

// TestGemmBF16MatchesGo: on an AVX512_BF16 CPU, VDPBF16PS (bfKernel) and
// the Go micro-kernel (GemmBF16Go) give the same bits for every shape, on
// normal data and on data laced with NaN, ±Inf, denormals, signed zeros
// and products that underflow or overflow, and on operands scaled by 2⁻⁶³
// whose products and sums straddle the float32 underflow threshold 2⁻¹²⁶
// — the test of the kernel's encoding, operand order and of dpStep's
// reading of the SDM.
func TestGemmBF16MatchesGo(t *testing.T) {
	if !HasBF16() {
		t.Skip("this CPU has no AVX512_BF16: GemmBF16 is GemmBF16Go")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, data := range []string{"normal", "special", "tiny"} {
		for _, sh := range bfShapes {
			m, n, k := sh[0], sh[1], sh[2]
			ldx, ldc := k+1, n+3
			x, w := normal32(rng, m*ldx, 1), normal32(rng, n*k, 0.05)
			switch data {
			case "special":
				x, w = special32(rng, m*ldx), special32(rng, n*k)
			case "tiny":
				x, w = normal32(rng, m*ldx, 0x1p-63), normal32(rng, n*k, 0x1p-63)
			}
			bits := make([]uint16, len(w))
			for i, v := range w {
				bits[i] = RoundBF16(v)
			}
			got, want := make([]float32, m*ldc), make([]float32, m*ldc)
			gemmBF16(m, n, k, x, ldx, denseBF16{bits, k, k}, got, ldc, bfKernel)
			GemmBF16Go(m, n, k, x, ldx, denseF32{w, k, k}, want, ldc)
			for i := range want {
				if !sameFloat(got[i], want[i]) {
					t.Fatalf("%s data, m=%d n=%d k=%d: C[%d,%d]: VDPBF16PS %v (%#08x), Go %v (%#08x)", data, m, n, k,
						i/ldc, i%ldc, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				}
			}
		}
	}
}

// TestGemmBF16Special: NaN and ±Inf propagate as in float arithmetic — a
// NaN in a row of X makes its row of C NaN, an Inf times a finite nonzero
// weight an Inf of the product's sign (or NaN where Infs of both signs
// meet), Inf times a zero weight NaN — and denormal inputs count as 0.
func TestGemmBF16Special(t *testing.T) {
	const n, k = 3, 5
	w := []float32{
		1, 1, 1, 1, 1,
		0, 2, 0, 0, 0,
		-1, 1, 0, 0, 0,
	}
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, tc := range []struct {
		x    [k]float32
		want [n]float32
	}{
		{[k]float32{nan, 0, 0, 0, 0}, [n]float32{nan, nan, nan}},
		{[k]float32{0, 0, 0, 0, nan}, [n]float32{nan, nan, nan}},
		{[k]float32{inf, 1, 0, 0, 0}, [n]float32{inf, nan, -inf}},
		{[k]float32{inf, -inf, 0, 0, 0}, [n]float32{nan, nan, -inf}},
		{[k]float32{0x1p-130, 1, 0x1p-127, 0, 2}, [n]float32{3, 2, 1}},
		{[k]float32{3, 0.5, 0, 0, 0}, [n]float32{3.5, 1, -2.5}},
	} {
		for name, gemm := range map[string]func(int, int, int, []float32, int, PairSource, []float32, int){"GemmBF16": GemmBF16, "GemmBF16Go": GemmBF16Go} {
			got := make([]float32, n)
			gemm(1, n, k, tc.x[:], k, denseF32{w, k, k}, got, n)
			for j := range got {
				if !sameFloat(got[j], tc.want[j]) && !(got[j] == tc.want[j]) {
					t.Errorf("%s x=%v: C[%d] = %v, want %v", name, tc.x, j, got[j], tc.want[j])
				}
			}
		}
	}
}

// TestPackPanelBF16: a whole panel packed at once (gathered with AVX-512
// where available) equals PackPairsBF16 row by row, for odd and even row
// strides, one pair to several blocks.
func TestPackPanelBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	for _, sh := range [][2]int{{1, 2}, {1, 7}, {17, 34}, {17, 41}, {128, 1024}, {128, 2049}, {300, 600}} {
		kp, stride := sh[0], sh[1]
		bits := make([]uint16, (bfNR-1)*stride+2*kp)
		for i := range bits {
			bits[i] = uint16(rng.Uint32())
		}
		got, want := make([]uint32, bfNR*kp), make([]uint32, bfNR*kp)
		PackPanelBF16(got, bits, stride, kp)
		for j := 0; j < bfNR; j++ {
			PackPairsBF16(want, j, bits[j*stride:j*stride+2*kp], kp)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("kp=%d stride=%d: step %d column %d: %#08x, want %#08x", kp, stride, i/bfNR, i%bfNR, got[i], want[i])
			}
		}
	}
}

// TestGemmBF16SuperBlocks: the product with row super-blocks of 2 and 3
// blocks of bfMA rows, and of the default size (bfABytes), gives the bits
// of the loop that packs W once per bfMA rows (super-blocks of bfMA rows,
// the loop before super-blocks), on bfKernel: m not a multiple of bfMA
// nor of 6 and spanning several super-blocks, n not a multiple of 32 and
// across blocks of bfNC columns, odd k across blocks of bfKP pairs, with
// strided operands.
func TestGemmBF16SuperBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	defer func(b int) { bfABytes = b }(bfABytes)
	for _, sh := range [][3]int{{1607, 1060, 7}, {1601, 70, 259}, {769, 33, 1}} {
		m, n, k := sh[0], sh[1], sh[2]
		ldx, ldc := k+3, n+1
		kpAll := (k + 1) / 2
		x, w := normal32(rng, m*ldx, 1), normal32(rng, n*k, 0.05)
		bits := make([]uint16, len(w))
		for i, v := range w {
			bits[i] = RoundBF16(v)
		}
		product := func() []float32 {
			c := normal32(rng, m*ldc, 1) // overwritten
			gemmBF16(m, n, k, x, ldx, denseBF16{bits, k, k}, c, ldc, bfKernel)
			return c
		}
		bfABytes = 1 // super-blocks of bfMA rows
		want := product()
		for _, blocks := range []int{2, 3, 0} {
			aBytes, name := blocks*bfMA*4*kpAll, fmt.Sprintf("%d·bfMA rows", blocks)
			if blocks == 0 {
				aBytes, name = 16<<20, "default"
			}
			bfABytes = aBytes
			if got := bfSuperRows(m, kpAll); blocks > 0 && got != min(m, blocks*bfMA) {
				t.Fatalf("bfSuperRows(%d, %d) = %d with bfABytes for %d blocks", m, kpAll, got, blocks)
			}
			got := product()
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					if g, v := got[i*ldc+j], want[i*ldc+j]; math.Float32bits(g) != math.Float32bits(v) {
						t.Fatalf("m=%d n=%d k=%d, super-blocks of %s: C[%d,%d] = %v (%#08x), per bfMA rows %v (%#08x)",
							m, n, k, name, i, j, g, math.Float32bits(g), v, math.Float32bits(v))
					}
				}
			}
		}
	}
}

// TestBF16BuffersKept: GemmBF16 keeps its buffers across collections
// (bfKept, not a sync.Pool): after a first product, products of the same
// shape with collections between them allocate nothing — so that the
// packed super-block of X is not made again after every collection.
func TestBF16BuffersKept(t *testing.T) {
	const m, n, k = 400, 64, 700
	rng := rand.New(rand.NewPCG(29, 30))
	x, w, c := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05), make([]float32, m*n)
	var src PairSource = denseF32{w, k, k}
	gemmBF16(m, n, k, x, k, src, c, n, bfKernel)
	if a := testing.AllocsPerRun(5, func() {
		runtime.GC()
		gemmBF16(m, n, k, x, k, src, c, n, bfKernel)
	}); a != 0 {
		t.Errorf("%v allocations per product after collections, want 0", a)
	}
}
