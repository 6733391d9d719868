package zoo

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/filterlens/probe/afatoy"
	"github.com/filterlens/probe/checkpoint"
)

const afaToyRoot = "checkpoints/afa_toy"

// torchPython returns a python3 that imports torch and numpy, or skips.
func torchPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import torch, numpy").Run() == nil {
			return py
		}
	}
	t.Skip("python3 with torch and numpy is not installed (.ci/setup.sh installs Debian python3-torch): AFA toy parity not checked")
	return ""
}

// afaToyDirs returns every checkpoint folder of the AFA toy zoo entry with
// the data file its evaluation reads: the settings and the earlier
// training stages (stages/step_NNNN, which read their setting's data).
func afaToyDirs(t *testing.T) [][2]string {
	t.Helper()
	e, err := Read(afaToyRoot)
	if err != nil {
		t.Fatal(err)
	}
	if e.LM || e.Arch != afatoy.ModelType || e.Script != "train/afa_toy.py" {
		t.Fatalf("%s/zoo.json: %+v", afaToyRoot, e)
	}
	cfgs, err := filepath.Glob(filepath.Join(afaToyRoot, "*", "config.json"))
	if err != nil || len(cfgs) == 0 {
		t.Fatalf("no checkpoints under %s (%v)", afaToyRoot, err)
	}
	var out [][2]string
	for _, c := range cfgs {
		dir := filepath.Dir(c)
		data := filepath.Join(dir, "data.safetensors")
		out = append(out, [2]string{dir, data})
		stages, _ := filepath.Glob(filepath.Join(dir, "stages", "*", "config.json"))
		sort.Strings(stages)
		for _, s := range stages {
			out = append(out, [2]string{filepath.Dir(s), data})
		}
	}
	return out
}

// compareAFAToy runs the script's eval mode on dir and the Go pass on the
// same inputs and compares every output tensor: max|go − torch|/max|torch|.
func compareAFAToy(t *testing.T, py, dir, data string, extra ...string) {
	t.Helper()
	m, err := afatoy.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := afatoy.ReadData(data)
	if err != nil {
		t.Fatal(err)
	}
	T := m.Config.SeqLen
	x, err := d.Inputs(T)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "eval.safetensors")
	args := append([]string{"train/afa_toy.py", "--eval", dir, "--data", data, "--out", out}, extra...)
	if b, err := exec.Command(py, args...).CombinedOutput(); err != nil {
		t.Fatalf("train/afa_toy.py --eval %s: %v\n%s", dir, err, b)
	}
	ref, err := checkpoint.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	got, err := m.Forward(x, d.N, T)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]float32{"pred": got.Pred, "out": got.Out}
	if m.Config.Layer == "afa" {
		want["pattern"], want["pattern_decayed"] = got.Patterns[0], got.Decayed
		for _, name := range ref.Names() {
			var i int
			if _, err := fmt.Sscanf(name, "pulled_%d", &i); err == nil {
				p, err := m.PulledForward(x, d.N, T, i)
				if err != nil {
					t.Fatal(err)
				}
				want[name] = p
			}
		}
	} else {
		for l, p := range got.Patterns {
			want[fmt.Sprintf("pattern.l%d", l)] = p
		}
	}
	names := ref.Names()
	sort.Strings(names)
	var msg []string
	for _, name := range names {
		r, err := ref.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		g, ok := want[name]
		if !ok {
			t.Errorf("%s: PyTorch wrote %q, which the Go pass does not produce", dir, name)
			continue
		}
		if len(g) != len(r) {
			t.Errorf("%s: %s has %d values in Go, %d in PyTorch", dir, name, len(g), len(r))
			continue
		}
		var md, mr float64
		for i := range r {
			md = math.Max(md, math.Abs(float64(g[i])-float64(r[i])))
			mr = math.Max(mr, math.Abs(float64(r[i])))
		}
		rel := md / mr
		msg = append(msg, fmt.Sprintf("%s %.1e", name, rel))
		if !(rel <= 1e-4) {
			t.Errorf("%s: %s rel. error %.3e > 1e-4", dir, name, rel)
		}
		delete(want, name)
	}
	for name := range want {
		t.Errorf("%s: PyTorch eval wrote no %q", dir, name)
	}
	t.Logf("%s: %s", dir, strings.Join(msg, ", "))
}

// TestAFAToyParity compares the Go pass of every AFA toy checkpoint (the
// three Fig. 1 filters, their earlier training stages and the Fig. 3
// softmax baseline) with the training script's PyTorch eval on the stored
// test trajectories.
func TestAFAToyParity(t *testing.T) {
	dirs := afaToyDirs(t)
	py := torchPython(t)
	for _, c := range dirs {
		name, _ := filepath.Rel(afaToyRoot, c[0])
		t.Run(name, func(t *testing.T) { compareAFAToy(t, py, c[0], c[1]) })
	}
}

// TestAFAToyOptionsParity trains tiny filters for a few steps with the
// options the zoo checkpoints do not use (random orthogonal embedding,
// normalized q/k with the paper's kernel, the RoPE and position-free
// baselines) and compares Go with PyTorch on them.
func TestAFAToyOptionsParity(t *testing.T) {
	if testing.Short() {
		t.Skip("trains four tiny models")
	}
	py := torchPython(t)
	small := []string{"--steps", "3", "--log-every", "1", "--embed-dim", "16", "--seq-len", "30", "--train-n", "4", "--test-n", "2"}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"afa_rotated_normqk_paper", []string{"--arch", "afa", "--channels", "8", "--heads", "2", "--embedding", "random_orthogonal", "--normalize-qk", "--kernel-form", "paper", "--setting", "c"}},
		{"afa_variance_nobias", []string{"--arch", "afa", "--channels", "4", "--noise", "variance", "--no-bias", "--setting", "a"}},
		{"softmax_rope", []string{"--arch", "softmax", "--positional", "rope", "--softmax-heads", "2", "--embedding", "random_orthogonal"}},
		{"softmax_none", []string{"--arch", "softmax", "--positional", "none", "--softmax-layers", "1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), c.name)
			args := append(append([]string{"train/afa_toy.py", "--out", dir}, small...), c.args...)
			if b, err := exec.Command(py, args...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, b)
			}
			compareAFAToy(t, py, dir, filepath.Join(dir, "data.safetensors"), "--pulled", "0,7,29")
		})
	}
}

// TestAFAToySize keeps the AFA toy entry within the zoo's 8 MB budget.
func TestAFAToySize(t *testing.T) {
	var total int64
	err := filepath.Walk(afaToyRoot, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %.2f MB", afaToyRoot, float64(total)/1e6)
	if total > 8<<20 {
		t.Errorf("%s holds %d bytes, more than 8 MiB", afaToyRoot, total)
	}
}
