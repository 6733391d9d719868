package probes

import (
	"math/rand/v2"
	"syscall"
	"testing"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// nopDelta asks the model for the effective-attention rows and does
// nothing with them: the cost of the W stream alone.
type nopDelta struct{}

func (nopDelta) ConsumeAttn(*hooks.AttnTile) error  { return nil }
func (nopDelta) ConsumeDelta(*hooks.AttnTile) error { return nil }

// benchModel generates a random d_model 256 checkpoint of arch (4 layers, 8
// heads, 4 KV heads, vocabulary 1024: `probe generate`'s defaults) and
// benchT random ids.
func benchModel(b *testing.B, arch model.Arch) (*model.Model, [][]int) {
	m := smallModel(b, arch, model.Size{Layers: 4, DModel: 256, Heads: 8, KVHeads: 4, Vocab: 1024, MaxPos: 32768}, 1)
	cfg := m.Config
	rng := rand.New(rand.NewPCG(1, 1))
	ids := [][]int{make([]int, benchT)}
	for i := range ids[0] {
		ids[0][i] = rng.IntN(cfg.Vocab)
	}
	return m, ids
}

// runPasses runs b.N forward passes with the hooks of mk and reports the
// CPU seconds (user + sys) per pass, the figure docs/diagnostics.md quotes:
// on a shared machine wall time varies with the load, CPU time much less.
func runPasses(b *testing.B, m *model.Model, ids [][]int, mk func() *hooks.Set) {
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Forward(ids, model.Options{Hooks: mk()}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := float64(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) / 1e9
	b.ReportMetric(cpu/float64(b.N), "cpu-s/pass")
}

// BenchmarkGDNFilter: one T = 4096 pass of a Qwen3.5-shaped checkpoint (3
// Gated DeltaNet layers of 16 value heads, d_k = d_v = 32, one gated
// softmax layer) plain, with the recurrence only (no-w-rows), with the
// model's W stream into a consumer that does nothing, and with the filter
// without and with the dispersion.
func BenchmarkGDNFilter(b *testing.B) {
	m, ids := benchModel(b, model.ArchQwen35)
	dn := m.Config.DeltaNet
	for _, bc := range []struct {
		name string
		opt  *GDNOptions
	}{
		{"forward", nil}, {"no-w-rows", &GDNOptions{NoRows: true}}, {"w-stream", nil},
		{"no-dispersion", &GDNOptions{NoDispersion: true}}, {"all", &GDNOptions{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			runPasses(b, m, ids, func() *hooks.Set {
				hs := &hooks.Set{}
				switch {
				case bc.name == "w-stream":
					for _, l := range dn.LinearLayers() {
						hs.Stream(l, nopDelta{})
					}
				case bc.opt != nil:
					f, err := NewGDNFilter(1, benchT, m.Config.Layers, dn.LinearLayers(), dn.ValueHeads, dn.KeyDim, dn.ValueDim, *bc.opt)
					if err != nil {
						b.Fatal(err)
					}
					f.Register(hs)
				}
				return hs
			})
		})
	}
}

// BenchmarkSinkCollector: one T = 4096 pass of a Qiu headwise-gated
// checkpoint plain and with probe sinks' measurements (the collector on
// every layer and the gate statistics).
func BenchmarkSinkCollector(b *testing.B) {
	m, ids := benchModel(b, model.ArchGated)
	c := &m.Config
	for _, name := range []string{"forward", "sinks"} {
		b.Run(name, func(b *testing.B) {
			runPasses(b, m, ids, func() *hooks.Set {
				hs := &hooks.Set{}
				if name == "sinks" {
					sc, err := NewSinkCollector(1, c.Layers, c.Heads, benchT, nil, true)
					if err != nil {
						b.Fatal(err)
					}
					hs.Stream(-1, sc)
					var scratch []float32
					hs.Add("blocks.*.attn.hook_gate", func(_ string, _ int, x *tensor.Dense) error {
						for h := 0; h < c.Heads; h++ {
							_, scratch = HeadGateStats(x.Data().([]float32), 1, benchT, c.Heads, c.GatePerHead(), h, 0.1, scratch)
						}
						return nil
					})
				}
				return hs
			})
		})
	}
}
