package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/filterlens/probe/hooks"
)

// benchLengths are the sequence lengths of BenchmarkForward: 1024, or the
// comma-separated list in $PROBE_BENCH_T (e.g. PROBE_BENCH_T=1024,4096).
func benchLengths(b *testing.B) []int {
	env := os.Getenv("PROBE_BENCH_T")
	if env == "" {
		return []int{1024}
	}
	var ts []int
	for _, f := range strings.Split(env, ",") {
		T, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || T <= 0 {
			b.Fatalf("PROBE_BENCH_T=%q: want a comma-separated list of positive lengths", env)
		}
		ts = append(ts, T)
	}
	return ts
}

// cpuSeconds returns the user+system CPU time of this process so far. On a
// machine shared with other work, CPU time per operation is the steadier
// figure for comparing kernels (wall time includes waiting for a core).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// discardMoments is a hooks.MomentsConsumer that drops what it gets: the cost
// of the pass's own moment computation, without any diagnostic on top.
type discardMoments struct{}

func (discardMoments) ConsumeAttn(*hooks.AttnTile) error       { return nil }
func (discardMoments) ConsumeMoments(*hooks.AttnMoments) error { return nil }

// BenchmarkForward runs the Qwen3-shaped model of the performance issue
// (41M parameters: d_model 512, 8 layers, 8 heads / 4 KV heads, head_dim 64,
// MLP 1536, vocabulary 32000) on one sequence, without logits: "plain", and
// "moments" with a hooks.MomentsConsumer on every layer (the float64 moments the
// diagnostics need, consumer discarding them). Reports tokens/s and
// GFLOP/s of the forward pass (matrix products only, 2·params·T for the
// projections plus 2·2·T²/2·H·dh per layer for the causal half of q·kᵀ and
// α·v; the moments' float64 products are not counted).
func BenchmarkForward(b *testing.B) {
	cfg, err := SmallConfig(ArchQwen3, Size{Layers: 8, DModel: 512, Heads: 8, KVHeads: 4, Vocab: 32000, MaxPos: 32768})
	if err != nil {
		b.Fatal(err)
	}
	cfg.DMLP = 1536
	m, _, err := Generate(cfg, 1)
	if err != nil {
		b.Fatal(err)
	}
	for _, T := range benchLengths(b) {
		for _, mode := range []string{"plain", "moments"} {
			b.Run(fmt.Sprintf("%s/T=%d/%s", BLAS(), T, mode), func(b *testing.B) {
				ids := seqs(1, T, cfg.Vocab)
				opt := Options{}
				if mode == "moments" {
					opt.Hooks = &hooks.Set{}
					opt.Hooks.Stream(-1, discardMoments{})
				}
				cpu0 := cpuSeconds()
				for i := 0; i < b.N; i++ {
					if _, err := m.Forward(ids, opt); err != nil {
						b.Fatal(err)
					}
				}
				perLayer := 2.0*float64(T)*float64(cfg.DModel*(cfg.Heads*cfg.DHead*2+cfg.KVHeads*cfg.DHead*2)+3*cfg.DModel*cfg.DMLP) +
					4.0*float64(T)*float64(T)/2*float64(cfg.Heads*cfg.DHead)
				flops := perLayer * float64(cfg.Layers)
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(T)/sec, "tokens/s")
				b.ReportMetric(flops/sec/1e9, "GFLOP/s")
				b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op")
			})
		}
	}
}

// BenchmarkAttentionTile compares query-tile sizes for one layer's
// attention of the benchmark shape (8 heads / 4 KV heads, head_dim 64) at
// T = 4096 (or the first of $PROBE_BENCH_T), with the moments on; at tile
// 64 also with learned sink logits.
func BenchmarkAttentionTile(b *testing.B) {
	T := 4096
	if os.Getenv("PROBE_BENCH_T") != "" {
		T = benchLengths(b)[0]
	}
	const H, KV, dh = 8, 4, 64
	rng := rand.New(rand.NewPCG(5, 6))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		return x
	}
	q, k, v := randn(T*H*dh), randn(T*KV*dh), randn(T*KV*dh)
	z := make([]float32, T*H*dh)
	sinks := []float32{0.5, -1, 2, 0, 1, -0.5, 3, 0.25} // gpt-oss's learned sink logits, one per head
	for _, c := range []struct {
		tile  int
		sinks []float32
	}{{16, nil}, {32, nil}, {64, nil}, {64, sinks}, {128, nil}, {256, nil}} {
		tile, name := c.tile, fmt.Sprintf("%s/T=%d/tile=%d", BLAS(), T, c.tile)
		if c.sinks != nil {
			name += "/sinks"
		}
		b.Run(name, func(b *testing.B) {
			a := &attnArgs{batch: 1, T: T, heads: H, kvHeads: KV, dHead: dh, scale: 0.125, sinks: c.sinks,
				q: q, k: k, v: v, z: z, consumers: []hooks.AttnConsumer{discardMoments{}}, tileRows: tile}
			cpu0 := cpuSeconds()
			defer func() { b.ReportMetric((cpuSeconds()-cpu0)/float64(b.N), "cpu-s/op") }()
			for i := 0; i < b.N; i++ {
				if err := causalAttention(a); err != nil {
					b.Fatal(err)
				}
			}
			flops := 4.0 * float64(T) * float64(T) / 2 * H * dh
			b.ReportMetric(flops/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkSoftmaxTile measures the softmax of a 64 × 4096 score tile with
// and without the moments' row statistics, and with and without a learned
// sink logit (ns per weight).
func BenchmarkSoftmaxTile(b *testing.B) {
	const rows, T = 64, 4096
	rng := rand.New(rand.NewPCG(7, 8))
	src := make([]float32, rows*T)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * 3)
	}
	s := make([]float32, len(src))
	for _, stats := range []bool{false, true} {
		for _, sink := range []float32{noSink, 1.5} {
			name := fmt.Sprintf("%s/stats=%v", BLAS(), stats)
			var sm []float32
			if sink != noSink {
				name += "/sink"
				sm = make([]float32, rows)
			}
			b.Run(name, func(b *testing.B) {
				var s1, s2, ent []float64
				if stats {
					s1, s2, ent = make([]float64, rows), make([]float64, rows), make([]float64, rows)
				}
				for i := 0; i < b.N; i++ {
					copy(s, src)
					softmaxTile(s, rows, T, T-rows, 0, 0, sink, sm, s1, s2, ent, nil, nil)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(rows*T), "ns/weight")
			})
		}
	}
}

// BenchmarkExpf compares expf with float32(math.Exp(float64(x))).
func BenchmarkExpf(b *testing.B) {
	xs := make([]float32, 4096)
	for i := range xs {
		xs[i] = -float32(i) / 256
	}
	var sink float32
	b.Run("expf", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, x := range xs {
				sink += expf(x)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(xs)), "ns/exp")
	})
	b.Run("math.Exp", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			for _, x := range xs {
				sink += float32(math.Exp(float64(x)))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(xs)), "ns/exp")
	})
	_ = sink
}

// BenchmarkSgemmPeak measures the float32 matrix product rate the forward
// pass can get: C[n×n] = A·B with n = 2048, the rows split across
// GOMAXPROCS goroutines, one single-threaded BLAS call each (as linear
// does). scripts/bench/compare.sh takes the best of several runs as the
// machine's sgemm peak, beside torch.matmul's.
func BenchmarkSgemmPeak(b *testing.B) {
	const n = 2048
	x := make([]float32, n*n)
	for i := range x {
		x[i] = float32(i%17) - 8
	}
	c := make([]float32, n*n)
	b.Run(BLAS(), func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			linear(c, x, n, n, f32Weight(x, n), n, nil)
		}
		b.ReportMetric(2*n*n*n/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
	})
}
