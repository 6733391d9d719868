package probes

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/filterlens/probe/hooks"
)

const benchT, benchD = 4096, 128

// benchTile is one query row of length benchT (query benchT−1) with d_head
// benchD, as the model would stream it.
func benchTile() *hooks.AttnTile {
	rng := rand.New(rand.NewPCG(41, 42))
	return &hooks.AttnTile{Q0: benchT - 1, Rows: 1, Stride: benchT, Alpha: softmaxRow(rng, benchT, 3),
		T: benchT, DHead: benchD, VStride: benchD, V: randValues(rng, benchT, benchD, benchD, 0, 1)}
}

// BenchmarkCollectorRow measures Collector.ConsumeAttn on one row of
// T = 4096 keys with d_head = 128. "attn-flop/ns" is 2·T·d (the flops of
// the row's own α·V product, the attention cost the diagnostic rides on)
// divided by the time per row: the rate at which the attention itself
// would have to run for the diagnostic to cost as much as it.
func BenchmarkCollectorRow(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts CollectorOptions
	}{
		{"default", CollectorOptions{}},
		{"keep-per-dim", CollectorOptions{KeepPerDim: true}},
		{"sandwich", CollectorOptions{Lambda: LambdaOptions{Form: Sandwich}}},
		{"expanded", CollectorOptions{Moments: Expanded}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			tile := benchTile()
			c, err := NewCollector(1, 1, 1, benchT, benchD, bc.opts)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.ConsumeAttn(tile); err != nil {
					b.Fatal(err)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(ns, "ns/row")
			b.ReportMetric(2*benchT*benchD/ns, "attn-flop/ns")
		})
	}
}

// BenchmarkAttentionRowReference is a plain float32 Go attention row of the
// same shape (q·k_j for every key, softmax, Σ α_j v_j: 4·T·d flops), the
// yardstick for BenchmarkCollectorRow on a CPU forward pass.
func BenchmarkAttentionRowReference(b *testing.B) {
	rng := rand.New(rand.NewPCG(43, 44))
	K := randValues(rng, benchT, benchD, benchD, 0, 1)
	V := randValues(rng, benchT, benchD, benchD, 0, 1)
	q := randValues(rng, 1, benchD, benchD, 0, 1)
	logits := make([]float32, benchT)
	out := make([]float32, benchD)
	scale := float32(1 / math.Sqrt(benchD))
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		mx := float32(math.Inf(-1))
		for j := range logits {
			k := K[j*benchD : (j+1)*benchD]
			var s float32
			for i, x := range q {
				s += x * k[i]
			}
			logits[j] = s * scale
			mx = max(mx, logits[j])
		}
		var z float32
		for j, l := range logits {
			logits[j] = float32(math.Exp(float64(l - mx)))
			z += logits[j]
		}
		clear(out)
		for j, a := range logits {
			a /= z
			v := V[j*benchD : (j+1)*benchD]
			for i, x := range v {
				out[i] += a * x
			}
		}
	}
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(ns, "ns/row")
	b.ReportMetric(4*benchT*benchD/ns, "flop/ns")
}
