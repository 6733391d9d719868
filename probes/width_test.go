package probes

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// TestCollectorPerLayerWidths: on a model whose layers' heads differ in
// width (the golden Gemma 4 case: sliding layers 16 wide, global layers
// 32), NewModelCollector's cells, on both kernels, equal the row
// functions (rowWant: n_eff, S̄, λobs with σ₀² = 1/width of the layer, K,
// first-token mass…) applied to the hook_pattern and hook_v of the same
// pass; the per-dimension S of a narrow layer fills its first 16 places
// of the DHead = 32 per cell and leaves the rest NaN.
func TestCollectorPerLayerWidths(t *testing.T) {
	dir := filepath.Join(goldenDir(), "gemma4_text")
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		t.Skipf("golden data missing (%v): the shared golden folder is expected at %s", err, goldenDir())
	}
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &m.Config
	widths := map[int]bool{}
	for l := 0; l < cfg.Layers; l++ {
		widths[cfg.LayerValueDim(l)] = true
	}
	if len(widths) < 2 {
		t.Fatalf("the gemma4_text case's layers all have one head width %v: the test needs two", widths)
	}
	const T = 23
	ids := make([]int, T)
	for i := range ids {
		ids[i] = (7*i + 3) % cfg.Vocab
	}
	for _, k := range []Kernel{MatrixKernel, RowKernel} {
		t.Run(k.String(), func(t *testing.T) {
			col, err := NewModelCollector(1, cfg, T, CollectorOptions{Kernel: k, KeepPerDim: true})
			if err != nil {
				t.Fatal(err)
			}
			hs := col.Hooks(cfg)
			cp := hs.Capture("blocks.*.attn.hook_pattern", "blocks.*.attn.hook_v")
			if _, err := m.Forward([][]int{ids}, model.Options{Hooks: hs, TileRows: 8}); err != nil {
				t.Fatal(err)
			}
			H := cfg.Heads
			worst := 0.0
			for l := 0; l < cfg.Layers; l++ {
				w := col.LayerDHead(l)
				if w != cfg.LayerValueDim(l) {
					t.Fatalf("layer %d: LayerDHead %d, config %d", l, w, cfg.LayerValueDim(l))
				}
				pat := cp.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
				vt := cp.Get(hooks.Name("blocks.{l}.attn.hook_v", l))
				v := vt.Data().([]float32)
				KV := vt.Shape()[2]
				if got := vt.Shape()[3]; got != w {
					t.Fatalf("layer %d: hook_v heads are %d wide, the collector reads %d", l, got, w)
				}
				for h := 0; h < H; h++ {
					kv := h / (H / KV)
					for q := 0; q < T; q++ {
						alpha := pat[(h*T+q)*T:][:q+1]
						want, S, _ := rowWant(alpha, func(j int) []float32 { return v[(j*KV+kv)*w:][:w] }, w, REMLPrior)
						for name, x := range want {
							got, err := col.Get(name, 0, l, h, q)
							if err != nil {
								t.Fatal(err)
							}
							d := math.Abs(got-x) / max(math.Abs(x), 1e-6)
							worst = max(worst, d)
							if d > 2e-5 {
								t.Fatalf("layer %d (width %d) head %d query %d: %s %v, row functions %v", l, w, h, q, name, got, x)
							}
						}
						for i := 0; i < col.DHead; i++ {
							got, _ := col.GetDim(results.MetricS, 0, l, h, q, i)
							switch {
							case i >= w && !math.IsNaN(got):
								t.Fatalf("layer %d (width %d): S[%d] = %v beyond the layer's width, want NaN", l, w, i, got)
							case i < w && math.Abs(got-S[i]) > 2e-5*math.Abs(S[i])+1e-9:
								t.Fatalf("layer %d head %d query %d: S[%d] %v, row functions %v", l, h, q, i, got, S[i])
							}
						}
					}
				}
			}
			t.Logf("%s: worst relative difference %.1e over widths %v", k, worst, fmt.Sprint(widths))
		})
	}
}
