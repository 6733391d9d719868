package analysis

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/model"
)

// genModel writes a small random checkpoint into a temporary folder and
// returns the folder; poison, when set, may change its tensors first.
func genModel(t testing.TB, arch model.Arch, layers, dModel, heads, kv, vocab, maxPos int, poison func([]checkpoint.Tensor)) string {
	t.Helper()
	cfg, err := model.SmallConfig(arch, model.Size{Layers: layers, DModel: dModel, Heads: heads, KVHeads: kv, Vocab: vocab, MaxPos: maxPos})
	if err != nil {
		t.Fatal(err)
	}
	_, tensors, err := model.Generate(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	if poison != nil {
		poison(tensors)
	}
	dir := filepath.Join(t.TempDir(), "model")
	if err := model.WriteHF(dir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	return dir
}

// randomStream returns n token ids in [lo, vocab), seeded.
func randomStream(n, lo, vocab int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = lo + rng.IntN(vocab-lo)
	}
	return ids
}

// newSweep loads dir and returns a Sweep over stream into out.
func newSweep(t testing.TB, dir string, stream []int, out string, opts results.SweepOptions, agg results.AggOptions) *Sweep {
	t.Helper()
	m, err := model.Load(dir, model.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	info, err := DescribeModel(m)
	if err != nil {
		t.Fatal(err)
	}
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	return &Sweep{RunSpec: RunSpec{Source: src, Stream: stream, Out: out, Threads: 2}, Model: m, Info: info, Options: opts, Agg: agg}
}

// relErr is |a − b|/|b| (absolute when b = 0); NaN = NaN counts as 0.
func relErr(a, b float64) float64 {
	if math.IsNaN(a) && math.IsNaN(b) {
		return 0
	}
	if b == 0 {
		return math.Abs(a)
	}
	return math.Abs(a-b) / math.Abs(b)
}

// sweepPass is the buckets pass file of (T, sample) in the sweep folder
// dir.
func sweepPass(dir string, T, sample int) string {
	return streamPassPath(dir, "buckets", results.Chunk{T: T, Sample: sample})
}

// readBucketPass reads and checks a sweep's buckets pass file: its record
// and rows.
func readBucketPass(path string) (results.StreamPass, []BucketRow, error) {
	rec, err := readStreamPass(path, "buckets")
	if err != nil {
		return rec, nil, err
	}
	rows, err := results.ReadTable[BucketRow](path)
	return rec, rows, err
}
