package analysis

import (
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// benchLen is the context length of the pass benchmarks: PROBE_BENCH_T, or
// 4096 (scripts/bench_sweep.sh sets 16384 for the documented numbers).
func benchLen(b *testing.B) int {
	if s := os.Getenv("PROBE_BENCH_T"); s != "" {
		T, err := strconv.Atoi(s)
		if err != nil || T < 2 {
			b.Fatalf("PROBE_BENCH_T=%q: want a length ≥ 2", s)
		}
		return T
	}
	return 4096
}

// benchModel is the benchmark checkpoint: Qwen3-shaped, 4 layers,
// d_model 256, 8 heads, 4 KV heads (generated, not written to disk).
func benchModel(b *testing.B, T int) (*model.Model, []int) {
	cfg, err := model.SmallConfig(model.ArchQwen3, model.Size{Layers: 4, DModel: 256, Heads: 8, KVHeads: 4, Vocab: 1024, MaxPos: max(32768, T)})
	if err != nil {
		b.Fatal(err)
	}
	m, _, err := model.Generate(cfg, 3)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	ids := make([]int, T)
	for i := range ids {
		ids[i] = rng.IntN(cfg.Vocab)
	}
	return m, ids
}

// cpuTime is the process's user + system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPass measures one forward pass at benchLen tokens on the
// benchmark checkpoint: "forward" without any hook, "diagnostics" with the
// Collector streamed on every layer (what sweep runs per pass), and
// "diagnostics+buckets" adding the reduction to bucket rows. tokens/s is
// the throughput; the overhead of the diagnostics is the ratio of the
// ns/op of the first two. cpu-s/op (user + system CPU seconds of the
// process per pass) is reported too: on a shared machine it varies less
// than the wall clock.
func BenchmarkPass(b *testing.B) {
	T := benchLen(b)
	m, ids := benchModel(b, T)
	c := &m.Config
	run := func(b *testing.B, diag, buckets bool) {
		b.ReportAllocs()
		cpu0 := cpuTime()
		for i := 0; i < b.N; i++ {
			opt := model.Options{}
			var col *probes.Collector
			if diag {
				var err error
				col, err = probes.NewCollector(1, c.Layers, c.Heads, T, c.DHead, probes.CollectorOptions{})
				if err != nil {
					b.Fatal(err)
				}
				opt.Hooks = col.Hooks(c)
			}
			if _, err := m.Forward([][]int{ids}, opt); err != nil {
				b.Fatal(err)
			}
			if buckets {
				bucketRows(col, 0, T, 0, bucketEdges(T, 64, windowStart(T, 0.25), windowStart(T, 0.5)), false, false, nil)
			}
		}
		b.ReportMetric(float64(T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	}
	b.Run("forward", func(b *testing.B) { run(b, false, false) })
	b.Run("diagnostics", func(b *testing.B) { run(b, true, false) })
	b.Run("diagnostics+buckets", func(b *testing.B) { run(b, true, true) })
}
