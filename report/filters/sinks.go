package filters

import (
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// epsGrid is the ε grid of the sink-rate curves: 0.01, 0.02, …, 0.99.
func epsGrid() []float64 {
	g := make([]float64, 99)
	for i := range g {
		g[i] = float64(i+1) / 100
	}
	return g
}

// Sinks returns the report of a probe sinks run: the mean first-token
// attention per (layer, head), Gu et al.'s sink rate against ε, entropy
// and largest weight against T per head, and the output-gate statistics
// (for a gated model).
func Sinks(man *results.SinksManifest, heads []results.SinkHeadRow, rates []results.SinkRateRow) (*report.Report, error) {
	if len(heads) == 0 {
		return nil, fmt.Errorf("sinks report: the sinks_heads table is empty")
	}
	lengths := slices.Clone(man.Options.Lengths)
	slices.Sort(lengths)
	T := longest(lengths)
	nh := 0
	for _, h := range heads {
		nh = max(nh, h.Head+1)
	}
	figs := []*report.Figure{sinksFirst(man, heads, T, nh), sinksRate(man, heads, rates, lengths)}
	if f := sinksLength(man, heads, lengths); f != nil {
		figs = append(figs, f)
	}
	if f := sinksGates(man, heads, T, nh); f != nil {
		figs = append(figs, f)
	}
	return &report.Report{
		Title:    "Attention sinks, entropy, fading and output gates",
		Subtitle: fmt.Sprintf("Model: %s (%s); softmax layers %s; lengths %v.", man.Model.Dir, man.Model.Arch, fmtInts(man.Layers), lengths),
		Intro: []string{"Per (length, sample, softmax layer, head), from the post-softmax, pre-gate rows the pass streams (definitions: " +
			"docs/diagnostics.md, \"Attention sinks, entropy, fading and output gates\"). Queries of a sliding-window layer that cannot see " +
			fmt.Sprintf("position 0 are left out of the first-token mean: %d rows over the run.", man.LeftOut)},
		Manifest: manifestOptions(results.SinksManifestName, man.Tool, man.Created, man.Model, man.Source, man.Chunks, man.Options),
		Figures:  figs,
	}, nil
}

// sinksFirst is the heat map of ā_0 per (layer, head) at the longest
// length, pooled over samples by their applicable queries.
func sinksFirst(man *results.SinksManifest, heads []results.SinkHeadRow, T, nh int) *report.Figure {
	g := newGrid(man.Layers, nh)
	for _, h := range heads {
		if h.T == T {
			g.add(h.Layer, h.Head, h.BOSMass, float64(h.BOSN))
		}
	}
	z := g.means()
	p, missing, ok := heatPanel("mean first-token attention ā_0", "ā_0", g.layers, nh, z, 0, 1)
	if !ok { // no head can see position 0 (every layer local, T ≥ window)
		p, missing, _ = heatPanel("mean first-token attention ā_0 (no applicable query)", "ā_0", g.layers, nh, make([]float64, len(z)), 0, 1)
		missing = len(z)
	}
	q := "every query"
	if !man.Options.IncludeFirstQuery {
		q = "the queries t ≥ 1"
	}
	f := &report.Figure{
		ID:    "sinks-first-token",
		Title: fmt.Sprintf("Mean attention on the first token per (layer, head), T = %d", T),
		Caption: fmt.Sprintf("Each cell is one head of one softmax layer (rows: model layer index): ā_0, the mean over %s that can see "+
			"position 0 of the post-softmax weight α[t, 0] (Gu et al. 2024), pooled over the samples of T = %d by their applicable "+
			"queries; the colour scale is fixed to [0, 1].", q, T),
		Panels:     []report.Panel{p},
		PanelWidth: max(5.4, 2.5+0.3*float64(nh)), PanelHeight: max(3.4, 1.6+0.3*float64(len(g.layers))),
	}
	if missing > 0 {
		f.Notes = append(f.Notes, fmt.Sprintf("%d cells have no applicable query (a local layer whose every query is beyond its window) and are drawn at 0.", missing))
	}
	return f
}

// sinksRate draws Sink_1^ε against ε for each length (and layer group):
// curves on a fine ε grid from the head rows, markers at the run's --eps
// from its sinks_rate table.
func sinksRate(man *results.SinksManifest, heads []results.SinkHeadRow, rates []results.SinkRateRow, lengths []int) *report.Figure {
	grid := epsGrid()
	curves := results.SinkRates(heads, lengths, grid, man.Options.SplitLocal)
	groups := []string{"all"}
	for _, r := range curves {
		if !slices.Contains(groups, r.Layers) {
			groups = append(groups, r.Layers)
		}
	}
	var panels []report.Panel
	for _, g := range groups {
		var ss []report.Series
		for i, T := range lengths {
			var x, y []float64
			for _, r := range curves {
				if r.T == T && r.Layers == g && r.Heads > 0 {
					x, y = append(x, r.Eps), append(y, r.Rate)
				}
			}
			if len(x) == 0 {
				continue
			}
			c := report.Viridis(0, 1).Frac(0.85 * float64(i) / math.Max(1, float64(len(lengths)-1)))
			ss = append(ss, report.Series{Name: fmt.Sprintf("T = %d", T), Kind: report.Line, X: x, Y: y, Color: c, Width: 1.8})
			var mx, my []float64
			for _, r := range rates {
				if r.T == T && r.Layers == g && r.Heads > 0 {
					mx, my = append(mx, r.Eps), append(my, r.Rate)
				}
			}
			if len(mx) > 0 {
				ss = append(ss, report.Series{Kind: report.Scatter, X: mx, Y: my, Color: c, Shape: report.Diamond, Radius: 4.5})
			}
		}
		if len(ss) == 0 {
			continue
		}
		panels = append(panels, report.Panel{Title: g + " layers", XLabel: "threshold ε", YLabel: "Sink₁^ε (% of heads)",
			X: report.Range{Min: 0, Max: 1}, Y: report.Range{Min: 0, Max: 100}, Series: ss, Legend: report.LegendTopRight})
	}
	if len(panels) == 0 { // no head has an applicable query at any length
		panels = []report.Panel{{Title: "no applicable heads", XLabel: "threshold ε", YLabel: "Sink₁^ε (% of heads)",
			Series: []report.Series{{Kind: report.Scatter, X: []float64{0}, Y: []float64{0}, Color: report.Grey}}}}
	}
	return &report.Figure{
		ID:    "sinks-rate",
		Title: "Sink rate Sink₁^ε against the threshold ε",
		Caption: fmt.Sprintf("Gu et al.'s Sink₁^ε = 100 · #{(layer, head): ā_0 > ε} / #(layer, head), each head's ā_0 pooled over the samples "+
			"of a length by their applicable queries, one line per length (viridis, short to long), computed from the per-head table at "+
			"ε = 0.01, 0.02, …, 0.99; the diamonds are the run's sinks_rate rows at its --eps %v. Sliding-window and global layers get "+
			"their own panels when the model has both (--split-local).", man.Options.Eps),
		Panels:     panels,
		Columns:    min(3, len(panels)),
		PanelWidth: 4.6, PanelHeight: 3.8,
	}
}

// pooledHeads returns, per (T, layer, head), the mean of get over the
// samples (equal weights: every sample has T queries).
func pooledHeads(heads []results.SinkHeadRow, get func(results.SinkHeadRow) float64) (T, layer, val []float64) {
	type key struct{ T, l, h int }
	sum, n := map[key]float64{}, map[key]float64{}
	var order []key
	for _, r := range heads {
		v := get(r)
		if !finite(v) {
			continue
		}
		k := key{r.T, r.Layer, r.Head}
		if n[k] == 0 {
			order = append(order, k)
		}
		sum[k] += v
		n[k]++
	}
	for _, k := range order {
		T, layer, val = append(T, float64(k.T)), append(layer, float64(k.l)), append(val, sum[k]/n[k])
	}
	return T, layer, val
}

// sinksLength draws entropy against ln T and the largest weight against T,
// one point per (length, layer, head), with the mean over heads.
func sinksLength(man *results.SinksManifest, heads []results.SinkHeadRow, lengths []int) *report.Figure {
	lo, hi := float64(slices.Min(man.Layers)), float64(slices.Max(man.Layers))
	if hi == lo {
		hi = lo + 1
	}
	colors := &report.ColorScale{Label: "layer ℓ", Map: report.Viridis(lo, hi), Integer: true}
	panel := func(title, xlabel, ylabel string, get func(results.SinkHeadRow) float64, xOf func(T float64) float64, bound func(T float64) float64, boundName string) (report.Panel, bool) {
		Ts, layer, v := pooledHeads(heads, get)
		if len(v) == 0 {
			return report.Panel{}, false
		}
		x := make([]float64, len(Ts))
		for i, T := range Ts {
			x[i] = xOf(T)
		}
		var mx, my []float64
		for _, T := range lengths {
			s, n := 0.0, 0.0
			for i := range Ts {
				if int(Ts[i]) == T {
					s += v[i]
					n++
				}
			}
			if n > 0 {
				mx, my = append(mx, xOf(float64(T))), append(my, s/n)
			}
		}
		ss := []report.Series{
			{Name: "(layer, head)", Kind: report.Scatter, X: x, Y: v, Values: layer, Radius: 3, Alpha: 0.8},
			{Name: "mean over heads", Kind: report.Line, X: mx, Y: my, Color: report.Black, Width: 2},
		}
		if bound != nil {
			var bx, by []float64
			for _, T := range lengths {
				bx, by = append(bx, xOf(float64(T))), append(by, bound(float64(T)))
			}
			ss = append(ss, report.Series{Name: boundName, Kind: report.Line, X: bx, Y: by, Color: report.Grey, Dash: true, Width: 1.4})
		}
		return report.Panel{Title: title, XLabel: xlabel, YLabel: ylabel, Series: ss, Colors: colors, Legend: report.LegendNone}, true
	}
	var panels []report.Panel
	if p, ok := panel("entropy vs ln T", "ln T", "mean entropy H_t (nats)", func(r results.SinkHeadRow) float64 { return r.Entropy },
		math.Log, math.Log, "ln T (uniform over T keys)"); ok {
		panels = append(panels, p)
	}
	if p, ok := panel("normalised entropy vs T", "context length T", "mean H_t / ln(visible keys)", func(r results.SinkHeadRow) float64 { return r.EntropyNorm },
		func(T float64) float64 { return T }, nil, ""); ok {
		panels = append(panels, p)
	}
	if p, ok := panel("largest weight vs T (fading)", "context length T", "mean max_j α_tj", func(r results.SinkHeadRow) float64 { return r.MaxWeight },
		func(T float64) float64 { return T }, nil, ""); ok {
		panels = append(panels, p)
	}
	if p, ok := panel("largest weight, last quarter of queries", "context length T", "mean max_j α_tj, t ≥ T − ⌊T/4⌋",
		func(r results.SinkHeadRow) float64 { return r.MaxLast }, func(T float64) float64 { return T }, nil, ""); ok {
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil
	}
	return &report.Figure{
		ID:    "sinks-length",
		Title: "Entropy and largest weight against context length, per head",
		Caption: fmt.Sprintf("One point per (length, softmax layer, head), coloured by layer (viridis), each the head's mean over queries "+
			"averaged over the samples of that length; the black line is the mean over heads. Entropy H_t = −Σ_j α_tj ln α_tj is drawn "+
			"against ln T with the dashed grey line ln T, the entropy of a row uniform over T keys; normalised entropy divides by the ln of the "+
			"keys the query can see; the largest weight max_j α_tj falls with T when attention spreads (\"fading\"). Lengths: %v.", lengths),
		Panels:     panels,
		Columns:    2,
		PanelWidth: 5, PanelHeight: 3.8,
	}
}

// sinksGates draws the output-gate statistics per (layer, head) at the
// longest length: mean gate and Qiu et al.'s sparsity as heat maps, and
// the gate at token 0 against the gate after it. Nil for an ungated model.
func sinksGates(man *results.SinksManifest, heads []results.SinkHeadRow, T, nh int) *report.Figure {
	var first, rest, layer []float64
	gm, gb := newGrid(man.Layers, nh), newGrid(man.Layers, nh)
	for _, h := range heads {
		if h.T != T || !finite(h.GateMean) {
			continue
		}
		gm.add(h.Layer, h.Head, h.GateMean, 1)
		gb.add(h.Layer, h.Head, h.GateBelow, 1)
		if finite(h.GateFirst) && finite(h.GateRest) {
			first, rest, layer = append(first, h.GateFirst), append(rest, h.GateRest), append(layer, float64(h.Layer))
		}
	}
	pm, _, ok := heatPanel("mean gate", "gate", gm.layers, nh, gm.means(), 0, 1)
	if !ok {
		return nil
	}
	pb, _, _ := heatPanel(fmt.Sprintf("fraction of gate values below %g", man.Options.GateBelow), "fraction", gb.layers, nh, gb.means(), 0, 1)
	panels := []report.Panel{pm, pb}
	if len(first) > 0 {
		lo, hi := float64(slices.Min(man.Layers)), float64(slices.Max(man.Layers))
		if hi == lo {
			hi = lo + 1
		}
		panels = append(panels, report.Panel{Title: "gate on the first token vs after it", XLabel: "mean gate at tokens ≥ 1", YLabel: "mean gate at token 0",
			X: report.Range{Min: 0, Max: 1}, Y: report.Range{Min: 0, Max: 1}, Legend: report.LegendNone,
			Colors: &report.ColorScale{Label: "layer ℓ", Map: report.Viridis(lo, hi), Integer: true},
			Series: []report.Series{
				{Name: "y = x", Kind: report.Line, X: []float64{0, 1}, Y: []float64{0, 1}, Color: report.Black, Dash: true, Width: 1.2},
				{Name: "(layer, head, sample)", Kind: report.Scatter, X: rest, Y: first, Values: layer, Radius: 3.4, Alpha: 0.9},
			}})
	}
	return &report.Figure{
		ID:    "sinks-gates",
		Title: fmt.Sprintf("Output gates per (layer, head), T = %d", T),
		Caption: fmt.Sprintf("Over every output-gate value of a head in a pass (tokens × dimensions for an element-wise gate), averaged over the "+
			"samples of T = %d: the mean gate; the fraction of values below %g (Qiu et al.'s sparsity); and, one point per (layer, head, sample) "+
			"coloured by layer (viridis), the mean gate at token 0 against the mean at tokens ≥ 1, with the dashed black line y = x (a point "+
			"below it is a head whose gate closes on the first token).", T, man.Options.GateBelow),
		Panels:     panels,
		Columns:    min(3, len(panels)),
		PanelWidth: max(4.6, 2.5+0.3*float64(nh)), PanelHeight: max(3.6, 1.6+0.3*float64(len(gm.layers))),
	}
}
