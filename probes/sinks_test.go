package probes

import (
	"math"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// feedRows streams rows (row t has t+1 weights) of one (batch, layer,
// head) to c as tiles of two rows.
func feedRows(t *testing.T, c hooks.AttnConsumer, b, l, h int, rows [][]float32) {
	t.Helper()
	T := len(rows)
	for q0 := 0; q0 < T; q0 += 2 {
		n := min(2, T-q0)
		alpha := make([]float32, n*T)
		for r := 0; r < n; r++ {
			copy(alpha[r*T:], rows[q0+r])
		}
		tile := &hooks.AttnTile{Batch: b, Layer: l, Head: h, Q0: q0, Rows: n, Stride: T, Alpha: alpha, T: T, DHead: 1, VStride: 1, V: make([]float32, T)}
		if err := c.ConsumeAttn(tile); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSinkCollectorConstructed: two layers of two heads over T = 4; layer 1
// has a window of 2, so its queries 2 and 3 cannot see position 0 and are
// left out of ā_0. By hand:
//
//	layer 0 head 0: α[t,0] = 1, 0.5, 0.4, 0.3 → ā_0 = 0.55 (0.4 without query 0)
//	layer 0 head 1: α[t,0] = 1, 0.1, 0.1, 0.1 → ā_0 = 0.325 (0.1)
//	layer 1 head 0: α[t,0] = 1, 0.2, –, –   → ā_0 = 0.6 (0.2), 2 left out
//	layer 1 head 1: α[t,0] = 1, 0.5, –, –   → ā_0 = 0.75 (0.5), 2 left out
//
// so Sink_1^{0.3} = 100 % with query 0, 50 % without; Sink_1^{0.65} = 25 %
// (0.75 only) and 0 % without.
func TestSinkCollectorConstructed(t *testing.T) {
	rows := map[[2]int][][]float32{
		{0, 0}: {{1}, {0.5, 0.5}, {0.4, 0.3, 0.3}, {0.3, 0.1, 0.1, 0.5}},
		{0, 1}: {{1}, {0.1, 0.9}, {0.1, 0.8, 0.1}, {0.1, 0.2, 0.3, 0.4}},
		{1, 0}: {{1}, {0.2, 0.8}, {0, 0.5, 0.5}, {0, 0, 1, 0}},
		{1, 1}: {{1}, {0.5, 0.5}, {0, 0.25, 0.75}, {0, 0, 0.5, 0.5}},
	}
	for _, c := range []struct {
		first           bool
		means           [4]float64
		rate03, rate065 float64
		firstN          int64
	}{
		{true, [4]float64{0.55, 0.325, 0.6, 0.75}, 100, 25, 4},
		{false, [4]float64{0.4, 0.1, 0.2, 0.5}, 50, 0, 3},
	} {
		sc, err := NewSinkCollector(1, 2, 2, 4, []int{0, 2}, c.first)
		if err != nil {
			t.Fatal(err)
		}
		for k, r := range rows {
			feedRows(t, sc, 0, k[0], k[1], r)
		}
		heads := sc.Heads([]int{0, 1})
		var means []float64
		for i, h := range heads {
			wantLeft, wantN := int64(0), c.firstN
			if h.Layer == 1 {
				wantLeft, wantN = 2, c.firstN-2
			}
			if math.Abs(h.BOSMass-c.means[i]) > 1e-7 || h.LeftOut != wantLeft || h.BOSN != wantN || h.Rows != 4 {
				t.Errorf("first query %v, layer %d head %d: ā_0 %v left out %d of %d (n %d); want %v, %d, n %d", c.first, h.Layer, h.Head,
					h.BOSMass, h.LeftOut, h.Rows, h.BOSN, c.means[i], wantLeft, wantN)
			}
			means = append(means, h.BOSMass)
		}
		if r, n := results.SinkRate(means, 0.3); r != c.rate03 || n != 4 {
			t.Errorf("first query %v: Sink^0.3 = %v %% of %d heads, want %v %% of 4", c.first, r, n, c.rate03)
		}
		if r, _ := results.SinkRate(means, 0.65); r != c.rate065 {
			t.Errorf("first query %v: Sink^0.65 = %v %%, want %v %%", c.first, r, c.rate065)
		}
	}
	// layer 1 head 0's query 3 is one-hot on its visible keys: max 1, entropy 0
	sc, _ := NewSinkCollector(1, 2, 2, 4, []int{0, 2}, true)
	feedRows(t, sc, 0, 1, 0, [][]float32{{1}, {0.5, 0.5}, {0, 0.5, 0.5}, {0, 0, 1, 0}})
	h := sc.Heads([]int{1})[0]
	ln2 := math.Log(2)
	if math.Abs(h.Entropy-(2*ln2)/4) > 1e-12 || math.Abs(h.EntropyNorm-2.0/3) > 1e-12 || math.Abs(h.MaxWeight-0.75) > 1e-12 ||
		h.MaxLast != 1 || math.Abs(h.NEff-(1+2+2+1)/4.0) > 1e-12 {
		t.Errorf("entropy %v (want ln2/2), normalised %v (want 2/3), max %v (0.75), max last quarter %v (1), n_eff %v (1.5)",
			h.Entropy, h.EntropyNorm, h.MaxWeight, h.MaxLast, h.NEff)
	}
}

// TestSinkWindowOne: a Gemma 2 model whose sliding window is 1 attends,
// in its local layers, to the query's own position only: n_eff = 1,
// entropy 0 and largest weight 1 on every row (both in the SinkCollector
// and in the per-row Collector of probe diag), and only query 0 can see
// position 0 — the other T − 1 rows are left out of ā_0.
func TestSinkWindowOne(t *testing.T) {
	cfg, err := model.SmallConfig(model.ArchGemma2, model.Size{Layers: 2, DModel: 64, Heads: 2, KVHeads: 1, Vocab: 97, MaxPos: 128})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sliding = 1
	m, _, err := model.Generate(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	const T = 19
	ids := [][]int{make([]int, T)}
	for i := range ids[0] {
		ids[0][i] = (7*i + 3) % 97
	}
	window := make([]int, cfg.Layers)
	var local []int
	for l := range window {
		if cfg.SlidingLayers == nil || cfg.SlidingLayers[l] {
			window[l] = cfg.Sliding
			local = append(local, l)
		}
	}
	if len(local) == 0 {
		t.Fatalf("the generated Gemma 2 config has no sliding layers (SlidingLayers %v)", cfg.SlidingLayers)
	}
	sc, err := NewSinkCollector(1, cfg.Layers, cfg.Heads, T, window, true)
	if err != nil {
		t.Fatal(err)
	}
	col, err := NewCollector(1, cfg.Layers, cfg.Heads, T, cfg.DHead, CollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hs := &hooks.Set{}
	hs.Stream(-1, sc)
	hs.Stream(-1, col)
	if _, err := m.Forward(ids, model.Options{Hooks: hs}); err != nil {
		t.Fatal(err)
	}
	for _, h := range sc.Heads(local) {
		if h.NEff != 1 || h.Entropy != 0 || h.MaxWeight != 1 || h.LeftOut != T-1 || h.BOSN != 1 || h.BOSMass != 1 {
			t.Errorf("layer %d head %d (window 1): n_eff %v entropy %v max %v, left out %d, ā_0 %v over %d; want 1, 0, 1, %d, 1 over 1",
				h.Layer, h.Head, h.NEff, h.Entropy, h.MaxWeight, h.LeftOut, h.BOSMass, h.BOSN, T-1)
		}
		for q := 0; q < T; q++ {
			if n := col.NEff[col.Index(0, h.Layer, h.Head, q)]; n != 1 {
				t.Fatalf("Collector: layer %d head %d query %d n_eff %v, want 1", h.Layer, h.Head, q, n)
			}
		}
	}
}

func TestHeadGateStats(t *testing.T) {
	// B = 1, T = 3, H = 2, element-wise with 2 values per head; head 1:
	// t=0: 0.05, 0.15; t=1: 0.5, 0.7; t=2: 0.9, 0.02.
	g := []float32{
		9, 9, 0.05, 0.15,
		9, 9, 0.5, 0.7,
		9, 9, 0.9, 0.02,
	}
	st, _ := HeadGateStats(g, 1, 3, 2, 2, 1, 0.1, nil)
	want := GateStats{Mean: 2.32 / 6, Median: (0.15 + 0.5) / 2, Below: 2.0 / 6, First: 0.1, Rest: 2.12 / 4}
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"mean", st.Mean, want.Mean}, {"median", st.Median, want.Median}, {"below", st.Below, want.Below},
		{"first", st.First, want.First}, {"rest", st.Rest, want.Rest}} {
		if math.Abs(c.got-c.want) > 1e-7 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// rowsOnly hides a consumer's optional interfaces, so the pass hands it
// rows only.
type rowsOnly struct{ c hooks.AttnConsumer }

func (r rowsOnly) ConsumeAttn(t *hooks.AttnTile) error { return r.c.ConsumeAttn(t) }

// TestSinkCollectorMomentsMatchRows: on a gated (Qiu) model, whose attention
// hands moments consumers their entropy and Σα² from its softmax pass,
// the SinkCollector's moments path agrees with its own row walk.
func TestSinkCollectorMomentsMatchRows(t *testing.T) {
	m := smallModel(t, model.ArchGated, model.Size{Layers: 2, DModel: 64, Heads: 4, KVHeads: 2, Vocab: 97, MaxPos: 512}, 5)
	cfg := m.Config
	const T = 300
	ids := [][]int{make([]int, T)}
	for i := range ids[0] {
		ids[0][i] = (13*i + 5) % 97
	}
	var heads [2][]SinkHead
	for k := range heads {
		sc, _ := NewSinkCollector(1, cfg.Layers, cfg.Heads, T, nil, true)
		hs := &hooks.Set{}
		if k == 0 {
			hs.Stream(-1, sc)
		} else {
			hs.Stream(-1, rowsOnly{sc})
		}
		if _, err := m.Forward(ids, model.Options{Hooks: hs}); err != nil {
			t.Fatal(err)
		}
		heads[k] = sc.Heads([]int{0, 1})
	}
	for i, a := range heads[0] {
		b := heads[1][i]
		for _, c := range []struct {
			name string
			x, y float64
		}{{"first", a.BOSMass, b.BOSMass}, {"entropy", a.Entropy, b.Entropy}, {"entropy_norm", a.EntropyNorm, b.EntropyNorm},
			{"max", a.MaxWeight, b.MaxWeight}, {"max_last", a.MaxLast, b.MaxLast}, {"neff", a.NEff, b.NEff}} {
			if math.Abs(c.x-c.y) > 1e-6*max(1, math.Abs(c.y)) {
				t.Errorf("layer %d head %d %s: moments %v, rows %v", a.Layer, a.Head, c.name, c.x, c.y)
			}
		}
	}
}
