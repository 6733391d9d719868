package checkpoint

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzGGUF parses arbitrary GGUF headers, metadata and tensor infos. It must
// never panic or allocate beyond the input's size; what it accepts must be
// self-consistent (every tensor aligned, inside the data section, sized as
// its type and dims say, overlapping none), dequantize, and its metadata
// must read back equal when written again. Seeds: files of every value and
// tensor type written here, and testdata/fuzz/FuzzGGUF (the header of a
// llama.cpp-written fixture).
func FuzzGGUF(f *testing.F) {
	f.Add(encodeGGUF(3, everyValueKV(), smallTensors(GGMLF32, GGMLF16, GGMLBF16, GGMLQ8_0, GGMLQ4_0, GGMLQ4_1), 32))
	f.Add(encodeGGUF(2, everyValueKV()[:3], smallTensors(GGMLQ5_0, GGMLQ5_1, GGMLQ2_K, GGMLQ3_K), 32))
	f.Add(encodeGGUF(3, []GGUFKV{{"general.alignment", GGUFUint32, uint32(64)}}, smallTensors(GGMLQ4_K, GGMLQ5_K, GGMLQ6_K, GGMLQ8_K, GGMLMXFP4), 64))
	for _, tc := range ggufBadCases() {
		if b := tc.file(); len(b) < 4096 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := parseGGUF("fuzz.gguf", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if g.DataOffset%g.Alignment != 0 || g.DataOffset > int64(len(data)) {
			t.Fatalf("data section at %d (alignment %d, %d bytes)", g.DataOffset, g.Alignment, len(data))
		}
		for i, ti := range g.Tensors {
			if n, err := tensorBytes(ti.Type, ti.Dims); err != nil || n != ti.Size {
				t.Fatalf("%s: size %d, type and dims say %d (%v)", ti.Name, ti.Size, n, err)
			}
			if ti.Offset < g.DataOffset || (ti.Offset-g.DataOffset)%g.Alignment != 0 || ti.Offset+ti.Size > int64(len(data)) {
				t.Fatalf("%s: bytes [%d, +%d) outside the data section [%d, %d) or misaligned", ti.Name, ti.Offset, ti.Size, g.DataOffset, len(data))
			}
			for _, o := range g.Tensors[:i] {
				if ti.Size > 0 && o.Size > 0 && ti.Offset < o.Offset+o.Size && o.Offset < ti.Offset+ti.Size {
					t.Fatalf("%s overlaps %s", ti.Name, o.Name)
				}
			}
			v, err := g.Dequantize(ti.Name)
			if err != nil || int64(len(v)) != ti.Numel() {
				t.Fatalf("%s: dequantized %d values of %d: %v", ti.Name, len(v), ti.Numel(), err)
			}
		}
		again := encodeGGUF(g.Version, g.KV, nil, g.Alignment)
		h, err := parseGGUF("again.gguf", bytes.NewReader(again), int64(len(again)))
		if err != nil {
			t.Fatalf("metadata written again does not parse: %v", err)
		}
		if !reflect.DeepEqual(h.KV, g.KV) && !hasNaN(g.KV) {
			t.Fatalf("metadata written again reads %v, was %v", h.KV, g.KV)
		}
	})
}

// hasNaN reports whether a float metadata value is NaN (DeepEqual fails on
// those however they round-trip).
func hasNaN(kv []GGUFKV) bool {
	var nan func(v any) bool
	nan = func(v any) bool {
		switch x := v.(type) {
		case float32:
			return x != x
		case float64:
			return x != x
		case []float32:
			for _, y := range x {
				if y != y {
					return true
				}
			}
		case []float64:
			for _, y := range x {
				if y != y {
					return true
				}
			}
		case GGUFArray:
			return nan(x.Values)
		case []GGUFArray:
			for _, y := range x {
				if nan(y) {
					return true
				}
			}
		}
		return false
	}
	for _, e := range kv {
		if nan(e.Value) {
			return true
		}
	}
	return false
}
