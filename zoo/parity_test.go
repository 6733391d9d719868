package zoo

import (
	"encoding/json"
	"math"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// TestZooParity runs every language-model checkpoint of the zoo through its
// training script in eval mode (PyTorch, float32) and through the Go forward
// pass, and compares the logits: max|go − torch| / max|torch| ≤ 1e-4.
func TestZooParity(t *testing.T) {
	dirs, err := List("checkpoints")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no checkpoints in zoo/checkpoints")
	}
	python := ""
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(p, "-c", "import torch, numpy").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		t.Skip("no python3 with torch and numpy (.ci/setup.sh installs Debian python3-torch): zoo parity not checked")
	}
	for _, dir := range dirs {
		e, err := Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !e.LM {
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			m, err := model.Load(dir, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Config.Arch) != e.Arch {
				t.Errorf("%s/zoo.json: arch %q, but the checkpoint loads as %q", dir, e.Arch, m.Config.Arch)
			}
			// Two rows of 300 ids: past the training context of 256.
			rng := rand.New(rand.NewSource(11))
			ids := make([][]int, 2)
			for b := range ids {
				ids[b] = make([]int, 300)
				for i := range ids[b] {
					ids[b][i] = rng.Intn(m.Config.Vocab)
				}
			}
			tmp := t.TempDir()
			idsFile := filepath.Join(tmp, "ids.json")
			data, _ := json.Marshal(ids)
			if err := os.WriteFile(idsFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(tmp, "logits.safetensors")
			cmd := exec.Command(python, e.Script, "--eval", dir, "--ids", idsFile, "--logits", out)
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s --eval: %v\n%s", e.Script, err, b)
			}
			ref := readLogits(t, out)
			got, err := m.Forward(ids, model.Options{Logits: true, AllowExtrapolation: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Logits) != len(ref) {
				t.Fatalf("logits: Go has %d values, PyTorch %d", len(got.Logits), len(ref))
			}
			var maxDiff, maxRef float64
			for i, r := range ref {
				maxDiff = math.Max(maxDiff, math.Abs(float64(got.Logits[i])-float64(r)))
				maxRef = math.Max(maxRef, math.Abs(float64(r)))
			}
			rel := maxDiff / maxRef
			t.Logf("%s: logits max|Δ|/max|ref| = %.2e", e.Name, rel)
			if !(rel <= 1e-4) {
				t.Errorf("%s: logits rel. error %.3e > 1e-4", e.Name, rel)
			}
		})
	}
}

func readLogits(t *testing.T, path string) []float32 {
	t.Helper()
	c, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	v, err := c.Float32("logits")
	if err != nil {
		t.Fatal(err)
	}
	return v
}
