package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
)

// dtypeInfo describes one element type, spelled as safetensors spells it.
type dtypeInfo struct {
	size    int  // bytes per element
	integer bool // integer or BOOL: readable by Int64
}

// dtypes lists every element type this package reads and writes.
var dtypes = map[string]dtypeInfo{
	"F64":  {8, false},
	"F32":  {4, false},
	"F16":  {2, false},
	"BF16": {2, false},
	"I64":  {8, true},
	"I32":  {4, true},
	"I16":  {2, true},
	"I8":   {1, true},
	"U8":   {1, true},
	"BOOL": {1, true},
}

// dtypeSize returns the element size of a known dtype, or 0.
func dtypeSize(dt string) int { return dtypes[dt].size }

// F16ToFloat32 converts an IEEE 754 half-precision value, given by its bits,
// to float32 exactly (every half value, subnormals, infinities and NaNs
// included, is representable as a float32).
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // infinity or NaN; keep the payload
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0 && mant == 0: // signed zero
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: mant × 2^-24; normalise for float32
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		mant &= 0x3ff
		return math.Float32frombits(sign | e<<23 | mant<<13)
	default:
		return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
	}
}

// BF16ToFloat32 converts a bfloat16 value, given by its bits, to float32
// exactly.
func BF16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBF16 rounds a float32 to bfloat16 bits, round-to-nearest-even,
// as torch's .to(torch.bfloat16) does. NaNs stay NaN (quiet).
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet NaN
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// Float32ToF16 rounds a float32 to IEEE 754 half-precision bits,
// round-to-nearest-even; values beyond the half range become ±Inf and tiny
// values become half subnormals or ±0. NaNs stay NaN (quiet).
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff { // infinity or NaN
		if mant == 0 {
			return sign | 0x7c00
		}
		return sign | 0x7c00 | 0x200 | uint16(mant>>13)
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // half subnormal (or zero): value = h × 2^-24
		if e < -10 {
			return sign
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		h := m >> shift
		rem, half := m&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && h&1 == 1) {
			h++ // may carry into the smallest normal, which is right
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | mant>>13
	if rem := mant & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to Inf, which is right
	}
	return sign | uint16(h)
}

// decodeFloat32 converts little-endian elements of type dt in raw to float32
// in out; len(raw) must be len(out) × the element size.
func decodeFloat32(dt string, raw []byte, out []float32) error {
	le := binary.LittleEndian
	switch dt {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
	case "F64":
		for i := range out {
			out[i] = float32(math.Float64frombits(le.Uint64(raw[8*i:])))
		}
	case "F16":
		for i := range out {
			out[i] = F16ToFloat32(le.Uint16(raw[2*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = BF16ToFloat32(le.Uint16(raw[2*i:]))
		}
	case "I64":
		for i := range out {
			out[i] = float32(int64(le.Uint64(raw[8*i:])))
		}
	case "I32":
		for i := range out {
			out[i] = float32(int32(le.Uint32(raw[4*i:])))
		}
	case "I16":
		for i := range out {
			out[i] = float32(int16(le.Uint16(raw[2*i:])))
		}
	case "I8":
		for i := range out {
			out[i] = float32(int8(raw[i]))
		}
	case "U8":
		for i := range out {
			out[i] = float32(raw[i])
		}
	case "BOOL":
		for i := range out {
			out[i] = boolValue(raw[i])
		}
	default:
		return fmt.Errorf("unsupported dtype %q", dt)
	}
	return nil
}

// decodeFloat64 is decodeFloat32 for float64 output.
func decodeFloat64(dt string, raw []byte, out []float64) error {
	le := binary.LittleEndian
	switch dt {
	case "F64":
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
	case "F32", "F16", "BF16":
		// One float32 pass, then widen: every value is exact in float32.
		tmp := make([]float32, len(out))
		if err := decodeFloat32(dt, raw, tmp); err != nil {
			return err
		}
		for i, v := range tmp {
			out[i] = float64(v)
		}
	default:
		if !dtypes[dt].integer {
			return fmt.Errorf("unsupported dtype %q", dt)
		}
		tmp := make([]int64, len(out))
		if err := decodeInt64(dt, raw, tmp); err != nil {
			return err
		}
		for i, v := range tmp {
			out[i] = float64(v)
		}
	}
	return nil
}

// decodeInt64 converts little-endian integer (or BOOL) elements to int64.
func decodeInt64(dt string, raw []byte, out []int64) error {
	le := binary.LittleEndian
	switch dt {
	case "I64":
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
	case "I32":
		for i := range out {
			out[i] = int64(int32(le.Uint32(raw[4*i:])))
		}
	case "I16":
		for i := range out {
			out[i] = int64(int16(le.Uint16(raw[2*i:])))
		}
	case "I8":
		for i := range out {
			out[i] = int64(int8(raw[i]))
		}
	case "U8":
		for i := range out {
			out[i] = int64(raw[i])
		}
	case "BOOL":
		for i := range out {
			out[i] = int64(boolValue(raw[i]))
		}
	default:
		return fmt.Errorf("dtype %s is not an integer type", dt)
	}
	return nil
}

// boolValue maps a stored BOOL byte to 0 or 1 (any non-zero byte is true).
func boolValue(b byte) float32 {
	if b != 0 {
		return 1
	}
	return 0
}

// mulShape returns the number of elements of shape and that number times
// elemSize, or ok=false when a dimension is negative or either product
// overflows int64.
func mulShape(shape []int64, elemSize int64) (numel, nbytes int64, ok bool) {
	numel = 1
	for _, d := range shape {
		if d < 0 {
			return 0, 0, false
		}
		if d != 0 && numel > math.MaxInt64/d {
			return 0, 0, false
		}
		numel *= d
	}
	if elemSize != 0 && numel > math.MaxInt64/elemSize {
		return 0, 0, false
	}
	return numel, numel * elemSize, true
}
