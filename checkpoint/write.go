package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/filterlens/probe/internal/atomicfile"
)

// Tensor is a tensor to write. Data is []float32 (dtype "F32"), BFloat16
// ("BF16"), Float16 ("F16"), []float64 ("F64"), []int64 ("I64"), []int32
// ("I32"), []int16 ("I16"), []int8 ("I8"), []uint8 ("U8") or []bool
// ("BOOL"), row-major, with as many elements as Shape implies (a nil slice
// for zero elements).
type Tensor struct {
	Name  string
	Shape []int
	Data  any
}

// BFloat16 is tensor data in bfloat16: each element's bits (see
// Float32ToBF16).
type BFloat16 []uint16

// Float16 is tensor data in IEEE 754 half precision: each element's bits
// (see Float32ToF16).
type Float16 []uint16

// Convert rounds float32 data to dtype "F32" (returned as is), "BF16"
// (BFloat16) or "F16" (Float16), round-to-nearest-even as torch's
// .to(torch.bfloat16) and .to(torch.float16) do; the result is a Data value
// for Tensor.
func Convert(data []float32, dtype string) (any, error) {
	switch dtype {
	case "F32":
		return data, nil
	case "BF16":
		out := make(BFloat16, len(data))
		for i, v := range data {
			out[i] = Float32ToBF16(v)
		}
		return out, nil
	case "F16":
		out := make(Float16, len(data))
		for i, v := range data {
			out[i] = Float32ToF16(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("checkpoint: cannot convert to dtype %q (want F32, BF16 or F16)", dtype)
}

// dataDType returns the dtype and length of a Tensor.Data value.
func dataDType(data any) (string, int, bool) {
	switch d := data.(type) {
	case []float32:
		return "F32", len(d), true
	case BFloat16:
		return "BF16", len(d), true
	case Float16:
		return "F16", len(d), true
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
			return fail("tensor %q: unsupported Data type %T (want []float32, BFloat16, Float16, []float64, []int64, []int32, []int16, []int8, []uint8 or []bool)", t.Name, t.Data)
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

	err := atomicfile.Write(path, func(w io.Writer) error {
		var lenBuf [8]byte
		binary.LittleEndian.PutUint64(lenBuf[:], uint64(hdr.Len()))
		if _, err := w.Write(lenBuf[:]); err != nil {
			return err
		}
		if _, err := w.Write(hdr.Bytes()); err != nil {
			return err
		}
		for _, t := range sorted {
			if err := writeData(w, t.Data); err != nil {
				return fmt.Errorf("writing tensor %q: %v", t.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checkpoint: %v", err)
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
func writeData(w io.Writer, data any) error {
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
	case BFloat16:
		for _, v := range d {
			le.PutUint16(buf[:], v)
			put(buf[:2])
		}
	case Float16:
		for _, v := range d {
			le.PutUint16(buf[:], v)
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

// ParseSize reads a size in bytes as Hugging Face's max_shard_size spells
// it (transformers' convert_file_size_to_int): a plain integer is bytes;
// a number (decimals allowed) followed by KB, MB, GB or TB is a decimal
// multiple (10^3, 10^6, 10^9, 10^12 bytes), by KiB, MiB, GiB or TiB a binary
// one (2^10 … 2^40); units are case-insensitive except that a decimal unit
// ending in a lowercase b (Kb, Mb, Gb, Tb) means bits, an eighth of the
// bytes, as there. The result is rounded down to whole bytes and must be
// positive.
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		scale  float64
	}{
		{"TIB", 1 << 40}, {"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10},
		{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	}
	bad := func() (int64, error) {
		return 0, fmt.Errorf("size %q: want a positive number of bytes, or a number with a unit such as 500MB, 2GB (decimal) or 5GiB (binary)", s)
	}
	num, scale := s, 1.0
	for _, u := range units {
		if len(s) > len(u.suffix) && strings.EqualFold(s[len(s)-len(u.suffix):], u.suffix) {
			num, scale = s[:len(s)-len(u.suffix)], u.scale
			if len(u.suffix) == 2 && s[len(s)-1] == 'b' {
				scale /= 8
			}
			break
		}
	}
	if scale == 1 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return bad()
		}
		return n, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || !(v > 0) || v*scale >= math.MaxInt64 || int64(v*scale) <= 0 {
		return bad()
	}
	return int64(v * scale), nil
}

// ShardIndexName is the index file of a sharded safetensors checkpoint.
const ShardIndexName = "model.safetensors.index.json"

// WriteSharded writes tensors into dir as Hugging Face's save_pretrained
// does with max_shard_size = maxShardSize bytes (huggingface_hub's
// split_state_dict_into_shards): walking the tensors in the order given, a
// tensor larger than maxShardSize gets a shard of its own, and a tensor
// that would take the current shard past maxShardSize starts a new one.
// One shard is written as model.safetensors with no index; N > 1 shards as
// model-00001-of-0000N.safetensors … and model.safetensors.index.json,
// {"metadata": {"total_parameters": P, "total_size": B}, "weight_map":
// {name: shard file}} (indented by 2, keys sorted, as transformers writes
// it), where B is the tensors' bytes and P their elements. Every shard
// carries metadata as its __metadata__. The index is written last, so a
// failed write never leaves an index that names missing shards. It returns
// the names of the files written.
func WriteSharded(dir string, tensors []Tensor, maxShardSize int64, metadata map[string]string) ([]string, error) {
	if maxShardSize <= 0 {
		return nil, fmt.Errorf("checkpoint: %s: shard size %d: want a positive number of bytes", dir, maxShardSize)
	}
	var shards [][]Tensor
	var cur []Tensor
	var curSize, totalSize, totalElems int64
	for _, t := range tensors {
		dt, n, ok := dataDType(t.Data)
		if !ok {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: unsupported Data type %T", dir, t.Name, t.Data)
		}
		size := int64(n) * int64(dtypeSize(dt))
		totalSize += size
		totalElems += int64(n)
		if size > maxShardSize {
			shards = append(shards, []Tensor{t})
			continue
		}
		if curSize+size > maxShardSize {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += size
	}
	if len(cur) > 0 {
		shards = append(shards, cur)
	}
	if len(shards) <= 1 {
		if err := WriteSafetensors(filepath.Join(dir, "model.safetensors"), tensors, metadata); err != nil {
			return nil, err
		}
		return []string{"model.safetensors"}, nil
	}
	weightMap := make(map[string]string, len(tensors))
	files := make([]string, 0, len(shards)+1)
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		for _, t := range shard {
			weightMap[t.Name] = name
		}
		if err := WriteSafetensors(filepath.Join(dir, name), shard, metadata); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	index := map[string]any{
		"metadata":   map[string]int64{"total_parameters": totalElems, "total_size": totalSize},
		"weight_map": weightMap,
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(index); err != nil { // maps encode with sorted keys
		return nil, fmt.Errorf("checkpoint: %s: %v", dir, err)
	}
	if err := atomicfile.WriteBytes(filepath.Join(dir, ShardIndexName), buf.Bytes()); err != nil {
		return nil, fmt.Errorf("checkpoint: %v", err)
	}
	return append(files, ShardIndexName), nil
}
