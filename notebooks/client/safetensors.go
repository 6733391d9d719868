package client

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"sort"
	"strings"
)

// Tensor is one tensor of a safetensors file, widened to float64.
type Tensor struct {
	Name  string
	DType string // as stored: F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL
	Shape []int
	Data  []float64 // row-major
}

// Len returns the number of elements.
func (t *Tensor) Len() int { return len(t.Data) }

// At returns the element at the given indices (one per dimension).
func (t *Tensor) At(idx ...int) float64 {
	if len(idx) != len(t.Shape) {
		panic(fmt.Sprintf("client: %s has %d dimensions, got %d indices", t.Name, len(t.Shape), len(idx)))
	}
	off := 0
	for d, i := range idx {
		if i < 0 || i >= t.Shape[d] {
			panic(fmt.Sprintf("client: %s index %d = %d out of range [0, %d)", t.Name, d, i, t.Shape[d]))
		}
		off = off*t.Shape[d] + i
	}
	return t.Data[off]
}

// Row returns the last-axis vector at the given leading indices (one fewer
// than the dimensions), sharing Data.
func (t *Tensor) Row(idx ...int) []float64 {
	if len(idx) != len(t.Shape)-1 {
		panic(fmt.Sprintf("client: %s has %d dimensions, Row needs %d indices, got %d",
			t.Name, len(t.Shape), len(t.Shape)-1, len(idx)))
	}
	n := t.Shape[len(t.Shape)-1]
	off := 0
	for d, i := range idx {
		if i < 0 || i >= t.Shape[d] {
			panic(fmt.Sprintf("client: %s index %d = %d out of range [0, %d)", t.Name, d, i, t.Shape[d]))
		}
		off = off*t.Shape[d] + i
	}
	return t.Data[off*n : (off+1)*n]
}

// Tensors are the tensors of one safetensors file.
type Tensors struct {
	Path     string
	Metadata map[string]string
	byName   map[string]*Tensor
}

// Names returns the tensor names, sorted.
func (ts *Tensors) Names() []string {
	names := make([]string, 0, len(ts.byName))
	for n := range ts.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the tensor called name, or nil.
func (ts *Tensors) Get(name string) *Tensor { return ts.byName[name] }

// HTML lists the tensors with dtype and shape.
func (ts *Tensors) HTML() string {
	t := &Table{Header: []string{"tensor", "dtype", "shape"}}
	for _, n := range ts.Names() {
		x := ts.byName[n]
		t.Rows = append(t.Rows, []string{n, x.DType, fmt.Sprint(x.Shape)})
	}
	return fmt.Sprintf("<div>%s</div>%s", html.EscapeString(ts.Path), t.HTML())
}

// dtypeSize is the element size of each supported dtype.
var dtypeSize = map[string]int{"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}

// maxHeader bounds the JSON header a file may declare (the format's own
// limit is 100 MB).
const maxHeader = 100 << 20

// ReadSafetensors reads a safetensors file: an 8-byte little-endian header
// length, a JSON header of {name: {dtype, shape, data_offsets}} plus an
// optional __metadata__ map, then the raw little-endian data. Every offset
// and size is checked against the file.
func ReadSafetensors(path string) (*Tensors, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw) < 8 {
		return nil, fmt.Errorf("%s: %d bytes, too short for a safetensors file", path, len(raw))
	}
	n := binary.LittleEndian.Uint64(raw[:8])
	if n > maxHeader || n > uint64(len(raw)-8) {
		return nil, fmt.Errorf("%s: header length %d does not fit the file (%d bytes)", path, n, len(raw))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		return nil, fmt.Errorf("%s: header: %v", path, err)
	}
	data := raw[8+n:]
	ts := &Tensors{Path: path, byName: map[string]*Tensor{}}
	for name, msg := range header {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &ts.Metadata); err != nil {
				return nil, fmt.Errorf("%s: __metadata__: %v", path, err)
			}
			continue
		}
		var info struct {
			DType   string   `json:"dtype"`
			Shape   []int    `json:"shape"`
			Offsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &info); err != nil {
			return nil, fmt.Errorf("%s: tensor %s: %v", path, name, err)
		}
		size, ok := dtypeSize[info.DType]
		if !ok {
			return nil, fmt.Errorf("%s: tensor %s: unsupported dtype %q", path, name, info.DType)
		}
		count := 1
		for _, d := range info.Shape {
			if d < 0 || (d > 0 && count > math.MaxInt32/d) {
				return nil, fmt.Errorf("%s: tensor %s: bad shape %v", path, name, info.Shape)
			}
			count *= d
		}
		if len(info.Offsets) != 2 || info.Offsets[0] > info.Offsets[1] || info.Offsets[1] > uint64(len(data)) {
			return nil, fmt.Errorf("%s: tensor %s: data_offsets %v outside the %d data bytes", path, name, info.Offsets, len(data))
		}
		buf := data[info.Offsets[0]:info.Offsets[1]]
		if len(buf) != count*size {
			return nil, fmt.Errorf("%s: tensor %s: %d bytes for shape %v of %s (want %d)", path, name, len(buf), info.Shape, info.DType, count*size)
		}
		t := &Tensor{Name: name, DType: info.DType, Shape: info.Shape, Data: make([]float64, count)}
		decode(t.Data, buf, info.DType)
		ts.byName[name] = t
	}
	return ts, nil
}

// decode widens little-endian elements of dtype from buf into dst.
func decode(dst []float64, buf []byte, dtype string) {
	le := binary.LittleEndian
	for i := range dst {
		switch dtype {
		case "F64":
			dst[i] = math.Float64frombits(le.Uint64(buf[8*i:]))
		case "F32":
			dst[i] = float64(math.Float32frombits(le.Uint32(buf[4*i:])))
		case "F16":
			dst[i] = float64(halfToFloat32(le.Uint16(buf[2*i:])))
		case "BF16":
			dst[i] = float64(math.Float32frombits(uint32(le.Uint16(buf[2*i:])) << 16))
		case "I64":
			dst[i] = float64(int64(le.Uint64(buf[8*i:])))
		case "I32":
			dst[i] = float64(int32(le.Uint32(buf[4*i:])))
		case "I16":
			dst[i] = float64(int16(le.Uint16(buf[2*i:])))
		case "I8":
			dst[i] = float64(int8(buf[i]))
		case "U8", "BOOL":
			dst[i] = float64(buf[i])
		}
	}
}

// halfToFloat32 converts an IEEE 754 binary16 value.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: frac·2^−24
		v := float32(frac) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | frac<<13)
}

// String summarizes the tensor.
func (t *Tensor) String() string {
	dims := make([]string, len(t.Shape))
	for i, d := range t.Shape {
		dims[i] = fmt.Sprint(d)
	}
	return fmt.Sprintf("%s %s[%s]", t.Name, t.DType, strings.Join(dims, ","))
}
