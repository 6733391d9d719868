// Package sweep draws the BFT paper's zero-training diagnostic figures
// (Long et al., App. I: Figs. 2, 3 and 4) from the results of `probe
// sweep`, with the paper's numbers (notes 003 §B.6) beside ours.
//
// Its input is the small Input struct, so the figures do not depend on how
// a sweep stores its tables: FromAnalysis (analysis.go) fills it from a
// sweep folder's manifest and aggregated tables (results.Manifest and
// results.Results, which analysis.LoadResults returns), and tests fill it
// by hand. It imports no package that runs a model.
package sweep

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/filterlens/probe/report"
	"github.com/filterlens/probe/report/analytic"
)

// Stat is a mean and the spread shown as a ±1 std band.
type Stat struct{ Mean, Std float64 }

// Length is Fig. 2 at one context length T: n_eff, gate and the λobs ratio,
// pooled over the figure's window (last layers, last queries, all heads,
// all samples), and the paper's values at this length (NaN where the paper
// has none).
type Length struct {
	T                                  int
	NEff, Gate, LambdaRatio            Stat
	PaperNEff, PaperGate, PaperLRRatio float64
}

// Fig3Point is Fig. 3 at one length: measured K, the K_opt predicted from
// the aggregate n_eff and S with λ fitted at Tmin, their relative error,
// and the paper's relative error (NaN where none).
type Fig3Point struct {
	T                             int
	KMeas, KOpt, RelErr, PaperRel float64
}

// Cell is one (layer, head) point of Fig. 4, with the cell's mean output
// gate over the same queries as K (Input.Gated).
type Cell struct {
	Layer, Head int
	K, BOS      float64
	Gate        float64
}

// Paper holds the paper's Fig. 4 summary numbers (notes 003 §B.6).
type Paper struct {
	Cells      int
	R, P       float64
	SinkBOS    float64 // every head with BOS mass above this …
	SinkK      float64 // … has K above this …
	SinkLayers [2]int  // … and lies in these layers
	LateK      [2]float64
	MaxBOS     float64
	Model      string
}

// Input is everything the three figures need.
type Input struct {
	Model     string          // what ran (for titles)
	Manifest  []report.Option // the sweep's settings, shown on the page
	Lengths   []Length
	Fig2Std   string // which std the bands show, for the caption
	Fig2Ratio string // which reading of Fig. 2(c), for the caption
	Fig2Pool  string // what Figs. 2–3 pool, for the caption
	Fig3      []Fig3Point
	LambdaFit float64
	Cells     []Cell
	Fig4Pool  string // what a Fig. 4 cell pools, for the caption
	// Gated says that the cells carry the model's output gate: Fig. 4 is
	// then drawn a second time with the gate in place of K.
	Gated    bool
	Spearman float64
	CI       [2]float64 // bootstrap CI of r (NaN when absent)
	Paper    Paper
	Notes    []string
}

// Build returns the report of the three figures.
func Build(in *Input) (*report.Report, error) {
	if len(in.Lengths) == 0 {
		return nil, fmt.Errorf("sweep: no lengths in the results")
	}
	var figs []*report.Figure
	figs = append(figs, fig2(in))
	if len(in.Fig3) > 0 {
		figs = append(figs, fig3(in))
	}
	if len(in.Cells) >= 3 {
		f, err := fig4(in)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f)
	}
	if in.Gated {
		f, err := fig4Gate(in)
		if err != nil {
			return nil, err
		}
		if f != nil {
			figs = append(figs, f)
		}
	}
	return &report.Report{
		Title:    "BFT zero-training diagnostic — Figs. 2, 3, 4 (App. I)",
		Subtitle: "Model: " + in.Model + ". The paper's numbers (" + in.Paper.Model + ") are drawn beside ours.",
		Intro:    in.Notes,
		Manifest: in.Manifest,
		Figures:  figs,
	}, nil
}

func fmtT(T int) string {
	if T%1000 == 0 {
		return fmt.Sprintf("%dk", T/1000)
	}
	if T%1024 == 0 {
		return fmt.Sprintf("%dKi", T/1024)
	}
	return fmt.Sprint(T)
}

func num(x float64, prec int) string {
	if math.IsNaN(x) {
		return "—"
	}
	return fmt.Sprintf("%.*f", prec, x)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// statPanel is one Fig. 2 panel: our mean ± std band and line, and the
// paper's points. The band is clipped to the quantity's range [floor,
// ceil] (n_eff ≥ 1, a gate in [0, 1], a ratio ≥ 0): a mean − std below the
// smallest possible value is a sign of a skewed spread, not a value.
func statPanel(title, ylabel string, in *Input, get func(Length) Stat, paper func(Length) float64, floor, ceil float64) report.Panel {
	var x, m, lo, hi, px, py []float64
	for _, l := range in.Lengths {
		s := get(l)
		if finite(s.Mean) {
			sd := s.Std
			if !finite(sd) {
				sd = 0
			}
			x, m = append(x, float64(l.T)), append(m, s.Mean)
			lo, hi = append(lo, math.Max(s.Mean-sd, floor)), append(hi, math.Min(s.Mean+sd, ceil))
		}
		if p := paper(l); finite(p) {
			px, py = append(px, float64(l.T)), append(py, p)
		}
	}
	var ss []report.Series
	if len(x) > 0 {
		ss = append(ss,
			report.Series{Name: "ours ±1 std", Kind: report.Band, X: x, Lo: lo, Hi: hi, Color: report.Blue},
			report.Series{Name: "ours (mean)", Kind: report.Line, X: x, Y: m, Color: report.Blue, Width: 2.2},
			report.Series{Kind: report.Scatter, X: x, Y: m, Color: report.Blue, Radius: 3.5})
	}
	if len(px) > 0 {
		ss = append(ss, report.Series{Name: "paper (App. I)", Kind: report.Scatter, X: px, Y: py, Color: report.Vermillion, Shape: report.Diamond, Radius: 4.5})
	}
	if len(ss) == 0 { // e.g. an ungated model's gate panel without paper points
		ss = append(ss, report.Series{Kind: report.Scatter, X: []float64{float64(in.Lengths[0].T)}, Y: []float64{0}, Color: report.Grey})
		title += " (no data)"
	}
	return report.Panel{Title: title, XLabel: "context length T (tokens)", YLabel: ylabel, Series: ss, Legend: report.LegendNone}
}

// withLegend shows the legend of one panel (the others share it).
func withLegend(p report.Panel, placement string) report.Panel {
	p.Legend = placement
	return p
}

func fig2(in *Input) *report.Figure {
	tbl := report.Table{Caption: "Fig. 2, paper vs ours (mean ± std)",
		Header: []string{"T", "n_eff paper", "n_eff ours", "gate paper", "gate ours", "λobs ratio paper", "λobs ratio ours"}}
	for _, l := range in.Lengths {
		pm := func(s Stat, prec int) string {
			if !finite(s.Mean) {
				return "—"
			}
			return num(s.Mean, prec) + " ± " + num(s.Std, prec)
		}
		tbl.Rows = append(tbl.Rows, []string{fmtT(l.T), num(l.PaperNEff, 1), pm(l.NEff, 1), num(l.PaperGate, 3), pm(l.Gate, 3),
			num(l.PaperLRRatio, 2), pm(l.LambdaRatio, 3)})
	}
	paperPoints := ""
	for _, l := range in.Lengths {
		if finite(l.PaperNEff) || finite(l.PaperGate) || finite(l.PaperLRRatio) {
			paperPoints = " Vermillion diamonds are the paper's values (App. I, Fig. 2) at the lengths it reports."
		}
	}
	first, last := in.Lengths[0], in.Lengths[len(in.Lengths)-1]
	growth := report.Table{Caption: "Growth over the sweep (T_min → T_max)", Header: []string{"quantity", "paper (1k → 10k)", "ours"},
		Rows: [][]string{
			{"n_eff(T_max)/n_eff(T_min)", "×2.2 (70.7/32.5)", "×" + num(last.NEff.Mean/first.NEff.Mean, 2)},
			{"gate(T_max) − gate(T_min)", "+0.027 (within ±0.075)", num(last.Gate.Mean-first.Gate.Mean, 3)},
			{"λobs ratio at T_max", "×1.28", "×" + num(last.LambdaRatio.Mean, 2)},
		}}
	return &report.Figure{
		ID:    "bft-fig2",
		Title: "BFT Fig. 2 — n_eff, gate and λobs(T)/λobs(T_min) vs context length",
		Caption: "(a) Kish effective sample size n_eff = 1/Σα², (b) the output gate σ(XW_θ), (c) the observation precision relative to the shortest " +
			"length, per context length T: mean (blue line and dots) ± 1 std (blue band) over " + in.Fig2Pool + ". Bands use " + in.Fig2Std + "; panel (c) is " + in.Fig2Ratio +
			". Each band is clipped to its quantity's range (n_eff ≥ 1, gate in [0, 1], ratio ≥ 0)." + paperPoints,
		Tables: []report.Table{tbl, growth},
		Panels: []report.Panel{
			withLegend(statPanel("(a) n_eff", "n_eff", in, func(l Length) Stat { return l.NEff }, func(l Length) float64 { return l.PaperNEff }, 1, math.Inf(1)), report.LegendTopLeft),
			statPanel("(b) gate", "gate σ(XW_θ)", in, func(l Length) Stat { return l.Gate }, func(l Length) float64 { return l.PaperGate }, 0, 1),
			statPanel("(c) recovered λobs(T)/λobs(T_min)", "λobs(T)/λobs(T_min)", in, func(l Length) Stat { return l.LambdaRatio }, func(l Length) float64 { return l.PaperLRRatio }, 0, math.Inf(1)),
		},
		Columns:    3,
		PanelWidth: 4.6, PanelHeight: 3.8,
	}
}

func fig3(in *Input) *report.Figure {
	var x, km, ko, rel, px, pr []float64
	tbl := report.Table{Caption: "Fig. 3, paper vs ours", Header: []string{"T", "K_meas (ours)", "K_opt (ours)", "K_opt − K_meas", "rel. error ours", "rel. error paper"}}
	for _, p := range in.Fig3 {
		x = append(x, float64(p.T))
		km, ko, rel = append(km, p.KMeas), append(ko, p.KOpt), append(rel, 100*p.RelErr)
		if finite(p.PaperRel) {
			px, pr = append(px, float64(p.T)), append(pr, 100*p.PaperRel)
		}
		tbl.Rows = append(tbl.Rows, []string{fmtT(p.T), num(p.KMeas, 5), num(p.KOpt, 5), fmt.Sprintf("%+.2e", p.KOpt-p.KMeas),
			num(100*p.RelErr, 3) + " %", func() string {
				if finite(p.PaperRel) {
					return num(100*p.PaperRel, 2) + " %"
				}
				return "— (fit point)"
			}()})
	}
	relSeries := []report.Series{{Name: "ours", Kind: report.Line, X: x[1:], Y: rel[1:], Color: report.Blue, Width: 2},
		{Kind: report.Scatter, X: x[1:], Y: rel[1:], Color: report.Blue, Radius: 3.5}}
	if len(x) < 2 {
		relSeries = []report.Series{{Name: "ours", Kind: report.Scatter, X: x, Y: rel, Color: report.Blue}}
	}
	if len(px) > 0 {
		relSeries = append(relSeries, report.Series{Name: "paper", Kind: report.Scatter, X: px, Y: pr, Color: report.Vermillion, Shape: report.Diamond, Radius: 4.5})
	}
	top := 0.0 // relative errors are ≥ 0: start the axis at 0, leave room for the legend
	for _, v := range append(append([]float64{}, rel[min(1, len(rel)):]...), pr...) {
		if finite(v) {
			top = math.Max(top, v)
		}
	}
	if top == 0 {
		top = 1
	}
	return &report.Figure{
		ID:    "bft-fig3",
		Title: "BFT Fig. 3 — K_opt predicted from n_eff and S vs measured K_BFT",
		Caption: fmt.Sprintf("(a) Measured gain K_meas (mean of per-element K at λ = 1) and the prediction K_opt(T) = λobs(T)/(λ + λobs(T)), with λobs(T) "+
			"from Eq. 6 on the aggregate n_eff(T) and S(T), and one scalar λ = %.4g fitted at T_min so that K_opt(T_min) = K_meas(T_min). (b) Relative "+
			"errors |K_opt − K_meas|/K_meas at the other lengths, ours and the paper's (max 0.28 %%). K moves little over the sweep, so sub-percent "+
			"errors are a weak test (notes 003 §B.6); the table shows K_opt − K_meas itself.", in.LambdaFit),
		Tables: []report.Table{tbl},
		Panels: []report.Panel{
			{Title: "(a) K_opt vs measured K", XLabel: "context length T (tokens)", YLabel: "Kalman gain K", Legend: report.LegendBottomRight, Series: []report.Series{
				{Name: "K_opt (λ fitted at T_min)", Kind: report.Line, X: x, Y: ko, Color: report.Black, Width: 1.8, Dash: true},
				{Name: "K_meas (ours)", Kind: report.Scatter, X: x, Y: km, Color: report.Blue, Radius: 4.5},
			}},
			{Title: "(b) relative error", XLabel: "context length T (tokens)", YLabel: "|K_opt − K_meas|/K_meas (%)", Legend: report.LegendTopLeft,
				Y: report.Range{Min: 0, Max: 1.35 * top}, Series: relSeries},
		},
		PanelWidth: 5.4, PanelHeight: 4,
	}
}

func fig4(in *Input) (*report.Figure, error) {
	var k, bos, layer []float64
	minL, maxL := math.MaxInt, 0
	for _, c := range in.Cells {
		if !finite(c.K) || !finite(c.BOS) {
			continue
		}
		k, bos, layer = append(k, c.K), append(bos, c.BOS), append(layer, float64(c.Layer))
		minL, maxL = min(minL, c.Layer), max(maxL, c.Layer)
	}
	r, p, err := analytic.Pearson(k, bos)
	if err != nil {
		return nil, fmt.Errorf("sweep: Fig. 4: %w", err)
	}
	// Threshold checks of the paper's text.
	var sinkK []float64
	var sinkLayers []int
	maxBOS, over03 := 0.0, 0
	for _, c := range in.Cells {
		if c.BOS > in.Paper.SinkBOS {
			sinkK = append(sinkK, c.K)
			sinkLayers = append(sinkLayers, c.Layer)
		}
		if c.BOS > 0.3 {
			over03++
		}
		maxBOS = math.Max(maxBOS, c.BOS)
	}
	sort.Ints(sinkLayers)
	sinkDesc := "none"
	if len(sinkK) > 0 {
		mk := math.Inf(1)
		for _, v := range sinkK {
			mk = math.Min(mk, v)
		}
		sinkDesc = fmt.Sprintf("%d heads; min K %.3f; layers %d–%d", len(sinkK), mk, sinkLayers[0], sinkLayers[len(sinkLayers)-1])
	}
	tbl := report.Table{Caption: "Fig. 4, paper vs ours", Header: []string{"quantity", "paper", "ours"}, Rows: [][]string{
		{"(layer, head) cells", fmt.Sprint(in.Paper.Cells), fmt.Sprint(len(k))},
		{"Pearson r (K, BOS mass)", fmt.Sprintf("%+.2f", in.Paper.R), fmt.Sprintf("%+.3f", r)},
		{"two-sided p (t, n − 2 df)", fmt.Sprintf("%.1e", in.Paper.P), fmt.Sprintf("%.2e", p)},
		{"heads with BOS mass > " + fmt.Sprint(in.Paper.SinkBOS), fmt.Sprintf("all have K > %.2f, layers %d–%d", in.Paper.SinkK, in.Paper.SinkLayers[0], in.Paper.SinkLayers[1]), sinkDesc},
		{"max BOS mass", fmt.Sprintf("< %.1f", in.Paper.MaxBOS), fmt.Sprintf("%.3f (%d heads > 0.3)", maxBOS, over03)},
	}}
	if finite(in.Spearman) {
		tbl.Rows = append(tbl.Rows, []string{"Spearman ρ", "—", fmt.Sprintf("%+.3f", in.Spearman)})
	}
	if finite(in.CI[0]) && finite(in.CI[1]) && in.CI[1] > in.CI[0] {
		tbl.Rows = append(tbl.Rows, []string{"bootstrap CI of r", "—", fmt.Sprintf("[%+.3f, %+.3f]", in.CI[0], in.CI[1])})
	}
	if maxL == minL {
		maxL = minL + 1
	}
	return &report.Figure{
		ID:    "bft-fig4",
		Title: fmt.Sprintf("BFT Fig. 4 — BOS mass vs K_BFT per (layer, head): r = %+.3f, p = %.2g", r, p),
		Caption: "One point per (layer, head) cell: x = K_BFT (mean over " + in.Fig4Pool + "), y = attention mass on position 0 (BOS mass) over the " +
			"second-half queries, colour = layer (viridis, 0-based). The paper reports r = +0.25, p = 1.3e-7 over 448 cells, sink heads " +
			"(BOS > 0.05) only at K > 0.94 in middle layers 6–18, and no head above 0.3. Caveat (notes 003 F.16): concentrating on one token lowers " +
			"n_eff but drives S → 0, so sink heads get K → 1 partly by construction of Eq. 6.",
		Tables: []report.Table{tbl},
		Panels: []report.Panel{{
			XLabel: "K_BFT (λ = 1)", YLabel: "BOS mass α[t, 0]", Legend: report.LegendNone,
			Colors: &report.ColorScale{Label: "layer ℓ", Map: report.Viridis(float64(minL), float64(maxL)), Integer: true},
			Series: []report.Series{{Name: "(layer, head) cells", Kind: report.Scatter, X: k, Y: bos, Values: layer, Radius: 3.4, Alpha: 0.9}},
		}},
		PanelWidth: 7, PanelHeight: 5,
	}, nil
}

// fig4Gate is Fig. 4 with the output gate in place of K_BFT (nil when
// fewer than 3 cells have both). Qiu et al. find that the learned gate
// removes sinks; BFT reads the gate as its gain K, so the question of
// Fig. 4 becomes whether the heads that keep mass on position 0 are the
// heads whose gate stays open.
func fig4Gate(in *Input) (*report.Figure, error) {
	var g, bos, layer []float64
	minL, maxL := math.MaxInt, 0
	for _, c := range in.Cells {
		if !finite(c.Gate) || !finite(c.BOS) {
			continue
		}
		g, bos, layer = append(g, c.Gate), append(bos, c.BOS), append(layer, float64(c.Layer))
		minL, maxL = min(minL, c.Layer), max(maxL, c.Layer)
	}
	if len(g) < 3 {
		return nil, nil
	}
	r, p, err := analytic.Pearson(g, bos)
	if err != nil {
		return nil, fmt.Errorf("sweep: Fig. 4 with the gate: %w", err)
	}
	if maxL == minL {
		maxL = minL + 1
	}
	return &report.Figure{
		ID:    "bft-fig4-gate",
		Title: fmt.Sprintf("Fig. 4 with the output gate in place of K: BOS mass vs gate per (layer, head): r = %+.3f, p = %.2g", r, p),
		Caption: "The analogue of BFT Fig. 4 with the model's learned output gate σ(x·W_θ) (Qiu et al.) in place of K_BFT: one point per (layer, head) cell, " +
			"x = mean gate over " + in.Fig4Pool + " (element-wise gates averaged over the head dimension), y = BOS mass as in Fig. 4, colour = layer (viridis, 0-based). " +
			"BFT reads the gate as its gain K: heads that keep mass on position 0 with an open gate (x near 1) are the K = 1 case of Lemma 1; " +
			"Qiu et al. report that the gate removes sinks, which puts sink heads at small gates.",
		Tables: []report.Table{{Caption: "Fig. 4 with the gate", Header: []string{"quantity", "value"}, Rows: [][]string{
			{"(layer, head) cells", fmt.Sprint(len(g))},
			{"Pearson r (gate, BOS mass)", fmt.Sprintf("%+.3f", r)},
			{"two-sided p (t, n − 2 df)", fmt.Sprintf("%.2e", p)},
		}}},
		Panels: []report.Panel{{
			XLabel: "output gate (mean)", YLabel: "BOS mass α[t, 0]", Legend: report.LegendNone,
			X:      report.Range{Min: 0, Max: 1},
			Colors: &report.ColorScale{Label: "layer ℓ", Map: report.Viridis(float64(minL), float64(maxL)), Integer: true},
			Series: []report.Series{{Name: "(layer, head) cells", Kind: report.Scatter, X: g, Y: bos, Values: layer, Radius: 3.4, Alpha: 0.9}},
		}},
		PanelWidth: 7, PanelHeight: 5,
	}, nil
}

// joinInts formats a list of ints compactly.
func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}
