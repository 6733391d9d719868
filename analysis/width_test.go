package analysis

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/probes"
)

// TestSweepPerLayerWidths: a sweep of a model whose layers' heads differ
// in width (the golden Gemma 4 case: sliding layers 16 wide, global 32)
// records the widths in its manifest (model.layer_d_head), leaves σ₀² to
// each layer (sigma02 0), and predicts Fig. 3's λobs of each layer group
// with σ₀² = 1/(that group's width).
func TestSweepPerLayerWidths(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "golden", "gemma4_text")
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Skipf("golden data missing (%v): the shared golden folder is expected at ../shared/golden", err)
	}
	stream := randomStream(300, 0, 512, 9)
	opts := DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.Bucket = "40,64", 2, 8
	agg := DefaultAggOptions()
	agg.Bootstrap = 50
	sw := newSweep(t, dir, stream, t.TempDir(), opts, agg)
	man, res, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	widths := man.Model.LayerDHead
	if len(widths) != 6 || slices.Min(widths) != 16 || slices.Max(widths) != 32 {
		t.Fatalf("manifest layer_d_head %v, want the six layers' widths 16 and 32", widths)
	}
	if man.Sweep.Probe.Sigma02 != 0 {
		t.Fatalf("manifest sigma02 %v, want 0 (1/d_head of each layer)", man.Sweep.Probe.Sigma02)
	}
	groups := map[string]bool{}
	for _, r := range res.Fig3 {
		w := 16.0
		if strings.Contains(r.Layers, "global") {
			w = 32
		}
		want := probes.LambdaREML(r.NEff, r.SMean, 1, 1/w)
		if math.IsNaN(r.LambdaPred) || relErr(r.LambdaPred, want) > 1e-12 {
			t.Errorf("fig3 T=%d %s: lambda_pred %v, Eq. 6 with σ₀² = 1/%v gives %v", r.T, r.Layers, r.LambdaPred, w, want)
		}
		groups[r.Layers] = true
	}
	if len(groups) != 2 {
		t.Fatalf("fig3 layer groups %v, want a local and a global one", groups)
	}
}
