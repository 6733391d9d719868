package filters

import (
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// Experts returns the report of a probe experts run at its longest
// length: the load of every (layer, expert) over all tokens, the first
// tokens and the rest (experts-load); the router's entropy and top-1
// margin per layer (experts-router); and how the first tokens' top-1
// expert compares with the rest's (experts-first).
func Experts(man *results.ExpertsManifest, loads []results.ExpertLoadRow, layers []results.ExpertLayerRow) (*report.Report, error) {
	if len(loads) == 0 || len(layers) == 0 {
		return nil, fmt.Errorf("experts report: the experts_load or experts_layers table is empty")
	}
	lengths := slices.Clone(man.Options.Lengths)
	slices.Sort(lengths)
	T := longest(lengths)
	var ls []results.ExpertLayerRow
	for _, r := range layers {
		if r.T == T {
			ls = append(ls, r)
		}
	}
	var ld []results.ExpertLoadRow
	for _, r := range loads {
		if r.T == T {
			ld = append(ld, r)
		}
	}
	if len(ls) == 0 || len(ld) != len(ls)*man.Experts {
		return nil, fmt.Errorf("experts report: T = %d has %d layer rows and %d load rows, want %d per layer", T, len(ls), len(ld), man.Experts)
	}
	return &report.Report{
		Title: "Mixture-of-experts routing",
		Subtitle: fmt.Sprintf("Model: %s (%s), %d layers, %d experts, top-%d; lengths %v, %d sample(s).", man.Model.Dir, man.Model.Arch,
			man.Model.Layers, man.Experts, man.TopK, lengths, man.Options.Samples),
		Intro: []string{"Per sparse layer, read from blocks.{l}.mlp.hook_router_logits, hook_expert_indices and hook_expert_weights: the share of " +
			"the k routing assignments per token each expert receives, over all tokens, the first token of each sequence and the rest; the " +
			"entropy and top-1 margin of the router's softmax over all experts (definitions: docs/diagnostics.md, \"Mixture-of-experts routing\")."},
		Manifest: manifestOptions(results.ExpertsManifestName, man.Tool, man.Created, man.Model, man.Source, man.Chunks, man.Options),
		Figures:  []*report.Figure{expertsLoad(man, ld, ls, T), expertsRouter(man, ls, T), expertsFirst(ls, T)},
	}, nil
}

// expertsLoad draws load, first_load and rest_load as (layer, expert)
// heatmaps on one scale.
func expertsLoad(man *results.ExpertsManifest, ld []results.ExpertLoadRow, ls []results.ExpertLayerRow, T int) *report.Figure {
	E := man.Experts
	idx := make([]int, len(ls))
	for i, r := range ls {
		idx[i] = r.Layer
	}
	z := [3][]float64{make([]float64, len(ld)), make([]float64, len(ld)), make([]float64, len(ld))}
	hi := 0.0
	for i, r := range ld {
		z[0][i], z[1][i], z[2][i] = r.Load, r.FirstLoad, r.RestLoad
		hi = max(hi, r.Load, r.FirstLoad, r.RestLoad)
	}
	tbl := report.Table{Caption: fmt.Sprintf("Largest load per layer, T = %d", T), Header: []string{"layer", "expert", "load", "first_load", "rest_load", "mean weight"}}
	for i, l := range ls {
		row := ld[i*E : (i+1)*E]
		b := 0
		for e := range row {
			if row[e].Load > row[b].Load {
				b = e
			}
		}
		tbl.Rows = append(tbl.Rows, []string{fmt.Sprint(l.Layer), fmt.Sprint(b), fmt.Sprintf("%.3f", row[b].Load),
			fmt.Sprintf("%.3f", row[b].FirstLoad), fmt.Sprintf("%.3f", row[b].RestLoad), fmt.Sprintf("%.3f", row[b].MeanWeight)})
	}
	var panels []report.Panel
	for k, title := range []string{"load, all tokens", "first_load, position 0", "rest_load, positions ≥ 1"} {
		p, _, ok := heatPanel(title, "share of assignments", idx, E, z[k], 0, max(hi, 1e-9))
		if ok {
			p.XLabel = "expert"
			panels = append(panels, p)
		}
	}
	return &report.Figure{
		ID:    "experts-load",
		Title: fmt.Sprintf("Expert load per layer, T = %d", T),
		Caption: fmt.Sprintf("Share of the N·k routing assignments of each sparse layer (rows) that go to each expert (columns), k = %d: over all "+
			"tokens of every sample (left), over the first token of each sequence (middle) and over the rest (right); each row sums to 1, "+
			"uniform routing gives 1/E = %.3g everywhere. One colour scale for the three panels. A first-token column far above the rest "+
			"is the routing's counterpart of an attention sink.", man.TopK, 1/float64(E)),
		Tables:     []report.Table{tbl},
		Panels:     panels,
		Columns:    3,
		PanelWidth: 3.6, PanelHeight: 3.4,
	}
}

// expertsRouter draws the mean entropy and top-1 margin per layer, over
// all tokens, the first and the rest.
func expertsRouter(man *results.ExpertsManifest, ls []results.ExpertLayerRow, T int) *report.Figure {
	var x []float64
	var ent, margin [3][]float64
	for _, r := range ls {
		x = append(x, float64(r.Layer))
		for k, v := range []float64{r.Entropy, r.EntropyFirst, r.EntropyRest} {
			ent[k] = append(ent[k], v)
		}
		for k, v := range []float64{r.Margin, r.MarginFirst, r.MarginRest} {
			margin[k] = append(margin[k], v)
		}
	}
	xr := report.Range{Min: x[0] - 0.5, Max: x[len(x)-1] + 0.5}
	styles := []report.Series{
		{Name: "all tokens", Kind: report.Line, Color: report.Black, Width: 2},
		{Name: "first token", Kind: report.Scatter, Color: report.Vermillion, Shape: report.Diamond, Radius: 4},
		{Name: "rest", Kind: report.Scatter, Color: report.Blue, Shape: report.Circle, Radius: 3},
	}
	series := func(ys [3][]float64) []report.Series {
		var ss []report.Series
		for k, s := range styles {
			s.X, s.Y = x, ys[k]
			ss = append(ss, s)
		}
		return ss
	}
	lnE := math.Log(float64(man.Experts))
	es := append(series(ent), report.Series{Name: "ln E (uniform)", Kind: report.Line, X: []float64{xr.Min, xr.Max}, Y: []float64{lnE, lnE},
		Color: report.Grey, Dash: true, Width: 1.2})
	unit := "p₍₁₎ − p₍₂₎"
	if man.Options.Margin == results.MarginLogit {
		unit = "z₍₁₎ − z₍₂₎"
	}
	return &report.Figure{
		ID:    "experts-router",
		Title: fmt.Sprintf("Router entropy and top-1 margin per layer, T = %d", T),
		Caption: fmt.Sprintf("Left: mean entropy H = −Σ_e p_e ln p_e (nats) of the router's softmax p over all %d experts; the dashed line is ln E, "+
			"a router that cannot choose. Right: mean top-1 margin %s (--margin %s). Black line: all tokens; vermillion diamonds: the "+
			"first token of each sequence; blue circles: the rest.", man.Experts, unit, man.Options.Margin),
		Panels: []report.Panel{
			{Title: "router entropy", XLabel: "layer l", YLabel: "H (nats)", X: xr, Series: es, Legend: report.LegendOutside},
			{Title: "top-1 margin", XLabel: "layer l", YLabel: unit, X: xr, Series: series(margin), Legend: report.LegendOutside},
		},
		PanelWidth: 5.2, PanelHeight: 3.8,
	}
}

// expertsFirst draws per layer the share of the first tokens whose top-1
// is the expert most of them pick, against the share of the other tokens
// that pick it.
func expertsFirst(ls []results.ExpertLayerRow, T int) *report.Figure {
	var x, first, rest []float64
	tbl := report.Table{Caption: fmt.Sprintf("First tokens' top-1 expert per layer, T = %d", T),
		Header: []string{"layer", "expert (mode)", "share of first tokens", "share of the rest", "sequences"}}
	for _, r := range ls {
		x, first, rest = append(x, float64(r.Layer)), append(first, r.FirstAgree), append(rest, r.RestAgree)
		tbl.Rows = append(tbl.Rows, []string{fmt.Sprint(r.Layer), fmt.Sprint(r.FirstMode), fmt.Sprintf("%.3f", r.FirstAgree),
			fmt.Sprintf("%.3f", r.RestAgree), fmt.Sprint(r.Sequences)})
	}
	xr := report.Range{Min: x[0] - 0.5, Max: x[len(x)-1] + 0.5}
	return &report.Figure{
		ID:    "experts-first",
		Title: fmt.Sprintf("The first token's expert vs the rest's, T = %d", T),
		Caption: "Per sparse layer, the expert that most first tokens (position 0 of each sequence) choose as their top-1 (table): vermillion " +
			"diamonds, the share of the first tokens that choose it; blue circles, the share of the other tokens that choose it as top-1. " +
			"A first token routed like any other sits on the blue circle; a dedicated first-token expert sits far above it.",
		Tables: []report.Table{tbl},
		Panels: []report.Panel{{XLabel: "layer l", YLabel: "share choosing the first tokens' top-1 expert", X: xr, Y: report.Range{Min: 0, Max: 1.05},
			Legend: report.LegendOutside, Series: []report.Series{
				{Name: "first tokens", Kind: report.Scatter, X: x, Y: first, Color: report.Vermillion, Shape: report.Diamond, Radius: 4},
				{Name: "the rest", Kind: report.Scatter, X: x, Y: rest, Color: report.Blue, Shape: report.Circle, Radius: 3},
			}}},
		PanelWidth: 6, PanelHeight: 3.8,
	}
}
