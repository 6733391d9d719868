package checkpoint

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
	"strings"
)

// GGUF is llama.cpp's single-file model format (ggml's gguf.h, versions 2
// and 3; version 1, which stored counts and lengths as uint32, is refused).
// Little-endian throughout:
//
//	magic "GGUF" | version u32 | tensor_count u64 | kv_count u64
//	kv_count × (key string | value_type u32 | value)
//	tensor_count × (name string | n_dims u32 | n_dims × ne u64 | ggml_type u32 | offset u64)
//	padding to the alignment | tensor data
//
// A string is a u64 byte length and the bytes (no terminator); an array is
// an element type u32, a u64 count and the elements (arrays of arrays
// allowed). ne[0] is the fastest-varying dimension (a PyTorch [out, in]
// weight is stored with ne = [in, out]); a tensor's offset is relative to
// the start of the data section and a multiple of the alignment, which is
// the u32 metadata value general.alignment (default 32, a power of two).
//
// OpenGGUF checks every length read from the file against what is left of
// the file before allocating anything proportional to it, and every
// tensor's byte range against the data section; the tensors stay in their
// stored types (quantized blocks included) in the file's memory mapping.

// GGUFValueType is the type tag of a GGUF metadata value.
type GGUFValueType uint32

// The GGUF metadata value types (gguf.h's enum gguf_type).
const (
	GGUFUint8   GGUFValueType = 0
	GGUFInt8    GGUFValueType = 1
	GGUFUint16  GGUFValueType = 2
	GGUFInt16   GGUFValueType = 3
	GGUFUint32  GGUFValueType = 4
	GGUFInt32   GGUFValueType = 5
	GGUFFloat32 GGUFValueType = 6
	GGUFBool    GGUFValueType = 7
	GGUFString  GGUFValueType = 8
	GGUFArrayT  GGUFValueType = 9 // an array (its value is a GGUFArray)
	GGUFUint64  GGUFValueType = 10
	GGUFInt64   GGUFValueType = 11
	GGUFFloat64 GGUFValueType = 12
)

// ggufScalarSize is the stored size of each fixed-size value type (0 for
// string and array, which are variable).
var ggufScalarSize = [...]int64{1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}

var ggufValueNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t GGUFValueType) String() string {
	if int(t) < len(ggufValueNames) {
		return ggufValueNames[t]
	}
	return fmt.Sprintf("type %d", uint32(t))
}

// minSize is the fewest bytes a value of type t occupies in the file: its
// size for a scalar, the length field of a string, the element type and
// count of an array. Used to bound counts before allocating.
func (t GGUFValueType) minSize() int64 {
	switch t {
	case GGUFString:
		return 8
	case GGUFArrayT:
		return 12
	}
	return ggufScalarSize[t]
}

// GGUFArray is a metadata array value. Values holds the elements as a typed
// slice: []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32,
// []bool, []string, []uint64, []int64, []float64, or []GGUFArray for an
// array of arrays.
type GGUFArray struct {
	Elem   GGUFValueType
	Values any
}

// Len returns the number of elements.
func (a GGUFArray) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	case []GGUFArray:
		return len(v)
	}
	return 0
}

// GGUFKV is one metadata entry. Value is uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64 or
// GGUFArray, as Type says.
type GGUFKV struct {
	Key   string
	Type  GGUFValueType
	Value any
}

// GGUFTensor describes one tensor of a GGUF file.
type GGUFTensor struct {
	Name string
	Type GGMLType
	// Dims is ggml's ne: Dims[0] varies fastest. Shape gives the
	// PyTorch order.
	Dims []int64
	// Offset is the tensor's first byte in the file (data section start +
	// the stored offset); Size is its byte count (ggml_nbytes).
	Offset, Size int64
}

// Shape returns the dimensions in PyTorch (row-major, slowest first)
// order: the reverse of Dims.
func (t GGUFTensor) Shape() []int {
	s := make([]int, len(t.Dims))
	for i, d := range t.Dims {
		s[len(s)-1-i] = int(d)
	}
	return s
}

// Numel returns the number of elements.
func (t GGUFTensor) Numel() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// GGUFFile is an opened GGUF file. Tensor data is read from the file's
// memory mapping (or the file, where it cannot be mapped) until Close.
type GGUFFile struct {
	Path    string
	Version uint32
	// KV holds the metadata in file order.
	KV []GGUFKV
	// Tensors holds the tensor infos in file order.
	Tensors []GGUFTensor
	// Alignment is general.alignment, or 32 when absent.
	Alignment int64
	// DataOffset is the start of the tensor data section.
	DataOffset int64

	size   int64
	r      io.ReaderAt
	byKey  map[string]int
	byName map[string]int
}

// GGUFMagic is the first four bytes of every GGUF file.
const GGUFMagic = "GGUF"

// ggufMaxArrayDepth bounds the nesting of arrays of arrays (llama.cpp
// writes none deeper than 2); deeper nesting is refused rather than
// recursed into.
const ggufMaxArrayDepth = 8

// ggufMaxDims is GGML_MAX_DIMS.
const ggufMaxDims = 4

// IsGGUF reports whether the file at path starts with the GGUF magic.
func IsGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var m [4]byte
	_, err = io.ReadFull(f, m[:])
	return err == nil && string(m[:]) == GGUFMagic
}

// OpenGGUF opens a GGUF file, parses and checks its header, metadata and
// tensor infos, and maps it.
func OpenGGUF(path string) (*GGUFFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gguf: %v", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: %v", path, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("gguf: %s: not a regular file", path)
	}
	r := openMapped(f, st.Size())
	g, err := parseGGUF(path, r, st.Size())
	if err != nil {
		r.(io.Closer).Close()
		return nil, err
	}
	return g, nil
}

// Close closes the file. Byte slices that TensorData returned from the
// mapping stay valid (the mapping stays until the process exits).
func (g *GGUFFile) Close() error {
	if c, ok := g.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// ggufReader reads the header sequentially, tracking the offset and
// refusing any read past the end of the file.
type ggufReader struct {
	br   *bufio.Reader
	off  int64
	size int64
	buf  [8]byte
}

// errTruncated wraps every read that runs past the end of the file.
var errTruncated = errors.New("file ends early")

func (r *ggufReader) left() int64 { return r.size - r.off }

func (r *ggufReader) read(n int, what string) ([]byte, error) {
	if int64(n) > r.left() {
		return nil, fmt.Errorf("%s at byte %d: %w (%d bytes needed, %d left)", what, r.off, errTruncated, n, r.left())
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.br, b); err != nil {
		return nil, fmt.Errorf("%s at byte %d: %v", what, r.off, err)
	}
	r.off += int64(n)
	return b, nil
}

func (r *ggufReader) u32(what string) (uint32, error) {
	b, err := r.read(4, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *ggufReader) u64(what string) (uint64, error) {
	b, err := r.read(8, what)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

// count reads a u64 count of items of at least minSize bytes each and
// refuses one that the rest of the file cannot hold.
func (r *ggufReader) count(what string, minSize int64) (int, error) {
	at := r.off
	n, err := r.u64(what)
	if err != nil {
		return 0, err
	}
	if minSize < 1 {
		minSize = 1
	}
	if n > uint64(r.left()/minSize) {
		return 0, fmt.Errorf("%s at byte %d is %d, more than the %d bytes left in the file can hold", what, at, n, r.left())
	}
	return int(n), nil
}

func (r *ggufReader) str(what string) (string, error) {
	n, err := r.count(what+" length", 1)
	if err != nil {
		return "", err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.br, b); err != nil {
		return "", fmt.Errorf("%s at byte %d: %v", what, r.off, err)
	}
	r.off += int64(n)
	return string(b), nil
}

// scalar reads one fixed-size value of type t.
func (r *ggufReader) scalar(t GGUFValueType, what string) (any, error) {
	b, err := r.read(int(ggufScalarSize[t]), what)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	switch t {
	case GGUFUint8:
		return b[0], nil
	case GGUFInt8:
		return int8(b[0]), nil
	case GGUFUint16:
		return le.Uint16(b), nil
	case GGUFInt16:
		return int16(le.Uint16(b)), nil
	case GGUFUint32:
		return le.Uint32(b), nil
	case GGUFInt32:
		return int32(le.Uint32(b)), nil
	case GGUFFloat32:
		return math.Float32frombits(le.Uint32(b)), nil
	case GGUFBool:
		if b[0] > 1 {
			return nil, fmt.Errorf("%s at byte %d: bool value %d (want 0 or 1)", what, r.off-1, b[0])
		}
		return b[0] == 1, nil
	case GGUFUint64:
		return le.Uint64(b), nil
	case GGUFInt64:
		return int64(le.Uint64(b)), nil
	case GGUFFloat64:
		return math.Float64frombits(le.Uint64(b)), nil
	}
	return nil, fmt.Errorf("%s: no scalar type %v", what, t)
}

func (r *ggufReader) valueType(what string) (GGUFValueType, error) {
	at := r.off
	v, err := r.u32(what)
	if err != nil {
		return 0, err
	}
	if int(v) >= len(ggufScalarSize) {
		return 0, fmt.Errorf("%s at byte %d: unknown value type %d (known: 0–12)", what, at, v)
	}
	return GGUFValueType(v), nil
}

// value reads a value of type t; depth counts enclosing arrays.
func (r *ggufReader) value(t GGUFValueType, what string, depth int) (any, error) {
	switch t {
	case GGUFString:
		return r.str(what)
	case GGUFArrayT:
		if depth >= ggufMaxArrayDepth {
			return nil, fmt.Errorf("%s at byte %d: arrays nested deeper than %d", what, r.off, ggufMaxArrayDepth)
		}
		et, err := r.valueType(what + " element type")
		if err != nil {
			return nil, err
		}
		n, err := r.count(what+" element count", et.minSize())
		if err != nil {
			return nil, err
		}
		return r.array(et, n, what, depth+1)
	}
	return r.scalar(t, what)
}

// array reads n elements of type et into a typed slice; n has been
// checked against the bytes left.
func (r *ggufReader) array(et GGUFValueType, n int, what string, depth int) (GGUFArray, error) {
	a := GGUFArray{Elem: et}
	var err error
	elem := func(i int) string { return fmt.Sprintf("%s[%d]", what, i) }
	switch et {
	case GGUFString:
		v := make([]string, n)
		for i := range v {
			if v[i], err = r.str(elem(i)); err != nil {
				return a, err
			}
		}
		a.Values = v
	case GGUFArrayT:
		v := make([]GGUFArray, n)
		for i := range v {
			x, err := r.value(GGUFArrayT, elem(i), depth)
			if err != nil {
				return a, err
			}
			v[i] = x.(GGUFArray)
		}
		a.Values = v
	default:
		a.Values, err = r.scalars(et, n, what)
	}
	return a, err
}

// scalars reads n fixed-size elements of type et into a typed slice.
func (r *ggufReader) scalars(et GGUFValueType, n int, what string) (any, error) {
	size := int(ggufScalarSize[et])
	raw := make([]byte, n*size) // n×size ≤ bytes left, checked by count
	if _, err := io.ReadFull(r.br, raw); err != nil {
		return nil, fmt.Errorf("%s at byte %d: %v", what, r.off, err)
	}
	r.off += int64(len(raw))
	le := binary.LittleEndian
	switch et {
	case GGUFUint8:
		return raw, nil
	case GGUFInt8:
		v := make([]int8, n)
		for i := range v {
			v[i] = int8(raw[i])
		}
		return v, nil
	case GGUFBool:
		v := make([]bool, n)
		for i := range v {
			if raw[i] > 1 {
				return nil, fmt.Errorf("%s[%d]: bool value %d (want 0 or 1)", what, i, raw[i])
			}
			v[i] = raw[i] == 1
		}
		return v, nil
	case GGUFUint16:
		v := make([]uint16, n)
		for i := range v {
			v[i] = le.Uint16(raw[2*i:])
		}
		return v, nil
	case GGUFInt16:
		v := make([]int16, n)
		for i := range v {
			v[i] = int16(le.Uint16(raw[2*i:]))
		}
		return v, nil
	case GGUFUint32:
		v := make([]uint32, n)
		for i := range v {
			v[i] = le.Uint32(raw[4*i:])
		}
		return v, nil
	case GGUFInt32:
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(le.Uint32(raw[4*i:]))
		}
		return v, nil
	case GGUFFloat32:
		v := make([]float32, n)
		for i := range v {
			v[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return v, nil
	case GGUFUint64:
		v := make([]uint64, n)
		for i := range v {
			v[i] = le.Uint64(raw[8*i:])
		}
		return v, nil
	case GGUFInt64:
		v := make([]int64, n)
		for i := range v {
			v[i] = int64(le.Uint64(raw[8*i:]))
		}
		return v, nil
	case GGUFFloat64:
		v := make([]float64, n)
		for i := range v {
			v[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return v, nil
	}
	return nil, fmt.Errorf("%s: no array of %v", what, et)
}

// parseGGUF reads and checks the header, metadata and tensor infos of a
// GGUF file of size bytes.
func parseGGUF(path string, ra io.ReaderAt, size int64) (*GGUFFile, error) {
	g := &GGUFFile{Path: path, size: size, r: ra, Alignment: 32}
	fail := func(err error) (*GGUFFile, error) { return nil, fmt.Errorf("gguf: %s: %w", path, err) }
	r := &ggufReader{br: bufio.NewReaderSize(io.NewSectionReader(ra, 0, size), 1<<16), size: size}
	magic, err := r.read(4, "magic")
	if err != nil {
		return fail(err)
	}
	if string(magic) != GGUFMagic {
		return fail(fmt.Errorf("magic %q: not a GGUF file (want %q)", magic, GGUFMagic))
	}
	if g.Version, err = r.u32("version"); err != nil {
		return fail(err)
	}
	switch {
	case g.Version == 1:
		return fail(errors.New("version 1 (uint32 lengths, 2023) is not supported; convert the file again with a current llama.cpp"))
	case g.Version&0xffff == 0 && g.Version != 0:
		return fail(fmt.Errorf("version %#x: a big-endian GGUF file (only little-endian files are read)", g.Version))
	case g.Version != 2 && g.Version != 3:
		return fail(fmt.Errorf("version %d: unknown (this reader knows 2 and 3)", g.Version))
	}
	// a tensor info is at least 24 bytes (empty name, no dims), a KV at least 13
	nt, err := r.count("tensor_count", 24)
	if err != nil {
		return fail(err)
	}
	nkv, err := r.count("metadata_kv_count", 13)
	if err != nil {
		return fail(err)
	}
	g.KV = make([]GGUFKV, 0, nkv)
	g.byKey = make(map[string]int, nkv)
	for i := 0; i < nkv; i++ {
		key, err := r.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return fail(err)
		}
		if _, dup := g.byKey[key]; dup {
			return fail(fmt.Errorf("metadata key %q appears twice", key))
		}
		what := fmt.Sprintf("metadata %q", key)
		t, err := r.valueType(what + " value type")
		if err != nil {
			return fail(err)
		}
		v, err := r.value(t, what, 0)
		if err != nil {
			return fail(err)
		}
		g.byKey[key] = len(g.KV)
		g.KV = append(g.KV, GGUFKV{Key: key, Type: t, Value: v})
	}
	if kv, ok := g.Meta("general.alignment"); ok {
		a, isU32 := kv.(uint32)
		if !isU32 {
			return fail(fmt.Errorf("metadata \"general.alignment\" is a %v, want uint32", g.KV[g.byKey["general.alignment"]].Type))
		}
		if a == 0 || a&(a-1) != 0 {
			return fail(fmt.Errorf("metadata \"general.alignment\" = %d: want a power of two", a))
		}
		g.Alignment = int64(a)
	}
	g.Tensors = make([]GGUFTensor, nt)
	g.byName = make(map[string]int, nt)
	stored := make([]int64, nt) // offsets relative to the data section
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Name, err = r.str(fmt.Sprintf("tensor %d name", i)); err != nil {
			return fail(err)
		}
		if _, dup := g.byName[t.Name]; dup {
			return fail(fmt.Errorf("tensor %q appears twice", t.Name))
		}
		g.byName[t.Name] = i
		what := fmt.Sprintf("tensor %q", t.Name)
		nd, err := r.u32(what + " n_dims")
		if err != nil {
			return fail(err)
		}
		if nd > ggufMaxDims {
			return fail(fmt.Errorf("%s: n_dims %d (at most %d)", what, nd, ggufMaxDims))
		}
		t.Dims = make([]int64, nd)
		for d := range t.Dims {
			v, err := r.u64(fmt.Sprintf("%s ne[%d]", what, d))
			if err != nil {
				return fail(err)
			}
			if v > math.MaxInt64 {
				return fail(fmt.Errorf("%s: ne[%d] = %d is negative as int64", what, d, v))
			}
			t.Dims[d] = int64(v)
		}
		ty, err := r.u32(what + " type")
		if err != nil {
			return fail(err)
		}
		t.Type = GGMLType(ty)
		if stored[i], err = r.u64Int(what + " offset"); err != nil {
			return fail(err)
		}
		if t.Size, err = tensorBytes(t.Type, t.Dims); err != nil {
			return fail(fmt.Errorf("%s: %w", what, err))
		}
	}
	g.DataOffset = alignUp(r.off, g.Alignment)
	if g.DataOffset > size || g.DataOffset < r.off {
		return fail(fmt.Errorf("data section at byte %d (after the tensor infos, aligned to %d): %w (file is %d bytes)", g.DataOffset, g.Alignment, errTruncated, size))
	}
	dataLen := size - g.DataOffset
	for i := range g.Tensors {
		t := &g.Tensors[i]
		off := stored[i]
		if off%g.Alignment != 0 {
			return fail(fmt.Errorf("tensor %q: offset %d is not a multiple of the alignment %d", t.Name, off, g.Alignment))
		}
		if off > dataLen || t.Size > dataLen-off {
			return fail(fmt.Errorf("tensor %q: bytes [%d, %d+%d) of the data section run past its end (%d bytes): %w", t.Name, off, off, t.Size, dataLen, errTruncated))
		}
		t.Offset = g.DataOffset + off
	}
	order := make([]int, nt)
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return g.Tensors[order[a]].Offset < g.Tensors[order[b]].Offset })
	for k := 1; k < nt; k++ {
		p, q := &g.Tensors[order[k-1]], &g.Tensors[order[k]]
		if p.Size > 0 && q.Size > 0 && q.Offset < p.Offset+p.Size {
			return fail(fmt.Errorf("tensors %q and %q overlap (bytes [%d, %d) and [%d, %d) of the file)", p.Name, q.Name, p.Offset, p.Offset+p.Size, q.Offset, q.Offset+q.Size))
		}
	}
	return g, nil
}

// u64Int reads a u64 that must fit an int64.
func (r *ggufReader) u64Int(what string) (int64, error) {
	v, err := r.u64(what)
	if err != nil {
		return 0, err
	}
	if v > math.MaxInt64 {
		return 0, fmt.Errorf("%s = %d is out of range", what, v)
	}
	return int64(v), nil
}

func alignUp(x, a int64) int64 { return (x + a - 1) / a * a }

// tensorBytes returns ggml_nbytes of a contiguous tensor of type t and
// dims ne: ne[0] a whole number of blocks, the element count and byte
// count within int64.
func tensorBytes(t GGMLType, ne []int64) (int64, error) {
	tr, ok := ggmlTypeTable(t)
	if !ok {
		return 0, fmt.Errorf("unknown or unsupported ggml type %v (supported: %s)", t, supportedGGMLTypes())
	}
	n := uint64(1)
	for d, v := range ne {
		hi, lo := bits.Mul64(n, uint64(v))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("element count (product of ne %v) overflows int64 at ne[%d]", ne, d)
		}
		n = lo
	}
	ne0 := int64(1) // a dimension not stored is 1, as ggml fills ne
	if len(ne) > 0 {
		ne0 = ne[0]
	}
	if ne0%int64(tr.block) != 0 {
		return 0, fmt.Errorf("ne[0] = %d is not a multiple of %v's block size %d", ne0, t, tr.block)
	}
	hi, lo := bits.Mul64(n/uint64(tr.block), uint64(tr.size))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("byte count of ne %v × %v overflows int64", ne, t)
	}
	return int64(lo), nil
}

// Meta returns the metadata value of key.
func (g *GGUFFile) Meta(key string) (any, bool) {
	i, ok := g.byKey[key]
	if !ok {
		return nil, false
	}
	return g.KV[i].Value, true
}

// MetaString returns a string metadata value.
func (g *GGUFFile) MetaString(key string) (string, error) {
	v, ok := g.Meta(key)
	if !ok {
		return "", fmt.Errorf("gguf: %s: no metadata %q", g.Path, key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("gguf: %s: metadata %q is a %v, want a string", g.Path, key, g.KV[g.byKey[key]].Type)
	}
	return s, nil
}

// MetaInt returns an integer metadata value of any integer type, as int64
// (a uint64 above MaxInt64 is refused).
func (g *GGUFFile) MetaInt(key string) (int64, error) {
	v, ok := g.Meta(key)
	if !ok {
		return 0, fmt.Errorf("gguf: %s: no metadata %q", g.Path, key)
	}
	switch x := v.(type) {
	case uint8:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case uint32:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), nil
		}
	}
	return 0, fmt.Errorf("gguf: %s: metadata %q is a %v (%v), want an integer", g.Path, key, g.KV[g.byKey[key]].Type, v)
}

// MetaFloat returns a float32 or float64 metadata value (an integer one is
// converted).
func (g *GGUFFile) MetaFloat(key string) (float64, error) {
	v, ok := g.Meta(key)
	if !ok {
		return 0, fmt.Errorf("gguf: %s: no metadata %q", g.Path, key)
	}
	switch x := v.(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	}
	i, err := g.MetaInt(key)
	if err != nil {
		return 0, fmt.Errorf("gguf: %s: metadata %q is a %v, want a number", g.Path, key, g.KV[g.byKey[key]].Type)
	}
	return float64(i), nil
}

// Tensor returns the named tensor's info.
func (g *GGUFFile) Tensor(name string) (GGUFTensor, bool) {
	i, ok := g.byName[name]
	if !ok {
		return GGUFTensor{}, false
	}
	return g.Tensors[i], true
}

// TensorData returns the named tensor's stored bytes (quantized blocks as
// they are): a view of the file's mapping where there is one (do not write
// to it: it is copy-on-write, private), a copy read from the file
// otherwise.
func (g *GGUFFile) TensorData(name string) ([]byte, error) {
	t, ok := g.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: %s: no tensor %q%s", g.Path, name, closestNames(name, g.names()))
	}
	if t.Size == 0 {
		return []byte{}, nil
	}
	if m, ok := g.r.(*mapping); ok {
		if b := m.view(t.Offset, t.Size, 1); b != nil {
			return b, nil
		}
	}
	b := make([]byte, t.Size)
	if _, err := g.r.ReadAt(b, t.Offset); err != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %v", g.Path, name, err)
	}
	return b, nil
}

// Dequantize returns the named tensor as float32 in its stored (ggml)
// element order, converted by DequantizeRow.
func (g *GGUFFile) Dequantize(name string) ([]float32, error) {
	t, ok := g.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("gguf: %s: no tensor %q%s", g.Path, name, closestNames(name, g.names()))
	}
	raw, err := g.TensorData(name)
	if err != nil {
		return nil, err
	}
	out := make([]float32, t.Numel())
	if err := DequantizeRow(t.Type, out, raw); err != nil {
		return nil, fmt.Errorf("gguf: %s: tensor %q: %w", g.Path, name, err)
	}
	return out, nil
}

func (g *GGUFFile) names() []string {
	n := make([]string, len(g.Tensors))
	for i, t := range g.Tensors {
		n[i] = t.Name
	}
	return n
}

// closestNames suggests up to three known names sharing the longest
// common suffix with name ("" when none shares a dot-separated part).
func closestNames(name string, known []string) string {
	score := func(k string) int {
		a, b := strings.Split(name, "."), strings.Split(k, ".")
		n := 0
		for n < len(a) && n < len(b) && a[len(a)-1-n] == b[len(b)-1-n] {
			n++
		}
		return n
	}
	c := append([]string(nil), known...)
	sort.SliceStable(c, func(i, j int) bool { return score(c[i]) > score(c[j]) })
	var out []string
	for _, k := range c {
		if len(out) == 3 || score(k) == 0 {
			break
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return ""
	}
	return " (closest: " + strings.Join(out, ", ") + ")"
}
