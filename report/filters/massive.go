package filters

import (
	"fmt"
	"math"
	"slices"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/report"
)

// Sun et al.'s reading of "massive": |h| > 100 and about 1,000× the median.
const (
	massiveAbs   = 100
	massiveRatio = 1000
)

// Massive returns the report of a probe massive run: the top-k |h| of the
// residual stream per layer against the layer's median, and the change in
// NLL when the top entries of one layer are replaced.
func Massive(man *results.MassiveManifest, top []results.MassiveTopRow, ppl []results.MassivePPLRow) (*report.Report, error) {
	if len(top) == 0 {
		return nil, fmt.Errorf("massive report: the massive_top table is empty")
	}
	lengths := slices.Clone(man.Options.Lengths)
	slices.Sort(lengths)
	T := longest(lengths)
	figs := []*report.Figure{massiveTop(man, top, T)}
	if f := massivePPL(man, ppl, lengths); f != nil {
		figs = append(figs, f)
	}
	return &report.Report{
		Title:    "Massive activations in the residual stream",
		Subtitle: fmt.Sprintf("Model: %s (%s), %d layers; lengths %v.", man.Model.Dir, man.Model.Arch, man.Model.Layers, lengths),
		Intro: []string{"Per layer l, the largest |h[t, i]| of blocks.{l}.hook_resid_post (the residual leaving block l) with their position " +
			"and channel, against the layer's median |h| (Sun, Chen, Kolter & Liu 2024; definitions: docs/diagnostics.md, \"Massive activations\")."},
		Manifest: manifestOptions(results.MassiveManifestName, man.Tool, man.Created, man.Model, man.Source, man.Chunks, man.Options),
		Figures:  figs,
	}, nil
}

// massiveTop draws per layer the top-k |h| (points), the median |h|
// (line) and the top-1 ratio, at the longest length over its samples.
func massiveTop(man *results.MassiveManifest, top []results.MassiveTopRow, T int) *report.Figure {
	var lx, ly, mx, my, rx, ry []float64
	medSum := map[int]float64{}
	medN := map[int]float64{}
	tbl := report.Table{Caption: fmt.Sprintf("Top entry per layer, sample 0, T = %d", T),
		Header: []string{"layer", "position", "channel", "value", "median |h|", "ratio"}}
	for _, r := range top {
		if r.T != T {
			continue
		}
		if a := math.Abs(r.Value); a > 0 {
			lx, ly = append(lx, float64(r.Layer)), append(ly, a)
		}
		if r.Rank == 0 {
			if r.MedianAbs > 0 {
				medSum[r.Layer] += r.MedianAbs
				medN[r.Layer]++
			}
			if finite(r.Ratio) && r.Ratio > 0 {
				rx, ry = append(rx, float64(r.Layer)), append(ry, r.Ratio)
			}
			if r.Sample == 0 {
				tbl.Rows = append(tbl.Rows, []string{fmt.Sprint(r.Layer), fmt.Sprint(r.Position), fmt.Sprint(r.Channel),
					fmt.Sprintf("%.4g", r.Value), fmt.Sprintf("%.4g", r.MedianAbs), fmt.Sprintf("%.4g", r.Ratio)})
			}
		}
	}
	for l := 0; l < man.Model.Layers; l++ {
		if medN[l] > 0 {
			mx, my = append(mx, float64(l)), append(my, medSum[l]/medN[l])
		}
	}
	xr := report.Range{Min: -0.5, Max: float64(man.Model.Layers) - 0.5}
	ends := []float64{xr.Min, xr.Max}
	values := []report.Series{
		{Name: fmt.Sprintf("top-%d |h|", man.Options.TopK), Kind: report.Scatter, X: lx, Y: ly, Color: report.Blue, Radius: 3, Alpha: 0.7},
		{Name: "median |h|", Kind: report.Line, X: mx, Y: my, Color: report.Black, Width: 2},
		{Name: "|h| = 100", Kind: report.Line, X: ends, Y: []float64{massiveAbs, massiveAbs}, Color: report.Grey, Dash: true, Width: 1.2},
	}
	panels := []report.Panel{{Title: "largest |h| and the median per layer", XLabel: "layer l", YLabel: "|h[t, i]|", YLog: true, X: xr,
		Series: values, Legend: report.LegendOutside}}
	if len(ry) > 0 {
		panels = append(panels, report.Panel{Title: "top-1 |h| / median |h|", XLabel: "layer l", YLabel: "ratio", YLog: true, X: xr, Legend: report.LegendOutside,
			Series: []report.Series{
				{Name: "per sample", Kind: report.Scatter, X: rx, Y: ry, Color: report.Vermillion, Shape: report.Diamond, Radius: 4},
				{Name: "ratio 1000", Kind: report.Line, X: ends, Y: []float64{massiveRatio, massiveRatio}, Color: report.Grey, Dash: true, Width: 1.2},
			}})
	}
	return &report.Figure{
		ID:    "massive-top",
		Title: fmt.Sprintf("Top-%d residual-stream entries per layer, T = %d", man.Options.TopK, T),
		Caption: fmt.Sprintf("Blue circles: the %d largest |h[t, i]| over all positions and channels of each layer's residual stream "+
			"(blocks.{l}.hook_resid_post), every sample of T = %d; black line: the layer's median |h| (mean over samples). Vermillion "+
			"diamonds: the top-1 |h| over the median, per sample. The dashed grey lines mark Sun et al.'s reading of massive: |h| > 100, "+
			"about 1,000× the median. Log scales.", man.Options.TopK, T),
		Tables:     []report.Table{tbl},
		Panels:     panels,
		PanelWidth: 5.6, PanelHeight: 3.8,
	}
}

// massivePPL draws the NLL change of each intervention per sample and
// length, and tabulates the mean NLL and perplexity of every variant.
func massivePPL(man *results.MassiveManifest, ppl []results.MassivePPLRow, lengths []int) *report.Figure {
	styles := map[string]struct {
		c     report.Series
		label string
	}{
		results.MassiveZero: {report.Series{Color: report.Vermillion, Shape: report.Diamond}, "zero (Sun et al.)"},
		results.MassiveMean: {report.Series{Color: report.Blue, Shape: report.Circle}, "channel mean (control)"},
	}
	tbl := report.Table{Caption: "Mean over samples, per length and variant",
		Header: []string{"T", "variant", "layer(s) replaced", "entries", "mean NLL", "ppl", "mean ΔNLL"}}
	var ss []report.Series
	for _, T := range lengths {
		for _, iv := range append([]string{"none"}, man.Options.Interventions...) {
			var nll, d float64
			n := 0
			var layers []int
			entries := 0
			for _, r := range ppl {
				if r.T == T && r.Intervention == iv {
					nll += r.NLL
					d += r.DNLL
					n++
					entries = r.Entries
					if r.Layer >= 0 && !slices.Contains(layers, r.Layer) {
						layers = append(layers, r.Layer)
					}
				}
			}
			if n == 0 {
				continue
			}
			ls := fmtInts(layers)
			if ls == "" {
				ls = "—"
			}
			tbl.Rows = append(tbl.Rows, []string{fmt.Sprint(T), iv, ls, fmt.Sprint(entries), fmt.Sprintf("%.4f", nll/float64(n)),
				fmt.Sprintf("%.4g", math.Exp(nll/float64(n))), fmt.Sprintf("%+.4f", d/float64(n))})
		}
	}
	for _, iv := range man.Options.Interventions {
		st, ok := styles[iv]
		if !ok {
			continue
		}
		var x, y, mx, my []float64
		for _, T := range lengths {
			s, n := 0.0, 0.0
			for _, r := range ppl {
				if r.T == T && r.Intervention == iv && finite(r.DNLL) {
					x, y = append(x, float64(T)), append(y, r.DNLL)
					s += r.DNLL
					n++
				}
			}
			if n > 0 {
				mx, my = append(mx, float64(T)), append(my, s/n)
			}
		}
		if len(x) == 0 {
			continue
		}
		ss = append(ss,
			report.Series{Name: st.label, Kind: report.Scatter, X: x, Y: y, Color: st.c.Color, Shape: st.c.Shape, Radius: 4},
			report.Series{Kind: report.Line, X: mx, Y: my, Color: st.c.Color, Width: 1.6})
	}
	if len(ss) == 0 {
		return nil
	}
	x0, x1 := float64(lengths[0]), float64(lengths[len(lengths)-1])
	if x0 == x1 { // one length: a short segment around it
		x0, x1 = 0.9*x0, 1.1*x1
	}
	ss = append(ss, report.Series{Name: "no change", Kind: report.Line, X: []float64{x0, x1}, Y: []float64{0, 0}, Color: report.Grey, Dash: true, Width: 1.2})
	return &report.Figure{
		ID:    "massive-ppl",
		Title: "Change in NLL when the massive entries are replaced",
		Caption: fmt.Sprintf("ΔNLL = mean NLL of the pass with the top %d entries of one layer replaced − that of the plain pass on the same chunk "+
			"(nats per token), one marker per sample, the line through the means over samples: vermillion diamonds set the entries to zero "+
			"(Sun et al.), blue circles to their channel's mean over the pass's positions (control). The dashed grey line is no change. "+
			"The layer is --layer, or in each pass the one whose top-1 ratio is largest (table).", entriesOf(man)),
		Tables:     []report.Table{tbl},
		Panels:     []report.Panel{{XLabel: "context length T (tokens)", YLabel: "ΔNLL (nats/token)", Series: ss, Legend: report.LegendOutside}},
		PanelWidth: 6.4, PanelHeight: 4,
	}
}

func entriesOf(man *results.MassiveManifest) int {
	if man.Options.Entries > 0 {
		return man.Options.Entries
	}
	return man.Options.TopK
}
