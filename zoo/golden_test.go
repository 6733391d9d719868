package zoo

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// goldenDir holds the golden cases made by independent implementations
// (Hugging Face transformers, the RFA authors' code); it comes with
// ../shared in CI.
var goldenDir = filepath.Join("..", "..", "shared", "golden")

// TestScriptsMatchGolden runs each training script's --check-golden mode on
// the golden cases of its architecture: the PyTorch modules the zoo was
// trained with equal the reference implementations (logits within
// max|Δ|/max|ref| ≤ 1e-4; qwen35.py in both its chunked and its recurrent
// delta rule, falcon_h1.py in both its quadratic (SSD) and its recurrent
// scan), so TestZooParity's comparison with the Go pass is against a
// checked reference.
func TestScriptsMatchGolden(t *testing.T) {
	if _, err := os.Stat(goldenDir); err != nil {
		t.Skipf("golden data not available at %s (it comes with ../shared in CI): %v", goldenDir, err)
	}
	python := torchPython(t)
	for _, c := range []struct{ script, golden string }{
		{"train/lm.py", "qwen3_gqa"},
		{"train/lm.py", "qwen3_gate_headwise"},
		{"train/rfa.py", "rfa_m1"},
		{"train/rfa.py", "rfa_m2_sc"},
		{"train/rfa.py", "rfa_m2_7_gate"},
		{"train/qwen35.py", "qwen35_text"},
		{"train/gemma3.py", "gemma3_text"},
		{"train/falcon_h1.py", "falcon_h1"},
	} {
		t.Run(c.golden, func(t *testing.T) {
			dir := filepath.Join(goldenDir, c.golden)
			if _, err := os.Stat(filepath.Join(dir, "golden.safetensors")); err != nil {
				t.Skipf("golden case %s not available: %v", c.golden, err)
			}
			out, err := exec.Command(python, c.script, "--check-golden", dir).CombinedOutput()
			t.Logf("%s --check-golden %s:\n%s", c.script, c.golden, out)
			if err != nil {
				t.Errorf("%s --check-golden %s: %v (its output above names the tensor and error)", c.script, dir, err)
			}
		})
	}
}
