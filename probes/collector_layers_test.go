package probes

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
)

// TestCollectorLayers: a Collector with cells for some layers only
// (CollectorOptions.Layers; NewModelCollector on a hybrid Qwen3.5 model,
// whose Gated DeltaNet layers stream no rows) holds every metric of those
// layers bit for bit as a Collector of every layer does, in slices of
// len(Layers)/L the length; Get reads NaN for the other layers, Index
// panics there, and gates and rows of those layers are ignored; bad layer
// lists are refused naming the field.
func TestCollectorLayers(t *testing.T) {
	m := smallModel(t, model.ArchQwen35, model.Size{Layers: 8, DModel: 128, Heads: 4, KVHeads: 2, Vocab: 512, MaxPos: 4096}, 3)
	cfg := m.Config
	soft := cfg.SoftmaxLayers()
	if len(soft) == 0 || len(soft) == cfg.Layers {
		t.Fatalf("want a hybrid model, softmax layers %v of %d", soft, cfg.Layers)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	const T = 150
	ids := [][]int{make([]int, T)}
	for i := range ids[0] {
		ids[0][i] = rng.IntN(cfg.Vocab)
	}
	all, err := NewCollector(1, cfg.Layers, cfg.Heads, T, cfg.ValueDim(), CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	some, err := NewModelCollector(1, &m.Config, T, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := some.Options().Layers; len(got) != len(soft) {
		t.Fatalf("NewModelCollector's layers %v, want the softmax layers %v", got, soft)
	}
	for _, c := range []*Collector{all, some} { // Bytes: 4·M·L'·H·T (docs/performance.md, "Peak memory")
		if want := int64(4 * len(c.Metrics()) * len(c.Options().Layers) * cfg.Heads * T); c.Bytes() != want {
			t.Errorf("Bytes() = %d, want 4·%d metrics·%d layers·%d heads·%d = %d", c.Bytes(), len(c.Metrics()), len(c.Options().Layers), cfg.Heads, T, want)
		}
	}
	for _, c := range []*Collector{all, some} {
		if _, err := m.Forward(ids, model.Options{Hooks: c.Hooks(&m.Config), TileRows: 32}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range all.Metrics() {
		a, _ := all.Metric(name)
		s, _ := some.Metric(name)
		if len(s)*cfg.Layers != len(a)*len(soft) {
			t.Fatalf("%s: %d cells, want %d/%d of %d", name, len(s), len(soft), cfg.Layers, len(a))
		}
		for _, l := range soft {
			for h := 0; h < cfg.Heads; h++ {
				for q := 0; q < T; q++ {
					x, y := a[all.Index(0, l, h, q)], s[some.Index(0, l, h, q)]
					if math.Float32bits(x) != math.Float32bits(y) {
						t.Fatalf("%s layer %d head %d query %d: %v, want %v (all layers)", name, l, h, q, y, x)
					}
				}
			}
		}
		if name == results.MetricGate || name == results.MetricNEff {
			if v, err := some.Get(name, 0, soft[0], 1, T-1); err != nil || math.IsNaN(v) {
				t.Fatalf("%s of a softmax layer: %v, %v", name, v, err)
			}
		}
	}
	gdn := 0 // a Gated DeltaNet layer
	if v, err := some.Get(results.MetricNEff, 0, gdn, 0, 0); err != nil || !math.IsNaN(v) {
		t.Fatalf("Get on a layer without cells: %v, %v; want NaN, nil", v, err)
	}
	if _, err := some.Get(results.MetricNEff, 0, cfg.Layers, 0, 0); err == nil {
		t.Fatal("Get beyond the last layer: no error")
	}
	// rows and gates of a layer without cells are ignored, and the
	// layers with cells keep their values
	before, _ := some.Metric(results.MetricNEff)
	before = append([]float32(nil), before...)
	syn := newSynth(rng, 1, cfg.Heads, T, cfg.ValueDim())
	for _, tile := range tiles(syn.attn, syn.v, 1, cfg.Heads, T, cfg.ValueDim(), 0, gdn, 0, 16) {
		if err := some.ConsumeAttn(tile); err != nil {
			t.Fatal(err)
		}
	}
	some.SetGate(0, gdn, 0, 0, 0.5)
	if err := some.SetLayerGates(gdn, make([]float32, T*cfg.Heads), 1); err != nil {
		t.Fatal(err)
	}
	after, _ := some.Metric(results.MetricNEff)
	for i := range after {
		if math.Float32bits(after[i]) != math.Float32bits(before[i]) {
			t.Fatalf("cell %d changed by rows of a layer without cells: %v → %v", i, before[i], after[i])
		}
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "no cells") {
				t.Fatalf("Index on a layer without cells: recover() = %v", r)
			}
		}()
		some.Index(0, gdn, 0, 0)
	}()

	for _, bad := range [][]int{{1, 1}, {2, 1}, {-1}, {cfg.Layers}} {
		_, err := NewCollector(1, cfg.Layers, cfg.Heads, T, cfg.ValueDim(), CollectorOptions{Layers: bad})
		if err == nil || !strings.Contains(err.Error(), "CollectorOptions.Layers") {
			t.Errorf("Layers %v: err = %v", bad, err)
		}
	}
}
