package model

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model/internal/kern"
)

// tensorSource is what the loader reads tensors from: a Hugging Face
// checkpoint (*checkpoint.Checkpoint) or a GGUF file read tensor by
// tensor under its Hugging Face names (ggufSource).
type tensorSource interface {
	Format() string
	Files() []string
	Names() []string
	Info(name string) (checkpoint.Info, bool)
	Float32View(name string) ([]float32, error)
	Uint16View(name string) ([]uint16, error)
	Uint8View(name string) ([]uint8, error)
	Int64(name string) ([]int64, error)
	Releaser(name string) func()
	Close() error
}

// FormatGGUF is Model.Format for a model loaded from a GGUF file.
const FormatGGUF = "gguf"

// openTensors opens the tensors of a model path: the GGUF file it names
// or holds (checkpoint.FindGGUF), else the Hugging Face checkpoint.
func openTensors(dir string) (tensorSource, error) {
	file, ok, err := checkpoint.FindGGUF(dir)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if ok {
		return openGGUFSource(file)
	}
	return checkpoint.Open(dir)
}

// ggufConfigFile returns the config.json that GGUFConfig makes from the
// metadata of the GGUF file dir names or holds, parsed; ok false when dir
// is no GGUF.
func ggufConfigFile(dir string) (cfg *Config, ok bool, err error) {
	file, ok, err := checkpoint.FindGGUF(dir)
	if err != nil || !ok {
		return nil, false, err
	}
	g, err := checkpoint.OpenGGUF(file)
	if err != nil {
		return nil, true, err
	}
	defer g.Close()
	fields, err := GGUFConfig(g)
	if err != nil {
		return nil, true, err
	}
	data, err := json.Marshal(fields)
	if err != nil {
		return nil, true, fmt.Errorf("model: %w", err)
	}
	cfg, err = ParseConfig(data)
	if err != nil {
		return nil, true, fmt.Errorf("model: %s: the config.json made from its metadata: %w", file, err)
	}
	return cfg, true, nil
}

// GGUFTokenizer returns the tokenizer.json for the model at path when path
// is a GGUF file or a folder holding one: the tokenizer.json beside the
// file where there is one (file is its path), else the one
// GGUFTokenizerJSON makes from the file's tokenizer.ggml.* metadata (data).
// ok is false when path is no GGUF.
func GGUFTokenizer(path string) (file string, data []byte, ok bool, err error) {
	gf, ok, err := checkpoint.FindGGUF(path)
	if err != nil || !ok {
		return "", nil, false, err
	}
	if p := filepath.Join(filepath.Dir(gf), "tokenizer.json"); fileExists(p) {
		return p, nil, true, nil
	}
	g, err := checkpoint.OpenGGUF(gf)
	if err != nil {
		return "", nil, true, err
	}
	defer g.Close()
	data, err = GGUFTokenizerJSON(g)
	if err != nil {
		return "", nil, true, fmt.Errorf("%w (or put a tokenizer.json beside %s)", err, gf)
	}
	return "", data, true, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// ggufSource reads a GGUF file's tensors under their Hugging Face names,
// one at a time when the loader asks for them, undoing the converter's
// changes (see the top of gguf.go) on each: Llama's q/k rows permuted back
// (ggufUnpermuteRows; quantized rows are whole blocks, moved as bytes),
// Gemma's norms read as the stored value − 1. Quantized tensors are handed
// out as their blocks (blocks), F16 and BF16 ones as their bits
// (Uint16View), both views of the mapped file where no rows move; F32
// ones, norms and biases are widened (Float32View).
type ggufSource struct {
	g    *checkpoint.GGUFFile
	fam  *ggufFamily
	arch string
	// heads, kv, dh: the q and k row permutations' head counts and head
	// dimension.
	heads, kv, dh int
	byHF          map[string]string // Hugging Face name → GGUF name
	names         []string          // Hugging Face names, then unmapped GGUF names
}

// openGGUFSource opens file and maps its tensor names.
func openGGUFSource(file string) (*ggufSource, error) {
	g, err := checkpoint.OpenGGUF(file)
	if err != nil {
		return nil, err
	}
	s, err := newGGUFSource(g)
	if err != nil {
		g.Close()
		return nil, err
	}
	return s, nil
}

func newGGUFSource(g *checkpoint.GGUFFile) (*ggufSource, error) {
	arch, f, err := ggufFamilyOf(g)
	if err != nil {
		return nil, err
	}
	cfg, err := GGUFConfig(g)
	if err != nil {
		return nil, err
	}
	s := &ggufSource{g: g, fam: f, arch: arch, byHF: map[string]string{},
		heads: int(cfg["num_attention_heads"].(int64)), kv: int(cfg["num_key_value_heads"].(int64)), dh: int(cfg["head_dim"].(int64))}
	for _, t := range g.Tensors {
		if t.Name == "rope_freqs.weight" { // llama3 rope scaling: in the config (GGUFConfig)
			continue
		}
		hf, ok := f.hfName(t.Name)
		if !ok {
			s.names = append(s.names, t.Name) // reported as unexpected by the loader
			continue
		}
		s.byHF[hf] = t.Name
		s.names = append(s.names, hf)
	}
	return s, nil
}

func (s *ggufSource) Format() string  { return FormatGGUF }
func (s *ggufSource) Files() []string { return []string{s.g.Path} }
func (s *ggufSource) Names() []string { return append([]string(nil), s.names...) }
func (s *ggufSource) Close() error    { return s.g.Close() }

// Releaser: GGUF views are not released from the resident set.
func (s *ggufSource) Releaser(string) func() { return nil }

// ggufDType is the loader's dtype of a ggml type: safetensors' spelling
// for F32, F16 and BF16, ggml's name in capitals ("Q4_K") for the others.
func ggufDType(t checkpoint.GGMLType) string { return strings.ToUpper(t.String()) }

func (s *ggufSource) tensor(name string) (checkpoint.GGUFTensor, error) {
	gg, ok := s.byHF[name]
	if !ok {
		return checkpoint.GGUFTensor{}, fmt.Errorf("model: %s: no tensor %q", s.g.Path, name)
	}
	t, _ := s.g.Tensor(gg)
	return t, nil
}

func (s *ggufSource) Info(name string) (checkpoint.Info, bool) {
	t, err := s.tensor(name)
	if err != nil {
		return checkpoint.Info{}, false
	}
	return checkpoint.Info{Name: name, DType: ggufDType(t.Type), Shape: t.Shape(), File: s.g.Path}, true
}

// heads returns the head count of the row permutation tensor name (a
// Hugging Face name) went through: n_head for q, n_head_kv for k, 0 for
// none.
func (s *ggufSource) permutedHeads(name string) int {
	if !s.fam.permuteQK || !strings.HasPrefix(name, "model.layers.") {
		return 0
	}
	switch {
	case strings.HasSuffix(name, ".q_proj.weight"), strings.HasSuffix(name, ".q_proj.bias"):
		return s.heads
	case strings.HasSuffix(name, ".k_proj.weight"), strings.HasSuffix(name, ".k_proj.bias"):
		return s.kv
	}
	return 0
}

// unpermute returns x (rows of equal length) with the converter's row
// permutation of name undone, or x itself where there is none.
func unpermute[T any](s *ggufSource, name string, x []T, t checkpoint.GGUFTensor) ([]T, error) {
	n := s.permutedHeads(name)
	if n == 0 {
		return x, nil
	}
	shape := t.Shape()
	if len(shape) == 0 || shape[0] != n*s.dh || s.dh%2 != 0 {
		return nil, fmt.Errorf("model: %s: tensor %q: shape %v, want %d heads × %d rows first", s.g.Path, t.Name, shape, n, s.dh)
	}
	return ggufUnpermuteRows(x, shape[0], n, s.dh), nil
}

// ggufUnpermuteRows inverts LlamaModel.permute on the rows of x (rows
// rows of equal length, n heads of d rows): Hugging Face row h·d + s·d/2 +
// i is GGUF row h·d + 2i + s. It returns a new slice.
func ggufUnpermuteRows[T any](x []T, rows, n, d int) []T {
	w := len(x) / rows
	out := make([]T, len(x))
	for h := 0; h < n; h++ {
		for s := 0; s < 2; s++ {
			for i := 0; i < d/2; i++ {
				src, dst := h*d+2*i+s, h*d+s*d/2+i
				copy(out[dst*w:(dst+1)*w], x[src*w:(src+1)*w])
			}
		}
	}
	return out
}

// Float32View returns the tensor dequantized to float32 (a new slice,
// checkpoint.GGUFFile.Dequantize), rows permuted back, Gemma's norms − 1.
func (s *ggufSource) Float32View(name string) ([]float32, error) {
	t, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	data, err := s.g.Dequantize(t.Name)
	if err != nil {
		return nil, err
	}
	if s.fam.normPlusOne && strings.HasSuffix(t.Name, "norm.weight") {
		for i := range data {
			data[i] -= 1
		}
	}
	return unpermute(s, name, data, t)
}

// Uint16View returns an F16 or BF16 tensor's bits: a view of the mapping
// (little-endian, 2-byte aligned) unless its rows move.
func (s *ggufSource) Uint16View(name string) ([]uint16, error) {
	t, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	if t.Type != checkpoint.GGMLF16 && t.Type != checkpoint.GGMLBF16 {
		return nil, fmt.Errorf("model: %s: tensor %q is %s, not F16 or BF16", s.g.Path, t.Name, ggufDType(t.Type))
	}
	raw, err := s.g.TensorData(t.Name)
	if err != nil {
		return nil, err
	}
	var bits []uint16
	if len(raw) > 0 && uintptr(unsafe.Pointer(&raw[0]))%2 == 0 {
		bits = unsafe.Slice((*uint16)(unsafe.Pointer(&raw[0])), len(raw)/2)
	} else {
		bits = make([]uint16, len(raw)/2)
		for i := range bits {
			bits[i] = uint16(raw[2*i]) | uint16(raw[2*i+1])<<8
		}
	}
	return unpermute(s, name, bits, t)
}

// blocks returns a quantized tensor's blocks with their row dequantizer:
// a view of the mapping unless its rows move (then a copy of the blocks,
// the same bytes in Hugging Face row order). Each row must be whole
// blocks.
func (s *ggufSource) blocks(name string) (*kern.Blocks, error) {
	t, err := s.tensor(name)
	if err != nil {
		return nil, err
	}
	block, size, fn, ok := checkpoint.RowDequantizer(t.Type)
	if !ok || block <= 1 {
		return nil, fmt.Errorf("model: %s: tensor %q of type %s is not a quantized type read here", s.g.Path, t.Name, ggufDType(t.Type))
	}
	if len(t.Dims) == 0 || t.Dims[0]%int64(block) != 0 {
		return nil, fmt.Errorf("model: %s: tensor %q: rows of %v values are not whole %s blocks of %d", s.g.Path, t.Name, t.Dims, ggufDType(t.Type), block)
	}
	raw, err := s.g.TensorData(t.Name)
	if err != nil {
		return nil, err
	}
	raw, err = unpermute(s, name, raw, t)
	if err != nil {
		return nil, err
	}
	return &kern.Blocks{Data: raw, Block: block, Size: size, Row: fn}, nil
}

func (s *ggufSource) Uint8View(name string) ([]uint8, error) {
	return nil, fmt.Errorf("model: %s: tensor %q: GGUF tensors are read as float or quantized weights, not as bytes", s.g.Path, name)
}

func (s *ggufSource) Int64(name string) ([]int64, error) {
	return nil, fmt.Errorf("model: %s: tensor %q: GGUF tensors are read as float or quantized weights, not as integers", s.g.Path, name)
}

// isGGUFQuantized reports whether a loader dtype is one of ggml's block
// types (ggufDType of a type with blocks of more than one element).
func isGGUFQuantized(dtype string) bool {
	return dtype != "F32" && dtype != "F16" && dtype != "BF16" && dtype != ""
}

// quantized is the loader's weight for a GGUF tensor in ggml's blocks: the
// blocks kept as stored (a view of the mapping; Llama's q/k rows a copy),
// dequantized inside the products. WeightBytes counts the stored bytes.
func (ld *loader) quantized(s *ggufSource, name string, info checkpoint.Info, rows, cols int) Weight {
	ld.used[name] = true
	q, err := s.blocks(name)
	if err != nil {
		ld.errs = append(ld.errs, err.Error())
		return f32Weight(ld.standIn(name, info.Shape), cols)
	}
	ld.types[info.DType] = true
	ld.params += int64(rows) * int64(cols)
	ld.bytes += int64(len(q.Data))
	return Weight{Rows: rows, Cols: cols, DType: info.DType, Q: q}
}
