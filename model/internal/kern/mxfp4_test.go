package kern

import (
	"math"
	"testing"
)

// e2m1Float64 decodes a 4-bit E2M1 code from its fields (sign, two
// exponent bits with bias 1, one mantissa bit; exponent 0 subnormal), as
// the OCP MX specification defines it: independently of the table.
func e2m1Float64(n uint8) float64 {
	sign, exp, man := n>>3&1, int(n>>1&3), float64(n&1)
	v := man / 2 // subnormal: 0 or ½
	if exp > 0 {
		v = (1 + man/2) * math.Pow(2, float64(exp-1))
	}
	if sign == 1 {
		v = -v
	}
	return v
}

// TestDequantMXFP4: every (scale byte, code byte) pair decodes, value by
// value, to the float64 decoding of the format e2m1(n)·2^(s−127) rounded
// to float32 (the sign of zero included; scale 255 as torch.ldexp gives
// it: ±Inf, ±0 for a zero code), low nibble first; and a read starting
// and ending inside blocks gives the same values as the whole row — in
// Go and on the AVX-512 decoding where the CPU has it.
func TestDequantMXFP4(t *testing.T) {
	t.Run("go", func(t *testing.T) {
		defer func(f func(dst []float32, blocks, scales []uint8)) { dequantBlocks = f }(dequantBlocks)
		dequantBlocks = nil
		testDequantMXFP4(t)
	})
	t.Run("simd", func(t *testing.T) {
		if dequantBlocks == nil {
			t.Skip("no vector decoding on this CPU and build")
		}
		testDequantMXFP4(t)
	})
}

func testDequantMXFP4(t *testing.T) {
	// rows of 256 blocks: block s has scale byte s and, in rotation rot,
	// the 16 bytes 16·((s+rot)%16) … +15, so that over the 16 rotations
	// every byte meets every scale
	const blocks = 256
	scales := make([]uint8, blocks)
	for s := range blocks {
		scales[s] = uint8(s)
	}
	for rot := range 16 {
		row := make([]uint8, blocks*16)
		for s := range blocks {
			for j := range 16 {
				row[s*16+j] = uint8(16*((s+rot)%16) + j)
			}
		}
		got := make([]float32, blocks*MXFP4Block)
		DequantMXFP4(got, row, scales, 0)
		for e := range got {
			s := int(scales[e/MXFP4Block])
			code := row[e/2] >> (4 * (e % 2)) & 15
			want64 := e2m1Float64(code) * math.Pow(2, float64(s-127))
			want := float32(want64)
			if math.Abs(want64) > math.MaxFloat32 {
				want = float32(math.Copysign(math.Inf(1), want64))
			}
			if float64(want) != want64 && !math.IsInf(float64(want), 0) {
				t.Fatalf("e2m1 %d · 2^%d = %v is not exact in float32", code, s-127, want64)
			}
			if math.Float32bits(got[e]) != math.Float32bits(want) {
				t.Fatalf("rotation %d element %d (byte %#02x, scale %d, code %d) = %v, want %v", rot, e, row[e/2], s, code, got[e], want)
			}
		}
		// a read from inside a block to inside another
		for _, span := range [][2]int{{1, 7}, {5, 64}, {31, 33}, {17, 200}, {0, 32}, {63, 1}} {
			part := make([]float32, span[1])
			DequantMXFP4(part, row, scales, span[0])
			for i, v := range part {
				if math.Float32bits(v) != math.Float32bits(got[span[0]+i]) {
					t.Fatalf("rotation %d: read of %d from %d: element %d = %v, the whole row's %v", rot, span[1], span[0], span[0]+i, v, got[span[0]+i])
				}
			}
		}
	}
	// the format's table: code 0x1 is ½, 0x7 is 6, 0x9 is −½, 0x8 is −0
	DequantMXFP4Check := func(b uint8, s uint8) [2]float32 {
		var d [2]float32
		blk := make([]uint8, 16)
		blk[0] = b
		row := make([]float32, MXFP4Block)
		DequantMXFP4(row, blk, []uint8{s}, 0)
		d[0], d[1] = row[0], row[1]
		return d
	}
	if d := DequantMXFP4Check(0x71, 127); d != [2]float32{0.5, 6} {
		t.Errorf("byte 0x71 at scale 2^0 = %v, want [0.5 6] (low nibble first)", d)
	}
	if d := DequantMXFP4Check(0x89, 125); d[0] != -0.125 || !math.Signbit(float64(d[1])) || d[1] != 0 {
		t.Errorf("byte 0x89 at scale 2^-2 = %v, want [-0.125 -0]", d)
	}
}

// BenchmarkDequantMXFP4 times the dequantization of one 2880-value row
// (gpt-oss-20b's width) per iteration.
func BenchmarkDequantMXFP4(b *testing.B) {
	const n = 2880
	blocks, scales := make([]uint8, n/2), make([]uint8, n/MXFP4Block)
	for i := range blocks {
		blocks[i] = uint8(i * 37)
	}
	for i := range scales {
		scales[i] = uint8(120 + i%5)
	}
	dst := make([]float32, n)
	b.SetBytes(n * 4)
	for b.Loop() {
		DequantMXFP4(dst, blocks, scales, 0)
	}
}
