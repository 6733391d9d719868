package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
)

// GGMLType is a ggml tensor type (ggml.h's enum ggml_type) as GGUF stores it.
type GGMLType uint32

// The ggml types this package reads. Numbers are ggml's; the gaps are
// types ggml removed or that are not read here (Q8_1, the IQ and TQ
// types, the integer types).
const (
	GGMLF32   GGMLType = 0
	GGMLF16   GGMLType = 1
	GGMLQ4_0  GGMLType = 2
	GGMLQ4_1  GGMLType = 3
	GGMLQ5_0  GGMLType = 6
	GGMLQ5_1  GGMLType = 7
	GGMLQ8_0  GGMLType = 8
	GGMLQ2_K  GGMLType = 10
	GGMLQ3_K  GGMLType = 11
	GGMLQ4_K  GGMLType = 12
	GGMLQ5_K  GGMLType = 13
	GGMLQ6_K  GGMLType = 14
	GGMLQ8_K  GGMLType = 15
	GGMLBF16  GGMLType = 30
	GGMLMXFP4 GGMLType = 39
)

// qkK is QK_K, the super-block size of the K-quants.
const qkK = 256

// ggmlType is one readable type: its ggml name, elements per block, bytes
// per block and the row function that widens whole blocks to float32.
type ggmlType struct {
	name    string
	block   int
	size    int
	dequant func(dst []float32, src []byte)
}

// ggmlTypes lists every type DequantizeRow reads, keyed by ggml's number.
var ggmlTypes = map[GGMLType]ggmlType{
	GGMLF32:   {"f32", 1, 4, dequantF32},
	GGMLF16:   {"f16", 1, 2, dequantF16},
	GGMLBF16:  {"bf16", 1, 2, dequantBF16},
	GGMLQ4_0:  {"q4_0", 32, 18, dequantQ4_0},
	GGMLQ4_1:  {"q4_1", 32, 20, dequantQ4_1},
	GGMLQ5_0:  {"q5_0", 32, 22, dequantQ5_0},
	GGMLQ5_1:  {"q5_1", 32, 24, dequantQ5_1},
	GGMLQ8_0:  {"q8_0", 32, 34, dequantQ8_0},
	GGMLQ2_K:  {"q2_K", qkK, 84, dequantQ2K},
	GGMLQ3_K:  {"q3_K", qkK, 110, dequantQ3K},
	GGMLQ4_K:  {"q4_K", qkK, 144, dequantQ4K},
	GGMLQ5_K:  {"q5_K", qkK, 176, dequantQ5K},
	GGMLQ6_K:  {"q6_K", qkK, 210, dequantQ6K},
	GGMLQ8_K:  {"q8_K", qkK, 292, dequantQ8K},
	GGMLMXFP4: {"mxfp4", 32, 17, dequantMXFP4},
}

// ggmlOtherNames names the ggml types that are not read, for errors.
var ggmlOtherNames = map[GGMLType]string{
	9: "q8_1", 16: "iq2_xxs", 17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s",
	23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m", 34: "tq1_0", 35: "tq2_0",
}

func ggmlTypeTable(t GGMLType) (ggmlType, bool) {
	tr, ok := ggmlTypes[t]
	return tr, ok
}

// String returns ggml's name of the type ("q4_K"), or "type N".
func (t GGMLType) String() string {
	if tr, ok := ggmlTypes[t]; ok {
		return tr.name
	}
	if n, ok := ggmlOtherNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// BlockSize returns the elements per block (1 for F32/F16/BF16), or 0 for a
// type not read here.
func (t GGMLType) BlockSize() int { return ggmlTypes[t].block }

// TypeSize returns the bytes per block, or 0 for a type not read here.
func (t GGMLType) TypeSize() int { return ggmlTypes[t].size }

// Quantized reports whether t stores blocks with scales (not F32/F16/BF16).
func (t GGMLType) Quantized() bool { return ggmlTypes[t].block > 1 }

func supportedGGMLTypes() string {
	var names []string
	for _, t := range []GGMLType{GGMLF32, GGMLF16, GGMLBF16, GGMLQ8_0, GGMLQ4_0, GGMLQ4_1, GGMLQ5_0, GGMLQ5_1,
		GGMLQ2_K, GGMLQ3_K, GGMLQ4_K, GGMLQ5_K, GGMLQ6_K, GGMLQ8_K, GGMLMXFP4} {
		names = append(names, t.String())
	}
	return strings.Join(names, ", ")
}

// DequantizeRow widens the blocks of type t in src to float32 in dst, bit
// for bit as ggml's dequantize_row_* (ggml_get_type_traits(t)->to_float)
// does. len(dst) must be a multiple of t's block size and len(src) exactly
// len(dst)/block × block bytes. It allocates nothing, so that a matrix
// product can widen a quantized weight inside its packing.
func DequantizeRow(t GGMLType, dst []float32, src []byte) error {
	tr, ok := ggmlTypes[t]
	if !ok {
		return fmt.Errorf("ggml type %v is not supported (supported: %s)", t, supportedGGMLTypes())
	}
	if len(dst)%tr.block != 0 || len(src) != len(dst)/tr.block*tr.size {
		return fmt.Errorf("%v: %d values need %d bytes (%d-element blocks of %d bytes), got %d bytes", t, len(dst), len(dst)/tr.block*tr.size, tr.block, tr.size, len(src))
	}
	tr.dequant(dst, src)
	return nil
}

// f16 reads the little-endian IEEE half at b.
func f16(b []byte) float32 { return F16ToFloat32(binary.LittleEndian.Uint16(b)) }

// dequantF32 copies little-endian float32s.
func dequantF32(y []float32, x []byte) {
	for i := range y {
		y[i] = math.Float32frombits(binary.LittleEndian.Uint32(x[4*i:]))
	}
}

// f16Table holds every half's float32 value (256 KiB, made on first use):
// a lookup instead of F16ToFloat32's branches for F16 tensors.
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = F16ToFloat32(uint16(h))
	}
	return &t
})

// dequantF16 widens IEEE halves (exact).
func dequantF16(y []float32, x []byte) {
	t := f16Table()
	for i := range y {
		y[i] = t[binary.LittleEndian.Uint16(x[2*i:])]
	}
}

// dequantBF16 widens bfloat16s: the bits shifted up by 16 (exact).
func dequantBF16(y []float32, x []byte) {
	for i := range y {
		y[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(x[2*i:])) << 16)
	}
}

// dequantQ8_0 reads block_q8_0 (34 bytes per 32 values): d f16 | qs[32]
// int8; y[j] = qs[j]·d.
func dequantQ8_0(y []float32, x []byte) {
	for b := 0; b < len(y)/32; b++ {
		blk, out := x[34*b:34*b+34], y[32*b:32*b+32]
		d := f16(blk)
		for j := range out {
			out[j] = float32(int8(blk[2+j])) * d
		}
	}
}

// dequantQ4_0 reads block_q4_0 (18 bytes per 32 values): d f16 | qs[16],
// value j in the low nibble of qs[j] and value j+16 in its high nibble;
// y = (q − 8)·d.
func dequantQ4_0(y []float32, x []byte) {
	for b := 0; b < len(y)/32; b++ {
		blk, out := x[18*b:18*b+18], y[32*b:32*b+32]
		d := f16(blk)
		for j, q := range blk[2:18] {
			out[j] = float32(int(q&0xf)-8) * d
			out[j+16] = float32(int(q>>4)-8) * d
		}
	}
}

// dequantQ4_1 reads block_q4_1 (20 bytes per 32 values): d f16 | m f16 |
// qs[16], nibbles as Q4_0; y = q·d + m.
func dequantQ4_1(y []float32, x []byte) {
	for b := 0; b < len(y)/32; b++ {
		blk, out := x[20*b:20*b+20], y[32*b:32*b+32]
		d, m := f16(blk), f16(blk[2:])
		for j, q := range blk[4:20] {
			out[j] = float32(float32(q&0xf)*d) + m
			out[j+16] = float32(float32(q>>4)*d) + m
		}
	}
}

// dequantQ5_0 reads block_q5_0 (22 bytes per 32 values): d f16 | qh u32
// (bit j: the fifth bit of value j) | qs[16], low nibbles as Q4_0;
// y = (q − 16)·d.
func dequantQ5_0(y []float32, x []byte) {
	for b := 0; b < len(y)/32; b++ {
		blk, out := x[22*b:22*b+22], y[32*b:32*b+32]
		d := f16(blk)
		qh := binary.LittleEndian.Uint32(blk[2:])
		for j, q := range blk[6:22] {
			h0 := (qh >> uint(j) << 4) & 0x10
			h1 := (qh >> uint(j+12)) & 0x10
			out[j] = float32(int(uint32(q&0xf)|h0)-16) * d
			out[j+16] = float32(int(uint32(q>>4)|h1)-16) * d
		}
	}
}

// dequantQ5_1 reads block_q5_1 (24 bytes per 32 values): d f16 | m f16 |
// qh u32 | qs[16], bits as Q5_0; y = q·d + m.
func dequantQ5_1(y []float32, x []byte) {
	for b := 0; b < len(y)/32; b++ {
		blk, out := x[24*b:24*b+24], y[32*b:32*b+32]
		d, m := f16(blk), f16(blk[2:])
		qh := binary.LittleEndian.Uint32(blk[4:])
		for j, q := range blk[8:24] {
			h0 := (qh >> uint(j) << 4) & 0x10
			h1 := (qh >> uint(j+12)) & 0x10
			out[j] = float32(float32(uint32(q&0xf)|h0)*d) + m
			out[j+16] = float32(float32(uint32(q>>4)|h1)*d) + m
		}
	}
}

// dequantQ2K reads block_q2_K (84 bytes per 256 values): scales[16] (low
// nibble: the 16-value sub-block's scale, high nibble: its min) | qs[64]
// (2-bit values: each 128-value half uses 32 bytes, value 32·s + l of the
// half in bits 2s..2s+1 of byte l) | d f16 | dmin f16;
// y = d·sc·q − dmin·m.
func dequantQ2K(y []float32, x []byte) {
	for b := 0; b < len(y)/qkK; b++ {
		blk, out := x[84*b:84*b+84], y[qkK*b:qkK*b+qkK]
		scales, qs := blk[0:16], blk[16:80]
		d, dmin := f16(blk[80:]), f16(blk[82:])
		is, o := 0, 0
		for n := 0; n < qkK; n += 128 {
			q := qs[n/4 : n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					sc := scales[is]
					is++
					dl, ml := d*float32(sc&0xf), dmin*float32(sc>>4)
					for l := 0; l < 16; l++ {
						out[o] = float32(dl*float32((q[16*half+l]>>shift)&3)) - ml
						o++
					}
				}
			}
		}
	}
}

// dequantQ3K reads block_q3_K (110 bytes per 256 values): hmask[32] (the
// high bit: value 32·s + l of each 128-value half at bit s+4h of byte l,
// set meaning "no −4") | qs[64] (low 2 bits, laid out as Q2_K) |
// scales[12] (sixteen 6-bit scales: low 4 bits in the nibbles of bytes
// 0–7, high 2 bits in bytes 8–11) | d f16; y = d·(sc − 32)·(q − 4·!h).
func dequantQ3K(y []float32, x []byte) {
	const kmask1, kmask2 = 0x03030303, 0x0f0f0f0f
	var sc [16]int8
	for b := 0; b < len(y)/qkK; b++ {
		blk, out := x[110*b:110*b+110], y[qkK*b:qkK*b+qkK]
		hm, qs, raw := blk[0:32], blk[32:96], blk[96:108]
		dAll := f16(blk[108:])
		le := binary.LittleEndian
		a0, a1, tmp := le.Uint32(raw), le.Uint32(raw[4:]), le.Uint32(raw[8:])
		aux := [4]uint32{
			(a0 & kmask2) | (((tmp >> 0) & kmask1) << 4),
			(a1 & kmask2) | (((tmp >> 2) & kmask1) << 4),
			((a0 >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4),
			((a1 >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4),
		}
		for i, a := range aux {
			for k := 0; k < 4; k++ {
				sc[4*i+k] = int8(a >> (8 * k))
			}
		}
		is, o := 0, 0
		m := byte(1)
		for n := 0; n < qkK; n += 128 {
			q := qs[n/4 : n/4+32]
			for shift := uint(0); shift < 8; shift += 2 {
				for half := 0; half < 2; half++ {
					dl := dAll * float32(int(sc[is])-32)
					is++
					for l := 16 * half; l < 16*half+16; l++ {
						v := int((q[l] >> shift) & 3)
						if hm[l]&m == 0 {
							v -= 4
						}
						out[o] = dl * float32(v)
						o++
					}
				}
				m <<= 1
			}
		}
	}
}

// scaleMinK4 unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K
// scales[12] (ggml's get_scale_min_k4): for j < 4 the low 6 bits of bytes
// j and j+4; for j ≥ 4 the nibbles of byte j+4 with the top 2 bits of bytes
// j−4 and j.
func scaleMinK4(j int, q []byte) (sc, m byte) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return (q[j+4] & 0xf) | ((q[j-4] >> 6) << 4), (q[j+4] >> 4) | ((q[j] >> 6) << 4)
}

// dequantQ4K reads block_q4_K (144 bytes per 256 values): d f16 | dmin f16
// | scales[12] (eight 6-bit scale/min pairs, scaleMinK4) | qs[128] (each
// 64-value chunk: 32 bytes, value l in the low nibble of byte l and value
// 32+l in its high nibble); y = d·sc·q − dmin·m per 32-value sub-block.
func dequantQ4K(y []float32, x []byte) {
	for b := 0; b < len(y)/qkK; b++ {
		blk, out := x[144*b:144*b+144], y[qkK*b:qkK*b+qkK]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qs := blk[4:16], blk[16:144]
		for c := 0; c < 4; c++ {
			sc, m := scaleMinK4(2*c, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*c+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			q, o := qs[32*c:32*c+32], out[64*c:64*c+64]
			for l, v := range q {
				o[l] = float32(d1*float32(v&0xf)) - m1
				o[l+32] = float32(d2*float32(v>>4)) - m2
			}
		}
	}
}

// dequantQ5K reads block_q5_K (176 bytes per 256 values): d f16 | dmin f16
// | scales[12] (as Q4_K) | qh[32] (fifth bits: value 64·c + l at bit 2c
// of byte l, value 64·c + 32 + l at bit 2c+1) | qs[128] (low nibbles as
// Q4_K); y = d·sc·q − dmin·m.
func dequantQ5K(y []float32, x []byte) {
	for b := 0; b < len(y)/qkK; b++ {
		blk, out := x[176*b:176*b+176], y[qkK*b:qkK*b+qkK]
		d, dmin := f16(blk), f16(blk[2:])
		scales, qh, qs := blk[4:16], blk[16:48], blk[48:176]
		for c := 0; c < 4; c++ {
			sc, m := scaleMinK4(2*c, scales)
			d1, m1 := d*float32(sc), dmin*float32(m)
			sc, m = scaleMinK4(2*c+1, scales)
			d2, m2 := d*float32(sc), dmin*float32(m)
			u1, u2 := byte(1)<<(2*c), byte(2)<<(2*c)
			q, o := qs[32*c:32*c+32], out[64*c:64*c+64]
			for l, v := range q {
				lo, hi := v&0xf, v>>4
				if qh[l]&u1 != 0 {
					lo += 16
				}
				if qh[l]&u2 != 0 {
					hi += 16
				}
				o[l] = float32(d1*float32(lo)) - m1
				o[l+32] = float32(d2*float32(hi)) - m2
			}
		}
	}
}

// dequantQ6K reads block_q6_K (210 bytes per 256 values): ql[128] (low 4
// bits) | qh[64] (high 2 bits) | scales[16] int8 (one per 16 values) | d
// f16. Per 128-value half (ql 64 bytes, qh 32 bytes, 8 scales), for
// l < 32: values l, l+32, l+64, l+96 are the low and high nibbles of
// ql[l] and ql[l+32] with bits 0–1, 2–3, 4–5, 6–7 of qh[l] on top;
// y = d·sc·(q − 32).
func dequantQ6K(y []float32, x []byte) {
	for b := 0; b < len(y)/qkK; b++ {
		blk, out := x[210*b:210*b+210], y[qkK*b:qkK*b+qkK]
		d := f16(blk[208:])
		for n := 0; n < 2; n++ {
			ql, qh, sc := blk[64*n:64*n+64], blk[128+32*n:128+32*n+32], blk[192+8*n:192+8*n+8]
			o := out[128*n : 128*n+128]
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
				q2 := int(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				o[l] = d * float32(int8(sc[is])) * float32(q1)
				o[l+32] = d * float32(int8(sc[is+2])) * float32(q2)
				o[l+64] = d * float32(int8(sc[is+4])) * float32(q3)
				o[l+96] = d * float32(int8(sc[is+6])) * float32(q4)
			}
		}
	}
}

// dequantQ8K reads block_q8_K (292 bytes per 256 values): d float32 |
// qs[256] int8 | bsums[16] int16 (sums of 16 values, unused here);
// y = d·q.
func dequantQ8K(y []float32, x []byte) {
	for b := 0; b < len(y)/qkK; b++ {
		blk, out := x[292*b:292*b+292], y[qkK*b:qkK*b+qkK]
		d := math.Float32frombits(binary.LittleEndian.Uint32(blk))
		for j := range out {
			out[j] = d * float32(int8(blk[4+j]))
		}
	}
}

// mxfp4Values is the FP4 E2M1 code table doubled (ggml's kvalues_mxfp4):
// the block scale is halved to compensate (e8m0Half).
var mxfp4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// e8m0Half returns half of the E8M0 scale 2^(e−127), i.e. 2^(e−128), as
// ggml's GGML_E8M0_TO_FP32_HALF: subnormal for e < 2.
func e8m0Half(e byte) float32 {
	if e < 2 {
		return math.Float32frombits(0x00200000 << e)
	}
	return math.Float32frombits(uint32(e-1) << 23)
}

// dequantMXFP4 reads block_mxfp4 (17 bytes per 32 values, OCP MX FP4):
// e E8M0 | qs[16] (value j in the low nibble of qs[j], value j+16 in its
// high nibble, E2M1 codes); y = kvalues[q]·2^(e−128).
func dequantMXFP4(y []float32, x []byte) {
	for b := 0; b < len(y)/32; b++ {
		blk, out := x[17*b:17*b+17], y[32*b:32*b+32]
		d := e8m0Half(blk[0])
		for j, q := range blk[1:17] {
			out[j] = float32(mxfp4Values[q&0xf]) * d
			out[j+16] = float32(mxfp4Values[q>>4]) * d
		}
	}
}

// RowDequantizer returns, for a type read here, the elements per block,
// the bytes per block and DequantizeRow's row function without its length
// checks: fn(dst, src) widens the len(dst)/block whole blocks of src,
// bit for bit as ggml's to_float, allocating nothing. model keeps
// quantized weights in their blocks and calls fn inside the matrix
// products' packing. ok is false for a type not read here.
func RowDequantizer(t GGMLType) (block, size int, fn func(dst []float32, src []byte), ok bool) {
	tr, ok := ggmlTypes[t]
	return tr.block, tr.size, tr.dequant, ok
}
