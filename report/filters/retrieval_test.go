package filters

import (
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/model"
)

// TestRetrievalReport runs probe retrieval's analysis on a small random
// Gemma-3-style model, reads the folder back through Read and checks that
// the heat maps hold the retrieval_heads values, then draws the page.
func TestRetrievalReport(t *testing.T) {
	dir := genModel(t, model.ArchGemma3, model.Size{Layers: 3, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 128, MaxPos: 512})
	out := filepath.Join(t.TempDir(), "retrieval")
	o := analysis.DefaultRetrievalOptions()
	o.Segment, o.Gap, o.Samples, o.Steps = 24, 8, 2, analysis.StepsAll
	man, rows, err := (&analysis.RetrievalRun{RunSpec: analysis.RunSpec{Dir: dir, Out: out, Formats: []string{analysis.FormatParquet}, Threads: 1}, Options: o}).Run()
	if err != nil {
		t.Fatal(err)
	}
	r, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	f := figure(t, r, "retrieval-heads")
	if len(f.Panels) != 2 {
		t.Fatalf("%d panels, want score and source mass", len(f.Panels))
	}
	for _, row := range rows {
		i := row.Layer*4 + row.Head // layers 0–2 are the grid's rows
		for p, want := range []float64{row.Score, row.SourceMass} {
			if got := f.Panels[p].Heatmap.Z[i]; got != want {
				t.Errorf("panel %d cell (%d, %d) = %g, want %g", p, row.Layer, row.Head, got, want)
			}
		}
	}
	if len(man.Samples) != 2 || man.T != 56 {
		t.Errorf("manifest: %d samples, T = %d", len(man.Samples), man.T)
	}
	writeAndCheck(t, r, filepath.Join(t.TempDir(), "report"))
}
