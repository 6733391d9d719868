package probes

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// retrievalTile returns a tile of every query of sequence b, layer 0, head
// h, whose row t is row(t) (t + 1 weights).
func retrievalTile(b, h, T int, row func(t int) []float32) *hooks.AttnTile {
	a := make([]float32, T*T)
	for t := 0; t < T; t++ {
		copy(a[t*T:], row(t))
	}
	return &hooks.AttnTile{Batch: b, Layer: 0, Head: h, Rows: T, Stride: T, Alpha: a, T: T, DHead: 1, VStride: 1, V: make([]float32, T)}
}

// TestRetrievalScoreIdentities: a head whose attention is one-hot on the
// copy source scores 1; one-hot one key off scores 0; uniform attention
// puts 1/(t+1) on the source (source mass exactly its mean, argmax on key
// 0 by the first-maximum rule, so score 0), and uniform attention with
// small random noise lands its argmax on the source with probability
// 1/(t+1), so its score is that mean within sampling error.
func TestRetrievalScoreIdentities(t *testing.T) {
	const T, B = 40, 400
	one, err := CopySources(T, 4, 20, 16)
	if err != nil {
		t.Fatal(err)
	}
	var src []int
	for b := 0; b < B; b++ {
		src = append(src, one...)
	}
	c, err := NewRetrievalCollector(B, 1, 4, T, src)
	if err != nil {
		t.Fatal(err)
	}
	oneHot := func(at func(t int) int) func(t int) []float32 {
		return func(t int) []float32 {
			r := make([]float32, t+1)
			r[at(t)] = 1
			return r
		}
	}
	uniform := func(t int) []float32 {
		r := make([]float32, t+1)
		for j := range r {
			r[j] = 1 / float32(t+1)
		}
		return r
	}
	rng := rand.New(rand.NewPCG(3, 4))
	noisy := func(t int) []float32 {
		r := uniform(t)
		for j := range r {
			r[j] *= 1 + 1e-3*float32(rng.NormFloat64())
		}
		return r
	}
	sourceOr0 := func(t int) int { return max(one[t], 0) }
	offByOne := func(t int) int { return max(one[t]-1, 0) }
	for b := 0; b < B; b++ {
		for h, row := range []func(int) []float32{oneHot(sourceOr0), uniform, noisy, oneHot(offByOne)} {
			if err := c.ConsumeAttn(retrievalTile(b, h, T, row)); err != nil {
				t.Fatal(err)
			}
		}
	}
	heads, err := c.Scores([]int{0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var inv float64 // mean over the copy queries t = 20 … 34 of 1/(t+1)
	for q := 20; q <= 34; q++ {
		inv += 1 / float64(q+1) / 15
	}
	steps := int64(B * 15)
	for _, h := range heads {
		if h.Steps != steps {
			t.Errorf("head %d: %d steps, want %d (15 copy queries × %d sequences)", h.Head, h.Steps, steps, B)
		}
	}
	check := func(what string, got, want, tol float64) {
		t.Helper()
		if math.Abs(got-want) > tol || math.IsNaN(got) {
			t.Errorf("%s = %.6g, want %.6g ± %.2g", what, got, want, tol)
		}
	}
	check("one-hot on the source: score", heads[0].Score, 1, 0)
	check("one-hot on the source: source mass", heads[0].SourceMass, 1, 0)
	check("uniform: score (argmax on key 0)", heads[1].Score, 0, 0)
	check("uniform: source mass", heads[1].SourceMass, inv, 1e-6)
	// binomial standard error of the pooled score: √(p(1−p)/steps)
	check("uniform with noise: score", heads[2].Score, inv, 4*math.Sqrt(inv*(1-inv)/float64(steps)))
	check("one-hot one key before the source: score", heads[3].Score, 0, 0)

	// Counting only some steps (the ones the model copies): the one-hot
	// head still scores 1 over them, and no step gives NaN.
	counted := make([]bool, B*T)
	for i := range counted {
		counted[i] = i%T == 25
	}
	heads, err = c.Scores([]int{0}, counted)
	if err != nil {
		t.Fatal(err)
	}
	if heads[0].Steps != B || heads[0].Score != 1 || heads[3].Score != 0 {
		t.Errorf("counted steps: %+v", heads)
	}
	heads, _ = c.Scores([]int{0}, make([]bool, B*T))
	if heads[0].Steps != 0 || !math.IsNaN(heads[0].Score) || !math.IsNaN(heads[0].SourceMass) {
		t.Errorf("no counted steps: %+v, want NaN scores", heads[0])
	}
}

// TestRetrievalRefusals: bad shapes and sources name what is wrong.
func TestRetrievalRefusals(t *testing.T) {
	if _, err := CopySources(10, 0, 4, 6); err == nil {
		t.Error("overlapping copies accepted")
	}
	if _, err := NewRetrievalCollector(1, 1, 1, 4, []int{-1, -1, 3, -1}); err == nil {
		t.Error("a source after its query accepted")
	}
	c, _ := NewRetrievalCollector(1, 2, 1, 4, []int{-1, -1, 1, 2})
	if _, err := c.Scores([]int{1}, nil); err == nil {
		t.Error("scores of a layer never streamed accepted")
	}
}

// BenchmarkRetrievalCollector: one T = 4096 pass of the generated gated
// checkpoint of the other benchmarks, plain and with the retrieval
// collector on every layer (the second half of the pass a copy of the
// first: 2047 copy queries per head).
func BenchmarkRetrievalCollector(b *testing.B) {
	m, ids := benchModel(b, model.ArchGated)
	c := &m.Config
	src, err := CopySources(benchT, 0, benchT/2, benchT/2)
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"forward", "retrieval"} {
		b.Run(name, func(b *testing.B) {
			runPasses(b, m, ids, func() *hooks.Set {
				hs := &hooks.Set{}
				if name == "retrieval" {
					rc, err := NewRetrievalCollector(1, c.Layers, c.Heads, benchT, src)
					if err != nil {
						b.Fatal(err)
					}
					hs.Stream(-1, rc)
				}
				return hs
			})
		})
	}
}
