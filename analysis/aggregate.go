package analysis

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/analysis/results"
)

// Query windows of the heads table (HeadRow.Window).
const (
	windowLast = "last" // the last LastFrac of the queries (Figs. 2–3, K of Fig. 4)
	windowBOS  = "bos"  // the last BOSFrac of the queries (BOS mass of Fig. 4)
	windowAll  = "all"  // every query
)

// Shape is what the aggregation needs to know of the model.
type Shape struct {
	Layers, Heads int
	Gated         bool
	// Sinks says that the model has learned attention sinks (the tables
	// then hold sink_mass; ModelInfo.Sinks).
	Sinks bool
	// Measured lists the layers with attention rows when not all have
	// them (ModelInfo.MeasuredLayers); nil: every layer.
	Measured []int
	// Windows is each layer's sliding window (ModelInfo.Windows); nil:
	// none.
	Windows []int
	// LayerDHead is each layer's head width where the layers differ
	// (ModelInfo.LayerDHead); nil: one width.
	LayerDHead []int
}

// window returns layer l's sliding window (0: none).
func (s Shape) window(l int) int {
	if l < len(s.Windows) {
		return s.Windows[l]
	}
	return 0
}

type statKey struct {
	T, sample, layer, head int
	metric                 string
}

type windowStats struct {
	last, bos, all Moments
	nonfinite      int64
	// queries left out as not applicable, per window
	lastOut, bosOut, allOut int64
}

// aggregate builds the tables of App. I from the bucket rows of every pass
// of a sweep, in any order (see aggregator).
func aggregate(rows []BucketRow, shape Shape, sw results.SweepOptions, probe results.ProbeOptions, agg results.AggOptions) (*results.Results, error) {
	a, err := newAggregator(shape, sw, probe, agg)
	if err != nil {
		return nil, err
	}
	if err := a.Add(rows); err != nil {
		return nil, err
	}
	return a.Results()
}

// newAggregator returns an aggregator: sw gives the lengths, samples,
// windows and k unit, probe the resolved λobs options (for Fig. 3), agg
// the aggregation options.
func newAggregator(shape Shape, sw results.SweepOptions, probe results.ProbeOptions, agg results.AggOptions) (*aggregator, error) {
	if err := agg.Validate(); err != nil {
		return nil, err
	}
	if len(sw.Lengths) == 0 || sw.Samples < 1 {
		return nil, fmt.Errorf("no passes to aggregate (lengths %v, %d samples)", sw.Lengths, sw.Samples)
	}
	if shape.Windows != nil && len(shape.Windows) != shape.Layers {
		return nil, fmt.Errorf("%d sliding windows for %d layers", len(shape.Windows), shape.Layers)
	}
	a := &aggregator{stats: map[statKey]*windowStats{}, seen: map[[2]int]bool{}, shape: shape, sw: sw, probe: probe,
		agg: agg, metrics: passMetrics(shape.Gated, shape.Sinks, probe.Reductions), order: map[string]int{}}
	for i, m := range a.metrics {
		a.order[m] = i
	}
	return a, nil
}

// Add accumulates bucket rows (typically one pass's). Rows of one (T,
// sample, layer, head, metric) may come in any order and in several
// calls; they are combined in query order within each call. The bos_mass
// rows of a sliding-window layer at queries t ≥ window (which cannot see
// position 0, so their mass is 0 by construction) are left out of every
// window's statistics and counted instead; a bucket straddling the window
// is an error (the pass files cut their buckets there, sweepKey.Cuts).
func (a *aggregator) Add(rows []BucketRow) error {
	sorted := slices.Clone(rows)
	slices.SortFunc(sorted, func(x, y BucketRow) int {
		return cmp.Or(cmp.Compare(x.T, y.T), cmp.Compare(x.Sample, y.Sample), cmp.Compare(x.Layer, y.Layer),
			cmp.Compare(x.Head, y.Head), cmp.Compare(a.order[x.Metric], a.order[y.Metric]), cmp.Compare(x.QLo, y.QLo))
	})
	for i := range sorted {
		r := &sorted[i]
		if _, ok := a.order[r.Metric]; !ok {
			return fmt.Errorf("bucket row (T=%d, sample %d): unknown metric %q", r.T, r.Sample, r.Metric)
		}
		T := int(r.T)
		k := statKey{T, int(r.Sample), int(r.Layer), int(r.Head), r.Metric}
		if k.layer < 0 || k.layer >= a.shape.Layers || k.head < 0 || k.head >= a.shape.Heads {
			return fmt.Errorf("bucket row (T=%d, sample %d): layer %d head %d outside the model's %d layers × %d heads",
				T, k.sample, k.layer, k.head, a.shape.Layers, a.shape.Heads)
		}
		ws := a.stats[k]
		if ws == nil {
			ws = &windowStats{}
			a.stats[k] = ws
		}
		m := r.Moments()
		ws.nonfinite += r.NonFinite
		leftOut := false
		if win := a.shape.window(k.layer); win > 0 && r.Metric == results.MetricBOSMass && int(r.QHi) > win {
			if int(r.QLo) < win {
				return fmt.Errorf("bucket [%d,%d) of (T=%d, sample %d) straddles layer %d's sliding window %d: the passes were made without cutting the buckets there",
					r.QLo, r.QHi, T, k.sample, k.layer, win)
			}
			if r.Sum != 0 {
				return fmt.Errorf("bucket [%d,%d) of (T=%d, sample %d), layer %d head %d: bos_mass sums to %g where the sliding window %d hides position 0 (want 0): the model's windows do not match the passes",
					r.QLo, r.QHi, T, k.sample, k.layer, k.head, r.Sum, win)
			}
			leftOut = true
		}
		n := r.QHi - r.QLo
		if leftOut {
			ws.allOut += n
		} else {
			ws.all = ws.all.Combine(m)
		}
		for _, w := range []struct {
			start int
			dst   *Moments
			out   *int64
		}{{windowStart(T, a.sw.LastFrac), &ws.last, &ws.lastOut}, {windowStart(T, a.sw.BOSFrac), &ws.bos, &ws.bosOut}} {
			switch {
			case int(r.QLo) >= w.start && leftOut:
				*w.out += n
			case int(r.QLo) >= w.start:
				*w.dst = w.dst.Combine(m)
			case int(r.QHi) > w.start:
				return fmt.Errorf("bucket [%d,%d) of (T=%d, sample %d) straddles the window start %d: the passes were made with other windows",
					r.QLo, r.QHi, T, k.sample, w.start)
			}
		}
		a.seen[[2]int{T, k.sample}] = true
	}
	return nil
}

// Results checks that every pass was added and builds the tables.
func (a *aggregator) Results() (*results.Results, error) {
	for _, T := range a.sw.Lengths {
		for s := 0; s < a.sw.Samples; s++ {
			if !a.seen[[2]int{T, s}] {
				return nil, fmt.Errorf("no rows for pass (T=%d, sample %d)", T, s)
			}
		}
	}
	a.notes = nil
	a.layers()
	res := &results.Results{}
	res.Summary = results.Summary{Lengths: a.sw.Lengths, TMin: a.sw.Lengths[0], Samples: a.sw.Samples, Agg: a.agg}
	for _, ws := range a.stats {
		res.Summary.NonFinite += ws.nonfinite
	}
	res.Heads = a.heads()
	lengths, err := a.fig4Lengths()
	if err != nil {
		return nil, err
	}
	cells := a.fig4Cells(lengths)
	res.Fig4 = cells
	for _, g := range a.groups {
		res.Fig2 = append(res.Fig2, a.fig2(g)...)
		rows, lamFit, maxErr := a.fig3(g)
		res.Fig3 = append(res.Fig3, rows...)
		st, err := a.fig4Stats(g, lengths, cells)
		if err != nil {
			return nil, err
		}
		res.Summary.Groups = append(res.Summary.Groups, results.GroupSummary{Layers: g.name, LayersUsed: g.used,
			LambdaFit: results.Float(lamFit), Fig3MaxRelErr: results.Float(maxErr), Fig4: st})
	}
	first := res.Summary.Groups[0]
	res.Summary.LayersUsed, res.Summary.LambdaFit, res.Summary.Fig3MaxRelErr = first.LayersUsed, first.LambdaFit, first.Fig3MaxRelErr
	res.Summary.Fig4 = first.Fig4
	res.Summary.Agg.Fig4Lengths = lengths
	res.Summary.Notes = a.notes
	return res, nil
}

// aggregator accumulates the bucket rows of a sweep's passes, one pass at
// a time, into exact per-(T, sample, layer, head, metric) window moments
// (memory O(passes·L·H·metrics), not O(rows)), and builds the tables from
// them.
type aggregator struct {
	stats   map[statKey]*windowStats
	seen    map[[2]int]bool
	order   map[string]int
	shape   Shape
	sw      results.SweepOptions
	probe   results.ProbeOptions
	agg     results.AggOptions
	metrics []string
	groups  []layerGroup
	notes   []string
}

// layerGroup is a set of layers aggregated together (Fig2Row.Layers).
type layerGroup struct {
	name     string
	measured []int // its layers with attention rows
	used     []int // the last LastLayers of them (Figs. 2–3)
}

// groupDHead is the head width of g's layers that σ₀²'s default is taken
// from where the options leave it to each layer (Shape.LayerDHead): 0 when
// the model's layers have one width (σ₀² is then resolved) or g's differ.
func (a *aggregator) groupDHead(g layerGroup) int {
	w := a.shape.LayerDHead
	if w == nil || len(g.used) == 0 {
		return 0
	}
	for _, l := range g.used {
		if w[l] != w[g.used[0]] {
			return 0
		}
	}
	return w[g.used[0]]
}

func (a *aggregator) note(format string, args ...any) {
	a.notes = append(a.notes, fmt.Sprintf(format, args...))
}

// layers splits the measured layers into the layer groups (global and
// local apart under LocalSeparate when the model has both) and picks
// each group's last-k layers of Figs. 2–3.
func (a *aggregator) layers() {
	measured, what := a.shape.Measured, "layers"
	if measured == nil {
		for l := 0; l < a.shape.Layers; l++ {
			measured = append(measured, l)
		}
	} else {
		what = "measured layers"
		a.note("only layers %v have softmax attention rows (the others are Gated DeltaNet or Mamba-2 layers): every figure uses those", measured)
	}
	var global, local []int
	for _, l := range measured {
		if a.shape.window(l) > 0 {
			local = append(local, l)
		} else {
			global = append(global, l)
		}
	}
	a.groups = []layerGroup{{name: results.LayersAll, measured: measured}}
	switch {
	case len(global) > 0 && len(local) > 0 && a.agg.LocalLayers == results.LocalSeparate:
		a.groups = []layerGroup{{name: results.LayersGlobal, measured: global}, {name: results.LayersLocal, measured: local}}
		a.note("the global layers %v and the sliding-window (local) layers %v are aggregated separately (analysis.local_layers = %s): every fig2, fig3 and fig4 row says its group in the layers column",
			global, local, results.LocalSeparate)
	case len(global) > 0 && len(local) > 0:
		a.note("the global layers %v and the sliding-window layers %v are pooled (analysis.local_layers = %s)", global, local, results.LocalPooled)
	}
	if len(local) > 0 {
		a.note("BOS mass aggregates (heads, fig2, fig4) leave out the queries of sliding-window layers that cannot see position 0 (t ≥ window) and count them in left_out / bos_left_out; the buckets table keeps their measured mass, 0")
	}
	for i := range a.groups {
		g := &a.groups[i]
		k := a.agg.LastLayers
		if k > len(g.measured) {
			if len(a.groups) == 1 {
				a.note("the model has %d %s, fewer than last-layers = %d: Figs. 2–3 pool all of them", len(g.measured), what, k)
			} else {
				a.note("the model has %d %s layers, fewer than last-layers = %d: their Figs. 2–3 pool all of them", len(g.measured), g.name, k)
			}
			k = len(g.measured)
		}
		g.used = slices.Clone(g.measured[len(g.measured)-k:])
	}
}

// groupOf returns the name of layer l's group.
func (a *aggregator) groupOf(l int) string {
	if len(a.groups) == 1 {
		return a.groups[0].name
	}
	if a.shape.window(l) > 0 {
		return results.LayersLocal
	}
	return results.LayersGlobal
}

func (a *aggregator) get(T, s, l, h int, m string) *windowStats {
	if ws := a.stats[statKey{T, s, l, h, m}]; ws != nil {
		return ws
	}
	return &windowStats{}
}

// pick returns a window's moments and the queries it left out.
func pick(ws *windowStats, window string) (Moments, int64) {
	switch window {
	case windowLast:
		return ws.last, ws.lastOut
	case windowBOS:
		return ws.bos, ws.bosOut
	}
	return ws.all, ws.allOut
}

func (a *aggregator) heads() []results.HeadRow {
	var rows []results.HeadRow
	for _, T := range a.sw.Lengths {
		for l := 0; l < a.shape.Layers; l++ {
			for h := 0; h < a.shape.Heads; h++ {
				for _, m := range a.metrics {
					for _, w := range []string{windowLast, windowBOS, windowAll} {
						var mo Moments
						var bad, out int64
						for s := 0; s < a.sw.Samples; s++ {
							ws := a.get(T, s, l, h, m)
							x, o := pick(ws, w)
							mo, out = mo.Combine(x), out+o
							if w == windowAll {
								bad += ws.nonfinite
							}
						}
						rows = append(rows, results.HeadRow{T: int64(T), Layer: int64(l), Head: int64(h), Metric: m, Window: w,
							Samples: int64(a.sw.Samples), N: mo.N, Mean: mo.Mean(), Std: mo.Std(a.agg.DDOF), NonFinite: bad, LeftOut: out})
					}
				}
			}
		}
	}
	return rows
}

// pool returns, for one length and metric over the Figs. 2–3 pool of
// layers used, the pooled moments, the moments of the (sample, layer)
// unit means and the queries left out.
func (a *aggregator) pool(T int, m string, used []int) (pooled, units Moments, leftOut int64) {
	var means []float64
	for s := 0; s < a.sw.Samples; s++ {
		for _, l := range used {
			var u Moments
			for h := 0; h < a.shape.Heads; h++ {
				ws := a.get(T, s, l, h, m)
				u = u.Combine(ws.last)
				leftOut += ws.lastOut
			}
			pooled = pooled.Combine(u)
			if u.N > 0 {
				means = append(means, u.Mean())
			}
		}
	}
	return pooled, momentsOf(means), leftOut
}

// cellMean is the pooled mean of one (layer, head) cell over the samples
// of length T in the last window.
func (a *aggregator) cellMean(T, l, h int, m string) float64 {
	var mo Moments
	for s := 0; s < a.sw.Samples; s++ {
		mo = mo.Combine(a.get(T, s, l, h, m).last)
	}
	return mo.Mean()
}

func (a *aggregator) fig2(g layerGroup) []results.Fig2Row {
	var rows []results.Fig2Row
	ddof, unit := a.agg.DDOF, a.sw.KUnit
	paper := map[string][]float64{results.MetricNEff: results.Paper.NEff, results.MetricGate: results.Paper.Gate}
	tmin := a.sw.Lengths[0]
	lamMin, _, _ := a.pool(tmin, results.MetricLambdaObs, g.used)
	kMin, _, _ := a.pool(tmin, results.MetricK, g.used)
	lamFromK := func(k float64) float64 { return a.probe.LambdaPrior * k / (1 - k) }
	for _, T := range a.sw.Lengths {
		for _, m := range a.metrics {
			p, u, out := a.pool(T, m, g.used)
			pv := math.NaN()
			if xs, ok := paper[m]; ok {
				pv = paperValue(xs, T, unit)
			}
			rows = append(rows, results.Fig2Row{T: int64(T), Layers: g.name, Metric: m, N: p.N, Mean: p.Mean(), StdPooled: p.Std(ddof),
				Units: u.N, MeanUnits: u.Mean(), StdUnits: u.Std(ddof), Paper: pv, LeftOut: out})
		}
		paperRatio := paperValue(results.Paper.LambdaRatio, T, unit)
		// (c) ratio of means: λ̄(T)/λ̄(Tmin); stds scaled by the same λ̄(Tmin).
		p, u, _ := a.pool(T, results.MetricLambdaObs, g.used)
		den := lamMin.Mean()
		rows = append(rows, results.Fig2Row{T: int64(T), Layers: g.name, Metric: "lambda_obs_ratio/" + results.RatioOfMeans, N: p.N,
			Mean: p.Mean() / den, StdPooled: p.Std(ddof) / den, Units: u.N, MeanUnits: u.Mean() / den,
			StdUnits: u.Std(ddof) / den, Paper: paperRatio})
		// mean over (layer, head) cells of the last layers of the cell ratios.
		var ratios []float64
		for _, l := range g.used {
			for h := 0; h < a.shape.Heads; h++ {
				if r := a.cellMean(T, l, h, results.MetricLambdaObs) / a.cellMean(tmin, l, h, results.MetricLambdaObs); !math.IsNaN(r) && !math.IsInf(r, 0) {
					ratios = append(ratios, r)
				}
			}
		}
		c := momentsOf(ratios)
		rows = append(rows, results.Fig2Row{T: int64(T), Layers: g.name, Metric: "lambda_obs_ratio/" + results.MeanOfRatios, N: c.N, Mean: c.Mean(),
			StdPooled: math.NaN(), Units: c.N, MeanUnits: c.Mean(), StdUnits: c.Std(ddof), Paper: paperRatio})
		// recovered from the mean gain.
		kT, _, _ := a.pool(T, results.MetricK, g.used)
		rows = append(rows, results.Fig2Row{T: int64(T), Layers: g.name, Metric: "lambda_obs_ratio/" + results.RatioFromK, N: kT.N,
			Mean: lamFromK(kT.Mean()) / lamFromK(kMin.Mean()), StdPooled: math.NaN(), MeanUnits: math.NaN(),
			StdUnits: math.NaN(), Paper: paperRatio})
	}
	return rows
}

func (a *aggregator) fig3(g layerGroup) ([]results.Fig3Row, float64, float64) {
	var rows []results.Fig3Row
	if a.probe.Form == "sandwich" && g.name == a.groups[0].name {
		a.note("Fig. 3 needs Eq. 5 or 6: with the sandwich form λobs cannot be predicted from n_eff and S")
	}
	var lamFit, kMin float64
	maxErr := math.NaN()
	for i, T := range a.sw.Lengths {
		n, _, _ := a.pool(T, results.MetricNEff, g.used)
		s, _, _ := a.pool(T, results.MetricSMean, g.used)
		k, _, _ := a.pool(T, results.MetricK, g.used)
		lam := lambdaFromAggregates(a.probe, n.Mean(), s.Mean(), a.groupDHead(g))
		kMeas := k.Mean()
		if i == 0 {
			lamFit = lam * (1 - kMeas) / kMeas
			kMin = kMeas
		}
		kOpt := lam / (lamFit + lam)
		if math.IsInf(lam, 1) {
			kOpt = 1
		}
		rel := math.Abs(kOpt-kMeas) / kMeas
		if i > 0 && (math.IsNaN(maxErr) || rel > maxErr) {
			maxErr = rel
		}
		rows = append(rows, results.Fig3Row{T: int64(T), Layers: g.name, NEff: n.Mean(), SMean: s.Mean(), LambdaPred: lam, KMeas: kMeas,
			LambdaFit: lamFit, KOpt: kOpt, RelErr: rel, DeltaK: kOpt - kMeas, KChange: kMeas - kMin,
			PaperRelErr: paperFig3(T, a.sw.KUnit)})
	}
	return rows, lamFit, maxErr
}

// fig4Lengths resolves the Fig. 4 lengths.
func (a *aggregator) fig4Lengths() ([]int, error) {
	have := map[int]bool{}
	for _, T := range a.sw.Lengths {
		have[T] = true
	}
	if len(a.agg.Fig4Lengths) > 0 {
		for _, T := range a.agg.Fig4Lengths {
			if !have[T] {
				return nil, fmt.Errorf("fig4 length %d is not one of the sweep's lengths %v", T, a.sw.Lengths)
			}
		}
		return slices.Sorted(slices.Values(a.agg.Fig4Lengths)), nil
	}
	var ls []int
	for _, k := range []int{4, 8} {
		if have[k*a.sw.KUnit] {
			ls = append(ls, k*a.sw.KUnit)
		}
	}
	if len(ls) < 2 {
		a.note("Fig. 4: the paper's lengths 4k and 8k are not both in the sweep; using %v", func() []int {
			if len(ls) == 0 {
				return a.sw.Lengths
			}
			return ls
		}())
	}
	if len(ls) == 0 {
		ls = slices.Clone(a.sw.Lengths)
	}
	return ls, nil
}

// fig4Cells builds the Fig. 4 cells of every (layer, head).
func (a *aggregator) fig4Cells(lengths []int) []results.Fig4Row {
	last := map[int]bool{} // a layer is in one group: its last layers
	for _, g := range a.groups {
		for _, l := range g.used {
			last[l] = true
		}
	}
	var rows []results.Fig4Row
	for l := 0; l < a.shape.Layers; l++ {
		for h := 0; h < a.shape.Heads; h++ {
			var kq, bq, gq Moments
			var kp, bp, gp []float64
			var out int64
			for _, T := range lengths {
				for s := 0; s < a.sw.Samples; s++ {
					k := a.get(T, s, l, h, results.MetricK).last
					bw := a.get(T, s, l, h, results.MetricBOSMass)
					g := a.get(T, s, l, h, results.MetricGate).last
					kq, bq, gq = kq.Combine(k), bq.Combine(bw.bos), gq.Combine(g)
					out += bw.bosOut
					if k.N > 0 {
						kp = append(kp, k.Mean())
					}
					if bw.bos.N > 0 {
						bp = append(bp, bw.bos.Mean())
					}
					if g.N > 0 {
						gp = append(gp, g.Mean())
					}
				}
			}
			row := results.Fig4Row{Layer: int64(l), Head: int64(h), Layers: a.groupOf(l), KPasses: momentsOf(kp).Mean(), BOSPasses: momentsOf(bp).Mean(),
				KQueries: kq.Mean(), BOSQueries: bq.Mean(), Passes: int64(len(kp)), LastLayers: last[l], BOSLeftOut: out}
			row.K, row.BOS, row.Gate = row.KPasses, row.BOSPasses, momentsOf(gp).Mean()
			if a.agg.Fig4Pool == results.PoolQueries {
				row.K, row.BOS, row.Gate = row.KQueries, row.BOSQueries, gq.Mean()
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// corr is the correlation of the pairs (x, y), with the bootstrap
// interval when the options ask for one.
func (a *aggregator) corr(xs, ys []float64) (results.Corr, error) {
	nan := results.Float(math.NaN())
	c := results.Corr{Cells: len(xs), R: nan, P: nan, Spearman: nan, DF: len(xs) - 2,
		CI: results.BootstrapCI{Lo: nan, Hi: nan, Level: a.agg.CILevel, Seed: a.agg.Seed}}
	if c.Cells < 3 {
		return c, nil
	}
	r, _ := pearson(xs, ys)
	rho, _ := spearman(xs, ys)
	c.R, c.P, c.Spearman = results.Float(r), results.Float(pearsonP(r, c.Cells)), results.Float(rho)
	if a.agg.Bootstrap > 0 {
		var err error
		if c.CI, err = bootstrapPearson(xs, ys, a.agg.Bootstrap, a.agg.CILevel, a.agg.Seed); err != nil {
			return c, err
		}
	}
	return c, nil
}

// fig4Stats are the statistics of group g's Fig. 4 cells: K against BOS
// mass, the paper's threshold checks, and the gate against BOS mass.
func (a *aggregator) fig4Stats(g layerGroup, lengths []int, cells []results.Fig4Row) (results.Fig4Stats, error) {
	st := results.Fig4Stats{Layers: g.name, Lengths: lengths, Pool: a.agg.Fig4Pool}
	var rows []results.Fig4Row
	var xs, ys, gx, gy []float64
	for _, r := range cells {
		if r.Layers != g.name {
			continue
		}
		st.BOSLeftOut += r.BOSLeftOut
		if !math.IsNaN(r.K) && !math.IsNaN(r.BOS) {
			rows = append(rows, r)
			xs, ys = append(xs, r.K), append(ys, r.BOS)
		}
		if !math.IsNaN(r.Gate) && !math.IsNaN(r.BOS) {
			gx, gy = append(gx, r.Gate), append(gy, r.BOS)
		}
	}
	var err error
	if st.Corr, err = a.corr(xs, ys); err != nil {
		return st, err
	}
	switch {
	case st.Cells < 3 && len(a.groups) == 1:
		a.note("Fig. 4 has %d cells: no correlation", st.Cells)
	case st.Cells < 3:
		a.note("Fig. 4 (%s layers) has %d cells: no correlation", g.name, st.Cells)
	}
	if a.shape.Gated {
		gc, err := a.corr(gx, gy)
		if err != nil {
			return st, err
		}
		st.Gate = &gc
	}
	maxBOS, sinkMinK := math.NaN(), math.NaN()
	st.SinkLayers = [2]int{-1, -1}
	var lastK, lastBOS []float64
	for _, r := range rows {
		if math.IsNaN(maxBOS) || r.BOS > maxBOS {
			maxBOS = r.BOS
		}
		if r.BOS > results.Paper.BOSSinkMass {
			st.SinkHeads++
			if math.IsNaN(sinkMinK) || r.K < sinkMinK {
				sinkMinK = r.K
			}
			if st.SinkLayers[0] < 0 || int(r.Layer) < st.SinkLayers[0] {
				st.SinkLayers[0] = int(r.Layer)
			}
			st.SinkLayers[1] = max(st.SinkLayers[1], int(r.Layer))
		}
		if r.BOS > results.Paper.MaxBOS {
			st.HeadsOver03++
		}
		if r.LastLayers {
			lastK, lastBOS = append(lastK, r.K), append(lastBOS, r.BOS)
		}
	}
	nan := results.Float(math.NaN())
	st.MaxBOS, st.SinkMinK = results.Float(maxBOS), results.Float(sinkMinK)
	st.LastLayersK = [2]results.Float{nan, nan}
	if len(lastK) > 0 {
		st.LastLayersK = [2]results.Float{results.Float(slices.Min(lastK)), results.Float(slices.Max(lastK))}
	}
	st.LastLayersBOS = results.Float(momentsOf(lastBOS).Mean())
	return st, nil
}
