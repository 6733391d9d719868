package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// TestMassiveCommandGolden runs probe massive on sequence 0 of the Qwen3.5
// golden case (T = 47 predicted tokens from its 48 ids) and checks: every
// layer's top entries (position, channel, value) and median |h| against
// probes.TopAbs and MedianAbs of the golden hidden.{l+1} (the residual
// after layer l); the plain pass's NLL against the golden logits; and each
// intervention's NLL against a forward pass that replaces the entries the
// table names, at the layer it names, through a hook written here.
func TestMassiveCommandGolden(t *testing.T) {
	dir := filepath.Join(goldenDir, "qwen35_text")
	if _, err := os.Stat(filepath.Join(dir, "golden.safetensors")); err != nil {
		t.Skipf("golden data not available at %s (it comes with ../shared in CI): %v", dir, err)
	}
	gold, err := checkpoint.OpenFile(filepath.Join(dir, "golden.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer gold.Close()
	idsFile, ids, n := goldenIDs(t, gold, false)
	tmp := filepath.Dir(idsFile)
	out := filepath.Join(tmp, "out")
	const topK = 4
	code, _, stderr := probe(t, "massive", "--model", dir, "--ids", idsFile, "--lengths", fmt.Sprint(n-1), "--top-k", fmt.Sprint(topK),
		"--entries", "2", "--out", out)
	if code != 0 {
		t.Fatalf("probe massive: exit %d: %s", code, stderr)
	}
	tops, err := results.ReadTable[results.MassiveTopRow](filepath.Join(out, "massive_top.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	ppls, err := results.ReadTable[results.MassivePPLRow](filepath.Join(out, "massive_ppl.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	T, D := n-1, m.DModel
	if len(tops) != m.Config.Layers*topK || len(ppls) != 3 {
		t.Fatalf("%d top rows and %d perplexity rows, want %d and 3", len(tops), len(ppls), m.Config.Layers*topK)
	}
	for _, r := range tops {
		h, err := gold.Float32(fmt.Sprintf("hidden.%d", r.Layer+1))
		if err != nil {
			t.Fatal(err)
		}
		h = h[:T*D] // sequence 0, first T positions (the pass sees ids 0 … T−1)
		ref := probes.TopAbs(h, T, D, topK)[r.Rank]
		med, _ := probes.MedianAbs(h, nil)
		if r.Position != ref.Position || r.Channel != ref.Channel || math.Abs(r.Value-float64(ref.Value)) > 2e-4 ||
			math.Abs(r.MedianAbs-med) > 2e-4 || math.Abs(r.Ratio-math.Abs(r.Value)/r.MedianAbs) > 1e-12 {
			t.Errorf("layer %d rank %d: (%d, %d) %v median %v; golden hidden.%d gives (%d, %d) %v median %v",
				r.Layer, r.Rank, r.Position, r.Channel, r.Value, r.MedianAbs, r.Layer+1, ref.Position, ref.Channel, ref.Value, med)
		}
	}
	logits, err := gold.Float32("logits")
	if err != nil {
		t.Fatal(err)
	}
	V := m.Vocab
	var ref float64
	for _, x := range analysis.TokenNLL(nil, logits[:T*V], V, ids[1:]) {
		ref += x / float64(T)
	}
	if ppls[0].Intervention != "none" || math.Abs(ppls[0].NLL-ref) > 1e-4 {
		t.Errorf("plain pass: %s NLL %v, golden logits give %v", ppls[0].Intervention, ppls[0].NLL, ref)
	}
	for _, p := range ppls[1:] {
		var entries []probes.Activation
		for _, r := range tops {
			if r.Layer == p.Layer && r.Rank < p.Entries {
				entries = append(entries, probes.Activation{Position: r.Position, Channel: r.Channel})
			}
		}
		hs := &hooks.Set{}
		hs.Add(hooks.Name("blocks.{l}.hook_resid_post", p.Layer), func(_ string, _ int, x *tensor.Dense) error {
			h := x.Data().([]float32)
			for _, a := range entries {
				v := float32(0)
				if p.Intervention == results.MassiveMean {
					var s float64
					for q := 0; q < T; q++ {
						s += float64(h[q*D+a.Channel])
					}
					v = float32(s / float64(T))
				}
				h[a.Position*D+a.Channel] = v
			}
			return nil
		})
		res, err := m.Forward([][]int{ids[:T]}, model.Options{Hooks: hs, Logits: true})
		if err != nil {
			t.Fatal(err)
		}
		var want float64
		for _, x := range analysis.TokenNLL(nil, res.Logits, V, ids[1:]) {
			want += x / float64(T)
		}
		if len(entries) != 2 || math.Abs(p.NLL-want) > 1e-9 || math.Abs(p.DNLL-(p.NLL-ppls[0].NLL)) > 1e-12 {
			t.Errorf("%s at layer %d on %d entries: NLL %v (Δ %v), the hook here gives %v", p.Intervention, p.Layer, len(entries), p.NLL, p.DNLL, want)
		}
	}
	code, _, stderr = probe(t, "massive", "--model", dir, "--ids", idsFile, "--lengths", "8", "--intervene", "half", "--out", filepath.Join(tmp, "out2"))
	if code == 0 || !strings.Contains(stderr, `intervention "half"`) {
		t.Errorf("--intervene half: exit %d, %q", code, stderr)
	}
}
