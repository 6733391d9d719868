package kern

import "math"

// MXFP4 is the OCP microscaling format of gpt-oss's released expert
// weights: each block of 32 consecutive values of a row shares one E8M0
// scale byte s, and each value is a 4-bit E2M1 code n (sign bit 8, then
// two exponent bits and one mantissa bit), two codes a byte, value 2i in
// the low nibble and 2i+1 in the high one. The value is
//
//	x = e2m1(n) · 2^(s−127),  e2m1 = {0, ½, 1, 1½, 2, 3, 4, 6} and their negatives
//
// as transformers' convert_moe_packed_tensors decodes it (torch.ldexp):
// scale byte 255, NaN in the OCP specification, decodes as 2^128 (±Inf for
// a non-zero code, ±0 for a zero one). Every finite value is exact in
// float32 and in bfloat16: at most two significant bits, exponents
// −128 … 129.
const (
	MXFP4Block = 32 // values per scale
)

// e2m1 is the value of each 4-bit code.
var e2m1 = [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}

// mxfp4Values[16·s + n] is the float32 value of code n under scale byte s.
var mxfp4Values = func() (t [256 * 16]float32) {
	for s := range 256 {
		for n, v := range e2m1 {
			x := math.Ldexp(v, s-127) // exact in float64
			if math.Abs(x) > math.MaxFloat32 {
				x = math.Copysign(math.Inf(1), x)
			}
			t[16*s+n] = float32(x) // exact: two significant bits at most
		}
	}
	for s := range 256 { // code 8 is −0 (a Go constant −0.0 is +0)
		t[16*s+8] = float32(math.Copysign(0, -1))
	}
	return t
}()

// DequantMXFP4 writes the len(dst) values of an MXFP4 matrix from element
// at on into dst as float32 (exact; see MXFP4): blocks hold the codes, two
// a byte (element i in byte i/2, the low nibble for even i), scales one
// byte per MXFP4Block elements (element i under scales[i/32]). A row of a
// [rows, cols] matrix with cols a multiple of 32 starts at element r·cols.
func DequantMXFP4(dst []float32, blocks, scales []uint8, at int) {
	i, n := 0, len(dst)
	// up to a block boundary (and an even element) value by value
	for ; i < n && (at+i)%MXFP4Block != 0; i++ {
		dst[i] = mxfp4Value(blocks, scales, at+i)
	}
	// whole blocks: 16 bytes under one scale (AVX-512 where the CPU has it)
	if nb := (n - i) / MXFP4Block; nb > 0 && dequantBlocks != nil {
		e := at + i
		dequantBlocks(dst[i:i+nb*MXFP4Block], blocks[e/2:e/2+nb*MXFP4Block/2], scales[e/MXFP4Block:e/MXFP4Block+nb])
		i += nb * MXFP4Block
	}
	for ; i+MXFP4Block <= n; i += MXFP4Block {
		e := at + i
		tab := (*[16]float32)(mxfp4Values[16*int(scales[e/MXFP4Block]):])
		src := (*[MXFP4Block / 2]uint8)(blocks[e/2:])
		d := (*[MXFP4Block]float32)(dst[i:])
		for j, b := range src {
			d[2*j] = tab[b&15]
			d[2*j+1] = tab[b>>4]
		}
	}
	for ; i < n; i++ {
		dst[i] = mxfp4Value(blocks, scales, at+i)
	}
}

// dequantBlocks, where the build has it (AVX-512, mxfp4_amd64.go), is
// DequantMXFP4 of len(scales) whole blocks from a block boundary: the
// same table entries.
var dequantBlocks func(dst []float32, blocks, scales []uint8)

// mxfp4Value is element e of an MXFP4 matrix (DequantMXFP4).
func mxfp4Value(blocks, scales []uint8, e int) float32 {
	code := blocks[e/2] >> (4 * (e % 2)) & 15
	return mxfp4Values[16*int(scales[e/MXFP4Block])+int(code)]
}
