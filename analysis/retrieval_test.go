package analysis

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestRetrievalMatchesPattern: the streamed retrieval scores of a
// Gemma-3-style model (sliding window 16 on layers 0–2, so some copy
// sources are outside the window) equal those counted from the
// materialized attention pattern.
func TestRetrievalMatchesPattern(t *testing.T) {
	cfg, err := model.SmallConfig(model.ArchGemma3, model.Size{Layers: 4, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 101, MaxPos: 512})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sliding = 16
	_, tensors, err := model.Generate(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "model")
	if err := model.WriteHF(dir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	o := DefaultRetrievalOptions()
	o.Segment, o.Gap, o.Samples, o.Steps = 12, 5, 2, StepsAll
	out := filepath.Join(t.TempDir(), "out")
	run := &RetrievalRun{RunSpec: RunSpec{Dir: dir, Out: out, Threads: 2}, Options: o}
	man, rows, err := run.Run()
	if err != nil {
		t.Fatal(err)
	}
	T := 29
	if man.T != T || len(rows) != 16 || len(man.Samples) != 2 || man.Samples[0].CopyQueries != 11 {
		t.Fatalf("manifest T %d, %d rows, samples %+v", man.T, len(rows), man.Samples)
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hits := map[[2]int]int64{}
	mass := map[[2]int]float64{}
	for s := 0; s < 2; s++ {
		ids, err := CopyTask(12, 5, 101, 1, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) != T || !slices.Equal(ids[:12], ids[17:]) {
			t.Fatalf("copy task %v", ids)
		}
		for _, id := range ids[12:17] {
			if slices.Contains(ids[:12], id) {
				t.Fatalf("filler id %d is in the segment %v", id, ids[:12])
			}
		}
		hs := &hooks.Set{}
		hs.Add(hooks.AttnPattern, func(_ string, l int, x *tensor.Dense) error {
			a := x.Data().([]float32) // [1, H, T, T]
			for h := 0; h < 4; h++ {
				for i := 1; i < 12; i++ {
					q, src := 16+i, i // query n + gap + i − 1 copies x[i]
					row := a[(h*T+q)*T : (h*T+q)*T+q+1]
					best := 0
					for j, v := range row {
						if v > row[best] {
							best = j
						}
					}
					if best == src {
						hits[[2]int{l, h}]++
					}
					mass[[2]int{l, h}] += float64(row[src]) / 22
				}
			}
			return nil
		})
		if _, err := m.Forward([][]int{ids}, model.Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
	}
	var outside bool
	for _, r := range rows {
		k := [2]int{r.Layer, r.Head}
		if r.Steps != 22 || r.Hits != hits[k] || relErr(r.SourceMass, mass[k]) > 1e-6 || relErr(r.Score, float64(hits[k])/22) > 1e-15 {
			t.Errorf("layer %d head %d: steps %d hits %d score %g mass %g; pattern: hits %d mass %g", r.Layer, r.Head, r.Steps, r.Hits, r.Score, r.SourceMass, hits[k], mass[k])
		}
		if (r.Kind == "local") != (r.Layer < 3) || (r.Window == 16) != (r.Layer < 3) {
			t.Errorf("layer %d: kind %q window %d", r.Layer, r.Kind, r.Window)
		}
		outside = outside || (r.Layer < 3 && r.SourceMass == 0)
	}
	if !outside {
		t.Error("no local head with zero source mass, though the sources 17 positions back lie outside the window 16")
	}
	var back results.RetrievalManifest
	b, err := os.ReadFile(filepath.Join(out, results.RetrievalManifestName))
	if err != nil || json.Unmarshal(b, &back) != nil || back.Kind != "retrieval" || back.Options.Steps != StepsAll {
		t.Errorf("manifest on disk: %v %+v", err, back.Options)
	}
	if _, err := results.ReadTable[results.RetrievalHeadRow](filepath.Join(out, "retrieval_heads.parquet")); err != nil {
		t.Error(err)
	}
	// Bad options name the option.
	for _, bad := range []results.RetrievalOptions{{Segment: 12, Samples: 1, Steps: "some"}, {Segment: 200, Samples: 1, Steps: StepsAll}, {Segment: 12, Samples: 0, Steps: StepsAll}} {
		if _, _, err := (&RetrievalRun{RunSpec: RunSpec{Dir: dir, Out: t.TempDir()}, Options: bad}).Run(); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}
