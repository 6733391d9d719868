package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// Tensor is a tensor to write. Data is []float32 (dtype "F32"), []float64
// ("F64"), []int64 ("I64"), []int32 ("I32"), []int16 ("I16"), []int8
// ("I8"), []uint8 ("U8") or []bool ("BOOL"), row-major, with as many elements
// as Shape implies (a nil slice for zero elements).
type Tensor struct {
	Name  string
	Shape []int
	Data  any
}

// dataDType returns the dtype and length of a Tensor.Data value.
func dataDType(data any) (string, int, bool) {
	switch d := data.(type) {
	case []float32:
		return "F32", len(d), true
	case []float64:
		return "F64", len(d), true
	case []int64:
		return "I64", len(d), true
	case []int32:
		return "I32", len(d), true
	case []int16:
		return "I16", len(d), true
	case []int8:
		return "I8", len(d), true
	case []uint8:
		return "U8", len(d), true
	case []bool:
		return "BOOL", len(d), true
	}
	return "", 0, false
}

// WriteSafetensors writes the tensors to path as a safetensors file, sorted
// by name, with metadata (if non-empty) as __metadata__. The header is an
// 8-byte little-endian length, then JSON with {"dtype","shape","data_offsets"}
// per tensor, space-padded to a multiple of 8 bytes; the data follow in the
// same order, little-endian.
//
// The write is atomic: the file is written to a temporary file in the same
// directory, synced and renamed over path; on error nothing is left behind.
func WriteSafetensors(path string, tensors []Tensor, metadata map[string]string) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: %s", path, fmt.Sprintf(format, args...))
	}
	sorted := append([]Tensor(nil), tensors...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	var hdr bytes.Buffer
	hdr.WriteByte('{')
	if len(metadata) > 0 {
		hdr.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeJSONString(&hdr, k)
			hdr.WriteByte(':')
			writeJSONString(&hdr, metadata[k])
		}
		hdr.WriteByte('}')
	}
	var offset int64
	for i, t := range sorted {
		if t.Name == "__metadata__" {
			return fail("tensor name %q is reserved", t.Name)
		}
		if i > 0 && sorted[i-1].Name == t.Name {
			return fail("tensor %q: duplicate name", t.Name)
		}
		dt, n, ok := dataDType(t.Data)
		if !ok {
			return fail("tensor %q: unsupported Data type %T (want []float32, []float64, []int64, []int32, []int16, []int8, []uint8 or []bool)", t.Name, t.Data)
		}
		shape := make([]int64, len(t.Shape))
		for j, d := range t.Shape {
			shape[j] = int64(d)
		}
		numel, nbytes, ok := mulShape(shape, int64(dtypeSize(dt)))
		if !ok {
			return fail("tensor %q: shape %v is negative or overflows", t.Name, t.Shape)
		}
		if numel != int64(n) {
			return fail("tensor %q: shape %v holds %d elements but Data has %d", t.Name, t.Shape, numel, n)
		}
		if hdr.Len() > 1 {
			hdr.WriteByte(',')
		}
		writeJSONString(&hdr, t.Name)
		fmt.Fprintf(&hdr, `:{"dtype":%q,"shape":[`, dt)
		for j, d := range t.Shape {
			if j > 0 {
				hdr.WriteByte(',')
			}
			hdr.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, offset, offset+nbytes)
		offset += nbytes
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}

	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("checkpoint: %v", err)
	}
	tmpName := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmpName)
		}
	}()
	w := bufio.NewWriterSize(tmp, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
	w.Write(lenBuf[:])
	w.Write(hdr.Bytes())
	for _, t := range sorted {
		if err := writeData(w, t.Data); err != nil {
			return fail("writing tensor %q: %v", t.Name, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fail("%v", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fail("%v", err)
	}
	if err := tmp.Sync(); err != nil {
		return fail("%v", err)
	}
	if err := tmp.Close(); err != nil {
		return fail("%v", err)
	}
	if err := os.Rename(tmpName, path); err != nil {
		return fail("%v", err)
	}
	ok = true
	// Make the rename durable; not every platform can sync a directory.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// writeJSONString writes s as a JSON string without HTML escaping.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)           // cannot fail for a string
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

// writeData writes a Data slice little-endian.
func writeData(w *bufio.Writer, data any) error {
	var buf [8]byte
	le := binary.LittleEndian
	var err error
	put := func(b []byte) {
		if err == nil {
			_, err = w.Write(b)
		}
	}
	switch d := data.(type) {
	case []float32:
		for _, v := range d {
			le.PutUint32(buf[:], math.Float32bits(v))
			put(buf[:4])
		}
	case []float64:
		for _, v := range d {
			le.PutUint64(buf[:], math.Float64bits(v))
			put(buf[:8])
		}
	case []int64:
		for _, v := range d {
			le.PutUint64(buf[:], uint64(v))
			put(buf[:8])
		}
	case []int32:
		for _, v := range d {
			le.PutUint32(buf[:], uint32(v))
			put(buf[:4])
		}
	case []int16:
		for _, v := range d {
			le.PutUint16(buf[:], uint16(v))
			put(buf[:2])
		}
	case []int8:
		for _, v := range d {
			buf[0] = byte(v)
			put(buf[:1])
		}
	case []uint8:
		put(d)
	case []bool:
		for _, v := range d {
			buf[0] = 0
			if v {
				buf[0] = 1
			}
			put(buf[:1])
		}
	}
	return err
}
