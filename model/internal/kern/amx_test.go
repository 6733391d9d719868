package kern

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

// amxShapes adds to bfShapes the AMX blocking's edges: one 32 × 32 block,
// a row and a column past it, k a multiple of 32 and one past, k across
// blocks of bfKP pairs with a tail under 16 pairs, m across amxMA rows.
var amxShapes = append([][3]int{{32, 32, 32}, {33, 33, 33}, {31, 65, 64}, {64, 96, 2 * 128 * 2}, {96, 64, 2*128 + 2},
	{1100, 40, 70}, {2, 1030, 290}}, bfShapes...)

// skipNoAMX skips where GemmBF16 does not run on AMX.
func skipNoAMX(t *testing.T) {
	t.Helper()
	if !HasAMX() {
		t.Skip("no AMX here (the CPU lacks AMX-TILE/AMX-BF16, or the OS refused the tile data state): GemmBF16 falls back to VDPBF16PS or Go")
	}
}

// TestGemmBF16AMX: on AMX each element of C is within the float32
// summation bound of the float64 product of the bf16-rounded operands:
// the k products are exact in float32 (8-bit significands), and any order
// of at most k − 1 float32 additions, each rounded to nearest (or
// fewer, where the unit adds a pair at once), errs by at most
// γ(k−1)·Σ|xw| ≤ k·2⁻²⁴·Σ|xw| (k(k−1)2⁻²⁴ ≤ 1 for the k here) — the bound
// TestGemmBF16Go holds the VDPBF16PS order to; with strided operands,
// over every shape's tails and blocks (checkAMXProduct).
func TestGemmBF16AMX(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(15, 16))
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		x, w := normal32(rng, m*(k+3), 1), normal32(rng, n*(k+1), 0.05)
		checkAMXProduct(t, GemmBF16, m, n, k, x, w, 1, func(x, w float32) float64 {
			return widenBF16(RoundBF16(x)) * widenBF16(RoundBF16(w))
		})
	}
}

// checkAMXProduct runs gemm on X (m × k, row stride k+3) and W (n × k,
// row stride k+1) into a C of row stride n+2 and checks that each element
// is within parts·k·2⁻²⁴·Σ|p| of the float64 sum of the products p =
// prod(x, w), that the columns past n keep their values, and that the
// sums depend on k alone: the rows from m/3 on alone, and the columns
// from n/2 on alone (W's rows from there, as package model splits a
// product between goroutines), give the same bits.
func checkAMXProduct(t *testing.T, gemm func(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int),
	m, n, k int, x, w []float32, parts int, prod func(x, w float32) float64) {
	t.Helper()
	ldx, ldw, ldc := k+3, k+1, n+2
	rng := rand.New(rand.NewPCG(uint64(m), uint64(n*k)))
	c := normal32(rng, m*ldc, 1) // overwritten; the gaps between rows kept
	keep := append([]float32(nil), c...)
	gemm(m, n, k, x, ldx, denseF32{w, k, ldw}, c, ldc)
	for i := 0; i < m; i++ {
		for j := n; j < ldc && i*ldc+j < len(c); j++ {
			if c[i*ldc+j] != keep[i*ldc+j] {
				t.Fatalf("m=%d n=%d k=%d: C[%d,%d] past n written", m, n, k, i, j)
			}
		}
		for j := 0; j < n; j++ {
			var ref, abs float64
			for p := range k {
				v := prod(x[i*ldx+p], w[j*ldw+p])
				ref += v
				abs += math.Abs(v)
			}
			bound := float64(parts*k) * 0x1p-24 * abs
			if d := math.Abs(float64(c[i*ldc+j]) - ref); d > bound {
				t.Fatalf("m=%d n=%d k=%d: C[%d,%d] = %v, float64 %v: error %.3g beyond %d·k·2⁻²⁴·Σ|xw| = %.3g",
					m, n, k, i, j, c[i*ldc+j], ref, d, parts, bound)
			}
		}
	}
	i0, j0 := m/3, n/2
	rows, cols := make([]float32, (m-i0)*n), make([]float32, m*(n-j0))
	gemm(m-i0, n, k, x[i0*ldx:], ldx, denseF32{w, k, ldw}, rows, n)
	gemm(m, n-j0, k, x, ldx, rowsFrom{denseF32{w, k, ldw}, j0}, cols, n-j0)
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

// rowsFrom is the rows of w from j0 on, as package model hands a block of
// a product's columns to a goroutine.
type rowsFrom struct {
	w  PairSource
	j0 int
}

func (r rowsFrom) PackPairs(dst []uint32, r0, rows, p0, kp int) {
	r.w.PackPairs(dst, r.j0+r0, rows, p0, kp)
}

// TestGemmBF16AMXExact: on small integers (|x|, |w| ≤ 8, so every partial
// sum is an integer below 2²⁴, exact in float32 whatever the order) AMX,
// VDPBF16PS and the Go micro-kernel give the same bits, the exact sums.
func TestGemmBF16AMXExact(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(17, 18))
	ints := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.IntN(17) - 8)
		}
		return v
	}
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		x, w := ints(m*k), ints(n*k)
		amx, vdp, gold := make([]float32, m*n), make([]float32, m*n), make([]float32, m*n)
		GemmBF16(m, n, k, x, k, denseF32{w, k, k}, amx, n)
		gemmBF16(m, n, k, x, k, denseF32{w, k, k}, vdp, n, bfKernel)
		GemmBF16Go(m, n, k, x, k, denseF32{w, k, k}, gold, n)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s float64
				for p := range k {
					s += float64(x[i*k+p]) * float64(w[j*k+p])
				}
				if g := amx[i*n+j]; float64(g) != s || g != vdp[i*n+j] || g != gold[i*n+j] {
					t.Fatalf("m=%d n=%d k=%d: C[%d,%d]: AMX %v, VDPBF16PS %v, Go %v, exact %v", m, n, k, i, j, g, vdp[i*n+j], gold[i*n+j], s)
				}
			}
		}
	}
}

// TestGemmBF16AMXSpecial: with NaN, ±Inf, signed zeros and denormals
// (read as 0) laced into normal data — no finite products or sums near
// the overflow, whose order would decide an Inf — AMX gives NaN exactly
// where the Go micro-kernel does, the same infinities, and finite values
// within the summation bound of the Go kernel's.
func TestGemmBF16AMXSpecial(t *testing.T) {
	skipNoAMX(t)
	rng := rand.New(rand.NewPCG(19, 20))
	sp := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0x1p-130, -0x1p-140,
		0, float32(math.Copysign(0, -1))}
	lace := func(n int) []float32 {
		x := normal32(rng, n, 1)
		for i := range x {
			if rng.IntN(400) == 0 {
				x[i] = sp[rng.IntN(len(sp))]
			}
		}
		return x
	}
	for _, sh := range amxShapes {
		m, n, k := sh[0], sh[1], sh[2]
		x, w := lace(m*k), lace(n*k)
		got, want := make([]float32, m*n), make([]float32, m*n)
		GemmBF16(m, n, k, x, k, denseF32{w, k, k}, got, n)
		GemmBF16Go(m, n, k, x, k, denseF32{w, k, k}, want, n)
		for i := range want {
			g, e := got[i], want[i]
			bad := (g != g) != (e != e) || (math.IsInf(float64(e), 0) && g != e)
			if !bad && e == e && !math.IsInf(float64(e), 0) {
				var abs float64
				for p := range k {
					a, b := bf16DAZ(RoundBF16(x[i/n*k+p])), bf16DAZ(RoundBF16(w[i%n*k+p]))
					abs += math.Abs(float64(a) * float64(b))
				}
				bad = math.Abs(float64(g)-float64(e)) > 2*float64(k)*0x1p-24*abs
			}
			if bad {
				t.Fatalf("m=%d n=%d k=%d: C[%d,%d]: AMX %v, Go %v", m, n, k, i/n, i%n, g, e)
			}
		}
	}
}

// TestGemmBF16AMXConcurrent: many goroutines multiplying at once, so that
// the scheduler's preemption signals and thread switches land while tiles
// are live, each get the bits of the same product run alone (AMX is
// deterministic), over several rounds: GemmBF16's products and
// GemmF32AMX's three-part ones.
func TestGemmBF16AMXConcurrent(t *testing.T) {
	skipNoAMX(t)
	const m, n, k, workers, rounds = 200, 130, 700, 16, 6
	rng := rand.New(rand.NewPCG(21, 22))
	x, w := normal32(rng, m*k, 1), normal32(rng, n*k, 0.05)
	for _, gemm := range []func(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int){GemmBF16, GemmF32AMX} {
		concurrentProducts(t, gemm, m, n, k, x, w, workers, rounds)
	}
}

func concurrentProducts(t *testing.T, gemm func(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int),
	m, n, k int, x, w []float32, workers, rounds int) {
	want := make([]float32, m*n)
	gemm(m, n, k, x, k, denseF32{w, k, k}, want, n)
	var wg sync.WaitGroup
	errs := make(chan string, workers)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]float32, m*n)
			for r := 0; r < rounds; r++ {
				clear(got)
				gemm(m, n, k, x, k, denseF32{w, k, k}, got, n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						errs <- "a concurrent product differs from the product alone"
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}
