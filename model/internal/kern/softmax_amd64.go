//go:build amd64

package kern

import "math"

// The softmax row, SiLU and squared-shift kernels (softmax_amd64.s); the
// slices must not be empty.

// Max returns the largest element of x (NaN elements may or may not win).
func Max(x []float32) float32 { return maxAVX512(&x[0], len(x)) }

// ExpSum replaces x[i] with p_i = e^(x[i] − m) (0 below e^−87.3; the
// method of model's expf with fused multiply-adds) and returns z = Σp in
// float64; with stats also pd = Σ p·(x − m) and q = Σp².
func ExpSum(x []float32, m float32, stats bool) (z, pd, q float64) {
	st := 0
	if stats {
		st = 1
	}
	return expSumAVX512(&x[0], len(x), m, st)
}

// SoftmaxRow is the attention row on 16 lanes: it replaces x with the
// weights α_j = p_j·(1/Z) (the product in float32), p_j = e^(x_j − m), with
//
//	m = max(max_j x_j, sink)    Z = Σ_j p_j + e^(sink − m)
//
// in float64: the softmax over the keys and one extra column, the head's
// learned sink logit (gpt-oss), which is dropped, so that Σα = 1 − σ with
// σ = e^(sink − m)·(1/Z) (float32, formed like the weights) the sink mass it
// returns. sink = −Inf means no sink column: Z is the keys' sum, σ = 0 and
// the weights are the plain softmax's bit for bit. The exponentials are
// ExpSum's (the sink's too). With stats it also returns, over the returned
// weights (not the sink column), Σα = Σp·(1/Z) and Σα² = Σp²·(1/Z)² from the
// unnormalized sums (within ~3e-7 relative of the sums of the rounded
// weights, without another pass) and the entropy −Σα log α = log Z·Σα −
// Σp(x − m)/Z; with w non-nil (len(w) ≥ len(x)) g = Σ_j α_j w_j
// (ScaleDot). x must not be empty.
func SoftmaxRow(x []float32, sink float32, stats bool, w []float32) (s1, s2, ent, g float64, sinkMass float32) {
	m := Max(x)
	hasSink := sink > float32(math.Inf(-1))
	if hasSink && sink > m {
		m = sink
	}
	zk, pd, q := ExpSum(x, m, stats)
	z := zk
	var ps [1]float32
	if hasSink {
		ps[0] = sink
		zs, _, _ := ExpSum(ps[:], m, false) // ps[0] = e^(sink − m)
		z += zs
	}
	inv := 1 / z
	invf := float32(inv)
	if w != nil {
		g = ScaleDot(x, invf, w[:len(x)])
	} else {
		Scale(x, invf)
	}
	if hasSink {
		sinkMass = ps[0] * invf
	}
	if !stats {
		return 0, 0, 0, g, sinkMass
	}
	fi := float64(invf)
	s1 = zk * fi
	return s1, q * fi * fi, math.Log(z)*s1 - pd*inv, g, sinkMass
}

// Scale multiplies x by s.
func Scale(x []float32, s float32) { scaleAVX512(&x[0], len(x), s) }

// ScaleDot multiplies x by s and returns Σ x[i]·w[i] over the scaled
// values (products in float32, summed in float32 over 8 blocks of 16
// lanes, then in float64).
func ScaleDot(x []float32, s float32, w []float32) float64 {
	_ = w[len(x)-1]
	return scaleDotAVX512(&x[0], len(x), s, &w[0])
}

// ShiftNorm sets w[j] = Σ_i (v[j·stride+i] − c[i])², j < n, dh = len(c), a
// positive multiple of 16 (float32 sums).
func ShiftNorm(w, v []float32, stride int, c []float32, n int) {
	dh := len(c)
	if dh%16 != 0 {
		panic("kern: ShiftNorm needs a multiple of 16 columns")
	}
	if n == 0 {
		return
	}
	_, _ = w[n-1], v[(n-1)*stride+dh-1]
	shiftNormAVX512(&w[0], &v[0], stride, &c[0], n, dh)
}

// ShiftSquare sets w[j·dh+i] = (v[j·stride+i] − c[i])², j < n, dh = len(c),
// a positive multiple of 16.
func ShiftSquare(w, v []float32, stride int, c []float32, n int) {
	dh := len(c)
	if dh%16 != 0 {
		panic("kern: ShiftSquare needs a multiple of 16 columns")
	}
	if n == 0 {
		return
	}
	_, _ = w[n*dh-1], v[(n-1)*stride+dh-1]
	shiftSquareAVX512(&w[0], &v[0], stride, &c[0], n, dh)
}

// SiluMul sets g[i] = silu(g[i])·u[i] = g[i]·σ(g[i])·u[i].
func SiluMul(g, u []float32) {
	_ = u[len(g)-1]
	siluMulAVX512(&g[0], &u[0], len(g))
}

//go:noescape
func maxAVX512(x *float32, n int) float32

//go:noescape
func expSumAVX512(x *float32, n int, m float32, stats int) (z, pd, q float64)

//go:noescape
func scaleAVX512(x *float32, n int, f float32)

//go:noescape
func scaleDotAVX512(x *float32, n int, f float32, w *float32) float64

//go:noescape
func shiftNormAVX512(w, v *float32, stride int, c *float32, n, dh int)

//go:noescape
func shiftSquareAVX512(w, v *float32, stride int, c *float32, n, dh int)

//go:noescape
func siluMulAVX512(x, u *float32, n int)

// SumSquares returns Σ x[i]², each square exact in float64 and summed in
// float64 (8 lanes, two accumulators); 0 for an empty x.
func SumSquares(x []float32) float64 {
	if len(x) == 0 {
		return 0
	}
	return sumSquaresAVX512(&x[0], len(x))
}

// ScaleMul sets dst[i] = w[i]·(x[i]·s), each product rounded to float32
// as Go rounds it (dst may be x).
func ScaleMul(dst, x, w []float32, s float32) {
	if len(x) == 0 {
		return
	}
	_, _ = dst[len(x)-1], w[len(x)-1]
	scaleMulAVX512(&dst[0], &x[0], &w[0], len(x), s)
}

// Rotate sets x1[i], x2[i] = x1[i]·c[i] − x2[i]·s[i], x2[i]·c[i] + x1[i]·s[i]
// for i < len(c), each product rounded to float32 as Go rounds it: the
// rotate-half RoPE of one head's halves x1 and x2.
func Rotate(x1, x2, c, s []float32) {
	n := len(c)
	if n == 0 {
		return
	}
	_, _, _ = x1[n-1], x2[n-1], s[n-1]
	rotateAVX512(&x1[0], &x2[0], &c[0], &s[0], n)
}

// FirstNonFinite returns the index of the first NaN or ±Inf of x, or −1.
func FirstNonFinite(x []float32) int {
	if len(x) == 0 {
		return -1
	}
	return firstNonFiniteAVX512(&x[0], len(x))
}

//go:noescape
func sumSquaresAVX512(x *float32, n int) float64

//go:noescape
func scaleMulAVX512(dst, x, w *float32, n int, s float32)

//go:noescape
func rotateAVX512(x1, x2, c, s *float32, n int)

//go:noescape
func firstNonFiniteAVX512(x *float32, n int) int
