package checkpoint

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// llamaFileTypes names llama.cpp's general.file_type values (llama.h's
// enum llama_ftype, LLAMA_FTYPE_ dropped): what the file was quantized
// to as a whole; single tensors may differ.
var llamaFileTypes = map[int64]string{
	0: "ALL_F32", 1: "MOSTLY_F16", 2: "MOSTLY_Q4_0", 3: "MOSTLY_Q4_1", 7: "MOSTLY_Q8_0", 8: "MOSTLY_Q5_0",
	9: "MOSTLY_Q5_1", 10: "MOSTLY_Q2_K", 11: "MOSTLY_Q3_K_S", 12: "MOSTLY_Q3_K_M", 13: "MOSTLY_Q3_K_L",
	14: "MOSTLY_Q4_K_S", 15: "MOSTLY_Q4_K_M", 16: "MOSTLY_Q5_K_S", 17: "MOSTLY_Q5_K_M", 18: "MOSTLY_Q6_K",
	32: "MOSTLY_BF16", 38: "MOSTLY_MXFP4_MOE",
}

// GGUFSummary is what `probe inspect` shows of a GGUF file, read from its
// header only.
type GGUFSummary struct {
	Path         string `json:"path"`
	Version      uint32 `json:"gguf_version"`
	Architecture string `json:"architecture"`
	Name         string `json:"name,omitempty"`
	FileType     string `json:"file_type,omitempty"` // general.file_type as llama.cpp names it
	Alignment    int64  `json:"alignment"`
	Metadata     int    `json:"metadata_entries"`
	FileBytes    int64  `json:"file_bytes"`
	TensorBytes  int64  `json:"tensor_bytes"`
	Parameters   int64  `json:"parameters"`
	// BytesPerParameter is FileBytes / Parameters; BitsPerWeight is
	// 8·TensorBytes / Parameters (llama.cpp's "BPW").
	BytesPerParameter float64             `json:"bytes_per_parameter"`
	BitsPerWeight     float64             `json:"bits_per_weight"`
	Types             []GGUFTypeSummary   `json:"types"`
	Tensors           []GGUFTensorSummary `json:"tensors"`
}

// GGUFTypeSummary counts the tensors of one ggml type.
type GGUFTypeSummary struct {
	Type          string  `json:"type"`
	Tensors       int     `json:"tensors"`
	Parameters    int64   `json:"parameters"`
	Bytes         int64   `json:"bytes"`
	BitsPerWeight float64 `json:"bits_per_weight"`
}

// GGUFTensorSummary is one tensor: its type, PyTorch-order shape and bytes.
type GGUFTensorSummary struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Shape []int  `json:"shape"`
	Bytes int64  `json:"bytes"`
}

// FindGGUF returns the GGUF file that path names: path itself when it is a
// GGUF file, or the single *.gguf file of a folder that holds no
// config.json; ok is false otherwise. A folder of several .gguf files is an
// error naming them.
func FindGGUF(path string) (file string, ok bool, err error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", false, nil
	}
	if st.Mode().IsRegular() {
		return path, IsGGUF(path), nil
	}
	if _, err := os.Stat(filepath.Join(path, "config.json")); err == nil {
		return "", false, nil
	}
	found, _ := filepath.Glob(filepath.Join(path, "*.gguf"))
	switch len(found) {
	case 0:
		return "", false, nil
	case 1:
		return found[0], IsGGUF(found[0]), nil
	}
	return "", false, fmt.Errorf("%s holds %d GGUF files (%s): name the one to use", path, len(found), strings.Join(found, ", "))
}

// SummarizeGGUF reads a GGUF file's header and sums its tensors by type.
func SummarizeGGUF(path string) (*GGUFSummary, error) {
	g, err := OpenGGUF(path)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	s := &GGUFSummary{Path: path, Version: g.Version, Alignment: g.Alignment, Metadata: len(g.KV), FileBytes: g.size}
	s.Architecture, _ = g.MetaString("general.architecture")
	s.Name, _ = g.MetaString("general.name")
	if ft, err := g.MetaInt("general.file_type"); err == nil {
		s.FileType = llamaFileTypes[ft]
		if s.FileType == "" {
			s.FileType = fmt.Sprintf("file type %d", ft)
		}
	}
	byType := map[GGMLType]*GGUFTypeSummary{}
	for _, t := range g.Tensors {
		n := t.Numel()
		s.Parameters += n
		s.TensorBytes += t.Size
		s.Tensors = append(s.Tensors, GGUFTensorSummary{Name: t.Name, Type: t.Type.String(), Shape: t.Shape(), Bytes: t.Size})
		ts := byType[t.Type]
		if ts == nil {
			ts = &GGUFTypeSummary{Type: t.Type.String()}
			byType[t.Type] = ts
		}
		ts.Tensors++
		ts.Parameters += n
		ts.Bytes += t.Size
	}
	for _, ts := range byType {
		ts.BitsPerWeight = bitsPer(ts.Bytes, ts.Parameters)
		s.Types = append(s.Types, *ts)
	}
	sort.Slice(s.Types, func(i, j int) bool { return s.Types[i].Bytes > s.Types[j].Bytes })
	if s.Parameters > 0 {
		s.BytesPerParameter = float64(s.FileBytes) / float64(s.Parameters)
	}
	s.BitsPerWeight = bitsPer(s.TensorBytes, s.Parameters)
	return s, nil
}

func bitsPer(bytes, params int64) float64 {
	if params == 0 {
		return 0
	}
	return 8 * float64(bytes) / float64(params)
}

// WriteGGUFSummary writes s as indented JSON or as text: the file, its
// types with their share, and every tensor's type and shape.
func WriteGGUFSummary(w io.Writer, s *GGUFSummary, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	fmt.Fprintf(w, "checkpoint:    %s (gguf v%d, %d metadata entries, alignment %d)\n", s.Path, s.Version, s.Metadata, s.Alignment)
	fmt.Fprintf(w, "architecture:  %s", s.Architecture)
	if s.Name != "" {
		fmt.Fprintf(w, " (name %s)", s.Name)
	}
	fmt.Fprintln(w)
	if s.FileType != "" {
		fmt.Fprintf(w, "file type:     %s\n", s.FileType)
	}
	fmt.Fprintf(w, "parameters:    %d in %d tensors\n", s.Parameters, len(s.Tensors))
	fmt.Fprintf(w, "size:          %d bytes: %.3f bytes per parameter (tensor data %.2f bits per weight)\n", s.FileBytes, s.BytesPerParameter, s.BitsPerWeight)
	for _, t := range s.Types {
		fmt.Fprintf(w, "  %-6s %4d tensors %12d parameters %12d bytes  %6.2f bits per weight\n", t.Type, t.Tensors, t.Parameters, t.Bytes, t.BitsPerWeight)
	}
	fmt.Fprintln(w, "tensors:")
	for _, t := range s.Tensors {
		fmt.Fprintf(w, "  %-40s %-6s %-16s %d bytes\n", t.Name, t.Type, fmt.Sprint(t.Shape), t.Bytes)
	}
	return nil
}
