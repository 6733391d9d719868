//go:build amd64

package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// TestHalfToFloat32: every one of the 65536 half-precision bit patterns
// widens to the float32 bits checkpoint.F16ToFloat32 gives (zeros,
// subnormals, normals, infinities, NaN payloads).
func TestHalfToFloat32(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		got, want := math.Float32bits(HalfToFloat32(uint16(h))), math.Float32bits(checkpoint.F16ToFloat32(uint16(h)))
		if got != want {
			t.Fatalf("HalfToFloat32(%#04x) = %#08x, want %#08x", h, got, want)
		}
	}
}

// TestSgemmRows: the product with rows given as float32, bfloat16 or half
// bits (contiguous or in runs) equals Sgemm(transB) of the widened rows
// bit for bit, NaN, infinities and the sign of a zero row's sums
// included, over the tails of every blocking level (1×1×1, m not a
// multiple of 6, n not of 32 and beyond 1024, k beyond 256 and not a
// multiple of 16), on the narrow path (m ≤ NarrowM, no packing) as on the
// packed one, and overwrites C whatever it held.
func TestSgemmRows(t *testing.T) {
	if !Available() {
		t.Skip("this CPU has no AVX-512F+BMI2: package model uses gonum's kernels")
	}
	rng := rand.New(rand.NewPCG(15, 16))
	type shape struct{ m, n, k, run, pitch int }
	for _, sh := range []shape{{1, 1, 1, 0, 0}, {6, 32, 16, 0, 0}, {7, 33, 300, 0, 0}, {13, 1100, 65, 0, 0},
		{5, 3, 513, 0, 0}, {20, 64, 40, 16, 48}, {9, 10, 17, 2, 5},
		// narrow (m ≤ NarrowM: groups of 16 of A's rows, B's rows split
		// between goroutines, k over several blocks with a tail) and the
		// first packed m
		{NarrowM, 1100, 600, 0, 0}, {17, 530, 1030, 0, 0}, {16, 47, 256, 0, 0}, {3, 600, 2100, 8, 24},
		{NarrowM + 1, 70, 300, 0, 0},
		// MXFP4 rows need k a multiple of 32
		{7, 33, 320, 0, 0}, {20, 64, 64, 1, 2}, {17, 530, 1056, 0, 0}, {NarrowM + 1, 70, 288, 0, 0}} {
		for _, kind := range []string{"F32", "BF16", "F16", "MXFP4"} {
			if kind == "MXFP4" && sh.k%MXFP4Block != 0 {
				continue
			}
			for _, poison := range []bool{false, true} {
				name := fmt.Sprintf("%s m%d n%d k%d run%d poison %v", kind, sh.m, sh.n, sh.k, sh.run, poison)
				stored := sh.n
				if sh.run > 0 {
					stored = (sh.n/sh.run)*sh.pitch + sh.pitch
				}
				b := Rows{Cols: sh.k, Run: sh.run, Pitch: sh.pitch, Half: kind == "F16"}
				vals := make([]float32, stored*sh.k)
				switch kind {
				case "F32":
					for i := range vals {
						vals[i] = float32(rng.NormFloat64())
					}
					b.F32 = vals
				case "MXFP4":
					b.FP4, b.Scales = make([]uint8, len(vals)/2), make([]uint8, len(vals)/MXFP4Block)
					for i := range b.FP4 {
						b.FP4[i] = uint8(rng.IntN(256))
					}
					for i := range b.Scales {
						b.Scales[i] = uint8(120 + rng.IntN(10))
					}
					DequantMXFP4(vals, b.FP4, b.Scales, 0)
				default:
					b.Bits = make([]uint16, len(vals))
					for i := range b.Bits {
						f := float32(rng.NormFloat64())
						if kind == "BF16" {
							b.Bits[i] = checkpoint.Float32ToBF16(f)
							vals[i] = checkpoint.BF16ToFloat32(b.Bits[i])
						} else {
							b.Bits[i] = checkpoint.Float32ToF16(f)
							vals[i] = checkpoint.F16ToFloat32(b.Bits[i])
						}
					}
				}
				lda, ldc := sh.k+3, sh.n+2
				a := make([]float32, sh.m*lda)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				// a zero row: its products are ±0, and so must be C's row
				// (the sign of zero included)
				clear(a[:sh.k])
				if poison { // NaN and ±Inf in B (one row each) and +Inf in A
					for _, r := range []int{0, sh.n / 2, sh.n - 1} {
						at := b.offset(r) + rng.IntN(sh.k)
						v := []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}[rng.IntN(3)]
						if kind == "MXFP4" { // scale byte 255: ±Inf for a non-zero code
							b.FP4[at/2] |= 0x11
							b.Scales[at/MXFP4Block] = 255
							DequantMXFP4(vals[at/MXFP4Block*MXFP4Block:][:MXFP4Block], b.FP4, b.Scales, at/MXFP4Block*MXFP4Block)
							continue
						}
						vals[at] = v
						switch kind {
						case "BF16":
							b.Bits[at] = uint16(math.Float32bits(v) >> 16)
						case "F16":
							b.Bits[at] = checkpoint.Float32ToF16(v)
						}
					}
					a[(sh.m-1)*lda] = float32(math.Inf(1))
				}
				wide := make([]float32, sh.n*sh.k) // the rows, widened and contiguous
				for j := 0; j < sh.n; j++ {
					copy(wide[j*sh.k:(j+1)*sh.k], vals[b.offset(j):])
				}
				want := make([]float32, sh.m*ldc)
				Sgemm(true, sh.m, sh.n, sh.k, 1, a, lda, wide, sh.k, 0, want, ldc)
				got := make([]float32, sh.m*ldc)
				for i := range got {
					got[i] = float32(math.NaN()) // overwritten, not accumulated into
				}
				SgemmRows(sh.m, sh.n, sh.k, a, lda, b, got, ldc)
				nan := 0 // non-finite outputs
				for i := 0; i < sh.m; i++ {
					for j := 0; j < sh.n; j++ {
						g, w := got[i*ldc+j], want[i*ldc+j]
						if w != w || math.IsInf(float64(w), 0) {
							nan++
						}
						if math.Float32bits(g) != math.Float32bits(w) && !(g != g && w != w) {
							t.Fatalf("%s: C[%d, %d] = %v, Sgemm of the widened rows %v", name, i, j, g, w)
						}
					}
				}
				if poison && nan == 0 {
					t.Fatalf("%s: no NaN or infinity reached C", name)
				}
			}
		}
	}
}
