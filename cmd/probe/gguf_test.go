package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGGUFModel: commands that run a model take a GGUF file — inspect
// --tokens estimates the pass through model.Load (the quantized blocks as
// held), capture runs it, and the tokenizer comes from the file's
// metadata (the fixture's placeholder tokenizer is refused naming why).
func TestGGUFModel(t *testing.T) {
	file := filepath.Join("..", "..", "..", "shared", "golden", "gguf", "qwen3_q8_0", "model.gguf")
	if _, err := os.Stat(file); err != nil {
		t.Skipf("no GGUF fixture: %v", err)
	}
	code, out, errs := probe(t, "inspect", file, "--tokens", "256")
	if code != 0 || !strings.Contains(out, "q8_0") || !strings.Contains(out, "memory:        one pass of 256 tokens") {
		t.Errorf("inspect --tokens: exit %d %s\n%s", code, errs, out)
	}
	tmp := t.TempDir()
	ids := filepath.Join(tmp, "ids.json")
	if err := os.WriteFile(ids, []byte("[1, 2, 3, 4, 5, 6, 7, 8]"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := probe(t, "capture", "--model", file, "--ids", ids, "--hook", "blocks.0.hook_resid_post", "--out", filepath.Join(tmp, "c.safetensors")); code != 0 {
		t.Errorf("capture on a GGUF file: exit %d %s", code, errs)
	}
	text := filepath.Join(tmp, "t.txt")
	if err := os.WriteFile(text, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := probe(t, "tokenize", "--model", file, "--text", text); code == 0 || !strings.Contains(errs, "not in the vocabulary") {
		t.Errorf("tokenize with the fixture's placeholder GGUF tokenizer: exit %d %s", code, errs)
	}
}
