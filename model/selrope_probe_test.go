package model_test

import (
	"math"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// TestSelRoPEFeedsCollector: a Selective-RoPE LM streams its attention rows
// to the diagnostics engine like every other model: the Collector's n_eff
// (1/Σα²) and BOS mass (α_t0) equal those of the materialized pattern.
func TestSelRoPEFeedsCollector(t *testing.T) {
	sc := model.DefaultSelRoPEConfig()
	sc.UseGate, sc.UseBias = true, true
	cfg, err := model.SmallSelRoPEConfig(2, 32, 4, 61, 256, sc)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := model.Generate(cfg, 9)
	if err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 33
	ids := make([][]int, B)
	for b := range ids {
		ids[b] = make([]int, T)
		for i := range ids[b] {
			ids[b][i] = (7*b + 13*i + i*i) % cfg.Vocab
		}
	}
	col, err := probes.NewCollector(B, cfg.Layers, cfg.Heads, T, cfg.DHead, probes.CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, col)
	cap := hs.Capture("blocks.*.attn.hook_pattern")
	if _, err := m.Forward(ids, model.Options{Hooks: hs, TileRows: 8}); err != nil {
		t.Fatal(err)
	}
	for l := 0; l < cfg.Layers; l++ {
		p := cap.Get(hooks.Name("blocks.{l}.attn.hook_pattern", l)).Data().([]float32)
		for b := 0; b < B; b++ {
			for h := 0; h < cfg.Heads; h++ {
				for q := 0; q < T; q++ {
					row := p[((b*cfg.Heads+h)*T+q)*T:][:q+1]
					var s2 float64
					for _, a := range row {
						s2 += float64(a) * float64(a)
					}
					if got, want := mustGet(t, col, results.MetricNEff, b, l, h, q), 1/s2; math.Abs(got-want) > 1e-5*want {
						t.Fatalf("layer %d batch %d head %d query %d: n_eff %v, from the pattern %v", l, b, h, q, got, want)
					}
					if got, want := mustGet(t, col, results.MetricBOSMass, b, l, h, q), float64(row[0]); math.Abs(got-want) > 1e-6 {
						t.Fatalf("layer %d batch %d head %d query %d: BOS mass %v, pattern α_t0 %v", l, b, h, q, got, want)
					}
				}
			}
		}
	}
}

// mustGet is Collector.Get, failing the test on an error.
func mustGet(t *testing.T, col *probes.Collector, metric string, b, l, h, q int) float64 {
	t.Helper()
	x, err := col.Get(metric, b, l, h, q)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
