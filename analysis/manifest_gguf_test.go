package analysis

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/filterlens/probe/model"
)

// TestDescribeModelGGUF: the manifest of a model loaded from a GGUF file
// records the file (its sha256, the only file: its metadata is the
// config), format "gguf" and the quantization types as stored.
func TestDescribeModelGGUF(t *testing.T) {
	file := filepath.Join("..", "..", "shared", "golden", "gguf", "qwen3_q8_0", "model.gguf")
	m, err := model.Load(file, model.LoadOptions{})
	if err != nil {
		t.Skipf("no GGUF fixture: %v", err)
	}
	info, err := DescribeModel(m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := HashFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Format != "gguf" || len(info.Files) != 1 || info.Files[0].SHA256 != want.SHA256 || info.Files[0].Path != "model.gguf" {
		t.Errorf("format %q, files %+v; want gguf and model.gguf with sha256 %s", info.Format, info.Files, want.SHA256)
	}
	if !slices.Contains(info.DTypes, "Q8_0") {
		t.Errorf("stored_dtypes %v: no Q8_0", info.DTypes)
	}
}
