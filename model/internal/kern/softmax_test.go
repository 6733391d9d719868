//go:build amd64

package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestScaleDotShiftNorm compares ScaleDot and ShiftNorm with float64 sums
// over lengths with and without a tail of n mod 16 elements.
func TestScaleDotShiftNorm(t *testing.T) {
	if !Available() {
		t.Skip("kern: the CPU lacks AVX-512F or BMI2")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 15, 16, 17, 127, 128, 129, 1000, 4099} {
		x, w := to32(randSlice(rng, n)), make([]float32, n)
		for i := range w {
			w[i] = float32(rng.Float64() * 3)
		}
		const s = float32(0.37)
		var want, mag float64
		for i := range x {
			xi := float64(x[i] * s)
			want += xi * float64(w[i])
			mag += math.Abs(xi * float64(w[i]))
		}
		y := append([]float32(nil), x...)
		got := ScaleDot(y, s, w)
		for i := range y {
			if y[i] != x[i]*s {
				t.Fatalf("n=%d: ScaleDot scaled x[%d] to %g, want %g", n, i, y[i], x[i]*s)
			}
		}
		if err := math.Abs(got-want) / mag; err > 1e-6 {
			t.Errorf("n=%d: ScaleDot = %g, want %g (error %.2g of Σ|x·w|)", n, got, want, err)
		}
	}
	for _, dh := range []int{16, 32, 64} {
		const n, stride = 37, 100
		v := to32(randSlice(rng, n*stride))
		c := to32(randSlice(rng, dh))
		w := make([]float32, n+1)
		w[n] = -1
		ShiftNorm(w, v, stride, c, n)
		for j := 0; j < n; j++ {
			var want float64
			for i := 0; i < dh; i++ {
				d := float64(v[j*stride+i]) - float64(c[i])
				want += d * d
			}
			if err := math.Abs(float64(w[j])-want) / want; err > 1e-6 {
				t.Errorf("dh=%d: ShiftNorm row %d = %g, want %g", dh, j, w[j], want)
			}
		}
		if w[n] != -1 {
			t.Errorf("dh=%d: ShiftNorm wrote past row n−1", dh)
		}
	}
}

// TestNormKernels: SumSquares within n·2⁻⁵³ relative of the compensated
// float64 sum (the squares are exact in float64; the bound of a float64
// sum of n positive terms in any order); ScaleMul equal
// bit for bit to w·(x·s) in Go, in place too, NaN staying NaN;
// FirstNonFinite naming the first NaN, +Inf or −Inf wherever it is (body
// or tail, first or last element, two of them) and −1 for finite values
// up to ±MaxFloat32 and subnormals.
func TestNormKernels(t *testing.T) {
	if !Available() {
		t.Skip("kern: the CPU lacks AVX-512F or BMI2")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	lengths := []int{0, 1, 7, 15, 16, 17, 31, 32, 33, 64, 100, 1000, 4099}
	for _, n := range lengths {
		x := make([]float32, n)
		w := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 3)
			w[i] = float32(rng.NormFloat64())
		}
		var want, comp float64 // Neumaier's compensated sum
		for _, v := range x {
			sq := float64(v) * float64(v)
			t := want + sq
			if math.Abs(want) >= sq {
				comp += (want - t) + sq
			} else {
				comp += (sq - t) + want
			}
			want = t
		}
		want += comp
		if got := SumSquares(x); math.Abs(got-want) > float64(n)*0x1p-53*want {
			t.Errorf("SumSquares n=%d: %v, want %v", n, got, want)
		}

		// Rotate: the same bits as Go's loop, NaN and Inf carried through
		x1, x2 := append([]float32(nil), x...), append([]float32(nil), w...)
		c, sn := make([]float32, n), make([]float32, n)
		for i := range c {
			a := rng.Float64() * 2 * math.Pi
			c[i], sn[i] = float32(math.Cos(a)), float32(math.Sin(a))
		}
		if n > 3 {
			x1[1], x2[2], c[3] = float32(math.NaN()), float32(math.Inf(1)), float32(math.NaN())
		}
		w1, w2 := append([]float32(nil), x1...), append([]float32(nil), x2...)
		for i := range c {
			a, b := w1[i], w2[i]
			w1[i] = a*c[i] - b*sn[i]
			w2[i] = b*c[i] + a*sn[i]
		}
		Rotate(x1, x2, c, sn)
		for i := range c {
			if math.Float32bits(x1[i]) != math.Float32bits(w1[i]) || math.Float32bits(x2[i]) != math.Float32bits(w2[i]) {
				t.Fatalf("Rotate n=%d: [%d] = %v, %v; want %v, %v", n, i, x1[i], x2[i], w1[i], w2[i])
			}
		}

		s := float32(0.37)
		dst := make([]float32, n)
		ScaleMul(dst, x, w, s)
		for i := range x {
			if wantv := w[i] * (x[i] * s); math.Float32bits(dst[i]) != math.Float32bits(wantv) {
				t.Fatalf("ScaleMul n=%d: dst[%d] = %v, want %v", n, i, dst[i], wantv)
			}
		}
		in := append([]float32(nil), x...)
		ScaleMul(in, in, w, s)
		for i := range in {
			if in[i] != dst[i] {
				t.Fatalf("ScaleMul in place n=%d: [%d] = %v, want %v", n, i, in[i], dst[i])
			}
		}
		if n > 0 {
			y := append([]float32(nil), x...)
			y[n-1] = float32(math.NaN())
			ScaleMul(y, y, w, s)
			if !math.IsNaN(float64(y[n-1])) {
				t.Errorf("ScaleMul n=%d: NaN became %v", n, y[n-1])
			}
		}

		finite := append([]float32(nil), x...)
		if n > 2 {
			finite[0], finite[1], finite[2] = math.MaxFloat32, -math.MaxFloat32, math.Float32frombits(1)
		}
		if got := FirstNonFinite(finite); got != -1 {
			t.Fatalf("FirstNonFinite n=%d finite: %d, want -1", n, got)
		}
		for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
			for _, at := range []int{0, n / 2, n - 1} {
				if at < 0 || n == 0 {
					continue
				}
				y := append([]float32(nil), finite...)
				y[at] = bad
				if at+1 < n {
					y[n-1] = bad // a later one must not win
				}
				if got := FirstNonFinite(y); got != at {
					t.Fatalf("FirstNonFinite n=%d %v at %d: %d", n, bad, at, got)
				}
			}
		}
	}
}

// TestSoftmaxRowSink: SoftmaxRow without a sink (−Inf) is Max, ExpSum and
// Scale bit for bit with σ = 0; with a sink logit below, inside and above
// the scores its weights and σ are the float64 softmax's with the extra
// column within 1.2e-7·(4 + |x − m|) relative, Σα + σ = 1 within 1e-6,
// and Σα is the float64 sum of its weights within 1e-6 — for lengths with
// and without a tail of n mod 16.
func TestSoftmaxRowSink(t *testing.T) {
	if !Available() {
		t.Skip("kern: the CPU lacks AVX-512F or BMI2")
	}
	rng := rand.New(rand.NewPCG(45, 46))
	for _, n := range []int{1, 15, 16, 17, 100} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * 3)
		}
		plain := append([]float32(nil), x...)
		z, _, _ := ExpSum(plain, Max(plain), false)
		Scale(plain, float32(1/z))
		none := append([]float32(nil), x...)
		if _, _, _, _, sm := SoftmaxRow(none, float32(math.Inf(-1)), true, nil); sm != 0 {
			t.Fatalf("n=%d: no sink: σ = %v", n, sm)
		}
		for i := range none {
			if math.Float32bits(none[i]) != math.Float32bits(plain[i]) {
				t.Fatalf("n=%d: no sink: weight %d = %v, Max/ExpSum/Scale %v", n, i, none[i], plain[i])
			}
		}
		for _, sink := range []float32{-20, 0.5, 12} {
			got := append([]float32(nil), x...)
			s1, _, _, _, sm := SoftmaxRow(got, sink, true, nil)
			m := float64(sink)
			for _, v := range x {
				m = math.Max(m, float64(v))
			}
			zr := math.Exp(float64(sink) - m)
			for _, v := range x {
				zr += math.Exp(float64(v) - m)
			}
			var sum float64
			for i, v := range x {
				want := math.Exp(float64(v)-m) / zr
				if math.Abs(float64(got[i])-want) > 1.2e-7*(4+m-float64(v))*want+1e-37 {
					t.Fatalf("n=%d sink %v: weight %d = %v, float64 %v", n, sink, i, got[i], want)
				}
				sum += float64(got[i])
			}
			want := math.Exp(float64(sink)-m) / zr
			if math.Abs(float64(sm)-want) > 1.2e-7*(4+m-float64(sink))*want || math.Abs(sum+float64(sm)-1) > 1e-6 ||
				math.Abs(s1-sum) > 1e-6*sum {
				t.Fatalf("n=%d sink %v: σ %v (float64 %v), Σα %v (sum of weights %v)", n, sink, sm, want, s1, sum)
			}
		}
	}
}
