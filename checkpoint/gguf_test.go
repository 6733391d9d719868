package checkpoint

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// ggufTestTensor is one tensor for encodeGGUF: data holds its stored bytes;
// offset < 0 places it after the previous one (aligned), as llama.cpp does.
type ggufTestTensor struct {
	name   string
	typ    GGMLType
	dims   []int64
	data   []byte
	offset int64
}

// encodeGGUF writes a little-endian GGUF file of the given version: the
// metadata in order, the tensor infos, padding to align and the data. It
// writes what it is given, also what OpenGGUF must refuse.
func encodeGGUF(version uint32, kv []GGUFKV, ts []ggufTestTensor, align int64) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	u32 := func(v uint32) { binary.Write(&b, le, v) }
	u64 := func(v uint64) { binary.Write(&b, le, v) }
	str := func(s string) { u64(uint64(len(s))); b.WriteString(s) }
	b.WriteString(GGUFMagic)
	u32(version)
	u64(uint64(len(ts)))
	u64(uint64(len(kv)))
	for _, e := range kv {
		str(e.Key)
		u32(uint32(e.Type))
		writeGGUFValue(&b, e.Type, e.Value)
	}
	offsets := make([]int64, len(ts))
	next, end := int64(0), int64(0)
	for i, t := range ts {
		offsets[i] = t.offset
		if t.offset < 0 {
			offsets[i] = next
		}
		if e := offsets[i] + int64(len(t.data)); e <= 1<<24 { // an offset far out writes no data there
			next = alignUp(e, align)
			end = max(end, next)
		}
	}
	for i, t := range ts {
		str(t.name)
		u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			u64(uint64(d))
		}
		u32(uint32(t.typ))
		u64(uint64(offsets[i]))
	}
	for int64(b.Len())%align != 0 {
		b.WriteByte(0)
	}
	data := make([]byte, end)
	for i, t := range ts {
		if offsets[i] >= 0 && offsets[i]+int64(len(t.data)) <= end {
			copy(data[offsets[i]:], t.data)
		}
	}
	b.Write(data)
	return b.Bytes()
}

// writeGGUFValue encodes one value of type t (scalars, strings, GGUFArray).
func writeGGUFValue(b *bytes.Buffer, t GGUFValueType, v any) {
	le := binary.LittleEndian
	switch t {
	case GGUFString:
		binary.Write(b, le, uint64(len(v.(string))))
		b.WriteString(v.(string))
	case GGUFArrayT:
		a := v.(GGUFArray)
		binary.Write(b, le, uint32(a.Elem))
		binary.Write(b, le, uint64(a.Len()))
		switch x := a.Values.(type) {
		case []string:
			for _, s := range x {
				writeGGUFValue(b, GGUFString, s)
			}
		case []GGUFArray:
			for _, s := range x {
				writeGGUFValue(b, GGUFArrayT, s)
			}
		case []bool:
			for _, s := range x {
				writeGGUFValue(b, GGUFBool, s)
			}
		default:
			binary.Write(b, le, x)
		}
	case GGUFBool:
		if v.(bool) {
			b.WriteByte(1)
		} else {
			b.WriteByte(0)
		}
	default:
		binary.Write(b, le, v)
	}
}

// everyValueKV holds one metadata value of every type, arrays of every
// element type and an array of arrays.
func everyValueKV() []GGUFKV {
	return []GGUFKV{
		{"general.architecture", GGUFString, "llama"},
		{"u8", GGUFUint8, uint8(200)},
		{"i8", GGUFInt8, int8(-100)},
		{"u16", GGUFUint16, uint16(60000)},
		{"i16", GGUFInt16, int16(-30000)},
		{"u32", GGUFUint32, uint32(4000000000)},
		{"i32", GGUFInt32, int32(-2000000000)},
		{"f32", GGUFFloat32, float32(1e-6)},
		{"bool", GGUFBool, true},
		{"u64", GGUFUint64, uint64(1) << 60},
		{"i64", GGUFInt64, int64(-1) << 60},
		{"f64", GGUFFloat64, math.Pi},
		{"empty", GGUFString, ""},
		{"a.u8", GGUFArrayT, GGUFArray{GGUFUint8, []uint8{1, 2, 255}}},
		{"a.i8", GGUFArrayT, GGUFArray{GGUFInt8, []int8{-1, 2}}},
		{"a.u16", GGUFArrayT, GGUFArray{GGUFUint16, []uint16{7}}},
		{"a.i16", GGUFArrayT, GGUFArray{GGUFInt16, []int16{-7, 8}}},
		{"a.u32", GGUFArrayT, GGUFArray{GGUFUint32, []uint32{9, 10}}},
		{"a.i32", GGUFArrayT, GGUFArray{GGUFInt32, []int32{-9}}},
		{"a.f32", GGUFArrayT, GGUFArray{GGUFFloat32, []float32{0.5, -2}}},
		{"a.bool", GGUFArrayT, GGUFArray{GGUFBool, []bool{true, false}}},
		{"a.str", GGUFArrayT, GGUFArray{GGUFString, []string{"<s>", "", "\xff\x00byte"}}},
		{"a.u64", GGUFArrayT, GGUFArray{GGUFUint64, []uint64{1 << 63}}},
		{"a.i64", GGUFArrayT, GGUFArray{GGUFInt64, []int64{-5}}},
		{"a.f64", GGUFArrayT, GGUFArray{GGUFFloat64, []float64{1e300}}},
		{"a.empty", GGUFArrayT, GGUFArray{GGUFFloat32, []float32{}}},
		{"a.nested", GGUFArrayT, GGUFArray{GGUFArrayT, []GGUFArray{
			{GGUFInt32, []int32{1, 2}}, {GGUFString, []string{"x"}}, {GGUFArrayT, []GGUFArray{{GGUFUint8, []uint8{3}}}}}}},
	}
}

// smallTensors returns one tensor of each given type with dims [block·2, 3]
// and random stored bytes.
func smallTensors(types ...GGMLType) []ggufTestTensor {
	var ts []ggufTestTensor
	for i, ty := range types {
		ne0 := int64(2 * ty.BlockSize())
		data := make([]byte, 3*2*ty.TypeSize())
		for j := range data {
			data[j] = byte(j*31 + i*7)
		}
		ts = append(ts, ggufTestTensor{name: fmt.Sprintf("t%d.%v", i, ty), typ: ty, dims: []int64{ne0, 3}, data: data, offset: -1})
	}
	return ts
}

func writeTemp(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGGUFRoundTrip: every metadata value type (arrays of each, an array of
// arrays) and a tensor of every supported type read back as written, at
// the alignment general.alignment gives, in versions 2 and 3.
func TestGGUFRoundTrip(t *testing.T) {
	types := []GGMLType{GGMLF32, GGMLF16, GGMLBF16, GGMLQ8_0, GGMLQ4_0, GGMLQ4_1, GGMLQ5_0, GGMLQ5_1,
		GGMLQ2_K, GGMLQ3_K, GGMLQ4_K, GGMLQ5_K, GGMLQ6_K, GGMLQ8_K, GGMLMXFP4}
	for _, tc := range []struct {
		version uint32
		align   int64
	}{{3, 32}, {2, 32}, {3, 64}} {
		kv := everyValueKV()
		if tc.align != 32 {
			kv = append(kv, GGUFKV{"general.alignment", GGUFUint32, uint32(tc.align)})
		}
		ts := smallTensors(types...)
		p := writeTemp(t, "m.gguf", encodeGGUF(tc.version, kv, ts, tc.align))
		g, err := OpenGGUF(p)
		if err != nil {
			t.Fatal(err)
		}
		if g.Version != tc.version || g.Alignment != tc.align || g.DataOffset%tc.align != 0 {
			t.Errorf("version %d alignment %d data at %d, want %d, %d", g.Version, g.Alignment, g.DataOffset, tc.version, tc.align)
		}
		if !reflect.DeepEqual(g.KV, kv) {
			for i := range kv {
				if i < len(g.KV) && !reflect.DeepEqual(g.KV[i], kv[i]) {
					t.Errorf("metadata %d: read %#v, wrote %#v", i, g.KV[i], kv[i])
				}
			}
			t.Fatalf("read %d metadata entries, wrote %d", len(g.KV), len(kv))
		}
		for _, w := range ts {
			info, ok := g.Tensor(w.name)
			if !ok || info.Type != w.typ || !reflect.DeepEqual(info.Dims, w.dims) || info.Size != int64(len(w.data)) || info.Offset%tc.align != 0 {
				t.Fatalf("%s: read %+v (ok %v), wrote type %v dims %v, %d bytes", w.name, info, ok, w.typ, w.dims, len(w.data))
			}
			if s := info.Shape(); s[0] != 3 || int64(s[1]) != w.dims[0] {
				t.Errorf("%s: Shape %v, want [3 %d]", w.name, s, w.dims[0])
			}
			got, err := g.TensorData(w.name)
			if err != nil || !bytes.Equal(got, w.data) {
				t.Fatalf("%s: data differs (%v)", w.name, err)
			}
			if _, err := g.Dequantize(w.name); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := g.MetaInt("u32"); err != nil || n != 4000000000 {
			t.Errorf("MetaInt(u32) = %d, %v", n, err)
		}
		if _, err := g.MetaInt("a.u8"); err == nil || !strings.Contains(err.Error(), `"a.u8" is a array`) {
			t.Errorf("MetaInt of an array: %v", err)
		}
		if f, err := g.MetaFloat("f32"); err != nil || float32(f) != 1e-6 {
			t.Errorf("MetaFloat(f32) = %g, %v", f, err)
		}
		if s, err := g.MetaString("general.architecture"); err != nil || s != "llama" {
			t.Errorf("MetaString = %q, %v", s, err)
		}
		g.Close()
	}
}

// TestGGUFMapsTensors: on a platform with mmap the tensor bytes are a view
// of the file's mapping, not a copy (the stored type, never widened).
func TestGGUFMapsTensors(t *testing.T) {
	if !canMap {
		t.Skip("no mmap on this platform")
	}
	p := writeTemp(t, "m.gguf", encodeGGUF(3, everyValueKV()[:1], smallTensors(GGMLQ4_K, GGMLF32), 32))
	g, err := OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	m, ok := g.r.(*mapping)
	if !ok {
		t.Fatalf("file not mapped: %T", g.r)
	}
	for _, ti := range g.Tensors {
		b, err := g.TensorData(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if &b[0] != &m.data[ti.Offset] {
			t.Errorf("%s: TensorData is a copy, not a view of the mapping", ti.Name)
		}
	}
}

// ggufBad builds a file from a valid one by a change to its parts.
type ggufBad struct {
	name string
	file func() []byte
	want string // a substring of the error: the field (and tensor) named
}

func ggufBadCases() []ggufBad {
	arch := []GGUFKV{{"general.architecture", GGUFString, "llama"}}
	one := func(ty GGMLType, dims []int64, n int, off int64) []ggufTestTensor {
		return []ggufTestTensor{{name: "blk.0.attn_q.weight", typ: ty, dims: dims, data: make([]byte, n), offset: off}}
	}
	valid := encodeGGUF(3, arch, one(GGMLF32, []int64{8, 2}, 64, -1), 32)
	le := binary.LittleEndian
	patch := func(b []byte, at int, v uint64, n int) []byte {
		c := append([]byte(nil), b...)
		if n == 4 {
			le.PutUint32(c[at:], uint32(v))
		} else {
			le.PutUint64(c[at:], v)
		}
		return c
	}
	// offsets in valid: header 24; key length at 24, "general.architecture" (20), type at 52, value length at 56, "llama", tensor info at 69
	const keyLen, strLen, tensorInfo = 24, 56, 69
	nameEnd := tensorInfo + 8 + len("blk.0.attn_q.weight")
	return []ggufBad{
		{"bad magic", func() []byte { c := append([]byte(nil), valid...); c[0] = 'X'; return c }, `magic "XGUF"`},
		{"version 1", func() []byte { return patch(valid, 4, 1, 4) }, "version 1"},
		{"big-endian", func() []byte { return patch(valid, 4, 3<<24, 4) }, "big-endian"},
		{"version 4", func() []byte { return patch(valid, 4, 4, 4) }, "version 4: unknown"},
		{"empty", func() []byte { return nil }, "magic at byte 0: file ends early"},
		{"truncated header", func() []byte { return valid[:12] }, "tensor_count at byte 8: file ends early"},
		{"truncated key", func() []byte { return valid[:40] }, "metadata key 0 length at byte 24 is 20, more than the 8 bytes left"},
		{"truncated value", func() []byte { return valid[:66] }, `metadata "general.architecture" length at byte 56 is 5, more than the 2 bytes left`},
		{"truncated tensor info", func() []byte { return valid[:nameEnd+10] }, `tensor "blk.0.attn_q.weight" ne[0] at byte 100: file ends early`},
		{"truncated data", func() []byte { return valid[:len(valid)-1] }, `tensor "blk.0.attn_q.weight": bytes [0, 0+64) of the data section run past its end (63 bytes)`},
		{"tensor_count beyond the file", func() []byte { return patch(valid, 8, 1<<40, 8) }, "tensor_count at byte 8 is 1099511627776, more than"},
		{"kv_count beyond the file", func() []byte { return patch(valid, 16, 1<<50, 8) }, "metadata_kv_count at byte 16 is"},
		{"key length beyond the file", func() []byte { return patch(valid, keyLen, 1<<62, 8) }, "metadata key 0 length at byte 24 is 4611686018427387904, more than"},
		{"string length beyond the file", func() []byte { return patch(valid, strLen, math.MaxUint64, 8) }, `metadata "general.architecture" length at byte 56 is 18446744073709551615`},
		{"array count beyond the file", func() []byte {
			return encodeGGUF(3, []GGUFKV{{"tokenizer.ggml.tokens", GGUFArrayT, GGUFArray{GGUFString, []string{"a"}}}}, nil, 32)[:69]
		}, `metadata "tokenizer.ggml.tokens" element count at byte 61 is 1, more than the 0 bytes left`},
		{"array count × element size beyond the file", func() []byte {
			b := encodeGGUF(3, []GGUFKV{{"tokenizer.ggml.scores", GGUFArrayT, GGUFArray{GGUFFloat32, []float32{1, 2}}}}, nil, 32)
			return patch(b, 24+8+21+4+4, 1<<61, 8)
		}, `metadata "tokenizer.ggml.scores" element count at byte 61 is 2305843009213693952, more than`},
		{"unknown value type", func() []byte { return patch(valid, 52, 13, 4) }, `metadata "general.architecture" value type at byte 52: unknown value type 13`},
		{"unknown array element type", func() []byte {
			b := encodeGGUF(3, []GGUFKV{{"x", GGUFArrayT, GGUFArray{GGUFUint8, []uint8{1}}}}, nil, 32)
			return patch(b, 24+8+1+4, 99, 4)
		}, `metadata "x" element type at byte 37: unknown value type 99`},
		{"bool not 0 or 1", func() []byte {
			b := encodeGGUF(3, []GGUFKV{{"b", GGUFBool, true}}, nil, 32)
			b[24+8+1+4] = 2
			return b
		}, `metadata "b" at byte 37: bool value 2`},
		{"arrays nested too deep", func() []byte {
			a := GGUFArray{GGUFUint8, []uint8{1}}
			for i := 0; i < ggufMaxArrayDepth; i++ {
				a = GGUFArray{GGUFArrayT, []GGUFArray{a}}
			}
			return encodeGGUF(3, []GGUFKV{{"deep", GGUFArrayT, a}}, nil, 32)
		}, `metadata "deep"[0][0][0][0][0][0][0][0] at byte 136: arrays nested deeper than 8`},
		{"duplicate key", func() []byte { return encodeGGUF(3, append(arch, arch...), nil, 32) }, `metadata key "general.architecture" appears twice`},
		{"alignment not a power of two", func() []byte {
			return encodeGGUF(3, []GGUFKV{{"general.alignment", GGUFUint32, uint32(48)}}, nil, 48)
		}, `"general.alignment" = 48: want a power of two`},
		{"alignment of the wrong type", func() []byte {
			return encodeGGUF(3, []GGUFKV{{"general.alignment", GGUFUint64, uint64(32)}}, nil, 32)
		}, `"general.alignment" is a uint64, want uint32`},
		{"unknown tensor type", func() []byte { return encodeGGUF(3, arch, one(99, []int64{8}, 32, -1), 32) }, `tensor "blk.0.attn_q.weight": unknown or unsupported ggml type type 99`},
		{"unsupported tensor type", func() []byte { return encodeGGUF(3, arch, one(23, []int64{256}, 136, -1), 32) }, `tensor "blk.0.attn_q.weight": unknown or unsupported ggml type iq4_xs`},
		{"too many dims", func() []byte { return encodeGGUF(3, arch, one(GGMLF32, []int64{1, 1, 1, 1, 1}, 4, -1), 32) }, `tensor "blk.0.attn_q.weight": n_dims 5 (at most 4)`},
		{"negative dim", func() []byte { return encodeGGUF(3, arch, one(GGMLF32, []int64{-1}, 4, -1), 32) }, `ne[0] = 18446744073709551615 is negative`},
		{"dimension product overflows", func() []byte {
			return encodeGGUF(3, arch, one(GGMLF32, []int64{1 << 32, 1 << 31, 2}, 4, -1), 32)
		}, `tensor "blk.0.attn_q.weight": element count (product of ne [4294967296 2147483648 2]) overflows int64 at ne[1]`},
		{"byte count overflows", func() []byte { return encodeGGUF(3, arch, one(GGMLF32, []int64{1 << 62}, 4, -1), 32) }, `byte count of ne [4611686018427387904] × f32 overflows`},
		{"row not whole blocks", func() []byte { return encodeGGUF(3, arch, one(GGMLQ4_K, []int64{128, 2}, 144, -1), 32) }, `ne[0] = 128 is not a multiple of q4_K's block size 256`},
		{"a scalar of a block type", func() []byte { return encodeGGUF(3, arch, one(GGMLQ8_0, nil, 0, -1), 32) }, `ne[0] = 1 is not a multiple of q8_0's block size 32`},
		{"offset past the end", func() []byte { return encodeGGUF(3, arch, one(GGMLF32, []int64{8}, 32, 1<<40), 32) }, `tensor "blk.0.attn_q.weight": bytes [1099511627776, 1099511627776+32) of the data section run past its end`},
		{"misaligned offset", func() []byte { return encodeGGUF(3, arch, one(GGMLF32, []int64{8}, 32, 4), 32) }, `tensor "blk.0.attn_q.weight": offset 4 is not a multiple of the alignment 32`},
		{"overlapping tensors", func() []byte {
			ts := []ggufTestTensor{
				{name: "a", typ: GGMLF32, dims: []int64{16}, data: make([]byte, 64), offset: 0},
				{name: "b", typ: GGMLF32, dims: []int64{16}, data: make([]byte, 64), offset: 32},
			}
			return encodeGGUF(3, arch, ts, 32)
		}, `tensors "a" and "b" overlap`},
		{"duplicate tensor", func() []byte {
			ts := one(GGMLF32, []int64{8}, 32, -1)
			return encodeGGUF(3, arch, append(ts, ts[0]), 32)
		}, `tensor "blk.0.attn_q.weight" appears twice`},
	}
}

// TestGGUFBadInput: each malformed file is refused naming the file and the
// field (and tensor) at fault.
func TestGGUFBadInput(t *testing.T) {
	for _, tc := range ggufBadCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := writeTemp(t, "bad.gguf", tc.file())
			g, err := OpenGGUF(p)
			if err == nil {
				g.Close()
				t.Fatalf("accepted; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q\nwant it to name the file and contain %q", err, tc.want)
			}
		})
	}
}

// TestGGUFRefusesBeforeAllocating: lengths and counts near 2^64 are refused
// without allocating anything near them (the whole open allocates under
// 1 MiB).
func TestGGUFRefusesBeforeAllocating(t *testing.T) {
	for _, tc := range ggufBadCases() {
		b := tc.file()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := parseGGUF("bad.gguf", bytes.NewReader(b), int64(len(b)))
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("%s: accepted", tc.name)
		}
		if d := after.TotalAlloc - before.TotalAlloc; d > 1<<20 {
			t.Errorf("%s: allocated %d bytes before refusing", tc.name, d)
		}
	}
}

// TestDequantizeRowChecksLengths: a destination that is not whole blocks,
// or bytes that do not match it, are refused naming the type and sizes.
func TestDequantizeRowChecksLengths(t *testing.T) {
	for _, tc := range []struct {
		ty       GGMLType
		dst, src int
		want     string
	}{
		{GGMLQ4_K, 256, 143, "q4_K: 256 values need 144 bytes (256-element blocks of 144 bytes), got 143 bytes"},
		{GGMLQ8_0, 33, 34, "q8_0: 33 values need 34 bytes"},
		{GGMLType(23), 256, 136, "ggml type iq4_xs is not supported"},
	} {
		err := DequantizeRow(tc.ty, make([]float32, tc.dst), make([]byte, tc.src))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %d/%d: %v, want %q", tc.ty, tc.dst, tc.src, err, tc.want)
		}
	}
	if n := testing.AllocsPerRun(10, func() {
		DequantizeRow(GGMLQ6_K, make([]float32, 0, 512)[:512], make([]byte, 420))
	}); n > 2 {
		t.Errorf("DequantizeRow allocates %v times", n)
	}
}

// TestDequantizeKnownValues: hand-made blocks whose values follow from the
// layouts in the doc comments (independent of ggml).
func TestDequantizeKnownValues(t *testing.T) {
	le := binary.LittleEndian
	out := make([]float32, 32)
	// Q8_0: d = 0.5, q = j − 16 → y = (j − 16)/2
	b := make([]byte, 34)
	le.PutUint16(b, Float32ToF16(0.5))
	for j := 0; j < 32; j++ {
		b[2+j] = byte(int8(j - 16))
	}
	DequantizeRow(GGMLQ8_0, out, b)
	for j, v := range out {
		if v != float32(j-16)/2 {
			t.Fatalf("q8_0[%d] = %g, want %g", j, v, float32(j-16)/2)
		}
	}
	// Q4_0: d = 2, qs[j] = (j&15) | 15−(j&15) << 4 → y[j] = 2(j − 8), y[j+16] = 2(7 − j)
	b = make([]byte, 18)
	le.PutUint16(b, Float32ToF16(2))
	for j := 0; j < 16; j++ {
		b[2+j] = byte(j | (15-j)<<4)
	}
	DequantizeRow(GGMLQ4_0, out, b)
	for j := 0; j < 16; j++ {
		if out[j] != float32(2*(j-8)) || out[j+16] != float32(2*(7-j)) {
			t.Fatalf("q4_0[%d], [%d] = %g, %g", j, j+16, out[j], out[j+16])
		}
	}
	// MXFP4: e = 128 → scale 2^(128−128) = 1 for the doubled table: y = kvalues[q]
	b = make([]byte, 17)
	b[0] = 128
	for j := 0; j < 16; j++ {
		b[1+j] = byte(j | j<<4)
	}
	DequantizeRow(GGMLMXFP4, out, b)
	for j := 0; j < 16; j++ {
		if out[j] != float32(mxfp4Values[j]) || out[j+16] != float32(mxfp4Values[j]) {
			t.Fatalf("mxfp4[%d] = %g, want %d", j, out[j], mxfp4Values[j])
		}
	}
}

// TestSummarizeGGUF: the llama Q4_K_M fixture's types and bits per weight
// are those llama.cpp's quantize log reports (4.92 BPW; 25 q4_K, 5 q6_K,
// 9 f32 tensors), and its text names every tensor's type.
func TestSummarizeGGUF(t *testing.T) {
	p := filepath.Join(goldenDir(t, "gguf", "llama_q4_k_m"), "model.gguf")
	s, err := SummarizeGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.Architecture != "llama" || s.FileType != "MOSTLY_Q4_K_M" || len(s.Tensors) != 39 || s.Parameters != 3672320 {
		t.Errorf("summary %s %s %d tensors %d parameters", s.Architecture, s.FileType, len(s.Tensors), s.Parameters)
	}
	if fmt.Sprintf("%.2f", s.BitsPerWeight) != "4.92" || math.Abs(s.BytesPerParameter-2281216.0/3672320) > 1e-12 {
		t.Errorf("%.4f bits per weight (llama.cpp: 4.92), %.4f bytes per parameter", s.BitsPerWeight, s.BytesPerParameter)
	}
	got := fmt.Sprint(s.Types)
	if want := "[{q4_K 25 2949120 1658880 4.5} {q6_K 5 720896 591360 6.5625} {f32 9 2304 9216 32}]"; got != want {
		t.Errorf("types %s, want %s", got, want)
	}
	var b strings.Builder
	if err := WriteGGUFSummary(&b, s, false); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"file type:     MOSTLY_Q4_K_M", "0.621 bytes per parameter (tensor data 4.92 bits per weight)",
		"output.weight                            q6_K   [1024 256]       215040 bytes"} {
		if !strings.Contains(b.String(), line) {
			t.Errorf("text lacks %q:\n%s", line, b.String())
		}
	}
}

// TestFindGGUF: a GGUF file, or a folder without config.json holding one
// .gguf file, is found; a folder with two is an error naming both.
func TestFindGGUF(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one")
	os.Mkdir(one, 0o755)
	b := encodeGGUF(3, everyValueKV()[:1], nil, 32)
	os.WriteFile(filepath.Join(one, "m-Q4_K_M.gguf"), b, 0o644)
	if f, ok, err := FindGGUF(one); !ok || err != nil || filepath.Base(f) != "m-Q4_K_M.gguf" {
		t.Errorf("folder of one: %q %v %v", f, ok, err)
	}
	if f, ok, err := FindGGUF(filepath.Join(one, "m-Q4_K_M.gguf")); !ok || err != nil || filepath.Base(f) != "m-Q4_K_M.gguf" {
		t.Errorf("file: %q %v %v", f, ok, err)
	}
	os.WriteFile(filepath.Join(one, "m-Q8_0.gguf"), b, 0o644)
	if _, ok, err := FindGGUF(one); ok || err == nil || !strings.Contains(err.Error(), "holds 2 GGUF files") || !strings.Contains(err.Error(), "m-Q8_0.gguf") {
		t.Errorf("folder of two: %v %v", ok, err)
	}
	os.WriteFile(filepath.Join(one, "config.json"), []byte("{}"), 0o644)
	if _, ok, err := FindGGUF(one); ok || err != nil {
		t.Errorf("a folder with config.json is a Hugging Face checkpoint: %v %v", ok, err)
	}
	st := filepath.Join(dir, "model.safetensors")
	os.WriteFile(st, []byte("\x08\x00\x00\x00\x00\x00\x00\x00{}      "), 0o644)
	if _, ok, err := FindGGUF(st); ok || err != nil {
		t.Errorf("a safetensors file: %v %v", ok, err)
	}
}

// TestWriteGGUF: WriteGGUF's file reads back with every metadata value and
// tensor as given, byte for byte as encodeGGUF (the tests' independent
// encoder) lays it out; a value of the wrong Go type and a tensor of the
// wrong byte count are refused naming them.
func TestWriteGGUF(t *testing.T) {
	kv := everyValueKV()
	ts := smallTensors(GGMLF32, GGMLQ4_K, GGMLMXFP4, GGMLQ8_0)
	var wts []GGUFWriteTensor
	for _, x := range ts {
		wts = append(wts, GGUFWriteTensor{Name: x.name, Type: x.typ, Dims: x.dims, Data: x.data})
	}
	p := filepath.Join(t.TempDir(), "w.gguf")
	if err := WriteGGUF(p, kv, wts); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if want := encodeGGUF(3, kv, ts, 32); !bytes.Equal(got, want) {
		t.Fatalf("WriteGGUF wrote %d bytes, encodeGGUF %d, differing", len(got), len(want))
	}
	g, err := OpenGGUF(p)
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	if !reflect.DeepEqual(g.KV, kv) {
		t.Errorf("metadata read back differs")
	}
	err = WriteGGUF(p, []GGUFKV{{"general.alignment", GGUFUint32, 32}}, nil)
	if err == nil || !strings.Contains(err.Error(), "general.alignment 32: want a uint32") {
		t.Errorf("int alignment: %v", err)
	}
	err = WriteGGUF(p, []GGUFKV{{"a", GGUFArrayT, GGUFArray{GGUFInt32, []uint32{1}}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `metadata "a": [0]: value uint32 is not a int32`) {
		t.Errorf("wrong array type: %v", err)
	}
	err = WriteGGUF(p, nil, []GGUFWriteTensor{{Name: "w", Type: GGMLQ8_0, Dims: []int64{32, 2}, Data: make([]byte, 34)}})
	if err == nil || !strings.Contains(err.Error(), `tensor "w": q8_0 [32 2] takes 68 bytes, got 34`) {
		t.Errorf("wrong size: %v", err)
	}
}

// BenchmarkDequantizeRow widens 1 Mi values of each type (a 4096 × 256
// slice of a weight): ns per value and the input bytes per second.
func BenchmarkDequantizeRow(b *testing.B) {
	for _, ty := range []GGMLType{GGMLF16, GGMLBF16, GGMLQ8_0, GGMLQ4_0, GGMLQ4_1, GGMLQ5_0, GGMLQ5_1,
		GGMLQ2_K, GGMLQ3_K, GGMLQ4_K, GGMLQ5_K, GGMLQ6_K, GGMLMXFP4} {
		b.Run(ty.String(), func(b *testing.B) {
			n := 1 << 20
			src := make([]byte, n/ty.BlockSize()*ty.TypeSize())
			for i := range src {
				src[i] = byte(i * 7)
			}
			dst := make([]float32, n)
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				DequantizeRow(ty, dst, src)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/value")
		})
	}
}
