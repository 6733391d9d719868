package model

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ggufQuantBounds is, per llama.cpp file type (enum llama_ftype, the
// number llama_model_quantize takes), the agreement held between probe on
// the file (Load, the quantized blocks resident) and llama.cpp on the
// same file and ids (TestGGUFQuantTypesMatchLlamaCpp): max |Δ log p| over
// probe's top 100 tokens, the larger KL of the two directions (max over
// positions) and the share of positions whose top-1 tokens agree. Each is
// about 1.5× the largest measured over the five families (2 layers, D 256,
// 256 positions; the test's log prints them). What they mean:
//
//   - F32 agrees to float32 rounding (measured 8.5e-5, KL 3.4e-7): the
//     file is read right. F16 and BF16 files: ggml rounds the activations
//     to the weights' type inside its products (0.029, 0.21).
//   - The quantized types: ggml rounds the activations to 8 bits (Q8_0,
//     Q8_K blocks) inside its quantized dot products while probe multiplies
//     float32 activations by the dequantized weights (see
//     ../shared/golden/gguf/README.md). These random models' distributions
//     are nearly certain (log p of the 100th token down to −100), so the
//     tail's Δ log p reaches 0.8–1.7 while KL stays ≤ 2.7e-3 and every
//     top-1 agrees.
//   - Gemma: ggml's GELU reads a float16 table (GGML_GELU_FP16), which
//     moves the far tail of these near-certain distributions by up to 1.15
//     in every type, F32 included (gemma, the bound for gemma2 and gemma3
//     where larger).
var ggufQuantBounds = []ggufQuantBound{
	{"F32", 0, 2e-4, 2, 2e-6, 1},
	{"F16", 1, 0.06, 2, 2e-6, 1},
	{"BF16", 32, 0.4, 2, 1e-4, 1},
	{"Q8_0", 7, 1.8, 0, 5e-5, 0.99},
	{"Q4_0", 2, 1.5, 0, 1e-4, 0.99},
	{"Q4_1", 3, 2.5, 0, 3e-5, 0.99},
	{"Q5_0", 8, 1.7, 0, 1e-4, 0.99},
	{"Q5_1", 9, 2, 0, 4e-3, 0.99},
	{"Q2_K", 10, 2.5, 0, 2e-5, 0.99},
	{"Q3_K_M", 12, 2.4, 0, 1e-5, 0.99},
	{"Q4_K_M", 15, 1.8, 0, 1e-3, 0.99},
	{"Q5_K_M", 17, 1.9, 0, 5e-3, 0.99},
	{"Q6_K", 18, 1.8, 0, 2e-4, 0.99},
}

// ggufQuantBound is one file type's name, llama_ftype number and bounds.
type ggufQuantBound struct {
	name  string
	ftype int
	dLogP float64
	gemma float64 // dLogP for gemma2 and gemma3 (0: dLogP)
	kl    float64
	top1  float64
}

// llamaCppLib returns the folder of llama.cpp's prebuilt library and of
// node-llama-cpp (third_party/node-llama-cpp), skipping the test with a
// message where either (or node) is absent.
func llamaCppLib(t *testing.T) (lib, nlc string) {
	t.Helper()
	nlc, _ = filepath.Abs("../third_party/node-llama-cpp")
	lib = filepath.Join(nlc, "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64")
	if _, err := os.Stat(filepath.Join(lib, "libllama.v0.4.0.so")); err != nil {
		t.Skipf("llama.cpp's library is not installed (%v): bash .ci/setup.sh installs npm @node-llama-cpp/linux-x64@3.21.1", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skipf("no node to run node-llama-cpp: %v", err)
	}
	return lib, nlc
}

// llamaCppProbs runs scripts/gguf/llamacpp_probs.mjs: llama.cpp's
// next-token probabilities at each position of ids on file ([len(ids), V]).
func llamaCppProbs(t *testing.T, nlc, file string, ids []int, V int) []float32 {
	t.Helper()
	dir := t.TempDir()
	idsFile, out := filepath.Join(dir, "ids.json"), filepath.Join(dir, "probs.f32")
	b, _ := json.Marshal(ids)
	if err := os.WriteFile(idsFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "../scripts/gguf/llamacpp_probs.mjs", nlc, file, idsFile, fmt.Sprint(V), out, "2")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node-llama-cpp on %s: %v\n%s", file, err, msg)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) != 4*len(ids)*V {
		t.Fatalf("node-llama-cpp wrote %d bytes for %d positions × %d tokens", len(raw), len(ids), V)
	}
	p := make([]float32, len(ids)*V)
	for i := range p {
		p[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return p
}

// TestGGUFQuantTypesMatchLlamaCpp: for each family llama.cpp writes that
// probe has, a generated model written as an F32 GGUF (WriteGGUFFromHF)
// and converted by llama.cpp's own llama_model_quantize to every file type
// of ggufQuantBounds; probe loads each file as it is (quantized blocks
// resident) and its softmax over 256 positions is held to llama.cpp's
// (node-llama-cpp 3.21.1: F32 KV cache, flash attention off) within the
// type's bounds. Skipped without node-llama-cpp, and with -short.
func TestGGUFQuantTypesMatchLlamaCpp(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 5 families × 13 file types through llama.cpp")
	}
	lib, nlc := llamaCppLib(t)
	const T = 256
	for _, arch := range []Arch{"llama", "qwen2", "qwen3", "gemma2", "gemma3"} {
		t.Run(string(arch), func(t *testing.T) {
			cfg, err := SmallConfig(arch, Size{Layers: 2, DModel: 256, Heads: 4, KVHeads: 2, Vocab: 512, MaxPos: 2 * T})
			if err != nil {
				t.Fatal(err)
			}
			_, tensors, err := Generate(cfg, 11)
			if err != nil {
				t.Fatal(err)
			}
			tmp := t.TempDir()
			f32 := filepath.Join(tmp, "F32.gguf")
			if err := WriteGGUFFromHF(f32, &cfg, tensors); err != nil {
				t.Fatal(err)
			}
			ids := make([]int, T)
			for i := range ids {
				ids[i] = (i*131 + 7) % cfg.Vocab
			}
			for _, q := range ggufQuantBounds {
				if q.gemma > 0 && strings.HasPrefix(string(arch), "gemma") {
					q.dLogP = q.gemma
				}
				t.Run(q.name, func(t *testing.T) { checkAgainstLlamaCpp(t, lib, nlc, f32, q, ids, cfg.Vocab) })
			}
		})
	}
}

// checkAgainstLlamaCpp quantizes f32 to ftype with llama.cpp (0: f32
// itself), runs probe and llama.cpp on the file and holds them to the
// bounds.
func checkAgainstLlamaCpp(t *testing.T, lib, nlc, f32 string, q ggufQuantBound, ids []int, V int) {
	T := len(ids)
	file := f32
	if q.ftype != 0 {
		file = filepath.Join(filepath.Dir(f32), q.name+".gguf")
		cmd := exec.Command("python3", "../scripts/gguf/ggml_ref.py", lib, "quantize", f32, file, fmt.Sprint(q.ftype))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: llama_model_quantize: %v\n%s", q.name, err, out)
		}
	}
	m, err := Load(file, LoadOptions{})
	if err != nil {
		t.Fatalf("%s: %v", q.name, err)
	}
	out, err := m.Forward([][]int{ids}, Options{Logits: true})
	if err != nil {
		t.Fatal(err)
	}
	probs := llamaCppProbs(t, nlc, file, ids, V)
	var maxD, kl float64
	top1 := 0
	for p := range ids {
		d, a, b, same := ggufPosition(out.Logits[p*V:(p+1)*V], probs[p*V:(p+1)*V])
		maxD, kl = math.Max(maxD, d), math.Max(kl, math.Max(a, b))
		if same {
			top1++
		}
	}
	share := float64(top1) / float64(T)
	t.Logf("%-7s %-24s max |Δ log p| top-100 %.3g, KL max %.3g, top-1 %d/%d", q.name, strings.Join(m.DTypes, ","), maxD, kl, top1, T)
	if maxD > q.dLogP || kl > q.kl || share < q.top1 || math.IsNaN(maxD+kl) {
		t.Errorf("%s: outside its bounds (|Δ log p| ≤ %g, KL ≤ %g, top-1 ≥ %g)", q.name, q.dLogP, q.kl, q.top1)
	}
}
