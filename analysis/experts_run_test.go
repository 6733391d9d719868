package analysis

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
)

// TestExpertsRunEqualsExperts: the experts_load and experts_layers rows
// of a run (2 lengths × 3 samples, written and read back from Parquet)
// equal analysis.Experts on the same chunks' sequences, length by length,
// within float64 summation order (1e-12); every count is exact.
func TestExpertsRunEqualsExperts(t *testing.T) {
	dir := genModel(t, model.ArchMixtral, 3, 32, 4, 2, 128, 512, nil)
	stream := randomStream(300, 0, 128, 9)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	o := DefaultExpertsRunOptions()
	o.Lengths, o.Samples = []int{16, 32}, 3
	out := filepath.Join(t.TempDir(), "experts")
	man, loads, layers, err := (&ExpertsRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Threads: 2}, Options: o}).Run()
	if err != nil {
		t.Fatal(err)
	}
	if !man.Complete || man.Experts != 4 || man.TopK != 2 {
		t.Fatalf("manifest: complete %v, experts %d, top-k %d", man.Complete, man.Experts, man.TopK)
	}
	backLoads, err := results.ReadTable[results.ExpertLoadRow](filepath.Join(out, "experts_load.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	backLayers, err := results.ReadTable[results.ExpertLayerRow](filepath.Join(out, "experts_layers.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool {
		return a == b || (math.IsNaN(a) && math.IsNaN(b)) || math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b))
	}
	var wantLoads []results.ExpertLoadRow
	var wantLayers []results.ExpertLayerRow
	for _, T := range o.Lengths {
		var ids [][]int
		for _, c := range man.Chunks {
			if c.T == T {
				ids = append(ids, stream[c.Start:c.End])
			}
		}
		rep, err := Experts(m, ids, ExpertOptions{Batch: 1})
		if err != nil {
			t.Fatal(err)
		}
		wantLoads, wantLayers = append(wantLoads, rep.Loads...), append(wantLayers, rep.Layers...)
	}
	for name, got := range map[string][]results.ExpertLoadRow{"returned": loads, "parquet": backLoads} {
		if len(got) != len(wantLoads) || len(got) != 2*3*4 {
			t.Fatalf("%s experts_load: %d rows, want %d", name, len(got), len(wantLoads))
		}
		for i, g := range got {
			w := wantLoads[i]
			if g.T != w.T || g.Layer != w.Layer || g.Expert != w.Expert || g.Assignments != w.Assignments ||
				!near(g.Load, w.Load) || !near(g.FirstLoad, w.FirstLoad) || !near(g.RestLoad, w.RestLoad) ||
				!near(g.MeanWeight, w.MeanWeight) || !near(g.FirstTop1, w.FirstTop1) || !near(g.RestTop1, w.RestTop1) {
				t.Errorf("%s experts_load row %d: %+v, Experts gives %+v", name, i, g, w)
			}
		}
	}
	for name, got := range map[string][]results.ExpertLayerRow{"returned": layers, "parquet": backLayers} {
		if len(got) != len(wantLayers) || len(got) != 2*3 {
			t.Fatalf("%s experts_layers: %d rows, want %d", name, len(got), len(wantLayers))
		}
		for i, g := range got {
			w := wantLayers[i]
			if g.T != w.T || g.Layer != w.Layer || g.Tokens != w.Tokens || g.Sequences != 3 || g.FirstMode != w.FirstMode ||
				!near(g.Entropy, w.Entropy) || !near(g.EntropyFirst, w.EntropyFirst) || !near(g.EntropyRest, w.EntropyRest) ||
				!near(g.Margin, w.Margin) || !near(g.MarginFirst, w.MarginFirst) || !near(g.MarginRest, w.MarginRest) ||
				!near(g.FirstAgree, w.FirstAgree) || !near(g.RestAgree, w.RestAgree) {
				t.Errorf("%s experts_layers row %d: %+v, Experts gives %+v", name, i, g, w)
			}
		}
	}
}

// TestExpertsRunRefusesDense: a model without a mixture-of-experts layer
// is refused with its folder and family named; an unknown margin too.
func TestExpertsRunRefusesDense(t *testing.T) {
	dir := genModel(t, model.ArchQwen3, 1, 32, 4, 2, 128, 512, nil)
	stream := randomStream(100, 0, 128, 3)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	o := DefaultExpertsRunOptions()
	o.Lengths = []int{16}
	_, _, _, err := (&ExpertsRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: t.TempDir()}, Options: o}).Run()
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "qwen3") || !strings.Contains(err.Error(), "no mixture-of-experts layer") {
		t.Errorf("dense model: %v", err)
	}
	o.Margin = "gap"
	if _, _, _, err := (&ExpertsRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: t.TempDir()}, Options: o}).Run(); err == nil || !strings.Contains(err.Error(), `margin "gap"`) {
		t.Errorf("margin gap: %v", err)
	}
}
