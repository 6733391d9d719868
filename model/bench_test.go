package model

import (
	"fmt"
	"testing"
)

// BenchmarkForward runs the Qwen3-shaped model of the performance issue
// (41M parameters: d_model 512, 8 layers, 8 heads / 4 KV heads, head_dim 64,
// MLP 1536, vocabulary 32000) on one sequence, without logits. Reports
// tokens/s and GFLOP/s (matrix products only: 2·params·T for the
// projections plus 4·T²/2·d per layer for attention).
func BenchmarkForward(b *testing.B) {
	cfg, err := SmallConfig(ArchQwen3, 8, 512, 8, 4, 32000, 32768)
	if err != nil {
		b.Fatal(err)
	}
	cfg.DMLP = 1536
	m, _ := Generate(cfg, 1)
	for _, T := range []int{256, 1024} {
		b.Run(fmt.Sprintf("%s/T=%d", BLAS(), T), func(b *testing.B) {
			ids := seqs(1, T, cfg.Vocab)
			for i := 0; i < b.N; i++ {
				if _, err := m.Forward(ids, Options{}); err != nil {
					b.Fatal(err)
				}
			}
			perLayer := 2.0*float64(T)*float64(cfg.DModel*(cfg.Heads*cfg.DHead*2+cfg.KVHeads*cfg.DHead*2)+3*cfg.DModel*cfg.DMLP) +
				4.0*float64(T)*float64(T)/2*float64(cfg.Heads*cfg.DHead)
			flops := perLayer * float64(cfg.Layers)
			sec := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(T)/sec, "tokens/s")
			b.ReportMetric(flops/sec/1e9, "GFLOP/s")
		})
	}
}
