package checkpoint

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/filterlens/probe/internal/atomicfile"
)

// GGUFWriteTensor is one tensor for WriteGGUF: Dims in ggml order (Dims[0]
// varies fastest: a PyTorch [out, in] matrix has Dims [in, out]) and Data
// its stored bytes in Type's layout (little-endian float32 for F32).
type GGUFWriteTensor struct {
	Name string
	Type GGMLType
	Dims []int64
	Data []byte
}

// WriteGGUF writes a GGUF v3 file: the metadata in order, the tensor infos,
// and the tensors each at the next multiple of the alignment
// (general.alignment when kv holds it, else 32), as llama.cpp's gguf
// writer lays them out. Every value must be of the Go type its Type says
// (GGUFKV); every tensor's bytes must be what its type and dims take. The
// write is atomic (a temporary file renamed over path).
func WriteGGUF(path string, kv []GGUFKV, tensors []GGUFWriteTensor) error {
	align := int64(32)
	for _, e := range kv {
		if e.Key == "general.alignment" {
			a, ok := e.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("gguf: %s: general.alignment %v: want a uint32 power of two", path, e.Value)
			}
			align = int64(a)
		}
	}
	for _, t := range tensors {
		n, err := tensorBytes(t.Type, t.Dims)
		if err != nil {
			return fmt.Errorf("gguf: %s: tensor %q: %w", path, t.Name, err)
		}
		if n != int64(len(t.Data)) {
			return fmt.Errorf("gguf: %s: tensor %q: %v %v takes %d bytes, got %d", path, t.Name, t.Type, t.Dims, n, len(t.Data))
		}
	}
	err := atomicfile.Write(path, func(out io.Writer) error {
		w := &ggufWriter{w: out}
		w.raw([]byte(GGUFMagic))
		w.u32(3)
		w.u64(uint64(len(tensors)))
		w.u64(uint64(len(kv)))
		for _, e := range kv {
			w.str(e.Key)
			w.u32(uint32(e.Type))
			if err := w.value(e.Type, e.Value); err != nil {
				return fmt.Errorf("metadata %q: %w", e.Key, err)
			}
		}
		off := int64(0)
		for _, t := range tensors {
			w.str(t.Name)
			w.u32(uint32(len(t.Dims)))
			for _, d := range t.Dims {
				w.u64(uint64(d))
			}
			w.u32(uint32(t.Type))
			w.u64(uint64(off))
			off = alignUp(off+int64(len(t.Data)), align)
		}
		w.pad(align)
		for _, t := range tensors {
			w.raw(t.Data)
			w.pad(align)
		}
		return w.err
	})
	if err != nil {
		return fmt.Errorf("gguf: %w", err)
	}
	return nil
}

// F32Bytes returns float32 values as GGUF stores them (little-endian), for
// a GGUFWriteTensor of type F32.
func F32Bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// BF16Bytes returns bfloat16 bit patterns as GGUF stores them
// (little-endian), for a GGUFWriteTensor of type BF16: on a little-endian
// machine a view of x's own memory, not a copy (a tensor viewed from a
// mapped checkpoint is written without reading it onto the heap), else a
// copy with the bytes swapped.
func BF16Bytes(x BFloat16) []byte {
	if len(x) == 0 {
		return nil
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 2*len(x))
	}
	b := make([]byte, 2*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return b
}

// ggufWriter writes little-endian GGUF fields, counting the bytes.
type ggufWriter struct {
	w   io.Writer
	n   int64
	err error // the first write error
}

func (w *ggufWriter) raw(b []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(b)
	}
	w.n += int64(len(b))
}

func (w *ggufWriter) u32(v uint32) { w.raw(binary.LittleEndian.AppendUint32(nil, v)) }

func (w *ggufWriter) u64(v uint64) { w.raw(binary.LittleEndian.AppendUint64(nil, v)) }

func (w *ggufWriter) str(s string) { w.u64(uint64(len(s))); w.raw([]byte(s)) }

func (w *ggufWriter) pad(align int64) {
	for w.n%align != 0 {
		w.raw([]byte{0})
	}
}

// value writes v as type t; v must be the Go type GGUFKV documents.
func (w *ggufWriter) value(t GGUFValueType, v any) error {
	le := binary.LittleEndian
	ok := true
	switch t {
	case GGUFUint8:
		var x uint8
		x, ok = v.(uint8)
		w.raw([]byte{x})
	case GGUFInt8:
		var x int8
		x, ok = v.(int8)
		w.raw([]byte{byte(x)})
	case GGUFUint16:
		var x uint16
		x, ok = v.(uint16)
		w.raw(le.AppendUint16(nil, x))
	case GGUFInt16:
		var x int16
		x, ok = v.(int16)
		w.raw(le.AppendUint16(nil, uint16(x)))
	case GGUFUint32:
		var x uint32
		x, ok = v.(uint32)
		w.u32(x)
	case GGUFInt32:
		var x int32
		x, ok = v.(int32)
		w.u32(uint32(x))
	case GGUFFloat32:
		var x float32
		x, ok = v.(float32)
		w.u32(math.Float32bits(x))
	case GGUFBool:
		var x bool
		x, ok = v.(bool)
		if x {
			w.raw([]byte{1})
		} else {
			w.raw([]byte{0})
		}
	case GGUFString:
		var x string
		x, ok = v.(string)
		w.str(x)
	case GGUFUint64:
		var x uint64
		x, ok = v.(uint64)
		w.u64(x)
	case GGUFInt64:
		var x int64
		x, ok = v.(int64)
		w.u64(uint64(x))
	case GGUFFloat64:
		var x float64
		x, ok = v.(float64)
		w.u64(math.Float64bits(x))
	case GGUFArrayT:
		a, isArr := v.(GGUFArray)
		if !isArr {
			return fmt.Errorf("value %T is not a GGUFArray", v)
		}
		return w.array(a)
	default:
		return fmt.Errorf("unknown value type %d", uint32(t))
	}
	if !ok {
		return fmt.Errorf("value %T is not a %v", v, t)
	}
	return nil
}

// array writes an element type, a count and the elements.
func (w *ggufWriter) array(a GGUFArray) error {
	w.u32(uint32(a.Elem))
	w.u64(uint64(a.Len()))
	each := func(n int, at func(i int) any) error {
		for i := 0; i < n; i++ {
			if err := w.value(a.Elem, at(i)); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	}
	switch x := a.Values.(type) {
	case []uint8:
		return each(len(x), func(i int) any { return x[i] })
	case []int8:
		return each(len(x), func(i int) any { return x[i] })
	case []uint16:
		return each(len(x), func(i int) any { return x[i] })
	case []int16:
		return each(len(x), func(i int) any { return x[i] })
	case []uint32:
		return each(len(x), func(i int) any { return x[i] })
	case []int32:
		return each(len(x), func(i int) any { return x[i] })
	case []float32:
		return each(len(x), func(i int) any { return x[i] })
	case []bool:
		return each(len(x), func(i int) any { return x[i] })
	case []string:
		return each(len(x), func(i int) any { return x[i] })
	case []uint64:
		return each(len(x), func(i int) any { return x[i] })
	case []int64:
		return each(len(x), func(i int) any { return x[i] })
	case []float64:
		return each(len(x), func(i int) any { return x[i] })
	case []GGUFArray:
		return each(len(x), func(i int) any { return x[i] })
	}
	return fmt.Errorf("array values %T are not a typed slice", a.Values)
}
