package model

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/checkpoint"
)

// TestGGUFLoadEqualsDequantized: Load on each fixture's GGUF file (named,
// and as the folder holding it) keeps the quantized matrices in their
// blocks (Weight.Q, dtypes the file's types, WeightBytes the stored
// bytes) and gives the logits of the same model with ggml's float32
// reading of every tensor (ConvertGGUF: checkpoint.DequantizeRow, bit for
// bit ggml's to_float). In the pure-Go build on AVX-512 both run the same
// packed products (the blocks dequantized into the panels the float32
// rows are copied into), so the f32 logits are equal bit for bit;
// elsewhere (OpenBLAS, linearBlocks' per-block calls for the quantized
// weights, one call for the float32 ones) they may differ in the
// summation order only: 1e-5 relative to the largest logit. With
// --compute bf16 the float32 reading's embedding rows are rounded to
// bfloat16 on load (roundedBF16) while a quantized embedding's rows are
// read as ggml widens them (the products round both alike): there the
// bound is 2e-2 of the largest logit (measured up to 7.9e-3).
func TestGGUFLoadEqualsDequantized(t *testing.T) {
	for _, dir := range ggufCases(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			file := filepath.Join(dir, "model.gguf")
			hf := t.TempDir()
			if err := ConvertGGUF(file, hf, GGUFOptions{NoTokenizer: true}); err != nil {
				t.Fatal(err)
			}
			ids := [][]int{{1, 5, 9, 2, 7, 3, 11, 4, 0, 6, 8, 10, 12, 13, 1, 2}}
			for _, c := range []Compute{ComputeF32, ComputeBF16} {
				ref, err := Load(hf, LoadOptions{Compute: c})
				if err != nil {
					t.Fatal(err)
				}
				want, err := ref.Forward(ids, Options{Logits: true})
				if err != nil {
					t.Fatal(err)
				}
				for _, path := range []string{file, dir} {
					m, err := Load(path, LoadOptions{Compute: c})
					if err != nil {
						t.Fatalf("Load(%s): %v", path, err)
					}
					if m.Format != FormatGGUF || len(m.Files) != 1 || m.Files[0] != file {
						t.Errorf("Load(%s): format %q, files %v", path, m.Format, m.Files)
					}
					checkGGUFResident(t, m, file)
					got, err := m.Forward(ids, Options{Logits: true})
					if err != nil {
						t.Fatal(err)
					}
					tol := 0.0
					if gemmWeight == nil {
						tol = 1e-5 * maxAbs32(want.Logits)
					}
					if c == ComputeBF16 {
						tol = 2e-2 * maxAbs32(want.Logits)
					}
					maxD := 0.0
					for i, v := range got.Logits {
						d := math.Abs(float64(v - want.Logits[i]))
						if d > tol || math.IsNaN(d) {
							t.Fatalf("%s, compute %s: logit %d = %g, ggml's float32 reading gives %g (|Δ| %g > %g)", path, c, i, v, want.Logits[i], d, tol)
						}
						maxD = math.Max(maxD, d)
					}
					t.Logf("compute %s: max |Δ logit| %.3g (%.3g of the largest)", c, maxD, maxD/maxAbs32(want.Logits))
				}
			}
		})
	}
}

// checkGGUFResident checks that m's quantized matrices are those of the
// file, in their blocks: DTypes lists the file's types, each quantized
// projection is a Weight with Q set, and WeightBytes is the file's stored
// bytes of the matrices plus 4 bytes a value of what is widened on load
// (norms and F32 tensors).
func checkGGUFResident(t *testing.T, m *Model, file string) {
	t.Helper()
	g, err := checkpoint.OpenGGUF(file)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	types := map[string]bool{}
	var bytes int64
	for _, ti := range g.Tensors {
		if ti.Name == "rope_freqs.weight" {
			continue
		}
		dt := ggufDType(ti.Type)
		types[dt] = true
		switch {
		case isGGUFQuantized(dt), dt == "F16", dt == "BF16":
			bytes += ti.Size
		default:
			bytes += 4 * ti.Numel()
		}
	}
	for _, dt := range m.DTypes {
		if !types[dt] {
			t.Errorf("DTypes %v: %s is not a type of the file", m.DTypes, dt)
		}
		delete(types, dt)
	}
	if len(types) > 0 {
		t.Errorf("DTypes %v misses %v", m.DTypes, types)
	}
	if m.WeightBytes != bytes {
		t.Errorf("WeightBytes %d, the file's matrices as stored and the rest as float32 %d", m.WeightBytes, bytes)
	}
	for l, ly := range m.Layers {
		for name, w := range map[string]Weight{"q": ly.Wq, "k": ly.Wk, "down": ly.WDown} {
			if isGGUFQuantized(w.DType) != (w.Q != nil) {
				t.Errorf("layer %d %s: dtype %s with blocks %v", l, name, w.DType, w.Q != nil)
			}
		}
	}
}

func maxAbs32(x []float32) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(float64(v)))
	}
	return m
}

// TestGGUFLoadRefuses: a GGUF model path that cannot be loaded says why,
// naming the file and what is wrong, never a generic "no checkpoint".
func TestGGUFLoadRefuses(t *testing.T) {
	dirs := ggufCases(t)
	src, err := os.ReadFile(filepath.Join(dirs[0], "model.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	two := t.TempDir()
	for _, n := range []string{"a.gguf", "b.gguf"} {
		if err := os.WriteFile(filepath.Join(two, n), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cut := filepath.Join(t.TempDir(), "cut.gguf")
	if err := os.WriteFile(cut, src[:len(src)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{two, "holds 2 GGUF files"},
		{cut, "cut.gguf"},
	} {
		_, err := Load(c.path, LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Load(%s): %v, want an error containing %q", c.path, err, c.want)
		}
	}
	ck, err := checkpoint.Open(filepath.Join(dirs[0], "model.gguf"))
	if err == nil {
		ck.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "GGUF") {
		t.Errorf("checkpoint.Open on a GGUF file: %v, want an error saying it is GGUF", err)
	}
}
