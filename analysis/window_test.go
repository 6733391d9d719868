package analysis

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
)

// windowSweep runs a sweep on a generated Gemma-3-style model whose layers
// 0–2 have a sliding window of 16 and layer 3 is global: lengths 24 and
// 40, 3 samples, buckets of 7 queries (which divide neither the windows
// nor the sliding window).
func windowSweep(t *testing.T, agg results.AggOptions) (*Sweep, *results.Manifest, *results.Results) {
	return windowSweepOf(t, agg, 16)
}

// windowSweepOf is windowSweep with sliding window w.
func windowSweepOf(t *testing.T, agg results.AggOptions, w int) (*Sweep, *results.Manifest, *results.Results) {
	t.Helper()
	cfg, err := model.SmallConfig(model.ArchGemma3, model.Size{Layers: 4, DModel: 32, Heads: 4, KVHeads: 2, Vocab: 101, MaxPos: 512})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Sliding = w
	_, tensors, err := model.Generate(cfg, 11)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "model")
	if err := model.WriteHF(dir, cfg, tensors); err != nil {
		t.Fatal(err)
	}
	opts := DefaultSweepOptions()
	opts.LengthsArg, opts.Samples, opts.Bucket = "24,40", 3, 7
	sw := newSweep(t, dir, randomStream(400, 0, 101, 5), filepath.Join(t.TempDir(), "out"), opts, agg)
	if !slices.Equal(sw.Info.Windows, []int{w, w, w, 0}) {
		t.Fatalf("manifest windows %v, want [%d %d %d 0]", sw.Info.Windows, w, w, w)
	}
	man, res, err := sw.Run()
	if err != nil {
		t.Fatal(err)
	}
	return sw, man, res
}

// TestSweepLeavesOutQueriesWithoutPosition0: the BOS mass aggregates of
// the sliding-window layers leave out the queries t ≥ 16 (position 0 is
// outside their window) and count them; the buckets keep the measured 0.
func TestSweepLeavesOutQueriesWithoutPosition0(t *testing.T) {
	agg := DefaultAggOptions()
	agg.LastLayers, agg.Bootstrap = 2, 0
	sw, man, res := windowSweep(t, agg)
	if man.Analysis.LocalLayers != results.LocalSeparate || man.Conventions["local_layers"] == "" || man.Conventions["left_out"] == "" {
		t.Errorf("manifest: local_layers %q, conventions %v", man.Analysis.LocalLayers, man.Conventions)
	}
	// Counted by hand per pass and head of a local layer (window 16):
	// T = 24: bos window [12, 24) leaves out 16…23 (8), last window
	// [18, 24) all 6, all queries 16…23 (8); T = 40: bos [20, 40) all 20,
	// last [30, 40) all 10, all 16…39 (24).
	want := map[int]map[string]int64{24: {windowBOS: 8, windowLast: 6, windowAll: 8}, 40: {windowBOS: 20, windowLast: 10, windowAll: 24}}
	for _, r := range res.Heads {
		w := int64(0)
		if r.Metric == results.MetricBOSMass && r.Layer < 3 {
			w = 3 * want[int(r.T)][r.Window]
		}
		if r.LeftOut != w {
			t.Errorf("heads T=%d layer %d head %d %s %s: left_out %d, want %d", r.T, r.Layer, r.Head, r.Metric, r.Window, r.LeftOut, w)
		}
	}
	// The BOS mass of a local head over its applicable queries, against
	// the per-query values: at T = 24 the queries 12…15, at T = 40 none.
	nv := newNaive(t, sw, man.Chunks, nil, 0)
	for _, r := range res.Heads {
		if r.Metric != results.MetricBOSMass || r.Window != windowBOS || r.Layer >= 3 {
			continue
		}
		var xs []float64
		for s := 0; s < 3; s++ {
			if r.T == 24 {
				xs = append(xs, nv.values(24, s, int(r.Layer), int(r.Head), results.MetricBOSMass, 12)[:4]...)
			}
		}
		m := math.NaN()
		if len(xs) > 0 {
			m, _ = meanStd(xs, 0)
		}
		if r.N != int64(len(xs)) || relErr(r.Mean, m) > 1e-12 {
			t.Errorf("heads T=%d layer %d head %d bos_mass: n %d mean %g, want n %d mean %g", r.T, r.Layer, r.Head, r.N, r.Mean, len(xs), m)
		}
	}
	// Per-row output keeps the measured mass: 0 (not left out) in the
	// buckets table.
	_, rows, err := readBucketPass(sweepPass(sw.Out, 40, 0))
	if err != nil {
		t.Fatal(err)
	}
	var zeros int64
	for _, r := range rows {
		if r.Metric == results.MetricBOSMass && r.Layer < 3 && r.QLo >= 16 {
			if r.Sum != 0 || r.N != r.QHi-r.QLo {
				t.Errorf("bucket [%d,%d) layer %d head %d: bos_mass n %d sum %g, want the measured zeros", r.QLo, r.QHi, r.Layer, r.Head, r.N, r.Sum)
			}
			zeros += r.N
		}
		if r.QLo < 16 && r.QHi > 16 {
			t.Errorf("bucket [%d,%d) straddles the sliding window 16", r.QLo, r.QHi)
		}
	}
	if zeros != 3*4*24 {
		t.Errorf("%d measured zeros at t ≥ 16 in the local layers, want 3 layers × 4 heads × 24", zeros)
	}
	// Fig. 4: every local cell leaves out 3 samples × (8 + 20) BOS queries.
	var leftOut int64
	for _, c := range res.Fig4 {
		wantOut, group := int64(0), results.LayersGlobal
		if c.Layer < 3 {
			wantOut, group = 84, results.LayersLocal
		}
		if c.BOSLeftOut != wantOut || c.Layers != group || !math.IsNaN(c.Gate) {
			t.Errorf("fig4 (%d,%d): bos_left_out %d, layers %q, gate %g; want %d, %q, NaN (no gate)", c.Layer, c.Head, c.BOSLeftOut, c.Layers, c.Gate, wantOut, group)
		}
		leftOut += c.BOSLeftOut
	}
	g := res.Summary.Groups
	if len(g) != 2 || g[0].Layers != results.LayersGlobal || g[1].Layers != results.LayersLocal || g[1].Fig4.BOSLeftOut != leftOut ||
		g[0].Fig4.BOSLeftOut != 0 || !slices.Equal(g[0].LayersUsed, []int{3}) || !slices.Equal(g[1].LayersUsed, []int{1, 2}) {
		t.Errorf("layer groups %+v", g)
	}
	// Fig. 2's BOS mass of the local group (layers 1, 2; last window, all
	// left out): 3 samples × 2 layers × 4 heads × 6 or 10 queries.
	for _, r := range res.Fig2 {
		w := int64(0)
		if r.Metric == results.MetricBOSMass && r.Layers == results.LayersLocal {
			w = 3 * 2 * 4 * want[int(r.T)][windowLast]
		}
		if r.LeftOut != w {
			t.Errorf("fig2 T=%d %s %s: left_out %d, want %d", r.T, r.Layers, r.Metric, r.LeftOut, w)
		}
	}
}

// TestSweepGlobalGroupIsTheGlobalLayersAlone: with separate layer groups,
// the global group's Figs. 2–4 equal the aggregation of the global layers'
// rows alone (the aggregation before layer groups, restricted to them).
func TestSweepGlobalGroupIsTheGlobalLayersAlone(t *testing.T) {
	agg := DefaultAggOptions()
	agg.LastLayers, agg.Bootstrap = 2, 200
	sw, man, res := windowSweep(t, agg)
	rows := slices.DeleteFunc(readAll(t, sw.Out, man), func(r BucketRow) bool { return r.Layer != 3 })
	old, err := aggregate(rows, Shape{Layers: 4, Heads: 4, Measured: []int{3}}, man.Sweep, man.Sweep.Probe, man.Analysis)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what string, a, b float64) {
		t.Helper()
		if a != b && !(math.IsNaN(a) && math.IsNaN(b)) {
			t.Errorf("%s: global group %.17g, global layers alone %.17g", what, a, b)
		}
	}
	var f2, f3 int
	for _, r := range res.Fig2 {
		if r.Layers != results.LayersGlobal {
			continue
		}
		o := old.Fig2[f2]
		f2++
		if o.T != r.T || o.Metric != r.Metric || o.Layers != results.LayersAll || o.N != r.N || o.Units != r.Units {
			t.Errorf("fig2 row %+v against %+v", r, o)
		}
		for i, v := range [][2]float64{{r.Mean, o.Mean}, {r.StdPooled, o.StdPooled}, {r.MeanUnits, o.MeanUnits}, {r.StdUnits, o.StdUnits}} {
			same(fmt.Sprintf("fig2 T=%d %s [%d]", r.T, r.Metric, i), v[0], v[1])
		}
	}
	for _, r := range res.Fig3 {
		if r.Layers != results.LayersGlobal {
			continue
		}
		o := old.Fig3[f3]
		f3++
		same(fmt.Sprintf("fig3 T=%d K_opt", r.T), r.KOpt, o.KOpt)
		same(fmt.Sprintf("fig3 T=%d K_meas", r.T), r.KMeas, o.KMeas)
		same(fmt.Sprintf("fig3 T=%d λ", r.T), r.LambdaFit, o.LambdaFit)
	}
	if f2 != len(old.Fig2) || f3 != len(old.Fig3) || f2 == 0 {
		t.Errorf("global group: %d fig2 and %d fig3 rows, the global layers alone %d and %d", f2, f3, len(old.Fig2), len(old.Fig3))
	}
	g, o := res.Summary.Groups[0].Fig4, old.Summary.Fig4
	if g.Cells != 4 || g.Cells != o.Cells || g.SinkHeads != o.SinkHeads || g.CI.Valid != o.CI.Valid {
		t.Errorf("fig4 global group %+v, global layers alone %+v", g, o)
	}
	for i, v := range [][2]results.Float{{g.R, o.R}, {g.P, o.P}, {g.Spearman, o.Spearman}, {g.CI.Lo, o.CI.Lo}, {g.CI.Hi, o.CI.Hi}, {g.MaxBOS, o.MaxBOS}, {g.LastLayersBOS, o.LastLayersBOS}} {
		same(fmt.Sprintf("fig4 statistic %d", i), float64(v[0]), float64(v[1]))
	}
	same("fig3 λ fit", float64(res.Summary.LambdaFit), float64(old.Summary.LambdaFit))

	// Pooled: one group, all layers, the same queries left out.
	agg.LocalLayers = results.LocalPooled
	pooled, err := aggregate(readAll(t, sw.Out, man), shapeOf(man.Model), man.Sweep, man.Sweep.Probe, agg)
	if err != nil {
		t.Fatal(err)
	}
	if len(pooled.Summary.Groups) != 1 || pooled.Summary.Groups[0].Layers != results.LayersAll || !slices.Equal(pooled.Summary.LayersUsed, []int{2, 3}) ||
		pooled.Summary.Fig4.BOSLeftOut != 4*3*84 {
		t.Errorf("pooled: groups %+v", pooled.Summary.Groups)
	}
}

// readAll reads every pass file of a sweep.
func readAll(t *testing.T, dir string, man *results.Manifest) []BucketRow {
	t.Helper()
	var rows []BucketRow
	for _, c := range man.Chunks {
		_, rs, err := readBucketPass(sweepPass(dir, c.T, c.Sample))
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, rs...)
	}
	return rows
}

// TestSweepWindowOne: a sliding window of 1 leaves each query of a local
// layer only itself, so n_eff = 1 and S = 0 at every query, and every
// query but t = 0 is left out of the BOS mass, whose mean is then α[0, 0]
// = 1.
func TestSweepWindowOne(t *testing.T) {
	agg := DefaultAggOptions()
	agg.Bootstrap = 0
	_, _, res := windowSweepOf(t, agg, 1)
	for _, r := range res.Heads {
		if r.Layer == 3 || r.Window != windowAll {
			continue
		}
		T := r.T
		switch r.Metric {
		case results.MetricNEff:
			if r.N != 3*T || math.Abs(r.Mean-1) > 1e-6 || r.Std > 1e-6 {
				t.Errorf("T=%d layer %d head %d: n_eff mean %g std %g over %d, want 1, 0 over %d", T, r.Layer, r.Head, r.Mean, r.Std, r.N, 3*T)
			}
		case results.MetricSMean:
			if math.Abs(r.Mean) > 1e-6 {
				t.Errorf("T=%d layer %d head %d: S_mean %g, want 0", T, r.Layer, r.Head, r.Mean)
			}
		case results.MetricBOSMass:
			if r.N != 3 || r.LeftOut != 3*(T-1) || math.Abs(r.Mean-1) > 1e-6 {
				t.Errorf("T=%d layer %d head %d: bos_mass %g over %d, %d left out; want 1 over 3, %d", T, r.Layer, r.Head, r.Mean, r.N, r.LeftOut, 3*(T-1))
			}
		}
	}
}
